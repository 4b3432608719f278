//! In-place writes into a tensor's buffer: `copy_`, `fill_`, `add_`..., `__setitem__`,
//! and gradient accumulation. The destination may be any non-overlapping view, the
//! source anything that broadcasts to it; the device's backend does the writing.

use crate::backend;
pub use crate::backend::Update;
use crate::error::{CandleContext, Error, Result};
use crate::ops::{broadcast_shape, Scalar};
use crate::tensor::{shape_str, Tensor};

/// A view whose elements share memory (a stride 0 over a dim > 1) cannot be written.
pub(crate) fn check_writable(op: &str, dst: &candle_core::Tensor) -> Result<()> {
    let l = dst.layout();
    let overlapping = l
        .dims()
        .iter()
        .zip(l.stride())
        .any(|(&d, &s)| d > 1 && s == 0);
    if overlapping && !l.dims().contains(&0) {
        return Err(Error::shape(format!(
            "{op}: unsupported operation: more than one element of the written-to tensor refers \
             to a single memory location. Please clone() the tensor before performing the operation."
        )));
    }
    Ok(())
}

/// `dst op= src` on the raw buffers, no autograd. `src` is cast to dst's dtype and must
/// broadcast to dst's shape.
pub fn update_data(op: &'static str, dst: &Tensor, src: &Tensor, u: Update) -> Result<()> {
    let (dd, sd) = (dst.dims(), src.dims());
    let b = broadcast_shape(op, &dd, &sd)?;
    if b != dd {
        return Err(Error::shape(format!(
            "{op}: output with shape {} doesn't match the broadcast shape {}",
            shape_str(&dd),
            shape_str(&b)
        )));
    }
    let dst_data = dst.data();
    check_writable(op, &dst_data)?;
    let mut src_data = src.data();
    if src.dtype() != dst.dtype() {
        src_data = crate::ops::convert::cast_data(&src_data, src.dtype(), dst.dtype())?;
    }
    // A source sharing dst's buffer is copied first so reads never see our writes.
    if backend::same_buffer(&src_data, &dst_data) {
        src_data = src_data.copy().op(op)?;
    }
    backend::on(&dst_data).update(op, &dst_data, &src_data, u)?;
    dst.bump_version();
    Ok(())
}

pub fn fill_data(dst: &Tensor, value: Scalar) -> Result<()> {
    let d = dst.data();
    check_writable("fill_", &d)?;
    let v = match dst.dtype() {
        crate::dtype::DType::Bool => Scalar::Bool(value.as_f64() != 0.0),
        _ => value,
    };
    backend::on(&d).fill("fill_", &d, v)?;
    dst.bump_version();
    Ok(())
}

/// Whether `src` can be added into `acc` in place (same shape and dtype, `acc` dense).
pub fn can_add_into(acc: &Tensor, src: &Tensor) -> bool {
    acc.dims() == src.dims() && acc.dtype() == src.dtype() && acc.data().is_contiguous()
}

/// Gradient accumulation: `acc += src`, no autograd, no version bump visible to users.
pub fn add_into(acc: &Tensor, src: &Tensor) -> Result<()> {
    update_data("accumulate_grad", acc, src, Update::Add)
}
