//! Optimizers in Rust: per-parameter update kernels (SGD, Adam, AdamW) and the
//! in-backward mode, where each parameter is stepped by a Rust post-accumulate hook the
//! moment its gradient is final, and its gradient freed.
//!
//! A param group's hyperparameters live in a shared `Group` that Python's `param_groups`
//! dicts write through to, so schedulers keep working while the hooks run in Rust.

pub mod kernels;

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::backend;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::ops;
use crate::tensor::{check_like, shape_str, Tensor};
use kernels::{AdamStep, GradPrep, SgdStep};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sgd,
    Adam,
    AdamW,
}

impl Kind {
    pub fn parse(name: &str) -> Result<Kind> {
        match name {
            "sgd" => Ok(Kind::Sgd),
            "adam" => Ok(Kind::Adam),
            "adamw" => Ok(Kind::AdamW),
            _ => Err(Error::value(format!("unknown optimizer kind '{name}'"))),
        }
    }
}

/// One param group's hyperparameters, as the kernels read them at each step.
#[derive(Clone, Debug)]
pub struct Hyper {
    pub kind: Kind,
    pub lr: f64,
    pub momentum: f64,
    pub dampening: f64,
    pub nesterov: bool,
    pub weight_decay: f64,
    pub maximize: bool,
    pub beta1: f64,
    pub beta2: f64,
    pub eps: f64,
    pub amsgrad: bool,
    /// Adam with `decoupled_weight_decay=True` is AdamW.
    pub decoupled: bool,
}

impl Hyper {
    pub fn new(kind: Kind) -> Hyper {
        Hyper {
            kind,
            lr: 1e-3,
            momentum: 0.0,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            maximize: false,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            amsgrad: false,
            decoupled: kind == Kind::AdamW,
        }
    }

    /// The hyperparameter a param-group key names (`betas` is two of them, set apart).
    pub fn field(&mut self, key: &str) -> Option<Field<'_>> {
        Some(match key {
            "lr" => Field::Number(&mut self.lr),
            "momentum" => Field::Number(&mut self.momentum),
            "dampening" => Field::Number(&mut self.dampening),
            "weight_decay" => Field::Number(&mut self.weight_decay),
            "eps" => Field::Number(&mut self.eps),
            "nesterov" => Field::Flag(&mut self.nesterov),
            "maximize" => Field::Flag(&mut self.maximize),
            "amsgrad" => Field::Flag(&mut self.amsgrad),
            "decoupled_weight_decay" => Field::Flag(&mut self.decoupled),
            _ => return None,
        })
    }
}

