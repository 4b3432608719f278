//! Automatic mixed precision (`gradstream.autocast`), per thread as in PyTorch.
//!
//! Inside an autocast region the products (matmul, linear, convolution, attention) run in
//! the region's lower-precision dtype: their floating operands are cast to it by recorded
//! casts, so the activations those ops and everything after them save take half the bytes,
//! while gradients flow back to float32 leaves in float32 through the casts' backward.
//! float64 operands are left alone, as PyTorch leaves them. The ops PyTorch runs in
//! float32 under autocast (the losses) cast back in the Python layer.
//!
//! A parameter's cast is not kept for backward: PyTorch's autocast saves (and caches) a
//! bfloat16 copy of every weight a product uses, half the parameters' bytes again. Here a
//! product that saves the cast of a parameter saves the parameter itself, which is alive
//! anyway, and backward casts it again (`parameter_source`, used by `SavedTensor`).

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::sync::{Arc, Weak};

use crate::autograd::saved_hooks::holds_parameter;

use crate::dtype::DType;
use crate::error::Result;
use crate::ops::convert::to_dtype;
use crate::tensor::{Tensor, TensorImpl};

/// The lower-precision dtype of each device type's region (CPU, CUDA), if one is active.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Region {
    pub cpu: Option<DType>,
    pub cuda: Option<DType>,
}

impl Region {
    /// The region's dtype for tensors on `device`.
    fn on(self, device: &candle_core::Device) -> Option<DType> {
        if device.is_cpu() {
            self.cpu
        } else {
            self.cuda
        }
    }

    pub fn is_active(self) -> bool {
        self.cpu.is_some() || self.cuda.is_some()
    }
}

thread_local! {
    static REGION: Cell<Region> = const { Cell::new(Region { cpu: None, cuda: None }) };
    /// The live casts of parameters (or views of them) made in this region: cast's id ->
    /// (cast, what was cast). Cleared whenever the region changes.
    static PARAMETER_CASTS: RefCell<HashMap<usize, (Weak<TensorImpl>, Tensor)>> =
        RefCell::new(HashMap::new());
}

/// This thread's autocast regions.
pub fn region() -> Region {
    REGION.with(|d| d.get())
}

/// Enter or leave autocast regions; returns the previous state.
pub fn set_region(region: Region) -> Region {
    PARAMETER_CASTS.with(|c| c.borrow_mut().clear());
    REGION.with(|d| d.replace(region))
}

/// `t` as an operand of a lower-precision op: cast to the region's dtype when autocast is
/// on for `t`'s device type and `t` is a floating tensor other than float64; else `t`.
pub fn lower(t: &Tensor) -> Result<Tensor> {
    match region().on(&t.device()) {
        Some(d)
            if t.dtype().is_floating_point() && t.dtype() != DType::Float64 && t.dtype() != d =>
        {
            let cast = to_dtype(t, d)?;
            if holds_parameter(t) {
                PARAMETER_CASTS.with(|c| {
                    let mut casts = c.borrow_mut();
                    casts.retain(|_, (weak, _)| weak.strong_count() > 0);
                    casts.insert(cast.id(), (cast.downgrade(), t.clone()));
                });
            }
            Ok(cast)
        }
        _ => Ok(t.clone()),
    }
}

/// The parameter `t` is an autocast cast of, if it is one.
pub fn parameter_source(t: &Tensor) -> Option<Tensor> {
    PARAMETER_CASTS.with(|c| {
        let casts = c.borrow();
        if casts.is_empty() {
            return None;
        }
        let (cast, source) = casts.get(&t.id())?;
        if !std::ptr::eq(cast.as_ptr(), Arc::as_ptr(&t.0)) {
            return None;
        }
        Some(source.clone())
    })
}
