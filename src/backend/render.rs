//! The fused NeRF volume renderer (`ops::volume_render` documents the maths) and its
//! O(S) backward. candle has no equivalent, so there is no default.

use candle_core::Tensor;

use super::no_fallback;
use crate::error::Result;

/// The channels of an output row before the weights: rgb (3), depth, acc.
pub const HEAD: usize = 5;

/// R rays of S samples each, and whether the background is white.
#[derive(Clone, Copy, Debug)]
pub struct RenderShape {
    pub rays: usize,
    pub samples: usize,
    pub white: bool,
}

/// The inputs of a render, dense, in one compute dtype (f32 or f64): raw (R, S, 4),
/// z (R, S), and where given rays_d (R, 3) and noise (R, S).
#[derive(Clone, Copy)]
pub struct RenderInputs<'a> {
    pub raw: &'a Tensor,
    pub z: &'a Tensor,
    pub rays_d: Option<&'a Tensor>,
    pub noise: Option<&'a Tensor>,
}

/// The gradients of raw (R, S, 4), and where asked of z (R, S) and rays_d (R, 3).
pub type RenderGrads = (Tensor, Option<Tensor>, Option<Tensor>);

pub trait RenderOps {
    no_fallback! {
        /// One (R, 5 + S) row per ray: rgb, depth, acc, then the S weights.
        fn volume_render(&self, name: &'static str, ins: RenderInputs<'_>, s: RenderShape)
            -> Result<Tensor> = name, ins.raw;
        /// The gradients of a render from `g` (R, 5 + S); `want` = (z's, rays_d's).
        fn volume_render_backward(&self, name: &'static str, ins: RenderInputs<'_>, g: &Tensor,
            s: RenderShape, want: (bool, bool)) -> Result<RenderGrads> = name, ins.raw;
    }
}
