//! Optimizer updates: one fused pass over a parameter, its gradient and its state
//! buffers, in place, with PyTorch's single-tensor formulas; and the gradient norms of
//! `clip_grad_norm_`. Buffers are contiguous and share the parameter's dtype.

use candle_core::Tensor;

use super::inplace::write_all;
use super::not_implemented;
use crate::error::{CandleContext, Result};

/// How the raw gradient is turned into the one the update uses (in-stream clipping,
/// `maximize`). Applied per element as it is read: no copy of the gradient is made.
#[derive(Clone, Copy, Debug)]
pub struct GradPrep {
    pub scale: f64,
    pub clip_value: Option<f64>,
    pub maximize: bool,
}

/// SGD's coefficients for one step.
#[derive(Clone, Copy, Debug)]
pub struct SgdStep {
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    /// The momentum buffer is new: it takes the gradient as it is.
    pub init_buffer: bool,
}

/// Adam's / AdamW's coefficients for one step (bias corrections already folded in).
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decoupled: bool,
    pub step_size: f64,
    pub bias_correction2_sqrt: f64,
}

/// Adam's per-parameter state: the moments (`exp_avg`, `exp_avg_sq`) and, with
/// amsgrad, `max_exp_avg_sq`.
pub type AdamState<'a> = ((&'a Tensor, &'a Tensor), Option<&'a Tensor>);

pub trait OptimOps {
    /// `param -= lr * (momentum-smoothed, decayed) grad`, in place; `buf` the momentum.
    fn sgd(
        &self,
        param: &Tensor,
        _grad: &Tensor,
        _buf: Option<&Tensor>,
        _s: &SgdStep,
        _prep: &GradPrep,
    ) -> Result<()> {
        Err(not_implemented("SGD step", param.device()))
    }

    /// One Adam/AdamW step, in place on the parameter and its moments.
    fn adam(
        &self,
        param: &Tensor,
        _grad: &Tensor,
        _state: AdamState<'_>,
        _s: &AdamStep,
        _prep: &GradPrep,
    ) -> Result<()> {
        Err(not_implemented("Adam step", param.device()))
    }

    /// `sum(|g|^p)` (or `max |g|` for p = inf) of a gradient, in f64.
    fn norm_pow(&self, grad: &Tensor, norm_type: f64) -> Result<f64> {
        let name = "grad norm";
        let a = grad
            .to_dtype(candle_core::DType::F64)
            .and_then(|g| g.abs())
            .op(name)?;
        let r = if norm_type.is_infinite() {
            a.flatten_all().and_then(|a| a.max(0))
        } else {
            a.powf(norm_type).and_then(|p| p.sum_all())
        };
        r.and_then(|r| r.to_scalar::<f64>()).op(name)
    }

    /// `t *= factor`, in place (contiguous floating point `t`).
    fn scale_inplace(&self, t: &Tensor, factor: f64) -> Result<()> {
        write_all("scale_", t, &t.affine(factor, 0.0).op("scale_")?)
    }

    /// `t = clamp(t, lo, hi)`, in place (contiguous floating point `t`).
    fn clamp_inplace(&self, t: &Tensor, lo: f64, hi: f64) -> Result<()> {
        write_all("clamp_", t, &t.clamp(lo, hi).op("clamp_")?)
    }
}
