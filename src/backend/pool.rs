//! Pooling and resampling kernels on planes: a tensor `(P, H, W)` of `P = N * C` planes
//! (1-d ops use `H = 1`), dense, in a compute dtype (f32 or f64).
//!
//! Two kernels cover every op of `ops::pool` and `ops::interpolate`:
//! - max pooling, which returns the position of each window's maximum within the window
//!   (one byte per output, the only thing its backward keeps), and its adjoint;
//! - a separable linear map ([`Taps`] per axis): average pooling, adaptive average
//!   pooling, nearest and (bi)linear interpolation are all `out = R x C^T` per plane with
//!   banded `R` and `C`, and each one's backward is the adjoint map.

use candle_core::Tensor;

use super::no_fallback;
use crate::error::Result;

/// One axis of a max-pooling window: output `o` reads input positions
/// `o * stride - padding + k * dilation` for `k < kernel`, those inside `0..input`; or,
/// `adaptive`, PyTorch's adaptive window `floor(o * input / output)` to
/// `ceil((o + 1) * input / output)` (`kernel` is then the longest window's length).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowAxis {
    pub input: usize,
    pub output: usize,
    pub kernel: usize,
    pub stride: usize,
    pub padding: usize,
    pub dilation: usize,
    pub adaptive: bool,
}

impl WindowAxis {
    /// The first input position of output `o`'s window (may be negative: padding).
    pub fn start(&self, o: usize) -> isize {
        (o * self.stride) as isize - self.padding as isize
    }

    /// The input position of window position `k` of output `o`, if inside the input.
    #[inline(always)]
    pub fn pos(&self, o: usize, k: usize) -> Option<usize> {
        if self.adaptive {
            let s = o * self.input / self.output.max(1);
            let e = ((o + 1) * self.input).div_ceil(self.output.max(1));
            return (s + k < e).then_some(s + k);
        }
        let i = self.start(o) + (k * self.dilation) as isize;
        (0..self.input as isize).contains(&i).then_some(i as usize)
    }

    /// An adaptive axis from `input` to `output` positions.
    pub fn adaptive(input: usize, output: usize) -> WindowAxis {
        let kernel = (0..output)
            .map(|o| ((o + 1) * input).div_ceil(output) - o * input / output)
            .max()
            .unwrap_or(1)
            .max(1);
        WindowAxis {
            input,
            output,
            kernel,
            stride: 1,
            padding: 0,
            dilation: 1,
            adaptive: true,
        }
    }
}

/// A max-pooling window over (H, W).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub h: WindowAxis,
    pub w: WindowAxis,
}

impl Window {
    /// The number of positions in one window (what an argmax must index).
    pub fn size(&self) -> usize {
        self.h.kernel * self.w.kernel
    }
}

/// One axis of a separable linear map: output `o` is `sum_k weights[o][k] * x[start[o] + k]`.
#[derive(Clone, Debug, PartialEq)]
pub struct Taps {
    pub input: usize,
    /// First input position of each output.
    pub start: Vec<usize>,
    /// `offset[o]..offset[o + 1]` are output `o`'s weights in `weights`.
    pub offset: Vec<usize>,
    pub weights: Vec<f64>,
}

impl Taps {
    pub fn new(input: usize) -> Taps {
        Taps {
            input,
            start: Vec::new(),
            offset: vec![0],
            weights: Vec::new(),
        }
    }

    /// Append an output reading `weights` from input position `start` on.
    pub fn push(&mut self, start: usize, weights: &[f64]) {
        self.start.push(start);
        self.weights.extend_from_slice(weights);
        self.offset.push(self.weights.len());
    }

    pub fn output(&self) -> usize {
        self.start.len()
    }

    /// Output `o`'s first input position and weights.
    pub fn tap(&self, o: usize) -> (usize, &[f64]) {
        (
            self.start[o],
            &self.weights[self.offset[o]..self.offset[o + 1]],
        )
    }
}

pub trait PoolOps {
    no_fallback! {
        /// Max pooling of planes `x` (P, H, W): the maxima (P, OH, OW), and per output the
        /// position of its maximum within its window, row-major (`kh * kernel_w + kw`): U8
        /// when a window has at most 256 positions, else I32.
        fn max_pool(&self, name: &'static str, x: &Tensor, w: Window)
            -> Result<(Tensor, Tensor)> = name, x;
        /// The adjoint of max pooling: `g` (P, OH, OW) added into zeros (P, H, W) at each
        /// window's maximum.
        fn max_pool_scatter(&self, name: &'static str, g: &Tensor, argmax: &Tensor, w: Window)
            -> Result<Tensor> = name, g;
        /// `x` (P, H, W) read at each window's maximum: (P, OH, OW) (max_pool's double
        /// backward).
        fn max_pool_gather(&self, name: &'static str, x: &Tensor, argmax: &Tensor, w: Window)
            -> Result<Tensor> = name, x;
        /// PyTorch's flat indices (into H * W) of each window's maximum, as I64 (P, OH, OW).
        fn max_pool_indices(&self, name: &'static str, argmax: &Tensor, w: Window)
            -> Result<Tensor> = name, argmax;
        /// The separable map `out[p, i, j] = sum R[i, a] C[j, b] x[p, a, b]`: (P, rows.output(),
        /// cols.output()).
        fn resample(&self, name: &'static str, x: &Tensor, rows: &Taps, cols: &Taps)
            -> Result<Tensor> = name, x;
        /// The adjoint of `resample`: `g` (P, OH, OW) to (P, rows.input, cols.input).
        fn resample_adjoint(&self, name: &'static str, g: &Tensor, rows: &Taps, cols: &Taps)
            -> Result<Tensor> = name, g;
    }
}
