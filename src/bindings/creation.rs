//! `tensor`, `zeros`, `arange`, `rand`... and the default float dtype they use.

use numpy::PyUntypedArray;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::add_functions;
use crate::bindings::convert::{
    check_device, extract_dtype, extract_scalar, extract_size, extract_tensor, opt_dtype,
    tensor_from_data, tensor_from_numpy, to_dims, type_name, PyDType,
};
use crate::bindings::op::Input;
use crate::bindings::random::pick_generator;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::{self, default_float, DType};
use crate::ops::{self, Scalar};
use crate::random::{self, Generator};
use crate::tensor::Tensor;

fn finish(t: Tensor, requires_grad: bool) -> PyResult<Tensor> {
    if requires_grad {
        t.set_requires_grad(true)?;
    }
    Ok(t)
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

/// A new tensor `make(dims, dtype)`, with the arguments every factory function takes.
fn make(
    make: impl FnOnce(&[usize], DType) -> crate::error::Result<Tensor>,
    dims: &[usize],
    dtype: Option<&Obj<'_>>,
    default: DType,
    device: Option<&Obj<'_>>,
    requires_grad: bool,
) -> PyResult<Tensor> {
    check_device(device)?;
    let dt = opt_dtype(dtype)?.unwrap_or(default);
    finish(make(dims, dt)?, requires_grad)
}

/// `zeros(*size)` (float32 unless `dtype=`) and `zeros_like(input)` (input's shape and
/// dtype), and so on for each factory.
macro_rules! factories {
    ($($name:ident / $like:ident => $make:expr),* $(,)?) => {$(
        #[pyfunction]
        #[pyo3(signature = (*size, dtype=None, device=None, requires_grad=false, out=None, layout=None, pin_memory=false, generator=None))]
        #[allow(clippy::too_many_arguments)]
        fn $name(
            size: &Bound<'_, PyTuple>,
            dtype: Option<&Obj<'_>>,
            device: Option<&Obj<'_>>,
            requires_grad: bool,
            out: Option<&Obj<'_>>,
            layout: Option<&Obj<'_>>,
            pin_memory: bool,
            generator: Option<&Obj<'_>>,
        ) -> PyResult<Tensor> {
            let _ = (out, layout, pin_memory);
            let g = pick_generator(stringify!($name), generator)?;
            let dims = to_dims(stringify!($name), &extract_size(stringify!($name), size)?)?;
            let f = |d: &[usize], dt| ($make)(d, dt, &*g);
            make(f, &dims, dtype, default_float(), device, requires_grad)
        }

        #[pyfunction]
        #[pyo3(signature = (input, *, dtype=None, device=None, requires_grad=false, memory_format=None, generator=None))]
        fn $like(
            input: &Obj<'_>,
            dtype: Option<&Obj<'_>>,
            device: Option<&Obj<'_>>,
            requires_grad: bool,
            memory_format: Option<&Obj<'_>>,
            generator: Option<&Obj<'_>>,
        ) -> PyResult<Tensor> {
            let _ = memory_format;
            let g = pick_generator(stringify!($like), generator)?;
            let t = Tensor::extract(stringify!($like), input)?;
            let f = |d: &[usize], dt| ($make)(d, dt, &*g);
            make(f, &t.dims(), dtype, t.dtype(), device, requires_grad)
        }
    )*};
}

factories! {
    zeros / zeros_like => |d: &[usize], dt, _: &Generator| ops::creation::full(d, 0.0, dt),
    ones / ones_like => |d: &[usize], dt, _: &Generator| ops::creation::full(d, 1.0, dt),
    empty / empty_like => |d: &[usize], dt, _: &Generator| ops::creation::full(d, 0.0, dt),
    rand / rand_like => random::rand,
    randn / randn_like => random::randn,
}

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
    let fill = |d: &[usize], dt| ops::creation::full(d, s.as_f64(), dt);
    make(fill, &dims, dtype, scalar_dtype(s), device, requires_grad)
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
        Scalar::Float(_) => default_float(),
    }
}

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
    let fill = |d: &[usize], dt| ops::creation::full(d, s.as_f64(), dt);
    make(fill, &t.dims(), dtype, t.dtype(), device, requires_grad)
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
    let num = |o: Option<&Obj<'_>>| o.filter(|o| !o.is_none()).map(|o| fill_scalar("arange", o));
    let (s, e) = match num(end) {
        Some(e) => (fill_scalar("arange", start)?, e?),
        None => (Scalar::Int(0), fill_scalar("arange", start)?),
    };
    let st = num(step).transpose()?.unwrap_or(Scalar::Int(1));
    let any_float = [s, e, st].iter().any(|x| matches!(x, Scalar::Float(_)));
    let default = if any_float {
        default_float()
    } else {
        DType::Int64
    };
    let dt = opt_dtype(dtype)?.unwrap_or(default);
    finish(ops::creation::arange(s, e, st, dt)?, requires_grad)
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
    let dt = opt_dtype(dtype)?.unwrap_or_else(default_float);
    finish(
        ops::creation::linspace(start, end, steps, dt)?,
        requires_grad,
    )
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
    let dt = opt_dtype(dtype)?.unwrap_or_else(default_float);
    finish(ops::creation::eye(n, m.unwrap_or(n), dt)?, requires_grad)
}

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
    let _ = requires_grad;
    check_device(device)?;
    let g = pick_generator("randint", generator)?;
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
    let size = extract_size("randint", &PyTuple::new(sz.py(), [sz])?)?;
    let dt = opt_dtype(dtype)?.unwrap_or(DType::Int64);
    Ok(random::randint(
        low,
        high,
        &to_dims("randint", &size)?,
        dt,
        &g,
    )?)
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
    let _ = requires_grad;
    check_device(device)?;
    let g = pick_generator("randperm", generator)?;
    Ok(random::randperm(
        n,
        opt_dtype(dtype)?.unwrap_or(DType::Int64),
        &g,
    )?)
}

/// `set_default_dtype(d)`: the dtype of Python floats, float factories and int-to-float
/// promotion. Any floating-point dtype, as in PyTorch.
#[pyfunction]
fn set_default_dtype(d: &Obj<'_>) -> PyResult<()> {
    if d.cast::<PyDType>().is_err() {
        return Err(PyTypeError::new_err(format!(
            "set_default_dtype(): invalid dtype object: only floating-point types are \
             supported as the default type (got {})",
            type_name(d)
        )));
    }
    let dt = extract_dtype(d)?;
    dtype::set_default_float(dt).map_err(|_| {
        PyTypeError::new_err(format!(
            "set_default_dtype(): only floating-point types are supported as the default \
             type, got {}",
            dt.name()
        ))
    })
}

/// The default float dtype (float32 unless `set_default_dtype` changed it).
#[pyfunction]
fn get_default_dtype(py: Python<'_>) -> PyResult<Py<PyDType>> {
    PyDType::object(py, dtype::default_float())
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
    Ok(PyTuple::new(py, ops::shape::meshgrid(&ts, xy)?)?.unbind())
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m,
        tensor, as_tensor, from_numpy, zeros, ones, empty, full, zeros_like, ones_like,
        empty_like, full_like, arange, linspace, eye, rand, randn, rand_like, randn_like,
        randint, randperm, meshgrid, set_default_dtype, get_default_dtype
    }
    Ok(())
}
