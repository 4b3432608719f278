//! The Python `Tensor` class: attributes, conversions and the methods every tensor has.
//! Op methods live beside their op families (`#[pymethods]` blocks in the other files).

use pyo3::exceptions::{PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyList, PyTuple, PyType};

use crate::bindings::convert::{
    check_device, extract_dtype, extract_operand, opt_dtype, tensor_from_data, tensor_to_numpy,
    PyDType, PyDevice,
};
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::error::Error;
use crate::ops;
use crate::tensor::Tensor;

#[pyclass(
    name = "Tensor",
    module = "gradstream",
    subclass,
    weakref,
    dict,
    frozen
)]
pub struct PyTensor {
    pub t: Tensor,
}

impl PyTensor {
    pub fn wrap(py: Python<'_>, t: Tensor) -> PyResult<Py<PyTensor>> {
        Py::new(py, PyTensor { t })
    }
}

/// Results of ops come back to Python as `Tensor`s.
impl<'py> IntoPyObject<'py> for Tensor {
    type Target = PyTensor;
    type Output = Bound<'py, PyTensor>;
    type Error = PyErr;
    fn into_pyobject(self, py: Python<'py>) -> PyResult<Self::Output> {
        // An exception a saved-tensor pack hook raised inside the op that made this tensor.
        crate::autograd::saved_hooks::check()?;
        Bound::new(py, PyTensor { t: self })
    }
}

static SIZE: PyOnceLock<Py<PyType>> = PyOnceLock::new();

pub fn make_size<'py>(py: Python<'py>, dims: &[usize]) -> PyResult<Bound<'py, PyAny>> {
    let ty = SIZE.import(py, "gradstream.size", "Size")?;
    ty.call1((PyTuple::new(py, dims)?,))
}

static FORMAT: PyOnceLock<Py<PyAny>> = PyOnceLock::new();

fn scalar_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    if t.numel() != 1 {
        return Err(PyRuntimeError::new_err(format!(
            "a Tensor with {} elements cannot be converted to Scalar",
            t.numel()
        )));
    }
    // NumPy's item() is the Python bool, int or float of each dtype.
    numpy_copy(py, t)?.call_method0("item")
}

/// The values as a NumPy array; bfloat16, which NumPy lacks, as float32 (exact).
fn numpy_copy<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    match t.dtype() {
        DType::BFloat16 => {
            tensor_to_numpy(py, &ops::convert::to_dtype(&t.detach(), DType::Float32)?)
        }
        _ => tensor_to_numpy(py, &t.detach()),
    }
}

#[pymethods]
impl PyTensor {
    /// Makes NumPy defer to the tensor's reflected operators: `np.float64(2) * t` is a
    /// tensor (PyTorch's value), not an array.
    #[classattr]
    #[pyo3(name = "__array_priority__")]
    fn array_priority() -> f64 {
        1000.0
    }

    /// `Tensor(data)` aliases a tensor or copies data; `Tensor(2, 3)` is uninitialised
    /// (zeros here). Subclasses such as `nn.Parameter` are built through this too.
    #[new]
    #[pyo3(signature = (*args, requires_grad=false))]
    fn new(args: &Bound<'_, PyTuple>, requires_grad: bool) -> PyResult<Self> {
        let t = if args.is_empty() {
            ops::creation::zeros(&[0], DType::Float32)?
        } else if args.len() == 1 && args.get_item(0)?.cast::<PyTensor>().is_ok() {
            args.get_item(0)?.cast::<PyTensor>()?.get().t.detach()
        } else if args.iter().all(|a| a.extract::<i64>().is_ok()) {
            let size = crate::bindings::convert::extract_size("Tensor", args)?;
            let dims = crate::bindings::convert::to_dims("Tensor", &size)?;
            ops::creation::zeros(&dims, DType::Float32)?
        } else {
            tensor_from_data(&args.get_item(0)?, Some(DType::Float32))?
        };
        t.set_requires_grad(requires_grad)?;
        Ok(PyTensor { t })
    }

    /// Mark this tensor's buffer as a parameter in memory accounting (`nn.Parameter`).
    fn _mark_parameter(&self) {
        self.t.mark_parameter()
    }

