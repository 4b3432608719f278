//! `tensor`, `zeros`, `arange`, `rand`... and `manual_seed`.

use std::sync::OnceLock;

use ::rand::{Rng, SeedableRng};
use numpy::PyUntypedArray;
use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;
use rand_distr::{Distribution, StandardNormal};

use crate::bindings::add_functions;
use crate::bindings::convert::{
    check_device, extract_scalar, extract_size, extract_tensor, opt_dtype, tensor_from_data,
    tensor_from_numpy, to_dims,
};
use crate::bindings::op::Input;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::{DType, DEFAULT_FLOAT};
use crate::error::{CandleContext, Error};
use crate::ops::{self, Scalar};
use crate::tensor::Tensor;

fn rng() -> &'static Mutex<::rand::rngs::StdRng> {
    static R: OnceLock<Mutex<::rand::rngs::StdRng>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(::rand::rngs::StdRng::seed_from_u64(0x5eed)))
}

/// Run `f` with the global generator (also used by dropout and `nn.init`).
pub fn with_rng<R>(f: impl FnOnce(&mut ::rand::rngs::StdRng) -> R) -> R {
    f(&mut rng().lock())
}

fn finish(t: Tensor, requires_grad: bool) -> PyResult<Tensor> {
    if requires_grad {
        t.set_requires_grad(true)?;
    }
    Ok(t)
}

/// A tensor of `dtype` from values computed in `T`.
fn from_vec<T: candle_core::WithDType>(
    v: Vec<T>,
    dims: &[usize],
    dtype: DType,
) -> PyResult<Tensor> {
    let t = candle_core::Tensor::from_vec(v, dims, &candle_core::Device::Cpu).op("tensor")?;
    let src = DType::from_candle(t.dtype())?;
    Ok(ops::convert::to_dtype(&Tensor::new(t, src), dtype)?)
}

/// `tensor(data, dtype=None, device=None, requires_grad=False)`: always copies.
#[pyfunction]
#[pyo3(signature = (data, *, dtype=None, device=None, requires_grad=false, pin_memory=false))]
fn tensor(
    data: &Obj<'_>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
    pin_memory: bool,
) -> PyResult<Tensor> {
    let _ = pin_memory;
    check_device(device)?;
    let t = tensor_from_data(data, opt_dtype(dtype)?)?;
    // `tensor(t)` of a tensor is a new leaf.
    let t = if t.grad_fn().is_some() { t.detach() } else { t };
    finish(t, requires_grad)
}

/// `as_tensor(data, dtype=None)`: a tensor is returned as is (cast if asked).
#[pyfunction]
#[pyo3(signature = (data, dtype=None, device=None))]
fn as_tensor(
    data: &Obj<'_>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
) -> PyResult<Tensor> {
    check_device(device)?;
    let dt = opt_dtype(dtype)?;
    if let Ok(t) = data.cast::<PyTensor>() {
        let t = t.get().t.clone();
        return Ok(match dt {
            Some(d) => ops::convert::to_dtype(&t, d)?,
            None => t,
        });
    }
    tensor_from_data(data, dt)
}

/// `from_numpy(array)`: a tensor of the same dtype and values. gradstream copies the
/// data (PyTorch shares it): later writes to the array are not seen by the tensor.
#[pyfunction]
fn from_numpy(array: &Obj<'_>) -> PyResult<Tensor> {
    let arr = array.cast::<PyUntypedArray>().map_err(|_| {
        PyTypeError::new_err(format!(
            "expected np.ndarray (got {})",
            array
                .get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        ))
    })?;
    tensor_from_numpy(arr)
}

/// A new tensor of `dims` filled with `value`: `zeros`, `ones_like`, `full`...
fn filled(
    dims: &[usize],
    value: f64,
    dtype: Option<&Obj<'_>>,
    default: DType,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    check_device(device)?;
    let dt = opt_dtype(dtype)?.unwrap_or(default);
    finish(ops::creation::full(dims, value, dt)?, requires_grad)
}

macro_rules! filled {
    ($name:ident, $value:expr) => {
        #[pyfunction]
        #[pyo3(signature = (*size, dtype=None, device=None, requires_grad=false, out=None, layout=None, pin_memory=false))]
        #[allow(clippy::too_many_arguments)]
        fn $name(
            size: &Bound<'_, PyTuple>,
            dtype: Option<&Obj<'_>>,
            device: Option<&Obj<'_>>,
            requires_grad: bool,
            out: Option<&Obj<'_>>,
            layout: Option<&Obj<'_>>,
            pin_memory: bool,
        ) -> PyResult<Tensor> {
            let _ = (out, layout, pin_memory);
            let dims = to_dims(stringify!($name), &extract_size(stringify!($name), size)?)?;
            filled(&dims, $value, dtype, DEFAULT_FLOAT, device, requires_grad)
        }
    };
}

