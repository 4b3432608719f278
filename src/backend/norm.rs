//! Per-channel normalisation kernels (batch norm) on `(N, C, S)` tensors, dense, in a
//! compute dtype (f32 or f64). Per-channel values (statistics, coefficients, gradient sums)
//! are f64 `(C,)` tensors on the input's device; sums are accumulated in f64.
//!
//! The defaults are candle's ops, in f64: a reduction over N and S, broadcast arithmetic.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};

/// A `(C,)` vector as `(1, C, 1)`, to broadcast over an `(N, C, S)` tensor.
fn per_channel(v: &Tensor) -> candle_core::Result<Tensor> {
    v.reshape((1, (), 1))
}

/// Sum over N and S of an `(N, C, S)` tensor: `(C,)`.
fn channel_sum(t: &Tensor) -> candle_core::Result<Tensor> {
    t.sum(2)?.sum(0)
}

pub trait NormOps {
    /// Per channel of `x` (N, C, S): the mean and the biased variance.
    fn channel_stats(&self, name: &'static str, x: &Tensor) -> Result<(Tensor, Tensor)> {
        (|| {
            let x = x.cast(DType::F64)?;
            let m = (x.dim(0)? * x.dim(2)?) as f64;
            let mean = (channel_sum(&x)? / m)?;
            let centred = x.broadcast_sub(&per_channel(&mean)?)?;
            let var = (channel_sum(&centred.sqr()?)? / m)?;
            Ok((mean, var))
        })()
        .op(name)
    }

    /// `(x - centre[c]) * scale[c] + shift[c]` for `x` (N, C, S), in x's dtype.
    fn channel_affine(
        &self,
        name: &'static str,
        x: &Tensor,
        centre: &Tensor,
        scale: &Tensor,
        shift: &Tensor,
    ) -> Result<Tensor> {
        (|| {
            let x64 = x.cast(DType::F64)?;
            x64.broadcast_sub(&per_channel(centre)?)?
                .broadcast_mul(&per_channel(scale)?)?
                .broadcast_add(&per_channel(shift)?)?
                .cast(x.dtype())
        })()
        .op(name)
    }

    /// Per channel of `g` and `x` (N, C, S): `sum g` and `sum g * (x - centre[c])`.
    fn channel_grad_sums(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        centre: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        (|| {
            let g = g.cast(DType::F64)?;
            let centred = x.cast(DType::F64)?.broadcast_sub(&per_channel(centre)?)?;
            Ok((channel_sum(&g)?, channel_sum(&(&g * &centred)?)?))
        })()
        .op(name)
    }

    /// `a[c] * g + b[c] * (x - centre[c]) + d[c]` for `g`, `x` (N, C, S): batch norm's
    /// input gradient in one pass, in g's dtype.
    fn channel_combine(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        coef: ChannelCoef<'_>,
    ) -> Result<Tensor> {
        (|| {
            let centred = x
                .cast(DType::F64)?
                .broadcast_sub(&per_channel(coef.centre)?)?;
            g.cast(DType::F64)?
                .broadcast_mul(&per_channel(coef.a)?)?
                .add(&centred.broadcast_mul(&per_channel(coef.b)?)?)?
                .broadcast_add(&per_channel(coef.d)?)?
                .cast(g.dtype())
        })()
        .op(name)
    }
}

/// The per-channel coefficients of `NormOps::channel_combine`: f64 `(C,)` tensors.
#[derive(Clone, Copy, Debug)]
pub struct ChannelCoef<'a> {
    pub a: &'a Tensor,
    pub centre: &'a Tensor,
    pub b: &'a Tensor,
    pub d: &'a Tensor,
}
