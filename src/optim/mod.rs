//! Optimizers in Rust: per-parameter update kernels (SGD, Adam, AdamW, RMSprop, Adagrad,
//! Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD, Adafactor) and the
//! in-backward mode, where each parameter is stepped by a Rust post-accumulate hook the
//! moment its gradient is final, and its gradient freed.
//!
//! A param group's hyperparameters live in a shared `Group` that Python's `param_groups`
//! dicts write through to, so schedulers keep working while the hooks run in Rust.

pub mod coded_state;
pub mod kernels;

use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::backend;
use crate::backend::coded::StateFormat;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::ops;
use crate::tensor::{check_like, shape_str, Tensor};
use coded_state::Coded;
use kernels::{
    AdadeltaStep, AdafactorStep, AdagradStep, AdamBase, AdamStep, AdamaxStep, AsgdStep, GradPrep,
    NAdamStep, RAdamStep, RmsPropStep, RpropStep, SgdStep, StepRule,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Sgd,
    Adam,
    AdamW,
    RmsProp,
    Adagrad,
    Adamax,
    NAdam,
    RAdam,
    Adadelta,
    Rprop,
    Asgd,
    Adafactor,
}

impl Kind {
    pub fn parse(name: &str) -> Result<Kind> {
        Ok(match name {
            "sgd" => Kind::Sgd,
            "adam" => Kind::Adam,
            "adamw" => Kind::AdamW,
            "rmsprop" => Kind::RmsProp,
            "adagrad" => Kind::Adagrad,
            "adamax" => Kind::Adamax,
            "nadam" => Kind::NAdam,
            "radam" => Kind::RAdam,
            "adadelta" => Kind::Adadelta,
            "rprop" => Kind::Rprop,
            "asgd" => Kind::Asgd,
            "adafactor" => Kind::Adafactor,
            _ => return Err(Error::value(format!("unknown optimizer kind '{name}'"))),
        })
    }
}

