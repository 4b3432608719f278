//! Per-channel normalisation kernels (batch norm) on `(N, C, S)` tensors, dense, in a
//! compute dtype (f32 or f64). Per-channel coefficients travel as host `f64` slices of
//! length C; sums are accumulated in f64.

use candle_core::Tensor;

use super::no_fallback;
use crate::error::Result;

pub trait NormOps {
    no_fallback! {
        /// Per channel of `x` (N, C, S): the mean and the biased variance.
        fn channel_stats(&self, name: &'static str, x: &Tensor)
            -> Result<(Vec<f64>, Vec<f64>)> = name, x;
        /// `(x - centre[c]) * scale[c] + shift[c]` for `x` (N, C, S).
        fn channel_affine(&self, name: &'static str, x: &Tensor, centre: &[f64], scale: &[f64],
            shift: &[f64]) -> Result<Tensor> = name, x;
        /// Per channel of `g` and `x` (N, C, S): `sum g` and `sum g * (x - centre[c])`.
        fn channel_grad_sums(&self, name: &'static str, g: &Tensor, x: &Tensor, centre: &[f64])
            -> Result<(Vec<f64>, Vec<f64>)> = name, g;
        /// `a[c] * g + b[c] * (x - centre[c]) + d[c]` for `g`, `x` (N, C, S): batch norm's
        /// input gradient in one pass.
        fn channel_combine(&self, name: &'static str, g: &Tensor, x: &Tensor,
            coef: ChannelCoef<'_>) -> Result<Tensor> = name, g;
    }
}

/// The per-channel coefficients of `NormOps::channel_combine`.
#[derive(Clone, Copy, Debug)]
pub struct ChannelCoef<'a> {
    pub a: &'a [f64],
    pub centre: &'a [f64],
    pub b: &'a [f64],
    pub d: &'a [f64],
}
