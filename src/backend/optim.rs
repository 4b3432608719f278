//! Optimizer updates: one fused pass over a parameter, its gradient and its state
//! buffers, in place, with PyTorch's single-tensor formulas; and the gradient norms of
//! `clip_grad_norm_`. Buffers are contiguous and share the parameter's dtype.

use crate::backend::cast::Convert;
use candle_core::Tensor;

use super::coded::CodedState;
use super::inplace::write_all;
use super::no_fallback;
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

/// What Adam, NAdam and RAdam share: the learning rate, the moments' betas, epsilon, and
/// weight decay (decoupled for AdamW and with `decoupled_weight_decay=True`).
#[derive(Clone, Copy, Debug)]
pub struct AdamBase {
    pub lr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub decoupled: bool,
}

/// Adam's / AdamW's coefficients for one step (bias corrections already folded in).
#[derive(Clone, Copy, Debug)]
pub struct AdamStep {
    pub base: AdamBase,
    pub step_size: f64,
    pub bias_correction2_sqrt: f64,
    /// `max_exp_avg_sq` is the third state buffer.
    pub amsgrad: bool,
}

/// RMSprop's coefficients.
#[derive(Clone, Copy, Debug)]
pub struct RmsPropStep {
    pub lr: f64,
    pub alpha: f64,
    pub eps: f64,
    pub weight_decay: f64,
    pub momentum: f64,
    pub centered: bool,
}

/// Adagrad's coefficients (`clr`: the learning rate after `lr_decay`).
#[derive(Clone, Copy, Debug)]
pub struct AdagradStep {
    pub clr: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// Adamax's coefficients (`clr`: `lr / (1 - beta1^step)`).
#[derive(Clone, Copy, Debug)]
pub struct AdamaxStep {
    pub clr: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// NAdam's coefficients for one step (the momentum schedule folded into `c_grad`, `c_avg`).
#[derive(Clone, Copy, Debug)]
pub struct NAdamStep {
    pub base: AdamBase,
    pub bias_correction2: f64,
    /// `-lr (1 - mu) / (1 - mu_product)`.
    pub c_grad: f64,
    /// `-lr mu_next / (1 - mu_product mu_next)`.
    pub c_avg: f64,
}

/// RAdam's coefficients for one step; `rect` is `None` while the variance is not tractable.
#[derive(Clone, Copy, Debug)]
pub struct RAdamStep {
    pub base: AdamBase,
    pub bias_correction1: f64,
    pub bias_correction2_sqrt: f64,
    pub rect: Option<f64>,
}

/// Adadelta's coefficients.
#[derive(Clone, Copy, Debug)]
pub struct AdadeltaStep {
    pub lr: f64,
    pub rho: f64,
    pub eps: f64,
    pub weight_decay: f64,
}

/// Rprop's coefficients.
#[derive(Clone, Copy, Debug)]
pub struct RpropStep {
    pub eta_minus: f64,
    pub eta_plus: f64,
    pub step_size_min: f64,
    pub step_size_max: f64,
}

/// ASGD's coefficients for one step (`eta`, `mu` as the state held them before it).
#[derive(Clone, Copy, Debug)]
pub struct AsgdStep {
    pub eta: f64,
    pub lambd: f64,
    pub mu: f64,
    pub weight_decay: f64,
}

/// Adafactor's coefficients for one step. The parameter's norm, which scales the step,
/// and the update's norm, which clips it, are the kernel's to measure.
#[derive(Clone, Copy, Debug)]
pub struct AdafactorStep {
    pub lr: f64,
    /// `min(lr, 1/sqrt(step))`.
    pub rho: f64,
    /// `step^beta2_decay`: the weight of this step's squared gradient in the variance.
    pub beta2_weight: f64,
    /// `eps[0]`; `None` is the parameter dtype's machine epsilon, as PyTorch's default.
    pub eps1: Option<f64>,
    pub eps2: f64,
    pub d: f64,
    pub weight_decay: f64,
    /// The last two sizes of a parameter of two or more dimensions: its second moment is
    /// kept factored, as a row and a column variance per matrix. `None` for 0-d and 1-d.
    pub matrix: Option<(usize, usize)>,
}

/// One optimizer step rule with its coefficients. The state buffers the kernel receives,
/// in order (PyTorch's state-dict names):
///
/// | rule | buffers |
/// |---|---|
/// | `Sgd` | `momentum_buffer` if momentum != 0 |
/// | `Adam` | `exp_avg`, `exp_avg_sq`, `max_exp_avg_sq` if amsgrad |
/// | `RmsProp` | `square_avg`, `momentum_buffer` if momentum > 0, `grad_avg` if centered |
/// | `Adagrad` | `sum` |
/// | `Adamax` | `exp_avg`, `exp_inf` |
/// | `NAdam`, `RAdam` | `exp_avg`, `exp_avg_sq` |
/// | `Adadelta` | `square_avg`, `acc_delta` |
/// | `Rprop` | `prev`, `step_size` |
/// | `Asgd` | `ax` |
/// | `Adafactor` | `row_var`, `col_var` for a matrix; `variance` otherwise |
#[derive(Clone, Copy, Debug)]
pub enum StepRule {
    Sgd(SgdStep),
    Adam(AdamStep),
    RmsProp(RmsPropStep),
    Adagrad(AdagradStep),
    Adamax(AdamaxStep),
    NAdam(NAdamStep),
    RAdam(RAdamStep),
    Adadelta(AdadeltaStep),
    Rprop(RpropStep),
    Asgd(AsgdStep),
    Adafactor(AdafactorStep),
}

impl StepRule {
    pub fn name(&self) -> &'static str {
        match self {
            StepRule::Sgd(_) => "SGD",
            StepRule::Adam(_) => "Adam",
            StepRule::RmsProp(_) => "RMSprop",
            StepRule::Adagrad(_) => "Adagrad",
            StepRule::Adamax(_) => "Adamax",
            StepRule::NAdam(_) => "NAdam",
            StepRule::RAdam(_) => "RAdam",
            StepRule::Adadelta(_) => "Adadelta",
            StepRule::Rprop(_) => "Rprop",
            StepRule::Asgd(_) => "ASGD",
            StepRule::Adafactor(_) => "Adafactor",
        }
    }