/// One hyperparameter of a [`Hyper`], by its kind.
pub enum Field<'a> {
    Number(&'a mut f64),
    Flag(&'a mut bool),
}

pub type Group = Arc<RwLock<Hyper>>;

/// A parameter's optimizer state (PyTorch's `optimizer.state[p]`).
#[derive(Default)]
pub struct ParamState {
    /// Adam's step count (PyTorch keeps it as a float32 0-d tensor).
    pub step: Option<f64>,
    pub momentum_buffer: Option<Tensor>,
    pub exp_avg: Option<Tensor>,
    pub exp_avg_sq: Option<Tensor>,
    pub max_exp_avg_sq: Option<Tensor>,
    /// Backward passes accumulated into `.grad` since the last in-backward step.
    pub micro_batches: u64,
}

impl ParamState {
    pub fn is_empty(&self) -> bool {
        self.step.is_none()
            && self.momentum_buffer.is_none()
            && self.exp_avg.is_none()
            && self.exp_avg_sq.is_none()
            && self.max_exp_avg_sq.is_none()
    }

    /// The state buffer PyTorch's state dict names `key`.
    pub fn buffer(&mut self, key: &str) -> Option<&mut Option<Tensor>> {
        Some(match key {
            "momentum_buffer" => &mut self.momentum_buffer,
            "exp_avg" => &mut self.exp_avg,
            "exp_avg_sq" => &mut self.exp_avg_sq,
            "max_exp_avg_sq" => &mut self.max_exp_avg_sq,
            _ => return None,
        })
    }
}

/// The state dict's buffer keys, in PyTorch's order.
pub const BUFFERS: [&str; 4] = ["momentum_buffer", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"];

pub type State = Arc<Mutex<ParamState>>;

/// A new zero state buffer shaped like `p`, counted as optimizer state.
fn state_like(p: &Tensor) -> Result<Tensor> {
    let t = ops::creation::zeros_like(p)?;
    t.set_role(Role::OptimizerState, true);
    Ok(t)
}

/// Take ownership of a state tensor given by the user (load_state_dict): a dense copy in
/// the parameter's dtype, counted as optimizer state.
pub fn adopt_state(p: &Tensor, t: &Tensor, name: &str) -> Result<Tensor> {
    if t.dims() != p.dims() {
        return Err(Error::shape(format!(
            "load_state_dict: state '{name}' has shape {} but the parameter has shape {}",
            shape_str(&t.dims()),
            shape_str(&p.dims())
        )));
    }
    let c = ops::convert::clone(&ops::convert::to_dtype(&t.detach(), p.dtype())?)?;
    let c = ops::convert::contiguous(&c)?.detach();
    c.set_role(Role::OptimizerState, true);
    Ok(c)
}

/// `optimizer.step()`: one fused in-place step per parameter that has a `.grad` (the
/// others are skipped, as PyTorch does).
pub fn step_all(params: &[Tensor], states: &[State], h: &Hyper) -> Result<()> {
    for (p, s) in params.iter().zip(states) {
        if let Some(g) = p.grad() {
            let prep = GradPrep {
                scale: 1.0,
                clip_value: None,
                maximize: false,
            };
            step(p, &g, h, &mut s.lock(), prep)?;
        }
    }
    Ok(())
}

/// Step one parameter with `grad`. `prep` carries in-stream clipping.
pub fn step(
    param: &Tensor,
    grad: &Tensor,
    h: &Hyper,
    st: &mut ParamState,
    prep: GradPrep,
) -> Result<()> {
    check_like(
        grad,
        param,
        |got, want| {
            Error::shape(format!(
                "optimizer step: gradient of shape {got} does not match parameter of shape {want}"
            ))
        },
        |got, want| {
            Error::type_(format!(
                "optimizer step: gradient dtype {got} does not match parameter dtype {want}"
            ))
        },
    )?;
    if !param.dtype().is_floating_point() {
        return Err(Error::type_(format!(
            "optimizer step: parameters must be floating point, got {}",
            param.dtype().name()
        )));
    }
    let pdata = param.data();
    if !pdata.is_contiguous() {
        return Err(Error::shape(format!(
            "optimizer step: parameter of shape {} is not contiguous; call .contiguous() on it \
             before building the optimizer",
            shape_str(&param.dims())
        )));
    }
    if param.numel() == 0 {
        return Ok(());
    }
    // The kernel reads the gradient while writing the parameter: never the same buffer.
    let mut gdata = grad.data();
    if !gdata.is_contiguous()
        || crate::memory::buffer_key(&gdata) == crate::memory::buffer_key(&pdata)
    {
        gdata = ops::convert::dense_copy(&gdata)?;
    }
    let prep = GradPrep {
        maximize: h.maximize,
        ..prep
    };
    match h.kind {
        Kind::Sgd => {
            let init = st.momentum_buffer.is_none();
            if h.momentum != 0.0 && init {
                st.momentum_buffer = Some(state_like(param)?);
            }
            let s = SgdStep {
                lr: h.lr,
                momentum: h.momentum,
                dampening: h.dampening,
                nesterov: h.nesterov,
                weight_decay: h.weight_decay,
                init_buffer: init,
            };
            let buf = if h.momentum != 0.0 {
                st.momentum_buffer.as_ref().map(|b| b.data())
            } else {
                None
            };
            backend::on(&pdata).sgd(&pdata, &gdata, buf.as_ref(), &s, &prep)?;
            if let Some(b) = &st.momentum_buffer {
                b.bump_version();
            }
        }
        Kind::Adam | Kind::AdamW => {
            if st.exp_avg.is_none() {
                st.exp_avg = Some(state_like(param)?);
            }
            if st.exp_avg_sq.is_none() {
                st.exp_avg_sq = Some(state_like(param)?);
            }
            if h.amsgrad && st.max_exp_avg_sq.is_none() {
                st.max_exp_avg_sq = Some(state_like(param)?);
            }
            let step = st.step.unwrap_or(0.0) + 1.0;
            st.step = Some(step);
            let bias_correction1 = 1.0 - h.beta1.powf(step);
            let bias_correction2 = 1.0 - h.beta2.powf(step);
            let s = AdamStep {
                lr: h.lr,
                beta1: h.beta1,
                beta2: h.beta2,
                eps: h.eps,
                weight_decay: h.weight_decay,
                decoupled: h.decoupled || h.kind == Kind::AdamW,
                step_size: h.lr / bias_correction1,
                bias_correction2_sqrt: bias_correction2.powf(0.5),
            };
            let m = st.exp_avg.as_ref().expect("initialised").data();
            let v = st.exp_avg_sq.as_ref().expect("initialised").data();
            let x = if h.amsgrad {
                st.max_exp_avg_sq.as_ref().map(|x| x.data())
            } else {
                None
            };
            let state = ((&m, &v), x.as_ref());
            backend::on(&pdata).adam(&pdata, &gdata, state, &s, &prep)?;
            for t in [&st.exp_avg, &st.exp_avg_sq, &st.max_exp_avg_sq]
                .into_iter()
                .flatten()
            {
                t.bump_version();
            }
        }
    }
    param.bump_version();
    Ok(())
}

/// What the in-backward hooks of one optimizer share: accumulation and clipping.
#[derive(Clone, Debug)]
pub struct StreamControl {
    /// Step on every n-th backward; the ones before accumulate into `.grad`.
    pub accumulate: u64,
    /// Clamp each gradient element to `[-v, v]`.
    pub clip_value: Option<f64>,
    /// Scale each parameter's gradient so its norm is at most `max_norm` (per parameter).
    pub clip_norm: Option<(f64, f64)>,
    pub phase: Phase,
}

/// Exact global-norm clipping runs the backward twice (see `Optimizer.backward`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Phase {
    /// Step as gradients arrive.
    Step,
    /// Pass 1: only add each gradient's `sum |g|^p` to `measured`, then free it.
    Measure { norm_type: f64, measured: f64 },
    /// Pass 2: step with every gradient scaled by this factor.
    Scaled(f64),
}

impl Default for StreamControl {
    fn default() -> Self {
        StreamControl {
            accumulate: 1,
            clip_value: None,
            clip_norm: None,
            phase: Phase::Step,
        }
    }
}

pub type Control = Arc<Mutex<StreamControl>>;

/// The in-backward step of one parameter: runs once per backward, when its gradient is
/// final (every contribution summed), then frees the gradient.
pub fn stream_step(leaf: &Tensor, group: &Group, state: &State, ctl: &Control) -> Result<()> {
    let Some(grad) = leaf.grad() else {
        return Ok(());
    };
    let c = ctl.lock().clone();
    let mut st = state.lock();
    if let Phase::Measure { norm_type, .. } = c.phase {
        let n = kernels::norm_pow(&grad.data(), norm_type)?;
        if let Phase::Measure { measured, .. } = &mut ctl.lock().phase {
            *measured = if norm_type.is_infinite() {
                measured.max(n)
            } else {
                *measured + n
            };
        }
        return leaf.set_grad(None);
    }
    st.micro_batches += 1;
    if st.micro_batches < c.accumulate.max(1) {
        return Ok(());
    }
    st.micro_batches = 0;
    let mut scale = match c.phase {
        Phase::Scaled(s) => s,
        _ => 1.0,
    };
    if let Some((max_norm, norm_type)) = c.clip_norm {
        let n = kernels::norm_pow(&grad.data(), norm_type)?;
        let n = if norm_type.is_infinite() || norm_type == 1.0 {
            n
        } else {
            n.powf(1.0 / norm_type)
        } * scale;
        let coef = max_norm / (n + 1e-6);
        if coef < 1.0 {
            scale *= coef;
        }
    }
    let prep = GradPrep {
        scale,
        clip_value: c.clip_value,
        maximize: false,
    };
    let h = group.read().clone();
    step(leaf, &grad, &h, &mut st, prep)?;
    drop(st);
    leaf.set_grad(None)
}
