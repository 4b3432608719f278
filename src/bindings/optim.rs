//! Python surface of the Rust optimizers (`gradstream.optim` is written over these).
//!
//! `_OptimGroup` holds one param group's hyperparameters (the Python `param_groups` dict
//! writes through to it), `_ParamState` one parameter's state, `_StreamControl` what the
//! in-backward hooks of one optimizer share. `_optim_step` steps parameters from their
//! `.grad`; `_optim_attach` installs the Rust post-accumulate hook of the in-backward mode.

use std::sync::Arc;

use parking_lot::RwLock;
use pyo3::exceptions::{PyKeyError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyTuple};

use crate::backend::coded::StateFormat;
use crate::bindings::convert::extract_tensor;
use crate::bindings::op::{attributes, functions, passed_as_is};
use crate::bindings::part;
use crate::bindings::row_types::typed;
use crate::bindings::Obj;
use crate::optim::coded_state;
use crate::optim::kernels;
use crate::optim::{self, Control, Field, Group, Hyper, Kind, ParamState, Phase, State};
use crate::tensor::Tensor;

fn float_of(key: &str, v: &Obj<'_>) -> PyResult<f64> {
    v.call_method0("__float__")
        .and_then(|f| f.extract::<f64>())
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "param group '{key}' must be a number, got {}",
                v.get_type()
                    .name()
                    .map(|n| n.to_string())
                    .unwrap_or_default()
            ))
        })
}

/// The two items of a pair-valued hyperparameter.
fn pair_items<'py>(key: &str, value: &Obj<'py>) -> PyResult<[Obj<'py>; 2]> {
    let v: Vec<Obj<'py>> = value.try_iter()?.collect::<PyResult<_>>()?;
    let n = v.len();
    v.try_into()
        .map_err(|_| PyValueError::new_err(format!("{key} must be a pair, got {n} values")))
}

/// A `state_dtype` value: None (the parameter's dtype), a name, or a dtype object.
fn state_format_of(value: &Obj<'_>) -> PyResult<StateFormat> {
    if value.is_none() {
        return Ok(StateFormat::Dense);
    }
    let name = match value.extract::<String>() {
        Ok(s) => s,
        Err(_) => value.str()?.to_string(),
    };
    let name = name.strip_prefix("torch.").unwrap_or(&name);
    let name = name.strip_prefix("gradstream.").unwrap_or(name);
    StateFormat::parse(name).ok_or_else(|| {
        PyValueError::new_err(format!(
            "state_dtype must be one of None, 'float32', 'bfloat16', 'int8', 'int4' or 'fp8', \
             got {name:?}"
        ))
    })
}

/// One param group's hyperparameters, shared with the in-backward hooks.
#[pyclass(name = "_OptimGroup", module = "gradstream._core", frozen)]
pub struct PyOptimGroup {
    pub g: Group,
}

#[pymethods]
impl PyOptimGroup {
    #[new]
    fn new(kind: &str) -> PyResult<Self> {
        Ok(PyOptimGroup {
            g: Arc::new(RwLock::new(Hyper::new(Kind::parse(kind)?))),
        })
    }

    /// Write one hyperparameter; keys the kernels do not read are ignored.
    fn set(&self, key: &str, value: &Obj<'_>) -> PyResult<()> {
        let mut h = self.g.write();
        if key == "state_dtype" {
            h.state_format = state_format_of(value)?;
            return Ok(());
        }
        if key == "block_size" && value.is_none() {
            h.block_size = 0.0; // the format's default
            return Ok(());
        }
        if let Some((first, second)) = h.optional_pair(key) {
            let [x, y] = pair_items(key, value)?;
            *first = if x.is_none() {
                None
            } else {
                Some(float_of(key, &x)?)
            };
            *second = float_of(key, &y)?;
            return Ok(());
        }
        match h.field(key) {
            Some(Field::Number(x)) => *x = float_of(key, value)?,
            Some(Field::Flag(f)) => *f = value.is_truthy()?,
            None => {}
        }
        if let Some((a, b)) = h.pair(key) {
            let [x, y] = pair_items(key, value)?;
            (*a, *b) = (float_of(key, &x)?, float_of(key, &y)?);
        }
        Ok(())
    }

    /// The value the kernels will use for `key` (for tests of the write-through).
    fn get<'py>(&self, py: Python<'py>, key: &str) -> PyResult<Bound<'py, PyAny>> {
        let mut h = self.g.read().clone();
        if key == "state_dtype" {
            return Ok(h.state_format.name().into_pyobject(py)?.into_any());
        }
        if let Some((a, b)) = h.optional_pair(key) {
            return Ok(
                PyTuple::new(py, [a.into_pyobject(py)?, b.into_pyobject(py)?.into_any()])?
                    .into_any(),
            );
        }
        if let Some((a, b)) = h.pair(key) {
            return Ok(PyTuple::new(py, [*a, *b])?.into_any());
        }
        match h.field(key) {
            Some(Field::Number(x)) => Ok(x.into_pyobject(py)?.into_any()),
            Some(Field::Flag(f)) => Ok(f.into_pyobject(py)?.to_owned().into_any()),
            None => Err(PyKeyError::new_err(key.to_string())),
        }
    }
}

