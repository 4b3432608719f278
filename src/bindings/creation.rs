//! `tensor`, `zeros`, `arange`, `rand`... and the default float dtype they use. Every
//! factory takes `dtype=`, `device=` (the default device when absent; a `*_like` follows
//! its input) and `requires_grad=`; [`make`] applies them.

use numpy::PyUntypedArray;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::convert::{
    extract_dtype, extract_scalar, extract_size, tensor_from_data, tensor_from_numpy, type_name,
    PyDType,
};
use crate::bindings::op::{functions, Input};
use crate::bindings::random::pick_generator;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::device::default_device;
use crate::dtype::{self, default_float, DType};
use crate::ops::memory_format::MemoryFormat;
use crate::ops::{self, to_dims, Scalar};
use crate::random::{self, Generator};
use crate::tensor::Tensor;

type Opt<'a, 'py> = Option<&'a Obj<'py>>;

/// A new tensor `make(dtype)` (`dtype=` or else `default`), requiring grad if asked.
fn make(
    dtype: Option<DType>,
    default: DType,
    requires_grad: bool,
    make: impl FnOnce(DType) -> crate::error::Result<Tensor>,
) -> PyResult<Tensor> {
    let t = make(dtype.unwrap_or(default))?;
    if requires_grad {
        t.set_requires_grad(true)?;
    }
    Ok(t)
}

/// A size given as one argument: `full((2, 3), ...)`, `randint(0, 5, (2, 3))`.
fn one_size(op: &str, size: &Obj<'_>) -> PyResult<Vec<usize>> {
    Ok(to_dims(
        op,
        &extract_size(op, &PyTuple::new(size.py(), [size])?)?,
    )?)
}

/// A Python number, or a one-element tensor, as `full`'s fill value or `arange`'s bounds.
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

/// `zeros(*size)` (the default float dtype unless `dtype=`) and `zeros_like(input)`
/// (input's shape and dtype), and so on for each factory.
macro_rules! factories {
    ($($name:ident / $like:ident => $make:expr),* $(,)?) => {
        functions! { mod factory_fns; $(
            fn $name[stringify!($name)](*size: Tuple; dtype: Option<DType> = None,
                device: Option<Device> = None, requires_grad: bool = false,
                out: Option<Object> = None, layout: Option<Object> = None, pin_memory: bool = false,
                generator: Option<Object> = None,
                memory_format: Option<MemoryFormat> = None) -> Tensor {
                let _ = (out, layout, pin_memory);
                let op = stringify!($name);
                let g = pick_generator(op, generator)?;
                let dims = to_dims(op, &extract_size(op, size)?)?;
                let device = device.unwrap_or_else(default_device);
                let f = memory_format.unwrap_or(MemoryFormat::Contiguous);
                make(dtype, default_float(), requires_grad, |dt| {
                    ops::memory_format::contiguous_as(&($make)(&dims, dt, &device, &*g)?, f)
                })
            }
            /// As `input`'s layout when `memory_format` is `preserve_format` (the default).
            fn $like[stringify!($like)](input: Object; dtype: Option<DType> = None,
                device: Option<Device> = None, requires_grad: bool = false,
                memory_format: Option<MemoryFormat> = None, generator: Option<Object> = None) -> Tensor {
                let g = pick_generator(stringify!($like), generator)?;
                let t = Tensor::extract(stringify!($like), input)?;
                let device = device.unwrap_or_else(|| t.device());
                let f = memory_format.unwrap_or(MemoryFormat::Preserve);
                make(dtype, t.dtype(), requires_grad, |dt| {
                    ops::memory_format::laid_out_like(($make)(&t.dims(), dt, &device, &*g)?, &t, f)
                })
            }
        )* }
    };
}

factories! {
    zeros / zeros_like => |d: &[usize], dt, on: &candle_core::Device, _: &Generator| ops::creation::zeros(d, dt, on),
    ones / ones_like => |d: &[usize], dt, on: &candle_core::Device, _: &Generator| ops::creation::full(d, 1.0, dt, on),
    empty / empty_like => |d: &[usize], dt, on: &candle_core::Device, _: &Generator| ops::creation::zeros(d, dt, on),
    rand / rand_like => random::rand,
    randn / randn_like => random::randn,
}