    #[getter]
    fn shape<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        make_size(py, &self.t.dims())
    }

    #[pyo3(signature = (dim=None))]
    fn size<'py>(&self, py: Python<'py>, dim: Option<i64>) -> PyResult<Bound<'py, PyAny>> {
        let dims = self.t.dims();
        match dim {
            None => make_size(py, &dims),
            Some(d) => {
                let d = ops::wrap_dim("size", d, dims.len())?;
                Ok(dims[d].into_pyobject(py)?.into_any())
            }
        }
    }

    #[getter]
    fn dtype(&self, py: Python<'_>) -> PyResult<Py<PyDType>> {
        PyDType::object(py, self.t.dtype())
    }

    #[getter]
    fn device(&self) -> PyDevice {
        PyDevice::cpu()
    }

    #[getter]
    fn is_cuda(&self) -> bool {
        false
    }

    #[getter]
    fn ndim(&self) -> usize {
        self.t.rank()
    }

    fn dim(&self) -> usize {
        self.t.rank()
    }

    fn numel(&self) -> usize {
        self.t.numel()
    }

    fn nelement(&self) -> usize {
        self.t.numel()
    }

    fn element_size(&self) -> usize {
        self.t.dtype().size_in_bytes()
    }

    #[getter]
    fn itemsize(&self) -> usize {
        self.t.dtype().size_in_bytes()
    }

    #[getter]
    fn nbytes(&self) -> usize {
        self.t.dtype().size_in_bytes() * self.t.numel()
    }

    fn stride<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        PyTuple::new(py, self.t.data().stride())
    }

    fn is_contiguous(&self) -> bool {
        self.t.data().is_contiguous()
    }

    fn is_floating_point(&self) -> bool {
        self.t.dtype().is_floating_point()
    }

    fn item<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        scalar_to_py(py, &self.t)
    }

    fn tolist<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        numpy_copy(py, &self.t)?.call_method0("tolist")
    }

    /// A NumPy copy of the data (gradstream buffers are not shared with NumPy).
    #[pyo3(signature = (*, force=false))]
    fn numpy<'py>(&self, py: Python<'py>, force: bool) -> PyResult<Bound<'py, PyAny>> {
        if self.t.requires_grad() && !force {
            return Err(PyRuntimeError::new_err(
                "Can't call numpy() on Tensor that requires grad. Use tensor.detach().numpy() instead.",
            ));
        }
        tensor_to_numpy(py, &self.t)
    }

    #[pyo3(signature = (dtype=None, copy=None))]
    fn __array__<'py>(
        &self,
        py: Python<'py>,
        dtype: Option<&Bound<'py, PyAny>>,
        copy: Option<bool>,
    ) -> PyResult<Bound<'py, PyAny>> {
        let _ = copy;
        let a = tensor_to_numpy(py, &self.t)?;
        match dtype {
            Some(d) if !d.is_none() => a.call_method1("astype", (d,)),
            _ => Ok(a),
        }
    }

    fn __len__(&self) -> PyResult<usize> {
        let dims = self.t.dims();
        dims.first()
            .copied()
            .ok_or_else(|| PyTypeError::new_err("len() of a 0-d tensor"))
    }

    fn __iter__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let t = &slf.get().t;
        let dims = t.dims();
        if dims.is_empty() {
            return Err(PyTypeError::new_err("iteration over a 0-d tensor"));
        }
        let items = (0..dims[0])
            .map(|i| ops::index::select(t, 0, i as i64))
            .collect::<Result<Vec<_>, Error>>()?;
        PyList::new(slf.py(), items)?
            .try_iter()
            .map(|i| i.into_any())
    }

    fn __bool__(&self) -> PyResult<bool> {
        if self.t.numel() != 1 {
            return Err(PyRuntimeError::new_err(format!(
                "Boolean value of Tensor with {} values is ambiguous",
                if self.t.numel() == 0 {
                    "no".to_string()
                } else {
                    "more than one".to_string()
                }
            )));
        }
        Python::attach(|py| scalar_to_py(py, &self.t)?.is_truthy())
    }

    fn __float__(&self, py: Python<'_>) -> PyResult<f64> {
        scalar_to_py(py, &self.t)?.extract::<f64>()
    }

    fn __int__(&self, py: Python<'_>) -> PyResult<i64> {
        let v = scalar_to_py(py, &self.t)?;
        v.call_method0("__int__")?.extract()
    }

    fn __index__(&self, py: Python<'_>) -> PyResult<i64> {
        if self.t.dtype().is_floating_point() {
            return Err(PyTypeError::new_err(
                "only integer tensors of a single element can be converted to an index",
            ));
        }
        scalar_to_py(py, &self.t)?.extract()
    }

    fn __hash__(&self) -> usize {
        self.t.id()
    }

    fn __repr__(slf: &Bound<'_, Self>) -> PyResult<String> {
        let py = slf.py();
        let f = FORMAT.get_or_try_init(py, || {
            Ok::<_, PyErr>(
                py.import("gradstream._formatting")?
                    .getattr("tensor_repr")?
                    .unbind(),
            )
        })?;
        f.bind(py).call1((slf,))?.extract()
    }

    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let t = &slf.get().t;
        let rebuild = py
            .import("gradstream._formatting")?
            .getattr("rebuild_tensor")?;
        // A bfloat16 tensor travels as float32 and is cast back on load.
        let arr = numpy_copy(py, t)?;
        let dtype = PyDType::object(py, t.dtype())?;
        Ok((rebuild, (arr, dtype, t.requires_grad()))
            .into_pyobject(py)?
            .into_any())
    }

    // ---- conversions ----

    /// `to(dtype)`, `to(device)`, `to(other)`, `to(device, dtype)`, with `copy=`.
    #[pyo3(signature = (*args, dtype=None, device=None, copy=false, non_blocking=false))]
    fn to(
        &self,
        args: &Bound<'_, PyTuple>,
        dtype: Option<&Obj<'_>>,
        device: Option<&Obj<'_>>,
        copy: bool,
        non_blocking: bool,
    ) -> PyResult<Tensor> {
        let _ = non_blocking;
        let mut target = opt_dtype(dtype)?;
        check_device(device)?;
        for a in args.iter() {
            if let Ok(t) = a.cast::<PyTensor>() {
                target = Some(t.get().t.dtype());
            } else if a.cast::<PyDType>().is_ok() {
                target = Some(extract_dtype(&a)?);
            } else if a.cast::<PyDevice>().is_ok() || a.extract::<String>().is_ok() {
                check_device(Some(&a))?;
            } else if !a.is_none() {
                return Err(PyTypeError::new_err(format!(
                    "to() received an invalid combination of arguments: {}",
                    a.repr()?
                )));
            }
        }
        let out = match target {
            Some(dt) => ops::convert::to_dtype(&self.t, dt)?,
            None => self.t.clone(),
        };
        if copy && out.same(&self.t) {
            return Ok(ops::convert::clone(&self.t)?);
        }
        Ok(out)
    }

    fn type_as(&self, other: &Obj<'_>) -> PyResult<Tensor> {
        let o = crate::bindings::convert::extract_tensor("type_as", "other", other)?;
        Ok(ops::convert::to_dtype(&self.t, o.dtype())?)
    }

    #[pyo3(signature = (dtype=None))]
    fn r#type(&self, py: Python<'_>, dtype: Option<&Obj<'_>>) -> PyResult<Py<PyAny>> {
        match dtype {
            None => Ok(format!("gradstream.{}Tensor", self.t.dtype().name())
                .into_pyobject(py)?
                .into_any()
                .unbind()),
            Some(d) => Ok(ops::convert::to_dtype(&self.t, extract_dtype(d)?)?
                .into_pyobject(py)?
                .into_any()
                .unbind()),
        }
    }

    #[pyo3(signature = (memory_format=None))]
    fn cpu(&self, memory_format: Option<&Obj<'_>>) -> Tensor {
        let _ = memory_format;
        self.t.clone()
    }

    #[pyo3(signature = (device=None, non_blocking=false))]
    fn cuda(&self, device: Option<&Obj<'_>>, non_blocking: bool) -> PyResult<Tensor> {
        let _ = (device, non_blocking);
        Err(PyRuntimeError::new_err(
            "gradstream was built without CUDA support: cuda() is not available",
        ))
    }

    #[pyo3(signature = (memory_format=None))]
    fn contiguous(&self, memory_format: Option<&Obj<'_>>) -> PyResult<Tensor> {
        let _ = memory_format;
        Ok(ops::convert::contiguous(&self.t)?)
    }

    #[pyo3(signature = (memory_format=None))]
    fn clone(&self, memory_format: Option<&Obj<'_>>) -> PyResult<Tensor> {
        let _ = memory_format;
        Ok(ops::convert::clone(&self.t)?)
    }

    /// `copy_(src)`: in place, broadcasting `src`; differentiable like PyTorch's.
    #[pyo3(signature = (src, non_blocking=false))]
    fn copy_<'py>(
        slf: &Bound<'py, Self>,
        src: &Bound<'py, PyAny>,
        non_blocking: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let _ = non_blocking;
        let s = match extract_operand("copy_", src)? {
            ops::Operand::Tensor(t) => t,
            ops::Operand::Scalar(s) => ops::creation::scalar_tensor(s, slf.get().t.dtype())?,
        };
        ops::index::assign(&slf.get().t, None, &s)?;
        Ok(slf.clone())
    }

    fn fill_<'py>(slf: &Bound<'py, Self>, value: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let v = match extract_operand("fill_", value)? {
            ops::Operand::Tensor(t) => {
                if t.rank() != 0 {
                    return Err(PyRuntimeError::new_err(format!(
                        "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions.",
                        t.rank()
                    )));
                }
                t
            }
            ops::Operand::Scalar(s) => ops::creation::scalar_tensor(s, slf.get().t.dtype())?,
        };
        ops::index::assign(&slf.get().t, None, &v)?;
        Ok(slf.clone())
    }

    fn zero_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let z = ops::creation::scalar_tensor(ops::Scalar::Int(0), slf.get().t.dtype())?;
        ops::index::assign(&slf.get().t, None, &z)?;
        Ok(slf.clone())
    }

    /// `.data`: the same buffer without history; assigning replaces the buffer.
    #[getter]
    fn get_data(&self) -> Tensor {
        self.t.detach()
    }

    #[setter]
    fn set_data(&self, value: &Obj<'_>) -> PyResult<()> {
        let v = crate::bindings::convert::extract_tensor("data", "value", value)?;
        self.t.set_data(v.data(), v.dtype());
        Ok(())
    }

    /// The in-place version counter (bumped by every in-place change of the buffer).
    #[getter]
    fn _version(&self) -> u64 {
        self.t.version()
    }

    #[getter]
    fn is_sparse(&self) -> bool {
        false
    }

    #[getter]
    fn layout(&self) -> &'static str {
        "strided"
    }

    fn __deepcopy__(slf: &Bound<'_, Self>, memo: &Obj<'_>) -> PyResult<Py<PyAny>> {
        let _ = memo;
        let py = slf.py();
        let t = &slf.get().t;
        let c = ops::convert::clone(&t.detach())?;
        c.set_requires_grad(t.requires_grad() && t.is_leaf())?;
        // Keep the subclass (nn.Parameter) by going through its constructor.
        let ty = slf.get_type();
        if ty.is(py.get_type::<PyTensor>()) {
            return Ok(c.into_pyobject(py)?.into_any().unbind());
        }
        Ok(ty
            .call1((c.into_pyobject(py)?, t.requires_grad()))?
            .unbind())
    }
}

pub fn value_error(msg: impl Into<String>) -> PyErr {
    PyValueError::new_err(msg.into())
}

/// `float()`, `long()`...: the tensor in that dtype (itself when it already is).
macro_rules! dtype_methods {
    ($($name:ident => $dt:ident),*) => {
        #[pymethods]
        impl PyTensor {
            $(fn $name(&self) -> PyResult<Tensor> {
                Ok(ops::convert::to_dtype(&self.t, DType::$dt)?)
            })*
        }
    };
}

dtype_methods!(
    float => Float32, double => Float64, half => Float16, bfloat16 => BFloat16, long => Int64,
    int => Int32, bool => Bool, byte => UInt8
);
