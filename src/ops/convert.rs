//! Dtype casts, moves between devices, copies and contiguity.

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Result};
use crate::tensor::Tensor;

/// Cast raw data between gradstream dtypes (bool is `x != 0` stored as u8), with
/// PyTorch's rules (`backend/cast.rs`); dense unless nothing changes.
pub fn cast_data(t: &candle_core::Tensor, from: DType, to: DType) -> Result<candle_core::Tensor> {
    if from == to {
        return Ok(t.clone());
    }
    backend::on(t).cast(t, from, to)
}

/// `t.to(dtype)`: the same tensor when the dtype already matches.
pub fn to_dtype(t: &Tensor, dtype: DType) -> Result<Tensor> {
    let started = remat::start();
    let from = t.dtype();
    if from == dtype {
        return Ok(t.clone());
    }
    let out = Tensor::new(cast_data(&t.data(), from, dtype)?, dtype);
    if dtype.is_floating_point() && from.is_floating_point() {
        remat::note("to", &out, &[t], started, move |ins| {
            to_dtype(&ins[0], dtype)
        });
        record("ToCopyBackward0", &out, &[t], Vec::new, move |_, g| {
            Ok(vec![Some(to_dtype(g, from)?)])
        });
    }
    Ok(out)
}

/// `t.to(device)`: the same tensor when it is already there, else a copy on `device` whose
/// gradient goes back to `t`'s device.
pub fn to_device(t: &Tensor, device: &candle_core::Device) -> Result<Tensor> {
    let started = remat::start();
    let from = t.device();
    if crate::device::same(&from, device) {
        return Ok(t.clone());
    }
    let out = Tensor::new(
        crate::device::to_device(&t.data(), device).op("to")?,
        t.dtype(),
    );
    if t.dtype().is_floating_point() {
        let to = device.clone();
        remat::note("to", &out, &[t], started, move |ins| {
            to_device(&ins[0], &to)
        });
        record("ToCopyBackward0", &out, &[t], Vec::new, move |_, g| {
            Ok(vec![Some(to_device(g, &from)?)])
        });
    }
    Ok(out)
}

/// A dense copy of the data, whatever its layout.
pub fn dense_copy(t: &candle_core::Tensor) -> Result<candle_core::Tensor> {
    crate::headroom::ensure("clone", t.dims(), t.dtype().size_in_bytes())?;
    backend::on(t).dense_copy("clone", t)
}

/// `clone()`: a new buffer, gradient passes through.
pub fn clone(t: &Tensor) -> Result<Tensor> {
    let started = remat::start();
    let out = Tensor::new(dense_copy(&t.data())?, t.dtype());
    remat::note("clone", &out, &[t], started, |ins| clone(&ins[0]));
    record("CloneBackward0", &out, &[t], Vec::new, |_, g| {
        Ok(vec![Some(g.clone())])
    });
    Ok(out)
}

/// `contiguous()`: the same tensor when already contiguous.
pub fn contiguous(t: &Tensor) -> Result<Tensor> {
    if t.data().is_contiguous() {
        Ok(t.clone())
    } else {
        clone(t)
    }
}