/// One param group's hyperparameters, as the kernels read them at each step (each
/// optimizer reads its own; Python sets every key of the group).
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
    /// Adam with `decoupled_weight_decay=True` is AdamW; NAdam and RAdam have it too.
    pub decoupled: bool,
    /// RMSprop's smoothing constant; ASGD's eta power.
    pub alpha: f64,
    pub centered: bool,
    pub lr_decay: f64,
    pub initial_accumulator_value: f64,
    pub momentum_decay: f64,
    pub rho: f64,
    /// Rprop's `etas` and `step_sizes` pairs.
    pub eta_minus: f64,
    pub eta_plus: f64,
    pub step_size_min: f64,
    pub step_size_max: f64,
    pub lambd: f64,
    pub t0: f64,
    /// Adafactor's decay exponent, its `eps` pair (`eps1` `None`: the dtype's epsilon)
    /// and its update clipping threshold `d`.
    pub beta2_decay: f64,
    pub eps1: Option<f64>,
    pub eps2: f64,
    pub d: f64,
    /// `state_dtype`: the state's coding (dense: the parameter's dtype), its block size
    /// (0: the format's default) and the least parameter size it applies to (smaller ones
    /// keep dense state, as bitsandbytes' `min_8bit_size`).
    pub state_format: StateFormat,
    pub block_size: f64,
    pub min_quantized_size: f64,
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
            alpha: 0.99,
            centered: false,
            lr_decay: 0.0,
            initial_accumulator_value: 0.0,
            momentum_decay: 4e-3,
            rho: 0.9,
            eta_minus: 0.5,
            eta_plus: 1.2,
            step_size_min: 1e-6,
            step_size_max: 50.0,
            lambd: 1e-4,
            t0: 1e6,
            beta2_decay: -0.8,
            eps1: None,
            eps2: 1e-3,
            d: 1.0,
            state_format: StateFormat::Dense,
            block_size: 0.0,
            min_quantized_size: 4096.0,
        }
    }

    /// The coded format and block size parameter `p`'s state takes, or `None` for dense
    /// state.
    fn coded_format(&self, p: &Tensor) -> Result<Option<(StateFormat, usize)>> {
        if self.state_format == StateFormat::Dense || (p.numel() as f64) < self.min_quantized_size {
            return Ok(None);
        }
        if !matches!(self.kind, Kind::Sgd | Kind::Adam | Kind::AdamW) {
            return Err(Error::value(format!(
                "state_dtype='{}' is supported by SGD, Adam and AdamW, not {:?}",
                self.state_format.name(),
                self.kind
            )));
        }
        let block = match self.block_size as usize {
            0 => self.state_format.default_block(),
            b => b,
        };
        Ok(Some((self.state_format, block)))
    }

    /// The hyperparameter a param-group key names (pairs such as `betas` are [`Hyper::pair`]).
    pub fn field(&mut self, key: &str) -> Option<Field<'_>> {
        if key == "eps" && self.kind == Kind::Adafactor {
            return None; // a pair: see [`Hyper::optional_pair`]
        }
        Some(match key {
            "lr" => Field::Number(&mut self.lr),
            "momentum" => Field::Number(&mut self.momentum),
            "dampening" => Field::Number(&mut self.dampening),
            "weight_decay" => Field::Number(&mut self.weight_decay),
            "eps" => Field::Number(&mut self.eps),
            "alpha" => Field::Number(&mut self.alpha),
            "lr_decay" => Field::Number(&mut self.lr_decay),
            "initial_accumulator_value" => Field::Number(&mut self.initial_accumulator_value),
            "momentum_decay" => Field::Number(&mut self.momentum_decay),
            "rho" => Field::Number(&mut self.rho),
            "lambd" => Field::Number(&mut self.lambd),
            "t0" => Field::Number(&mut self.t0),
            "beta2_decay" => Field::Number(&mut self.beta2_decay),
            "d" => Field::Number(&mut self.d),
            "block_size" => Field::Number(&mut self.block_size),
            "min_quantized_size" => Field::Number(&mut self.min_quantized_size),
            "nesterov" => Field::Flag(&mut self.nesterov),
            "maximize" => Field::Flag(&mut self.maximize),
            "amsgrad" => Field::Flag(&mut self.amsgrad),
            "centered" => Field::Flag(&mut self.centered),
            "decoupled_weight_decay" => Field::Flag(&mut self.decoupled),
            _ => return None,
        })
    }

    /// The pair a param-group key names whose first value may be `None` (Adafactor's
    /// `eps = (None, 1e-3)`).
    pub fn optional_pair(&mut self, key: &str) -> Option<(&mut Option<f64>, &mut f64)> {
        match key {
            "eps" if self.kind == Kind::Adafactor => Some((&mut self.eps1, &mut self.eps2)),
            _ => None,
        }
    }

    /// The two hyperparameters a pair-valued param-group key names.
    pub fn pair(&mut self, key: &str) -> Option<(&mut f64, &mut f64)> {
        Some(match key {
            "betas" => (&mut self.beta1, &mut self.beta2),
            "etas" => (&mut self.eta_minus, &mut self.eta_plus),
            "step_sizes" => (&mut self.step_size_min, &mut self.step_size_max),
            _ => return None,
        })
    }
}

