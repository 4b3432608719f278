//! The optimizer's update kernels, reached through the device's backend
//! (`backend::OptimOps`; the CPU ones are in `backend/cpu/optim.rs`).

use candle_core::Tensor;

use crate::backend;
pub use crate::backend::{
    AdadeltaStep, AdafactorStep, AdagradStep, AdamBase, AdamStep, AdamaxStep, AsgdStep, GradPrep,
    NAdamStep, RAdamStep, RmsPropStep, RpropStep, SgdStep, StepRule,
};
use crate::error::Result;

/// `sum(|g|^p)` (or `max |g|` for p = inf) of a gradient, in f64.
pub fn norm_pow(grad: &Tensor, norm_type: f64) -> Result<f64> {
    backend::on(grad).norm_pow(grad, norm_type)
}

/// `sum |g|^p` over many tensors (`max |g|` for p = inf), in f64: gradient clipping's norm.
pub fn total_norm_pow(ts: &[crate::tensor::Tensor], norm_type: f64) -> Result<f64> {
    let mut acc = 0.0f64;
    for t in ts {
        let n = norm_pow(&t.data(), norm_type)?;
        acc = if norm_type.is_infinite() {
            acc.max(n)
        } else {
            acc + n
        };
    }
    Ok(acc)
}

/// `t *= factor`, in place (contiguous floating point `t`).
pub fn scale_inplace(t: &Tensor, factor: f64) -> Result<()> {
    backend::on(t).scale_inplace(t, factor)
}

/// `t = clamp(t, lo, hi)`, in place (contiguous floating point `t`).
pub fn clamp_inplace(t: &Tensor, lo: f64, hi: f64) -> Result<()> {
    backend::on(t).clamp_inplace(t, lo, hi)
}