filled!(zeros, 0.0);
filled!(ones, 1.0);
filled!(empty, 0.0);

#[pyfunction]
#[pyo3(signature = (size, fill_value, *, dtype=None, device=None, requires_grad=false))]
fn full(
    size: &Obj<'_>,
    fill_value: &Obj<'_>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    let dims = to_dims(
        "full",
        &extract_size("full", &PyTuple::new(size.py(), [size])?)?,
    )?;
    let s = fill_scalar("full", fill_value)?;
    filled(
        &dims,
        s.as_f64(),
        dtype,
        scalar_dtype(s),
        device,
        requires_grad,
    )
}

fn fill_scalar(op: &str, v: &Obj<'_>) -> PyResult<Scalar> {
    if let Some(s) = extract_scalar(v) {
        return Ok(s);
    }
    if let Ok(t) = v.cast::<PyTensor>() {
        if t.get().t.numel() == 1 {
            let f: f64 = t.call_method0("item")?.extract()?;
            return Ok(if t.get().t.dtype().is_floating_point() {
                Scalar::Float(f)
            } else {
                Scalar::Int(f as i64)
            });
        }
    }
    Err(PyTypeError::new_err(format!(
        "{op}(): argument 'fill_value' must be Number, not {}",
        v.get_type().name()?
    )))
}

fn scalar_dtype(s: Scalar) -> DType {
    match s {
        Scalar::Bool(_) => DType::Bool,
        Scalar::Int(_) => DType::Int64,
        Scalar::Float(_) => DEFAULT_FLOAT,
    }
}

macro_rules! filled_like {
    ($name:ident, $value:expr) => {
        #[pyfunction]
        #[pyo3(signature = (input, *, dtype=None, device=None, requires_grad=false, memory_format=None))]
        fn $name(
            input: &Obj<'_>,
            dtype: Option<&Obj<'_>>,
            device: Option<&Obj<'_>>,
            requires_grad: bool,
            memory_format: Option<&Obj<'_>>,
        ) -> PyResult<Tensor> {
            let _ = memory_format;
            let t = Tensor::extract(stringify!($name), input)?;
            filled(&t.dims(), $value, dtype, t.dtype(), device, requires_grad)
        }
    };
}

filled_like!(zeros_like, 0.0);
filled_like!(ones_like, 1.0);
filled_like!(empty_like, 0.0);

#[pyfunction]
#[pyo3(signature = (input, fill_value, *, dtype=None, device=None, requires_grad=false))]
fn full_like(
    input: &Obj<'_>,
    fill_value: &Obj<'_>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    let t = Tensor::extract("full_like", input)?;
    let s = fill_scalar("full_like", fill_value)?;
    filled(
        &t.dims(),
        s.as_f64(),
        dtype,
        t.dtype(),
        device,
        requires_grad,
    )
}

/// `arange(end)`, `arange(start, end, step=1)`: int64 for integer arguments, else float32.
#[pyfunction]
#[pyo3(signature = (start, end=None, step=None, *, dtype=None, device=None, requires_grad=false))]
fn arange(
    start: &Obj<'_>,
    end: Option<&Obj<'_>>,
    step: Option<&Obj<'_>>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    check_device(device)?;
    let num = |o: &Obj<'_>| fill_scalar("arange", o);
    let (s, e) = match end {
        Some(e) if !e.is_none() => (num(start)?, num(e)?),
        _ => (Scalar::Int(0), num(start)?),
    };
    let st = match step {
        Some(x) if !x.is_none() => num(x)?,
        _ => Scalar::Int(1),
    };
    let any_float = [s, e, st].iter().any(|x| matches!(x, Scalar::Float(_)));
    let dt = opt_dtype(dtype)?.unwrap_or(if any_float {
        DEFAULT_FLOAT
    } else {
        DType::Int64
    });
    let (a, b, c) = (s.as_f64(), e.as_f64(), st.as_f64());
    if c == 0.0 {
        return Err(PyRuntimeError::new_err("arange: step must be nonzero"));
    }
    if (b - a) / c < 0.0 {
        return Err(PyRuntimeError::new_err(format!(
            "arange: upper bound and larger bound inconsistent with step sign (start={a}, end={b}, step={c})"
        )));
    }
    let n = ((b - a) / c).ceil() as usize;
    let t = if !any_float {
        let (a, c) = (a as i64, c as i64);
        from_vec((0..n as i64).map(|i| a + i * c).collect(), &[n], dt)?
    } else {
        from_vec((0..n).map(|i| a + i as f64 * c).collect(), &[n], dt)?
    };
    finish(t, requires_grad)
}