impl Hyper {
    /// The coefficients the Adam family shares; AdamW always decouples its weight decay.
    fn adam_base(&self) -> AdamBase {
        AdamBase {
            lr: self.lr,
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
            decoupled: self.decoupled || self.kind == Kind::AdamW,
        }
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
    /// The step count (PyTorch keeps it as a float32 0-d tensor).
    pub step: Option<f64>,
    /// Other scalar state (NAdam's `mu_product`, ASGD's `eta` and `mu`): float32 values,
    /// as PyTorch's 0-d tensors hold them.
    pub scalars: Vec<(&'static str, f64)>,
    /// State buffers by PyTorch's state-dict name, in the order they were made.
    pub buffers: Vec<(&'static str, Tensor)>,
    /// Coded state buffers (`state_dtype`), by the same names; a parameter's state is
    /// either all dense or all coded.
    pub coded: Vec<(&'static str, Coded)>,
    /// The coding new buffers take (set by the step from the param group).
    pub format: Option<(StateFormat, usize)>,
    /// Backward passes accumulated into `.grad` since the last in-backward step.
    pub micro_batches: u64,
    /// The backward pass (`autograd::pass`) of the last in-backward step.
    pub stepped_in_pass: Option<u64>,
}

/// Every state buffer name the optimizers use (PyTorch's state-dict keys).
pub const BUFFERS: [&str; 15] = [
    "momentum_buffer",
    "exp_avg",
    "exp_avg_sq",
    "max_exp_avg_sq",
    "square_avg",
    "grad_avg",
    "sum",
    "exp_inf",
    "acc_delta",
    "prev",
    "step_size",
    "ax",
    "row_var",
    "col_var",
    "variance",
];

/// The scalar state names besides `step`.
pub const SCALARS: [&str; 3] = ["mu_product", "eta", "mu"];

impl ParamState {
    pub fn is_empty(&self) -> bool {
        self.step.is_none()
            && self.scalars.is_empty()
            && self.buffers.is_empty()
            && self.coded.is_empty()
    }

    pub fn coded(&self, key: &str) -> Option<&Coded> {
        self.coded.iter().find(|(k, _)| *k == key).map(|(_, c)| c)
    }

    /// The format and block of the state held now, if it is coded.
    pub fn held_format(&self) -> Option<(StateFormat, usize)> {
        self.coded.first().map(|(_, c)| {
            let f = match c.coding {
                backend::coded::Coding::BFloat16 => StateFormat::BFloat16,
                backend::coded::Coding::Int8 { .. } => StateFormat::Int8,
                backend::coded::Coding::Fp8 { .. } => StateFormat::Fp8,
                _ => StateFormat::Int4,
            };
            (f, c.block)
        })
    }

    pub fn get(&self, key: &str) -> Option<&Tensor> {
        self.buffers.iter().find(|(k, _)| *k == key).map(|(_, t)| t)
    }

    /// Make the buffer `key` if it is missing: shaped like `p`, filled with `fill`.
    fn ensure(&mut self, key: &'static str, p: &Tensor, fill: f64) -> Result<()> {
        if self.get(key).is_none() {
            self.buffers.push((key, state_like(p, fill)?));
        }
        Ok(())
    }

    /// Make each missing buffer of `keys`, zero-filled like `p` (coded when the step set a
    /// coded format), and hand `keys` back.
    fn zeros(
        &mut self,
        keys: &'static [&'static str],
        p: &Tensor,
    ) -> Result<&'static [&'static str]> {
        for &k in keys {
            match self.format {
                Some((format, block)) if self.coded(k).is_none() => {
                    self.coded.push((k, Coded::zeros(format, k, p, block)?))
                }
                Some(_) => {}
                None => self.ensure(k, p, 0.0)?,
            }
        }
        Ok(keys)
    }

    /// Make the zero buffer `key` of shape `dims` (a factored state) if it is missing.
    fn ensure_shaped(&mut self, key: &'static str, p: &Tensor, dims: &[usize]) -> Result<()> {
        if self.get(key).is_none() {
            let t = ops::creation::zeros(dims, p.dtype(), &p.device())?;
            t.set_role(Role::OptimizerState, true);
            self.buffers.push((key, t));
        }
        Ok(())
    }

    /// The buffers `keys`, which must exist, in that order.
    fn data(&self, keys: &[&str]) -> Vec<candle_core::Tensor> {
        keys.iter()
            .map(|k| {
                self.get(k)
                    .expect("state buffer made before the step")
                    .data()
            })
            .collect()
    }

    pub fn scalar(&self, key: &str) -> Option<f64> {
        self.scalars
            .iter()
            .find(|(k, _)| *k == key)
            .map(|(_, v)| *v)
    }

    /// Set `key` to `v` unless it is already set (a state's first step).
    fn init_scalar(&mut self, key: &'static str, v: f64) {
        if self.scalar(key).is_none() {
            self.set_scalar(key, v);
        }
    }
    pub fn set_scalar(&mut self, key: &'static str, v: f64) {
        match self.scalars.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = v,
            None => self.scalars.push((key, v)),
        }
    }

    /// Put a buffer (replacing one of the same name).
    pub fn set_buffer(&mut self, key: &'static str, t: Tensor) {
        match self.buffers.iter_mut().find(|(k, _)| *k == key) {
            Some(e) => e.1 = t,
            None => self.buffers.push((key, t)),
        }
    }
}

pub type State = Arc<Mutex<ParamState>>;

/// A new state buffer shaped like `p` and filled with `fill`, counted as optimizer state.
fn state_like(p: &Tensor, fill: f64) -> Result<Tensor> {
    let t = ops::creation::zeros_like(p)?;
    if fill != 0.0 {
        ops::inplace::fill_data(&t, ops::Scalar::Float(fill))?;
    }
    t.set_role(Role::OptimizerState, true);
    Ok(t)
}

/// A value as a float32 0-d tensor holds it (PyTorch's scalar optimizer state).
fn f32r(v: f64) -> f64 {
    v as f32 as f64
}

/// Take ownership of a state tensor given by the user (load_state_dict): a dense copy in
/// the parameter's dtype, counted as optimizer state.
pub fn adopt_state(p: &Tensor, t: &Tensor, name: &str) -> Result<Tensor> {
    if t.dims() != state_dims(name, &p.dims()) {
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

/// The shape of the state buffer `name` of a parameter of shape `dims`: the parameter's,
/// except Adafactor's row and column variances, which drop the last or the second-to-last
/// size to 1.
pub fn state_dims(name: &str, dims: &[usize]) -> Vec<usize> {
    let mut d = dims.to_vec();
    let n = d.len();
    match name {
        "row_var" if n >= 2 => d[n - 1] = 1,
        "col_var" if n >= 2 => d[n - 2] = 1,
        _ => {}
    }
    d
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
    if param.numel() == 0 {
        return Ok(());
    }
    let pdata = param.data();
    if !pdata.is_contiguous() {
        // A parameter laid out otherwise (channels-last, transposed): its state is kept
        // contiguous; the kernel steps a contiguous copy, written back in place.
        let dense = Tensor::new(ops::convert::dense_copy(&pdata)?, param.dtype());
        step(&dense, grad, h, st, prep)?;
        ops::inplace::update_data("optimizer step", param, &dense, backend::Update::Assign)?;
        return Ok(());
    }
    // The kernel reads the gradient while writing the parameter: never the same buffer.
    let mut gdata = grad.data();
    if !gdata.is_contiguous() || crate::backend::same_buffer(&gdata, &pdata) {
        gdata = ops::convert::dense_copy(&gdata)?;
    }
    let prep = GradPrep {
        maximize: h.maximize,
        ..prep
    };
    let (rule, keys) = rule_for(param, h, st)?;
    if st.format.is_some() {
        let coded: Vec<&Coded> = keys.iter().filter_map(|k| st.coded(k)).collect();
        let views: Vec<_> = coded.iter().map(|c| c.view()).collect();
        let states = coded_state::kernel_states(&views);
        backend::on(&pdata).optim_step_coded(&pdata, &gdata, &states, &rule, &prep)?;
        coded.iter().for_each(|c| c.bump_version());
        param.bump_version();
        return Ok(());
    }
    let bufs = st.data(keys);
    let refs: Vec<&candle_core::Tensor> = bufs.iter().collect();
    backend::on(&pdata).optim_step(&pdata, &gdata, &refs, &rule, &prep)?;
    for k in keys {
        if let Some(t) = st.get(k) {
            t.bump_version();
        }
    }
    param.bump_version();
    Ok(())
}

/// Advance `st` by one step of `h.kind` (making missing buffers, counting the step,
/// updating scalar state) and give the kernel's rule and the buffers it takes, in order.
fn rule_for(
    p: &Tensor,
    h: &Hyper,
    st: &mut ParamState,
) -> Result<(StepRule, &'static [&'static str])> {
    let format = h.coded_format(p)?;
    let held_dense = !st.buffers.is_empty();
    if (st.held_format().is_some() || held_dense) && st.held_format() != format {
        let held = match st.held_format() {
            Some((f, b)) => format!("{} in blocks of {b}", f.name()),
            None => "dense".to_string(),
        };
        let wanted = match format {
            Some((f, b)) => format!("{} in blocks of {b}", f.name()),
            None => "dense".to_string(),
        };
        return Err(Error::value(format!(
            "optimizer step: the state of the parameter of shape {} is held {held}, but its \
             param group asks for {wanted} (state_dtype, block_size and min_quantized_size \
             must not change once the state exists)",
            shape_str(&p.dims())
        )));
    }
    st.format = format;
    let next_step = |st: &mut ParamState| {
        let s = st.step.unwrap_or(0.0) + 1.0;
        st.step = Some(s);
        s
    };
    Ok(match h.kind {
        Kind::Sgd => {
            let init = st.get("momentum_buffer").is_none();
            let keys = match h.momentum != 0.0 {
                true => st.zeros(&["momentum_buffer"], p)?,
                false => &[],
            };
            let s = SgdStep {
                lr: h.lr,
                momentum: h.momentum,
                dampening: h.dampening,
                nesterov: h.nesterov,
                weight_decay: h.weight_decay,
                init_buffer: init,
            };
            (StepRule::Sgd(s), keys)
        }
        Kind::Adam | Kind::AdamW => {
            let keys = st.zeros(
                match h.amsgrad {
                    true => &["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
                    false => &["exp_avg", "exp_avg_sq"],
                },
                p,
            )?;
            let step = next_step(st);
            let bias_correction1 = 1.0 - h.beta1.powf(step);
            let bias_correction2 = 1.0 - h.beta2.powf(step);
            let s = AdamStep {
                base: h.adam_base(),
                step_size: h.lr / bias_correction1,
                bias_correction2_sqrt: bias_correction2.powf(0.5),
                amsgrad: h.amsgrad,
            };
            (StepRule::Adam(s), keys)
        }
        Kind::RmsProp => {
            let centered = h.centered;
            let keys = st.zeros(
                match (h.momentum > 0.0, centered) {
                    (false, false) => &["square_avg"],
                    (true, false) => &["square_avg", "momentum_buffer"],
                    (false, true) => &["square_avg", "grad_avg"],
                    (true, true) => &["square_avg", "momentum_buffer", "grad_avg"],
                },
                p,
            )?;
            next_step(st);
            let s = RmsPropStep {
                lr: h.lr,
                alpha: h.alpha,
                eps: h.eps,
                weight_decay: h.weight_decay,
                momentum: h.momentum,
                centered,
            };
            (StepRule::RmsProp(s), keys)
        }
        Kind::Adagrad => {
            st.ensure("sum", p, h.initial_accumulator_value)?;
            let step = next_step(st);
            let s = AdagradStep {
                clr: h.lr / (1.0 + (step - 1.0) * h.lr_decay),
                eps: h.eps,
                weight_decay: h.weight_decay,
            };
            (StepRule::Adagrad(s), &["sum"])
        }
        Kind::Adamax => {
            let keys = st.zeros(&["exp_avg", "exp_inf"], p)?;
            let step = next_step(st);
            let s = AdamaxStep {
                clr: h.lr / (1.0 - h.beta1.powf(step)),
                beta1: h.beta1,
                beta2: h.beta2,
                eps: h.eps,
                weight_decay: h.weight_decay,
            };
            (StepRule::Adamax(s), keys)
        }
        Kind::NAdam => {
            st.init_scalar("mu_product", 1.0);
            let keys = st.zeros(&["exp_avg", "exp_avg_sq"], p)?;
            let step = next_step(st);
            let mu = h.beta1 * (1.0 - 0.5 * 0.96f64.powf(step * h.momentum_decay));
            let mu_next = h.beta1 * (1.0 - 0.5 * 0.96f64.powf((step + 1.0) * h.momentum_decay));
            let prod = st.scalar("mu_product").unwrap_or(1.0);
            let prod = f32r(f64::from(prod as f32 * mu as f32));
            st.set_scalar("mu_product", prod);
            let s = NAdamStep {
                base: h.adam_base(),
                bias_correction2: 1.0 - h.beta2.powf(step),
                c_grad: -h.lr * (1.0 - mu) / (1.0 - prod),
                c_avg: (-h.lr * mu_next) / (1.0 - prod * mu_next),
            };
            (StepRule::NAdam(s), keys)
        }
        Kind::RAdam => {
            let keys = st.zeros(&["exp_avg", "exp_avg_sq"], p)?;
            let step = next_step(st);
            let bc1 = 1.0 - h.beta1.powf(step);
            let bc2 = 1.0 - h.beta2.powf(step);
            let rho_inf = 2.0 / (1.0 - h.beta2) - 1.0;
            let rho_t = rho_inf - 2.0 * step * h.beta2.powf(step) / bc2;
            let rect = (rho_t > 5.0).then(|| {
                ((rho_t - 4.0) * (rho_t - 2.0) * rho_inf
                    / ((rho_inf - 4.0) * (rho_inf - 2.0) * rho_t))
                    .powf(0.5)
            });
            let s = RAdamStep {
                base: h.adam_base(),
                bias_correction1: bc1,
                bias_correction2_sqrt: bc2.powf(0.5),
                rect,
            };
            (StepRule::RAdam(s), keys)
        }
        Kind::Adadelta => {
            let keys = st.zeros(&["square_avg", "acc_delta"], p)?;
            next_step(st);
            let s = AdadeltaStep {
                lr: h.lr,
                rho: h.rho,
                eps: h.eps,
                weight_decay: h.weight_decay,
            };
            (StepRule::Adadelta(s), keys)
        }
        Kind::Rprop => {
            st.ensure("prev", p, 0.0)?;
            st.ensure("step_size", p, h.lr)?;
            next_step(st);
            let s = RpropStep {
                eta_minus: h.eta_minus,
                eta_plus: h.eta_plus,
                step_size_min: h.step_size_min,
                step_size_max: h.step_size_max,
            };
            (StepRule::Rprop(s), &["prev", "step_size"])
        }
        Kind::Asgd => {
            st.init_scalar("eta", f32r(h.lr));
            st.init_scalar("mu", 1.0);
            let keys = st.zeros(&["ax"], p)?;
            let step = next_step(st);
            let (eta, mu) = (
                st.scalar("eta").unwrap_or(1.0),
                st.scalar("mu").unwrap_or(1.0),
            );
            let s = AsgdStep {
                eta,
                lambd: h.lambd,
                mu,
                weight_decay: h.weight_decay,
            };
            let new_eta = h.lr / (1.0 + h.lambd * h.lr * step).powf(h.alpha);
            st.set_scalar("eta", f32r(new_eta));
            st.set_scalar("mu", f32r(1.0 / (step - h.t0).max(1.0)));
            (StepRule::Asgd(s), keys)
        }
        Kind::Adafactor => {
            let dims = p.dims();
            let matrix = (dims.len() >= 2).then(|| (dims[dims.len() - 2], dims[dims.len() - 1]));
            let keys: &[&str] = if matrix.is_some() {
                st.ensure_shaped("row_var", p, &state_dims("row_var", &dims))?;
                st.ensure_shaped("col_var", p, &state_dims("col_var", &dims))?;
                &["row_var", "col_var"]
            } else {
                st.ensure("variance", p, 0.0)?;
                &["variance"]
            };
            let step = next_step(st);
            let s = AdafactorStep {
                lr: h.lr,
                rho: h.lr.min(1.0 / step.sqrt()),
                beta2_weight: step.powf(h.beta2_decay),
                eps1: h.eps1,
                eps2: h.eps2,
                d: h.d,
                weight_decay: h.weight_decay,
                matrix,
            };
            (StepRule::Adafactor(s), keys)
        }
    })
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
    st.stepped_in_pass = Some(crate::autograd::pass::latest());
    drop(st);
    leaf.set_grad(None)
}
