//! Python values in and out: dtypes, devices, numbers, nested lists and NumPy arrays.

use numpy::{PyArrayDyn, PyArrayMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyList, PyString, PyTuple};

use crate::bindings::op::{attributes, passed_as_is};
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::{default_float, DType};
use crate::error::CandleContext;
use crate::ops::memory_format::MemoryFormat;
use crate::ops::{self, wrap_dim, wrap_dims, Operand, Scalar};
use crate::tensor::Tensor;

/// `gradstream.float32` and friends.
#[pyclass(
    name = "dtype",
    module = "gradstream",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyDType {
    pub dt: DType,
}

attributes! { PyDType.dt;
    #[getter] fn is_floating_point(dt) -> bool = dt.is_floating_point();
    #[getter] fn is_signed(dt) -> bool = !matches!(dt, DType::Bool | DType::UInt8);
    #[getter] fn itemsize(dt) -> usize = dt.size_in_bytes();
    fn __repr__(dt) -> String = format!("gradstream.{}", dt.name());
    /// Pickles as the module attribute `gradstream.<name>`.
    fn __reduce__(dt) -> &'static str = dt.name();
}

passed_as_is!(extracted: PyDType);

/// `gradstream.channels_last` and the other memory formats.
#[pyclass(name = "memory_format", module = "gradstream", frozen, eq, hash)]
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyMemoryFormat {
    pub f: MemoryFormat,
}

attributes! { PyMemoryFormat.f;
    fn __repr__(f) -> String = format!("gradstream.{}", f.name());
    /// Pickles as the module attribute `gradstream.<name>`.
    fn __reduce__(f) -> &'static str = f.name();
}

/// A `memory_format=` argument.
pub fn extract_memory_format(op: &str, name: &str, obj: &Obj<'_>) -> PyResult<MemoryFormat> {
    Ok(
        extract_class::<PyMemoryFormat>(op, name, "memory_format", obj)?
            .get()
            .f,
    )
}

static DTYPE_OBJECTS: pyo3::sync::PyOnceLock<Vec<Py<PyDType>>> = pyo3::sync::PyOnceLock::new();

impl PyDType {
    /// The one Python object for each dtype, so `t.dtype is gradstream.float32` holds.
    pub fn object(py: Python<'_>, dt: DType) -> PyResult<Py<PyDType>> {
        let all = DTYPE_OBJECTS.get_or_try_init(py, || {
            DType::ALL
                .iter()
                .map(|&dt| Py::new(py, PyDType { dt }))
                .collect::<PyResult<Vec<_>>>()
        })?;
        let i = DType::ALL
            .iter()
            .position(|&d| d == dt)
            .expect("every dtype is listed");
        Ok(all[i].clone_ref(py))
    }
}

/// `gradstream.device("cuda:0")`: a device's name. Any kind PyTorch knows can be named;
/// tensors live on the ones this build and machine have (`crate::device::get`).
#[pyclass(
    name = "device",
    module = "gradstream",
    frozen,
    eq,
    hash,
    from_py_object
)]
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct PyDevice {
    kind: String,
    index: Option<i64>,
}

impl PyDevice {
    /// The name of a candle device.
    pub fn of(device: &candle_core::Device) -> Self {
        let (kind, index) = crate::device::kind_and_index(device);
        PyDevice {
            kind: kind.into(),
            index: index.map(|i| i as i64),
        }
    }

    /// The candle device this names; a device the build or the machine lacks raises.
    pub fn candle(&self) -> PyResult<candle_core::Device> {
        let index = match self.index {
            Some(i) if i < 0 => {
                return Err(PyRuntimeError::new_err(format!(
                    "Device index must not be negative (got {})",
                    self.__str__()
                )))
            }
            i => i.map(|i| i as usize),
        };
        Ok(crate::device::get(&self.kind, index)?)
    }
}