#[pyfunction]
#[pyo3(signature = (start, end, steps, *, dtype=None, device=None, requires_grad=false))]
fn linspace(
    start: f64,
    end: f64,
    steps: i64,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    check_device(device)?;
    if steps < 0 {
        return Err(PyRuntimeError::new_err(format!(
            "linspace: number of steps must be non-negative, got {steps}"
        )));
    }
    let n = steps as usize;
    let step = if n > 1 {
        (end - start) / (n - 1) as f64
    } else {
        0.0
    };
    // Symmetric from both ends, as PyTorch computes it.
    let v: Vec<f64> = (0..n)
        .map(|i| {
            if i < n / 2 {
                start + step * i as f64
            } else {
                end - step * (n - 1 - i) as f64
            }
        })
        .collect();
    let dt = opt_dtype(dtype)?.unwrap_or(DEFAULT_FLOAT);
    finish(from_vec(v, &[n], dt)?, requires_grad)
}

#[pyfunction]
#[pyo3(signature = (n, m=None, *, dtype=None, device=None, requires_grad=false))]
fn eye(
    n: i64,
    m: Option<i64>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    check_device(device)?;
    let m = m.unwrap_or(n);
    if n < 0 || m < 0 {
        return Err(PyRuntimeError::new_err(format!(
            "eye: n and m must be non-negative, got n={n}, m={m}"
        )));
    }
    let (n, m) = (n as usize, m as usize);
    let mut v = vec![0f64; n * m];
    for i in 0..n.min(m) {
        v[i * m + i] = 1.0;
    }
    let dt = opt_dtype(dtype)?.unwrap_or(DEFAULT_FLOAT);
    finish(from_vec(v, &[n, m], dt)?, requires_grad)
}

fn random_float(op: &str, dims: &[usize], dt: DType, normal: bool) -> PyResult<Tensor> {
    if !dt.is_floating_point() {
        return Err(PyTypeError::new_err(format!(
            "{op}: expected a floating point dtype, got {}",
            dt.name()
        )));
    }
    let n: usize = dims.iter().product();
    let v: Vec<f32> = with_rng(|r| {
        if normal {
            (0..n).map(|_| StandardNormal.sample(r)).collect()
        } else {
            (0..n).map(|_| r.random::<f32>()).collect()
        }
    });
    from_vec(v, dims, dt)
}

/// `rand(*size)` / `randn(*size)`: U(0, 1) / N(0, 1) draws from the global generator.
macro_rules! random {
    ($name:ident, $normal:expr) => {
        #[pyfunction]
        #[pyo3(signature = (*size, dtype=None, device=None, requires_grad=false, generator=None))]
        fn $name(
            size: &Bound<'_, PyTuple>,
            dtype: Option<&Obj<'_>>,
            device: Option<&Obj<'_>>,
            requires_grad: bool,
            generator: Option<&Obj<'_>>,
        ) -> PyResult<Tensor> {
            let _ = generator;
            check_device(device)?;
            let op = stringify!($name);
            let dims = to_dims(op, &extract_size(op, size)?)?;
            let dt = opt_dtype(dtype)?.unwrap_or(DEFAULT_FLOAT);
            finish(random_float(op, &dims, dt, $normal)?, requires_grad)
        }
    };
}

random!(rand, false);
random!(randn, true);

/// `rand_like(input)` / `randn_like(input)`.
macro_rules! random_like {
    ($name:ident, $normal:expr) => {
        #[pyfunction]
        #[pyo3(signature = (input, *, dtype=None))]
        fn $name(input: &Obj<'_>, dtype: Option<&Obj<'_>>) -> PyResult<Tensor> {
            let t = Tensor::extract(stringify!($name), input)?;
            let dt = opt_dtype(dtype)?.unwrap_or(t.dtype());
            random_float(stringify!($name), &t.dims(), dt, $normal)
        }
    };
}

random_like!(rand_like, false);
random_like!(randn_like, true);