/// One parameter's optimizer state, in Rust so the in-backward hook can reach it.
#[pyclass(name = "_ParamState", module = "gradstream._core", frozen)]
pub struct PyParamState {
    pub s: State,
}

#[pymethods]
impl PyParamState {
    #[new]
    fn new() -> Self {
        PyParamState {
            s: State::default(),
        }
    }

    /// PyTorch's `optimizer.state[p]` layout: the tensors are the live buffers.
    fn to_dict<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.s.lock();
        let d = PyDict::new(py);
        // PyTorch's `_get_scalar_dtype()`: float64 under a float64 default, else float32.
        let dt = crate::dtype::default_float().compute();
        // They are CPU tensors whatever the parameter's device, as PyTorch's are.
        let host = crate::device::host();
        let scalar =
            |v: f64| crate::ops::creation::scalar_tensor(crate::ops::Scalar::Float(v), dt, &host);
        if let Some(step) = s.step {
            d.set_item("step", scalar(step)?)?;
        }
        for (key, v) in &s.scalars {
            d.set_item(*key, scalar(*v)?)?;
        }
        for (key, t) in &s.buffers {
            d.set_item(*key, t.detach())?;
        }
        if let Some((format, block)) = s.held_format() {
            d.set_item("state_dtype", format.name())?;
            d.set_item("block_size", block)?;
            for (key, c) in &s.coded {
                for (name, t) in c.entries(key) {
                    d.set_item(name, t)?;
                }
            }
        }
        Ok(d)
    }

    /// Replace the state from a PyTorch-layout dict; tensors are copied.
    fn load(&self, param: &Obj<'_>, state: &Bound<'_, PyDict>) -> PyResult<()> {
        let p = extract_tensor("load_state_dict", "param", param)?;
        let mut s = ParamState::default();
        if let Some(f) = state.get_item("state_dtype")? {
            let format = state_format_of(&f)?;
            let block: usize = match state.get_item("block_size")? {
                Some(b) => b.extract()?,
                None => format.default_block(),
            };
            for name in optim::BUFFERS {
                let Some(codes) = state.get_item(name)? else {
                    continue;
                };
                let codes = extract_tensor("load_state_dict", name, &codes)?;
                let coding = format.coding(coded_state::is_signed(name), &p.dims());
                let mut scales = vec![];
                for suffix in coding.map_or(&[][..], |c| c.scale_suffixes()) {
                    let key = format!("{name}_{suffix}");
                    let t = state.get_item(&key)?.ok_or_else(|| {
                        PyKeyError::new_err(format!(
                            "load_state_dict: {} state '{name}' has no '{key}'",
                            format.name()
                        ))
                    })?;
                    scales.push(extract_tensor("load_state_dict", name, &t)?);
                }
                let c = coded_state::Coded::adopt(format, block, name, &p, &codes, &scales)?;
                s.coded.push((name, c));
            }
        }
        let coded = !s.coded.is_empty();
        for (k, v) in state.iter() {
            let key: String = k.extract()?;
            if v.is_none() {
                continue;
            }
            if key == "step" {
                s.step = Some(float_of("step", &v)?);
            } else if let Some(name) = optim::SCALARS.iter().find(|n| **n == key) {
                let x = float_of(name, &v)?;
                s.set_scalar(name, f64::from(x as f32));
            } else if let Some(name) = optim::BUFFERS.iter().find(|n| **n == key && !coded) {
                let t = extract_tensor("load_state_dict", name, &v)?;
                s.set_buffer(name, optim::adopt_state(&p, &t, name)?);
            }
        }
        *self.s.lock() = s;
        Ok(())
    }
}

#[pymethods]
impl PyParamState {
    /// The state buffers as float32 tensors shaped like `param`: coded ones decoded, dense
    /// ones as they are (`Optimizer.dequantized_state`).
    fn decoded<'py>(&self, py: Python<'py>, param: &Obj<'_>) -> PyResult<Bound<'py, PyDict>> {
        let p = extract_tensor("dequantized_state", "param", param)?;
        let s = self.s.lock();
        let d = PyDict::new(py);
        for (key, t) in &s.buffers {
            d.set_item(*key, t.detach())?;
        }
        for (key, c) in &s.coded {
            d.set_item(*key, c.decode(&p)?)?;
        }
        Ok(d)
    }
}

attributes! { PyParamState.s;
    fn clear(s) -> () = *s.lock() = ParamState::default();
    fn is_empty(s) -> bool = s.lock().is_empty();
    /// Restart gradient accumulation (`Optimizer.accumulate(n)`).
    fn reset_micro_batches(s) -> () = s.lock().micro_batches = 0;
    #[getter] fn micro_batches(s) -> u64 = s.lock().micro_batches;
}