#[pymethods]
impl PyDevice {
    #[new]
    #[pyo3(signature = (spec, index=None))]
    fn new(spec: &Obj<'_>, index: Option<i64>) -> PyResult<Self> {
        if let Ok(d) = spec.cast::<PyDevice>() {
            return Ok(d.get().clone());
        }
        // An int is a CUDA device's index, as in PyTorch.
        if spec.is_instance_of::<PyInt>() && !spec.is_instance_of::<PyBool>() {
            return Ok(PyDevice {
                kind: "cuda".into(),
                index: Some(spec.extract()?),
            });
        }
        // Another library's device object (`torch.device`) by its name.
        let named = match spec.extract::<String>() {
            Ok(s) => Ok(s),
            Err(_) if spec.hasattr("type")? && spec.hasattr("index")? => {
                spec.str()?.extract::<String>()
            }
            Err(e) => Err(e),
        };
        let s: String = named.map_err(|_| {
            PyTypeError::new_err(format!(
                "device(): expected a string such as 'cpu' or 'cuda:0', got {}",
                type_name(spec)
            ))
        })?;
        let (kind, idx) = match s.split_once(':') {
            Some((k, i)) => (
                k.to_string(),
                Some(i.parse::<i64>().map_err(|_| {
                    PyRuntimeError::new_err(format!("Invalid device string: '{s}'"))
                })?),
            ),
            None => (s.clone(), index),
        };
        if !crate::device::KINDS.contains(&kind.as_str()) {
            return Err(PyRuntimeError::new_err(format!(
                "Expected one of cpu, cuda, mps, meta device type at start of device string: {s}"
            )));
        }
        Ok(PyDevice { kind, index: idx })
    }
    #[getter]
    fn r#type(&self) -> &str {
        &self.kind
    }
    #[getter]
    fn index(&self) -> Option<i64> {
        self.index
    }
    fn __repr__(&self) -> String {
        match self.index {
            Some(i) => format!("device(type='{}', index={i})", self.kind),
            None => format!("device(type='{}')", self.kind),
        }
    }
    fn __str__(&self) -> String {
        match self.index {
            Some(i) => format!("{}:{i}", self.kind),
            None => self.kind.clone(),
        }
    }
    /// Pickles as `device("cuda:0")`.
    fn __reduce__<'py>(&self, py: Python<'py>) -> (Bound<'py, pyo3::types::PyType>, (String,)) {
        (py.get_type::<PyDevice>(), (self.__str__(),))
    }
}

/// A dtype argument: `gradstream.float32`, or Python's `float`, `int`, `bool`.
pub fn extract_dtype(obj: &Obj<'_>) -> PyResult<DType> {
    if let Ok(d) = obj.cast::<PyDType>() {
        return Ok(d.get().dt);
    }
    let py = obj.py();
    if obj.is(py.get_type::<PyFloat>()) {
        return Ok(DType::Float64);
    }
    if obj.is(py.get_type::<PyBool>()) {
        return Ok(DType::Bool);
    }
    if obj.is(py.get_type::<PyInt>()) {
        return Ok(DType::Int64);
    }
    if let Ok(name) = obj.getattr("name").and_then(|n| n.extract::<String>()) {
        // a NumPy dtype or scalar type
        if let Some(dt) = DType::from_name(&name) {
            return Ok(dt);
        }
    }
    Err(PyTypeError::new_err(format!(
        "dtype must be a gradstream dtype (e.g. gradstream.float32), got {}",
        obj.repr()?
    )))
}

pub fn opt_dtype(obj: Option<&Obj<'_>>) -> PyResult<Option<DType>> {
    obj.filter(|o| !o.is_none()).map(extract_dtype).transpose()
}

/// A device argument (`"cuda:0"`, `gradstream.device`, an index, `torch.device`) as the
/// candle device it names.
pub fn extract_device(obj: &Obj<'_>) -> PyResult<candle_core::Device> {
    PyDevice::new(obj, None)?.candle()
}

/// An optional device argument; `None` and absent are `None`.
pub fn opt_device(obj: Option<&Obj<'_>>) -> PyResult<Option<candle_core::Device>> {
    obj.filter(|o| !o.is_none()).map(extract_device).transpose()
}

/// A Python number as a `Scalar`, or `None` if the object is not one.
pub fn extract_scalar(obj: &Obj<'_>) -> Option<Scalar> {
    if obj.is_instance_of::<PyBool>() {
        return obj.extract::<bool>().ok().map(Scalar::Bool);
    }
    if obj.is_instance_of::<PyInt>() {
        return obj.extract::<i64>().ok().map(Scalar::Int);
    }
    if obj.is_instance_of::<PyFloat>() {
        return obj.extract::<f64>().ok().map(Scalar::Float);
    }
    // NumPy scalars
    let ty = obj.get_type();
    let module = ty.module().ok()?;
    if module.to_str().ok()? == "numpy" {
        let name = ty.name().ok()?.to_string();
        if name.starts_with("float") {
            return obj.extract::<f64>().ok().map(Scalar::Float);
        }
        if name.starts_with("int") || name.starts_with("uint") {
            return obj.extract::<i64>().ok().map(Scalar::Int);
        }
        if name == "bool" || name == "bool_" {
            return obj.extract::<bool>().ok().map(Scalar::Bool);
        }
    }
    None
}

