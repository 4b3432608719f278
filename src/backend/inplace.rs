//! In-place writes into a buffer: `dst op= src` on any non-overlapping view, `fill_`,
//! and a dense copy. The defaults write through candle's `slice_set`, which needs a
//! contiguous destination.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use super::not_implemented;
use crate::error::{CandleContext, Result};
use crate::scalar::Scalar;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Update {
    Assign,
    Add,
    Sub,
    Mul,
    Div,
}

pub trait InplaceOps {
    /// `dst op= src`, in place; `src` has dst's dtype and broadcasts to its shape and does
    /// not share dst's buffer.
    fn update(&self, name: &'static str, dst: &Tensor, src: &Tensor, u: Update) -> Result<()> {
        if !dst.is_contiguous() {
            return Err(not_implemented(name, dst.device()));
        }
        let src = src.broadcast_as(dst.shape()).op(name)?;
        let new = match u {
            Update::Assign => src.dense(),
            Update::Add => dst.add(&src),
            Update::Sub => dst.sub(&src),
            Update::Mul => dst.mul(&src),
            Update::Div => dst.div(&src),
        }
        .op(name)?;
        write_all(name, dst, &new)
    }

    /// Every element of `dst` set to `v` (already in dst's dtype's range).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn fill(&self, name: &'static str, dst: &Tensor, v: Scalar) -> Result<()> {
        if !dst.is_contiguous() {
            return Err(not_implemented(name, dst.device()));
        }
        let (shape, device) = (dst.shape(), dst.device());
        let new = match (dst.dtype(), v) {
            // int64 exactly; integers wrap into narrower ones, as the kernels' fills
            (DType::I64, v) => Tensor::full(v.as_i64(), shape, device),
            (DType::I32, Scalar::Int(i)) => Tensor::full(i as i32, shape, device),
            (DType::U8, Scalar::Int(i)) => Tensor::full(i as u8, shape, device),
            (dtype, v) => Tensor::full(v.as_f64(), shape, device).and_then(|t| t.cast(dtype)),
        }
        .op(name)?;
        write_all(name, dst, &new)
    }

    /// A new dense tensor holding `x`'s elements (never sharing its buffer).
    #[allow(clippy::disallowed_methods)] // candle's copy is this fallback
    fn dense_copy(&self, name: &'static str, x: &Tensor) -> Result<Tensor> {
        if x.is_contiguous() {
            x.copy().op(name)
        } else {
            x.contiguous().op(name)
        }
    }
}

/// Overwrite the contiguous `dst` with `src`'s elements.
pub(crate) fn write_all(name: &'static str, dst: &Tensor, src: &Tensor) -> Result<()> {
    let (d, s) = (dst.flatten_all().op(name)?, src.flatten_all().op(name)?);
    // candle writes no buffer from itself: a source sharing it is copied first.
    let s = match super::same_buffer(&d, &s) {
        true => s.copy(),
        false => s.dense(),
    }
    .op(name)?;
    d.slice_set(&s, 0, 0).op(name)
}
