//! `Generator`, `default_generator` and seeding, and the random ops that are not
//! factories (`bernoulli`, `multinomial`, `Tensor.uniform_/normal_/bernoulli_`).

use std::sync::Arc;

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyFloat, PyInt};

use crate::bindings::convert::{extract_class, opt_device, type_name, PyDevice};
use crate::bindings::op::{attributes, functions, tensor_ops};
use crate::bindings::part;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::ops;
use crate::random::{self, default_generator, Generator, DEFAULT_SEED, STATE_BYTES};
use crate::tensor::Tensor;

/// A random number generator: pass it as `generator=` to draw from it instead of the
/// global one (`default_generator`). Seeding it makes its draws repeatable. Every generator
/// draws on the host; `device` is the device its draws are made for.
#[pyclass(name = "Generator", module = "gradstream", frozen)]
pub struct PyGenerator {
    g: Arc<Generator>,
    device: PyDevice,
}

/// A seed as PyTorch takes it: any integer in [-2^63, 2^64), negatives wrapping to u64.
fn seed_value(op: &str, seed: &Obj<'_>) -> PyResult<u64> {
    if !seed.is_instance_of::<PyInt>() {
        return Err(PyRuntimeError::new_err(format!(
            "{op} expected a long, but got {}",
            type_name(seed)
        )));
    }
    if let Ok(v) = seed.extract::<i64>() {
        return Ok(v as u64);
    }
    seed.extract::<u64>().map_err(|_| {
        PyValueError::new_err(format!(
            "{op}: Overflow when unpacking long long (seed {seed} is outside [-2^63, 2^64))"
        ))
    })
}

/// A generator state as `get_state()` returns it: a uint8 tensor of `STATE_BYTES` bytes.
fn state_bytes(op: &str, state: &Obj<'_>) -> PyResult<Vec<u8>> {
    let t = state.cast::<PyTensor>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{op}: expected a uint8 Tensor from get_state(), but got {}",
            type_name(state)
        ))
    })?;
    let t = t.get().t.clone();
    if t.dtype() != DType::UInt8 {
        return Err(PyTypeError::new_err(format!(
            "{op}: RNG state must be a uint8 Tensor, but got a {} Tensor",
            t.dtype().name()
        )));
    }
    Ok(t.to_vec::<u8>("set_state")?)
}

/// The state as PyTorch's ByteTensor, which lives on the CPU whatever the generator's device.
fn state_tensor(g: &Generator) -> PyResult<Tensor> {
    Ok(ops::creation::from_vec(
        g.get_state(),
        &[STATE_BYTES],
        DType::UInt8,
        &crate::device::host(),
    )?)
}

#[pymethods]
impl PyGenerator {
    #[new]
    #[pyo3(signature = (device=None))]
    fn new(device: Option<&Obj<'_>>) -> PyResult<Self> {
        let device = opt_device(device)?.unwrap_or_else(crate::device::host);
        Ok(PyGenerator {
            g: Arc::new(Generator::new(DEFAULT_SEED)),
            device: PyDevice::of(&device),
        })
    }

    #[getter]
    fn device(&self) -> PyDevice {
        self.device.clone()
    }

    /// Seed the generator; returns the generator.
    fn manual_seed<'py>(slf: &Bound<'py, Self>, seed: &Obj<'py>) -> PyResult<Bound<'py, Self>> {
        slf.get().g.manual_seed(seed_value("manual_seed", seed)?);
        Ok(slf.clone())
    }

    /// Restore a state from `get_state()`; returns the generator.
    fn set_state<'py>(slf: &Bound<'py, Self>, new_state: &Obj<'py>) -> PyResult<Bound<'py, Self>> {
        slf.get()
            .g
            .set_state(&state_bytes("set_state", new_state)?)?;
        Ok(slf.clone())
    }
}

/// The Python object of the global generator (`gradstream.default_generator`).
fn default_object(py: Python<'_>) -> PyResult<Py<PyGenerator>> {
    static OBJ: PyOnceLock<Py<PyGenerator>> = PyOnceLock::new();
    OBJ.get_or_try_init(py, || {
        Py::new(
            py,
            PyGenerator {
                g: default_generator().clone(),
                device: PyDevice::of(&crate::device::host()),
            },
        )
    })
    .map(|g| g.clone_ref(py))
}

attributes! { PyGenerator.g;
    /// Seed from the operating system's entropy; returns the seed.
    fn seed(g) -> u64 = g.seed();
    /// The seed the generator was last seeded with.
    fn initial_seed(g) -> u64 = g.initial_seed();
    /// The state as a uint8 tensor (ChaCha12 key, stream, word position and initial seed);
    /// `set_state` of it replays the same draws.
    fn get_state(g) -> PyResult<Tensor> = state_tensor(g);
}