/// An op argument: a tensor, a number, or data that becomes a tensor.
pub fn extract_operand(op: &str, obj: &Obj<'_>) -> PyResult<Operand> {
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(Operand::Tensor(t.get().t.clone()));
    }
    if let Some(s) = extract_scalar(obj) {
        return Ok(Operand::Scalar(s));
    }
    if obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<PyUntypedArray>()
    {
        return Ok(Operand::Tensor(tensor_from_data(obj, None)?));
    }
    Err(PyTypeError::new_err(format!(
        "{op}(): argument must be Tensor or Number, not {}",
        obj.get_type().name()?
    )))
}

/// An argument that must be an instance of the class `T` (`what`, in the error).
pub fn extract_class<'a, 'py, T: pyo3::type_object::PyTypeCheck>(
    op: &str,
    name: &str,
    what: &str,
    obj: &'a Obj<'py>,
) -> PyResult<&'a Bound<'py, T>> {
    obj.cast::<T>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{op}(): argument '{name}' must be {what}, not {}",
            type_name(obj)
        ))
    })
}

/// An argument that must be a tensor.
pub fn extract_tensor(op: &str, name: &str, obj: &Obj<'_>) -> PyResult<Tensor> {
    Ok(extract_class::<PyTensor>(op, name, "Tensor", obj)?
        .get()
        .t
        .clone())
}

fn array_to_tensor<T: numpy::Element + candle_core::WithDType>(
    arr: &Bound<'_, PyUntypedArray>,
) -> PyResult<candle_core::Tensor> {
    let typed = arr.cast::<PyArrayDyn<T>>()?;
    let ro = typed.readonly();
    let view = ro.as_array();
    let dims = view.shape().to_vec();
    let data: Vec<T> = match view.as_slice() {
        Some(s) => s.to_vec(),
        None => view.iter().copied().collect(),
    };
    Ok(crate::device::from_vec(data, dims, &crate::device::host()).op("tensor")?)
}

/// The gradstream dtype a NumPy array maps to, casting other kinds through int64/float64.
fn numpy_dtype_name(arr: &Bound<'_, PyUntypedArray>) -> PyResult<String> {
    arr.dtype().getattr("name")?.extract()
}

/// A tensor copied from a NumPy array (its dtype kept, as `torch.from_numpy`).
pub fn tensor_from_numpy(arr: &Bound<'_, PyUntypedArray>) -> PyResult<Tensor> {
    let name = numpy_dtype_name(arr)?;
    let (t, dt) = match name.as_str() {
        "float32" => (array_to_tensor::<f32>(arr)?, DType::Float32),
        "float64" => (array_to_tensor::<f64>(arr)?, DType::Float64),
        "float16" => (array_to_tensor::<half::f16>(arr)?, DType::Float16),
        "int64" => (array_to_tensor::<i64>(arr)?, DType::Int64),
        "int32" => (array_to_tensor::<i32>(arr)?, DType::Int32),
        "uint8" => (array_to_tensor::<u8>(arr)?, DType::UInt8),
        "bool" => {
            let as_u8 = arr.call_method1("astype", ("uint8",))?;
            (
                array_to_tensor::<u8>(as_u8.cast::<PyUntypedArray>()?)?,
                DType::Bool,
            )
        }
        "int8" | "int16" | "uint16" | "uint32" | "uint64" => {
            let c = arr.call_method1("astype", ("int64",))?;
            (
                array_to_tensor::<i64>(c.cast::<PyUntypedArray>()?)?,
                DType::Int64,
            )
        }
        other => {
            return Err(PyTypeError::new_err(format!(
                "can't convert np.ndarray of type numpy.{other}. The only supported types are: \
                 float64, float32, float16, int64, int32, int16, int8, uint8, and bool."
            )))
        }
    };
    Ok(Tensor::new(t, dt))
}

/// A NumPy scalar (`np.float64(1.0)`, `np.int32(2)`), not a Python number or an array.
fn is_numpy_scalar(obj: &Obj<'_>) -> bool {
    let ty = obj.get_type();
    ty.module()
        .is_ok_and(|m| m.to_str().is_ok_and(|m| m == "numpy"))
        && obj.cast::<PyUntypedArray>().is_err()
}