/// `randint(high, size)` or `randint(low, high, size)`.
#[pyfunction]
#[pyo3(signature = (*args, size=None, dtype=None, device=None, requires_grad=false, generator=None))]
fn randint(
    args: &Bound<'_, PyTuple>,
    size: Option<&Obj<'_>>,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
    generator: Option<&Obj<'_>>,
) -> PyResult<Tensor> {
    let _ = (generator, requires_grad);
    check_device(device)?;
    let mut ints: Vec<i64> = Vec::new();
    let mut sz = size.cloned();
    for a in args.iter() {
        match a.extract::<i64>() {
            Ok(v) if sz.is_none() || ints.len() < 2 => ints.push(v),
            _ => sz = Some(a),
        }
    }
    let (low, high) = match ints.as_slice() {
        [h] => (0, *h),
        [l, h] => (*l, *h),
        _ => {
            return Err(PyTypeError::new_err(
                "randint() expects (high, size) or (low, high, size)",
            ))
        }
    };
    let sz =
        sz.ok_or_else(|| PyTypeError::new_err("randint() missing required argument 'size'"))?;
    if low >= high {
        return Err(PyRuntimeError::new_err(format!(
            "random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )));
    }
    let dims = to_dims(
        "randint",
        &extract_size("randint", &PyTuple::new(sz.py(), [sz])?)?,
    )?;
    let n: usize = dims.iter().product();
    let v: Vec<i64> = with_rng(|r| (0..n).map(|_| r.random_range(low..high)).collect());
    from_vec(v, &dims, opt_dtype(dtype)?.unwrap_or(DType::Int64))
}

#[pyfunction]
#[pyo3(signature = (n, *, dtype=None, device=None, requires_grad=false, generator=None))]
fn randperm(
    n: i64,
    dtype: Option<&Obj<'_>>,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
    generator: Option<&Obj<'_>>,
) -> PyResult<Tensor> {
    let _ = (generator, requires_grad);
    check_device(device)?;
    if n < 0 {
        return Err(PyRuntimeError::new_err(format!(
            "randperm: n must be non-negative, got {n}"
        )));
    }
    let mut v: Vec<i64> = (0..n).collect();
    with_rng(|r| {
        use ::rand::seq::SliceRandom;
        v.shuffle(r)
    });
    from_vec(v, &[n as usize], opt_dtype(dtype)?.unwrap_or(DType::Int64))
}

/// A saved state of the global generator (`get_rng_state` / `set_rng_state`).
#[pyclass(name = "RngState", module = "gradstream", frozen)]
pub struct PyRngState {
    rng: ::rand::rngs::StdRng,
}

#[pyfunction]
fn get_rng_state() -> PyRngState {
    PyRngState {
        rng: with_rng(|r| r.clone()),
    }
}

#[pyfunction]
fn set_rng_state(state: &Obj<'_>) -> PyResult<()> {
    let s = state.cast::<PyRngState>().map_err(|_| {
        PyTypeError::new_err("set_rng_state() expects a state returned by get_rng_state()")
    })?;
    let rng = s.get().rng.clone();
    with_rng(|r| *r = rng);
    Ok(())
}

/// Seed the global generator: the same seed gives the same `rand`, `randn`, dropout masks.
#[pyfunction]
fn manual_seed(seed: i64) -> PyResult<()> {
    with_rng(|r| *r = ::rand::rngs::StdRng::seed_from_u64(seed as u64));
    Ok(())
}

#[pyfunction]
fn seed() -> u64 {
    let s: u64 = ::rand::rng().random();
    with_rng(|r| *r = ::rand::rngs::StdRng::seed_from_u64(s));
    s
}

/// `meshgrid(*tensors, indexing="ij")`: views of each 1-D input expanded to the grid.
#[pyfunction]
#[pyo3(signature = (*tensors, indexing=None))]
fn meshgrid(
    py: Python<'_>,
    tensors: &Bound<'_, PyTuple>,
    indexing: Option<&str>,
) -> PyResult<Py<PyTuple>> {
    let items: Vec<Obj<'_>> =
        if tensors.len() == 1 && tensors.get_item(0)?.cast::<PyTensor>().is_err() {
            tensors.get_item(0)?.try_iter()?.collect::<PyResult<_>>()?
        } else {
            tensors.iter().collect()
        };
    let ts = items
        .iter()
        .map(|t| extract_tensor("meshgrid", "tensors", t))
        .collect::<PyResult<Vec<_>>>()?;
    let xy = match indexing.unwrap_or("ij") {
        "ij" => false,
        "xy" => true,
        other => {
            return Err(PyValueError::new_err(format!(
                "meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {other}"
            )))
        }
    };
    for t in &ts {
        if t.rank() > 1 {
            return Err(PyRuntimeError::new_err(format!(
                "meshgrid: Expected 0D or 1D tensor in the tensor list but got: {}D",
                t.rank()
            )));
        }
    }
    let mut sizes: Vec<usize> = ts.iter().map(|t| t.numel()).collect();
    let n = ts.len();
    if xy && n >= 2 {
        sizes.swap(0, 1);
    }
    let out = ts
        .iter()
        .enumerate()
        .map(|(i, t)| {
            let pos = if xy && n >= 2 && i < 2 { 1 - i } else { i };
            let mut shape = vec![1; n];
            shape[pos] = t.numel();
            let r = ops::shape::reshape(t, &shape)?;
            ops::shape::expand(&r, &sizes)
        })
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(PyTuple::new(py, out)?.unbind())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<PyRngState>()?;
    add_functions! { m,
        tensor, as_tensor, from_numpy, zeros, ones, empty, full, zeros_like, ones_like,
        empty_like, full_like, arange, linspace, eye, rand, randn, rand_like, randn_like,
        randint, randperm, manual_seed, get_rng_state, set_rng_state, seed, meshgrid
    }
    Ok(())
}