functions! { mod functions;
    /// `tensor(data, dtype=None, device=None, requires_grad=False)`: always copies.
    fn tensor["tensor"](data: Object; dtype: Option<DType> = None, device: Option<Device> = None,
        requires_grad: bool = false, pin_memory: bool = false) -> Tensor {
        let _ = pin_memory;
        let t = tensor_from_data(data, dtype)?;
        // `tensor(t)` of a tensor is a new leaf.
        let t = if t.grad_fn().is_some() { t.detach() } else { t };
        let t = ops::convert::to_device(&t, &device.unwrap_or_else(default_device))?;
        make(None, t.dtype(), requires_grad, |_| Ok(t))
    }
    /// `as_tensor(data, dtype=None)`: a tensor is returned as is (cast if asked).
    fn as_tensor["as_tensor"](data: Object, dtype: Option<DType> = None,
        device: Option<Device> = None) -> Tensor {
        let t = match (data.cast::<PyTensor>(), dtype) {
            (Ok(t), Some(d)) => ops::convert::to_dtype(&t.get().t, d)?,
            (Ok(t), None) => t.get().t.clone(),
            (Err(_), _) => tensor_from_data(data, dtype)?,
        };
        match device {
            Some(d) => Ok(ops::convert::to_device(&t, &d)?),
            None => Ok(t),
        }
    }
    /// `from_numpy(array)`: a tensor of the same dtype and values. gradstream copies the
    /// data (PyTorch shares it): later writes to the array are not seen by the tensor.
    fn from_numpy["from_numpy"](array: Object) -> Tensor {
        let arr = array.cast::<PyUntypedArray>().map_err(|_| {
            PyTypeError::new_err(format!("expected np.ndarray (got {})", type_name(array)))
        })?;
        tensor_from_numpy(arr)
    }
    fn full["full"](size: Object, fill_value: Object; dtype: Option<DType> = None,
        device: Option<Device> = None, requires_grad: bool = false) -> Tensor {
        let dims = one_size("full", size)?;
        let s = fill_scalar("full", fill_value)?;
        let device = device.unwrap_or_else(default_device);
        let fill = |dt| ops::creation::full(&dims, s.checked(dt)?, dt, &device);
        make(dtype, s.default_dtype(), requires_grad, fill)
    }
    fn full_like["full_like"](input: Object, fill_value: Object; dtype: Option<DType> = None,
        device: Option<Device> = None, requires_grad: bool = false) -> Tensor {
        let t = Tensor::extract("full_like", input)?;
        let s = fill_scalar("full_like", fill_value)?;
        let device = device.unwrap_or_else(|| t.device());
        let fill = |dt| ops::creation::full(&t.dims(), s.checked(dt)?, dt, &device);
        make(dtype, t.dtype(), requires_grad, fill)
    }
    /// `arange(end)`, `arange(start, end, step=1)`: int64 for integer arguments, else the
    /// default float dtype.
    fn arange["arange"](start: Object, end: Option<Object> = None, step: Option<Object> = None;
        dtype: Option<DType> = None, device: Option<Device> = None,
        requires_grad: bool = false) -> Tensor {
        let num = |o: Opt<'_, '_>| o.filter(|o| !o.is_none()).map(|o| fill_scalar("arange", o));
        let (s, e) = match num(end) {
            Some(e) => (fill_scalar("arange", start)?, e?),
            None => (Scalar::Int(0), fill_scalar("arange", start)?),
        };
        let st = num(step).transpose()?.unwrap_or(Scalar::Int(1));
        let any_float = [s, e, st].iter().any(|x| matches!(x, Scalar::Float(_)));
        let default = if any_float { default_float() } else { DType::Int64 };
        let device = device.unwrap_or_else(default_device);
        make(dtype, default, requires_grad, |dt| ops::creation::arange(s, e, st, dt, &device))
    }
    fn linspace["linspace"](start: f64, end: f64, steps: i64; dtype: Option<DType> = None,
        device: Option<Device> = None, requires_grad: bool = false) -> Tensor {
        let device = device.unwrap_or_else(default_device);
        let f = |dt| ops::creation::linspace(start, end, steps, dt, &device);
        make(dtype, default_float(), requires_grad, f)
    }
    fn eye["eye"](n: i64, m: Option<i64> = None; dtype: Option<DType> = None,
        device: Option<Device> = None, requires_grad: bool = false) -> Tensor {
        let device = device.unwrap_or_else(default_device);
        let f = |dt| ops::creation::eye(n, m.unwrap_or(n), dt, &device);
        make(dtype, default_float(), requires_grad, f)
    }
    /// `randint(high, size)` or `randint(low, high, size)`.
    fn randint["randint"](*args: Tuple; size: Option<Object> = None, dtype: Option<DType> = None,
        device: Option<Device> = None, requires_grad: bool = false,
        generator: Option<Object> = None) -> Tensor {
        let _ = requires_grad;
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
        let dims = one_size("randint", &sz)?;
        let device = device.unwrap_or_else(default_device);
        let f = |dt| random::randint(low, high, &dims, dt, &device, &g);
        make(dtype, DType::Int64, false, f)
    }
    fn randperm["randperm"](n: i64; dtype: Option<DType> = None, device: Option<Device> = None,
        requires_grad: bool = false, generator: Option<Object> = None) -> Tensor {
        let _ = requires_grad;
        let g = pick_generator("randperm", generator)?;
        let device = device.unwrap_or_else(default_device);
        make(dtype, DType::Int64, false, |dt| random::randperm(n, dt, &device, &g))
    }
    /// `set_default_dtype(d)`: the dtype of Python floats, float factories and int-to-float
    /// promotion. Any floating-point dtype, as in PyTorch.
    fn set_default_dtype["set_default_dtype"](d: Object) -> () {
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
    fn get_default_dtype["get_default_dtype"](py: Python<'_>) -> Py<PyDType> {
        PyDType::object(py, dtype::default_float())
    }
    /// `meshgrid(*tensors, indexing="ij")`: views of each 1-D input expanded to the grid.
    fn meshgrid["meshgrid"](py: Python<'_>, *tensors: Tuple;
        indexing: Option<Str> = None) -> Py<PyTuple> {
        let items: Vec<Obj<'_>> =
            if tensors.len() == 1 && tensors.get_item(0)?.cast::<PyTensor>().is_err() {
                tensors.get_item(0)?.try_iter()?.collect::<PyResult<_>>()?
            } else {
                tensors.iter().collect()
            };
        let ts = items
            .iter()
            .map(|t| crate::bindings::convert::extract_tensor("meshgrid", "tensors", t))
            .collect::<PyResult<Vec<_>>>()?;
        Ok(PyTuple::new(py, ops::shape::meshgrid(&ts, indexing.unwrap_or("ij"))?)?.unbind())
    }
}
