//! Convolution kernels: the forward of a 2-d convolution, its input gradient (which is
//! also the forward of `conv_transpose2d`) and its weight gradient, on NCHW tensors that
//! are dense and in a compute dtype (f32 or f64). 1-d convolution is the 2-d one with
//! H = 1. All three share one [`ConvGeometry`].

use candle_core::Tensor;

use super::{no_fallback, not_implemented};
use crate::error::{CandleContext, Result};

/// The shapes of one convolution `y = conv(x, w)`: x (n, c_in, h, w), w (c_out,
/// c_in / groups, kh, kw), y (n, c_out, oh, ow). For a transposed convolution the same
/// geometry is read backwards: its input is `y`'s shape, its output `x`'s.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConvGeometry {
    pub n: usize,
    pub c_in: usize,
    pub h: usize,
    pub w: usize,
    pub c_out: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: (usize, usize),
    pub padding: (usize, usize),
    pub dilation: (usize, usize),
    pub groups: usize,
    pub oh: usize,
    pub ow: usize,
}

impl ConvGeometry {
    /// Input channels per group.
    pub fn cin_g(&self) -> usize {
        self.c_in / self.groups.max(1)
    }
    /// Output channels per group.
    pub fn cout_g(&self) -> usize {
        self.c_out / self.groups.max(1)
    }
    /// The length of one column of im2col: a group's input channels times the kernel.
    pub fn k(&self) -> usize {
        self.cin_g() * self.kh * self.kw
    }
    /// Output positions per channel.
    pub fn l(&self) -> usize {
        self.oh * self.ow
    }
    pub fn input_dims(&self) -> [usize; 4] {
        [self.n, self.c_in, self.h, self.w]
    }
    pub fn weight_dims(&self) -> [usize; 4] {
        [self.c_out, self.cin_g(), self.kh, self.kw]
    }
    pub fn output_dims(&self) -> [usize; 4] {
        [self.n, self.c_out, self.oh, self.ow]
    }
    /// The output padding a transposed convolution needs to give back `h` x `w`.
    fn output_padding(&self) -> (usize, usize) {
        let span = |o: usize, s: usize, p: usize, d: usize, k: usize| {
            (o.saturating_sub(1) * s + d * (k - 1) + 1).saturating_sub(2 * p)
        };
        let (sh, sw) = self.stride;
        let (ph, pw) = self.padding;
        let (dh, dw) = self.dilation;
        (
            self.h.saturating_sub(span(self.oh, sh, ph, dh, self.kh)),
            self.w.saturating_sub(span(self.ow, sw, pw, dw, self.kw)),
        )
    }
    /// Stride, padding and dilation the same along both dims, as candle's kernels take them.
    fn square(&self) -> Option<(usize, usize, usize)> {
        let (s, p, d) = (self.stride, self.padding, self.dilation);
        (s.0 == s.1 && p.0 == p.1 && d.0 == d.1).then_some((s.0, p.0, d.0))
    }
}

pub trait ConvOps {
    /// `y = conv2d(x, w) + bias` (bias of c_out elements, broadcast over n, oh, ow).
    fn conv2d(
        &self,
        name: &'static str,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        let Some((s, p, d)) = geo.square() else {
            return Err(not_implemented(name, x.device()));
        };
        // candle's kernels index past an empty input or weight: the sums are then empty.
        let y = if x.elem_count() == 0 || w.elem_count() == 0 {
            crate::device::zeros(&geo.output_dims()[..], x.dtype(), x.device()).op(name)?
        } else {
            x.conv2d(w, p, s, d, geo.groups).op(name)?
        };
        match bias {
            Some(b) => y
                .broadcast_add(&b.reshape((1, geo.c_out, 1, 1)).op(name)?)
                .op(name),
            None => Ok(y),
        }
    }

    /// The input gradient `dx = conv_transpose2d(g, w)`, of shape `geo.input_dims()`, from
    /// `g` of shape `geo.output_dims()`; also the forward of a transposed convolution.
    fn conv2d_input_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        w: &Tensor,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        match geo.square() {
            Some((s, p, d)) if geo.groups == 1 => {
                let (oph, opw) = geo.output_padding();
                if oph != opw {
                    return Err(not_implemented(name, g.device()));
                }
                g.conv_transpose2d(w, p, oph, s, d).op(name)
            }
            _ => Err(not_implemented(name, g.device())),
        }
    }

    no_fallback! {
        /// The weight gradient `dw = sum_n g_n · im2col(x_n)^T`, of shape `geo.weight_dims()`.
        fn conv2d_weight_grad(&self, name: &'static str, g: &Tensor, x: &Tensor,
            geo: &ConvGeometry) -> Result<Tensor> = name, g;
    }
}
