//! Automatic mixed precision (`gradstream.autocast`), per thread as in PyTorch.
//!
//! Inside an autocast region the products (matmul, linear, convolution, attention) run in
//! the region's lower-precision dtype: their floating operands are cast to it by recorded
//! casts, so the activations those ops and everything after them save take half the bytes,
//! while gradients flow back to float32 leaves in float32 through the casts' backward.
//! float64 operands are left alone, as PyTorch leaves them. The ops PyTorch runs in
//! float32 under autocast (the losses) cast back in the Python layer.

use std::cell::Cell;

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::convert::to_dtype;
use crate::tensor::Tensor;

thread_local! {
    static DTYPE: Cell<Option<DType>> = const { Cell::new(None) };
}

/// The lower-precision dtype of the current autocast region, if one is active.
pub fn dtype() -> Option<DType> {
    DTYPE.with(|d| d.get())
}

/// Enter (`Some`) or leave (`None`) an autocast region; returns the previous state.
pub fn set_dtype(dtype: Option<DType>) -> Option<DType> {
    DTYPE.with(|d| d.replace(dtype))
}

/// `t` as an operand of a lower-precision op: cast to the region's dtype when autocast is
/// on and `t` is a floating tensor other than float64; else `t` itself.
pub fn lower(t: &Tensor) -> Result<Tensor> {
    match dtype() {
        Some(d)
            if t.dtype().is_floating_point() && t.dtype() != DType::Float64 && t.dtype() != d =>
        {
            to_dtype(t, d)
        }
        _ => Ok(t.clone()),
    }
}