    /// How many state buffers the kernel takes.
    pub fn buffers(&self) -> usize {
        match self {
            StepRule::Sgd(s) => usize::from(s.momentum != 0.0),
            StepRule::Adam(s) => 2 + usize::from(s.amsgrad),
            StepRule::RmsProp(s) => 1 + usize::from(s.momentum > 0.0) + usize::from(s.centered),
            StepRule::Adagrad(_) | StepRule::Asgd(_) => 1,
            StepRule::Adamax(_)
            | StepRule::NAdam(_)
            | StepRule::RAdam(_)
            | StepRule::Adadelta(_)
            | StepRule::Rprop(_) => 2,
            StepRule::Adafactor(s) => 1 + usize::from(s.matrix.is_some()),
        }
    }
}

pub trait OptimOps {
    no_fallback! {
        /// One optimizer step, in place on the parameter and its state buffers (in the order
        /// [`StepRule`] lists), reading the gradient through `prep`.
        fn optim_step(&self, param: &Tensor, grad: &Tensor, state: &[&Tensor], rule: &StepRule,
            prep: &GradPrep) -> Result<()> = &format!("{} step", rule.name()), param;
        /// One optimizer step whose state buffers are coded in fewer bits
        /// ([`super::coded`]): decoded, updated and coded back block by block, in place.
        fn optim_step_coded(&self, param: &Tensor, grad: &Tensor, state: &[CodedState<'_>],
            rule: &StepRule, prep: &GradPrep) -> Result<()>
            = &format!("{} step with {} state", rule.name(), state.first().map_or("coded",
                |s| s.coding.name())), param;
    }

    /// `sum(|g|^p)` (or `max |g|` for p = inf) of a gradient, in f64.
    fn norm_pow(&self, grad: &Tensor, norm_type: f64) -> Result<f64> {
        let name = "grad norm";
        let a = grad
            .cast(candle_core::DType::F64)
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