/// The generator a `generator=` argument names: the global one for None.
pub fn pick_generator(op: &str, obj: Option<&Obj<'_>>) -> PyResult<Arc<Generator>> {
    match obj {
        Some(o) if !o.is_none() => {
            let g = extract_class::<PyGenerator>(op, "generator", "Generator", o)?;
            Ok(g.get().g.clone())
        }
        _ => Ok(default_generator().clone()),
    }
}

functions! { mod seeding;
    /// Seed the global generator: the same seed gives the same `rand`, `randn`, dropout
    /// masks. Returns `default_generator`.
    fn manual_seed["manual_seed"](py: Python<'_>, seed: Object) -> Py<PyGenerator> {
        // `torch.manual_seed` takes anything `int()` takes.
        let seed = match seed.is_instance_of::<PyFloat>() {
            true => py.get_type::<PyInt>().call1((seed,))?,
            false => seed.clone(),
        };
        random::manual_seed(seed_value("manual_seed", &seed)?);
        default_object(py)
    }
    /// Seed the global generator from the operating system's entropy; returns the seed.
    fn seed["seed"]() -> u64 { Ok(default_generator().seed()) }
    /// The seed the global generator was last seeded with.
    fn initial_seed["initial_seed"]() -> u64 { Ok(default_generator().initial_seed()) }
    /// The global generator's state (`default_generator.get_state()`).
    fn get_rng_state["get_rng_state"]() -> Tensor { state_tensor(default_generator()) }
    /// Restore the global generator's state from `get_rng_state()`.
    fn set_rng_state["set_rng_state"](new_state: Object) -> () {
        Ok(default_generator().set_state(&state_bytes("set_rng_state", new_state)?)?)
    }
}

/// Write `new` (drawn values) into `x` as `copy_` does, handing `x` back.
fn assign(x: Py<PyTensor>, new: Tensor) -> PyResult<Py<PyTensor>> {
    ops::index::assign(&x.get().t, None, &new)?;
    Ok(x)
}

tensor_ops! { mod ops_;
    /// 0 or 1 drawn with probability `input` (or `p`), in `input`'s dtype.
    both fn bernoulli(x: Tensor, p: Option<f64> = None;
        generator: Option<Object> = None) -> Tensor {
        let g = pick_generator("bernoulli", generator)?;
        Ok(match p {
            Some(p) => random::bernoulli_scalar("bernoulli", &x.dims(), x.dtype(), &x.device(), p, &g)?,
            None => random::bernoulli(&x, &g)?,
        })
    }
    /// `num_samples` category indices per row of weights `input` (1-D or 2-D), int64.
    both fn multinomial(x: Tensor, num_samples: i64, replacement: bool = false;
        generator: Option<Object> = None) -> Tensor {
        let g = pick_generator("multinomial", generator)?;
        Ok(random::multinomial(&x, num_samples, replacement, &g)?)
    }
    /// Fill with 0 or 1 drawn with probability `p` (a number or a tensor broadcast to
    /// this one's shape; 0.5 by default).
    method fn bernoulli_(x: Py<PyTensor>, p: Option<Object> = None;
        generator: Option<Object> = None) -> Py<PyTensor> {
        let g = pick_generator("bernoulli_", generator)?;
        let t = x.get().t.clone();
        let new = match p {
            Some(p) if p.cast::<PyTensor>().is_ok() => {
                random::bernoulli_like(&t, &p.cast::<PyTensor>()?.get().t, &g)?
            }
            Some(p) if !p.is_none() => {
                let v: f64 = p.extract().map_err(|_| PyTypeError::new_err(format!(
                    "bernoulli_(): argument 'p' must be float or Tensor, not {}",
                    type_name(p)
                )))?;
                random::bernoulli_scalar("bernoulli_", &t.dims(), t.dtype(), &t.device(), v, &g)?
            }
            _ => random::bernoulli_scalar("bernoulli_", &t.dims(), t.dtype(), &t.device(), 0.5, &g)?,
        };
        assign(x, new)
    }
    /// Fill with U(from_, to) draws.
    method fn uniform_(x: Py<PyTensor>, from_: f64 = 0.0, to: f64 = 1.0;
        generator: Option<Object> = None) -> Py<PyTensor> {
        let g = pick_generator("uniform_", generator)?;
        let new = random::uniform(&x.get().t, from_, to, &g)?;
        assign(x, new)
    }
    /// Fill with N(mean, std^2) draws.
    method fn normal_(x: Py<PyTensor>, mean: f64 = 0.0, std: f64 = 1.0;
        generator: Option<Object> = None) -> Py<PyTensor> {
        let g = pick_generator("normal_", generator)?;
        let new = random::normal(&x.get().t, mean, std, &g)?;
        assign(x, new)
    }
}

part!(|m| {
    m.add_class::<PyGenerator>()?;
    m.add("default_generator", default_object(m.py())?)
});