/// `tensor(data)`: numbers, nested sequences, NumPy arrays and tensors; copies.
pub fn tensor_from_data(obj: &Obj<'_>, dtype: Option<DType>) -> PyResult<Tensor> {
    let py = obj.py();
    let t = if let Ok(t) = obj.cast::<PyTensor>() {
        crate::ops::convert::clone(&t.get().t.detach())?
    } else if is_numpy_scalar(obj) {
        // A NumPy scalar keeps its dtype (np.float64 -> float64), as in PyTorch.
        let arr = py.import("numpy")?.call_method1("asarray", (obj,))?;
        tensor_from_numpy(arr.cast::<PyUntypedArray>()?)?
    } else if let Some(s) = extract_scalar(obj) {
        // Made in the asked dtype at once: an int64 past 2**53 stays exact, and a number the
        // dtype cannot hold is refused as PyTorch refuses it (floats overflow to inf).
        let dt = dtype.unwrap_or(s.default_dtype());
        let s = if dt.is_floating_point() {
            s
        } else {
            s.checked(dt)?
        };
        return Ok(crate::ops::creation::scalar_tensor(
            s,
            dt,
            &crate::device::host(),
        )?);
    } else if obj.is_instance_of::<PyInt>() {
        return Err(PyValueError::new_err("Overflow when unpacking long long"));
    } else if let Ok(arr) = obj.cast::<PyUntypedArray>() {
        tensor_from_numpy(arr)?
    } else {
        let np = py.import("numpy")?;
        let arr = np.call_method1("asarray", (obj,)).map_err(|e| {
            PyTypeError::new_err(format!("tensor(): could not convert data to a tensor: {e}"))
        })?;
        let arr = arr.cast_into::<PyUntypedArray>()?;
        let name = numpy_dtype_name(&arr)?;
        if name == "object" || name.starts_with("<U") || name.starts_with("str") {
            return Err(PyTypeError::new_err(format!(
                "tensor(): could not infer dtype of {}",
                obj.get_type().name()?
            )));
        }
        if name == "uint64" {
            // Python ints past int64's range
            return Err(PyValueError::new_err("Overflow when unpacking long long"));
        }
        if let Some(dt) = dtype {
            check_fits(&arr, &name, dt)?;
        }
        let t = tensor_from_numpy(&arr)?;
        // Python floats take the default dtype, as in PyTorch (an explicit `dtype` is cast
        // to from the float64 values, so float64 keeps them exact).
        if name == "float64" && dtype.is_none() {
            crate::ops::convert::to_dtype(&t, default_float())?
        } else {
            t
        }
    };
    Ok(match dtype {
        Some(dt) => crate::ops::convert::to_dtype(&t, dt)?,
        None => t,
    })
}

/// Python numbers bound for an integer `dtype` must fit it, as in PyTorch's
/// `tensor([...], dtype=...)` (a cast of a tensor wraps instead).
fn check_fits(arr: &Bound<'_, PyUntypedArray>, name: &str, dtype: DType) -> PyResult<()> {
    if dtype.is_floating_point() || dtype == DType::Bool || arr.len() == 0 {
        return Ok(());
    }
    let ends = |m: &str| arr.call_method0(m);
    let (lo, hi) = match name {
        "int64" => (
            Scalar::Int(ends("min")?.extract()?),
            Scalar::Int(ends("max")?.extract()?),
        ),
        "float64" => {
            // NaN compares false with every bound; `min`/`max` propagate it.
            (
                Scalar::Float(ends("min")?.extract()?),
                Scalar::Float(ends("max")?.extract()?),
            )
        }
        _ => return Ok(()),
    };
    lo.checked(dtype)?;
    hi.checked(dtype)?;
    Ok(())
}

/// A tensor's data as a NumPy array (a copy).
pub fn tensor_to_numpy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let data = t.data().flatten_all().op("numpy")?;
    let dims = t.dims();
    fn mk<'py, T: numpy::Element + candle_core::WithDType>(
        py: Python<'py>,
        d: &candle_core::Tensor,
        dims: &[usize],
    ) -> PyResult<Bound<'py, PyAny>> {
        let v: Vec<T> = crate::host::read("Tensor.numpy()", d)?;
        Ok(numpy::PyArray1::from_vec(py, v)
            .reshape(dims.to_vec())?
            .into_any())
    }
    match t.dtype() {
        DType::Float32 => mk::<f32>(py, &data, &dims),
        DType::Float64 => mk::<f64>(py, &data, &dims),
        DType::Float16 => mk::<half::f16>(py, &data, &dims),
        DType::Int64 => mk::<i64>(py, &data, &dims),
        DType::Int32 => mk::<i32>(py, &data, &dims),
        DType::UInt8 => mk::<u8>(py, &data, &dims),
        DType::Bool => mk::<u8>(py, &data, &dims)?.call_method1("astype", ("bool",)),
        DType::BFloat16 => Err(PyTypeError::new_err("Got unsupported ScalarType BFloat16")),
    }
}