/// What one optimizer's in-backward hooks share: accumulation, clipping, the two-pass mode.
#[pyclass(name = "_StreamControl", module = "gradstream._core", frozen)]
pub struct PyStreamControl {
    pub c: Control,
}

#[pymethods]
impl PyStreamControl {
    #[new]
    fn new() -> Self {
        PyStreamControl {
            c: Control::default(),
        }
    }

    #[setter]
    fn set_accumulate(&self, n: u64) {
        self.c.lock().accumulate = n.max(1);
    }

    #[pyo3(signature = (clip_value=None, clip_norm=None, norm_type=2.0))]
    fn set_clipping(&self, clip_value: Option<f64>, clip_norm: Option<f64>, norm_type: f64) {
        let mut c = self.c.lock();
        c.clip_value = clip_value;
        c.clip_norm = clip_norm.map(|m| (m, norm_type));
    }

    /// Pass 1 of exact global-norm clipping: hooks only measure and free gradients.
    fn begin_measure(&self, norm_type: f64) {
        self.c.lock().phase = Phase::Measure {
            norm_type,
            measured: 0.0,
        };
    }

    /// End pass 1: the total `sum |g|^p` (or max for inf) measured.
    fn end_measure(&self) -> f64 {
        let mut c = self.c.lock();
        let m = match c.phase {
            Phase::Measure { measured, .. } => measured,
            _ => 0.0,
        };
        c.phase = Phase::Step;
        m
    }

    /// Pass 2: step with every gradient multiplied by `scale`.
    fn set_scale(&self, scale: f64) {
        self.c.lock().phase = Phase::Scaled(scale);
    }
}

attributes! { PyStreamControl.c;
    #[getter] fn accumulate(c) -> u64 = c.lock().accumulate;
    fn reset_phase(c) -> () = c.lock().phase = Phase::Step;
}

fn tensors(name: &str, obj: &Obj<'_>) -> PyResult<Vec<Tensor>> {
    obj.try_iter()?
        .map(|o| extract_tensor("optimizer", name, &o?))
        .collect()
}

functions! { mod functions;
    /// `_optim_step(params, group, states)`: one fused in-place step per parameter that has
    /// a `.grad` (others are skipped, as PyTorch does).
    fn _optim_step["optimizer"](py: Python<'_>, params: Object, group: PyOptimGroup,
        states: List) -> () {
        let ps = tensors("params", params)?;
        let ss: Vec<State> = states
            .iter()
            .map(|s| Ok(s.cast::<PyParamState>()?.get().s.clone()))
            .collect::<PyResult<_>>()?;
        if ps.len() != ss.len() {
            return Err(PyValueError::new_err(format!(
                "_optim_step: {} params but {} states",
                ps.len(),
                ss.len()
            )));
        }
        let h = group.g.read().clone();
        Ok(py.detach(|| optim::step_all(&ps, &ss, &h))?)
    }
    /// Install the in-backward step on `param`: a Rust post-accumulate hook (no Python call
    /// per parameter). Returns the hook id for `_optim_detach`.
    fn _optim_attach["optimizer"](param: Tensor, group: PyOptimGroup, state: PyParamState,
        control: PyStreamControl) -> u64 {
        let (g, s, c) = (group.g.clone(), state.s.clone(), control.c.clone());
        let hook = Arc::new(move |leaf: &Tensor| optim::stream_step(leaf, &g, &s, &c));
        Ok(param.add_post_accumulate_hook(hook)?)
    }
    fn _optim_detach["optimizer"](param: Tensor, hook_id: u64) -> () {
        param.remove_post_accumulate_hook(hook_id);
        Ok(())
    }
    /// `sum |g|^p` over tensors (`max |g|` for p = inf), in float64.
    fn _norm_pow["optimizer"](py: Python<'_>, ts: Object, norm_type: f64) -> f64 {
        let ts = tensors("tensors", ts)?;
        Ok(py.detach(|| kernels::total_norm_pow(&ts, norm_type))?)
    }
    /// `t *= factor` in place, without autograd (gradient clipping).
    fn _scale_["clip_grad"](tensor: Tensor, factor: f64) -> () {
        kernels::scale_inplace(&tensor.data(), factor)?;
        tensor.bump_version();
        Ok(())
    }
    /// Clamp `t` into `[lo, hi]` in place, without autograd (`clip_grad_value_`).
    fn _clamp_["clip_grad"](tensor: Tensor, lo: f64, hi: f64) -> () {
        kernels::clamp_inplace(&tensor.data(), lo, hi)?;
        tensor.bump_version();
        Ok(())
    }
}

passed_as_is!(borrowed:
    PyOptimGroup => &'a PyOptimGroup: typed("_OptimGroup"),
    PyParamState => &'a PyParamState: typed("_ParamState"),
    PyStreamControl => &'a PyStreamControl: typed("_StreamControl"),
);

part!(|m| {
    m.add_class::<PyOptimGroup>()?;
    m.add_class::<PyParamState>()?;
    m.add_class::<PyStreamControl>()
});