/// Dims given as `f(2, 3)`, `f((2, 3))` or `f([2, 3])`.
pub fn extract_size(op: &str, args: &Bound<'_, PyTuple>) -> PyResult<Vec<i64>> {
    if args.is_empty() {
        // `x.view()`, `zeros()`: PyTorch's argument parser refuses a missing size (an
        // empty size is spelled `()`).
        let what = match op {
            "permute" | "flip" | "tile" => "dims",
            "repeat" => "repeats",
            "reshape" => "shape",
            _ => "size",
        };
        return Err(PyTypeError::new_err(format!(
            "{op}() missing 1 required positional arguments: \"{what}\""
        )));
    }
    let items: Vec<Obj<'_>> = if args.len() == 1 && !args.get_item(0)?.is_instance_of::<PyInt>() {
        let a = args.get_item(0)?;
        if extract_scalar(&a).is_some() {
            vec![a]
        } else {
            a.try_iter()
                .map_err(|_| size_type_error(op, &a))?
                .collect::<PyResult<Vec<_>>>()?
        }
    } else {
        args.iter().collect()
    };
    items
        .iter()
        .map(|i| {
            if i.is_instance_of::<PyFloat>() {
                return Err(size_type_error(op, i));
            }
            i.extract::<i64>().or_else(|_| {
                i.call_method0("__index__")
                    .and_then(|v| v.extract::<i64>())
                    .map_err(|_| size_type_error(op, i))
            })
        })
        .collect()
}

fn size_type_error(op: &str, obj: &Obj<'_>) -> PyErr {
    PyTypeError::new_err(format!(
        "{op}(): argument 'size' must be tuple of ints, but found element of type {}",
        type_name(obj)
    ))
}

/// A dim argument: an int, or a tuple/list of ints.
pub fn extract_dims(obj: &Obj<'_>) -> PyResult<Vec<i64>> {
    if let Ok(d) = obj.extract::<i64>() {
        return Ok(vec![d]);
    }
    obj.extract::<Vec<i64>>().map_err(|_| {
        PyTypeError::new_err(format!(
            "dim must be an int or a tuple of ints, got {}",
            obj.repr().map(|r| r.to_string()).unwrap_or_default()
        ))
    })
}

/// A `dim` that may be an int, a tuple/list of ints, or None (every dim).
pub fn dims_arg(op: &str, t: &Tensor, dim: Option<&Obj<'_>>) -> PyResult<Option<Vec<usize>>> {
    let Some(d) = dim.filter(|d| !d.is_none()) else {
        return Ok(None);
    };
    if d.is_instance_of::<PyFloat>() || d.is_instance_of::<PyString>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'dim' must be int or tuple of ints, not {}",
            type_name(d)
        )));
    }
    // `dim=()` reduces every dim, as in PyTorch.
    let dims = wrap_dims(op, &extract_dims(d)?, t.rank())?;
    Ok((!dims.is_empty()).then_some(dims))
}

/// A `dim` that must be a single int.
pub fn int_dim(op: &str, t: &Tensor, dim: &Obj<'_>) -> PyResult<usize> {
    if !dim.is_instance_of::<PyInt>() || dim.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'dim' must be int, not {}",
            type_name(dim)
        )));
    }
    Ok(wrap_dim(op, dim.extract::<i64>()?, t.rank())?)
}

/// An optional single-int `dim`.
pub fn opt_int_dim(op: &str, t: &Tensor, dim: Option<&Obj<'_>>) -> PyResult<Option<usize>> {
    dim.filter(|d| !d.is_none())
        .map(|d| int_dim(op, t, d))
        .transpose()
}

/// The input cast to `dtype=` when given.
pub fn with_dtype(t: &Tensor, dtype: Option<DType>) -> PyResult<Tensor> {
    Ok(match dtype {
        Some(dt) => ops::convert::to_dtype(t, dt)?,
        None => t.clone(),
    })
}

/// The name of an argument's type, for error messages.
pub fn type_name(obj: &Obj<'_>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}
