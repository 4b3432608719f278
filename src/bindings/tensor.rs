//! The Python `Tensor` class: attributes, conversions and the methods every tensor has.
//! Op methods live beside their op families (`#[pymethods]` blocks in the other files).

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyInt, PyTuple, PyType};

use crate::bindings::convert::{
    extract_device, extract_dtype, extract_memory_format, opt_device, opt_dtype, tensor_from_data,
    tensor_to_numpy, PyDType, PyDevice,
};
use crate::bindings::op::{attributes, tensor_ops};
use crate::bindings::Obj;
use crate::device::default_device;
use crate::dtype::DType;
use crate::ops;
use crate::ops::memory_format::MemoryFormat;
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

fn scalar_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    if t.numel() != 1 {
        return Err(PyRuntimeError::new_err(format!(
            "a Tensor with {} elements cannot be converted to Scalar",
            t.numel()
        )));
    }
    // NumPy's item() is the Python bool, int or float of each dtype; bfloat16, which NumPy
    // lacks, goes through float32 (exact).
    let t = match t.dtype() {
        DType::BFloat16 => ops::convert::to_dtype(&t.detach(), DType::Float32)?,
        _ => t.detach(),
    };
    tensor_to_numpy(py, &t)?.call_method0("item")
}

#[pymethods]
impl PyTensor {
    /// `Tensor(data)` aliases a tensor or copies data; `Tensor(2, 3)` is uninitialised
    /// (zeros here). Subclasses such as `nn.Parameter` are built through this too.
    #[new]
    #[pyo3(signature = (*args, requires_grad=false))]
    fn new(args: &Bound<'_, PyTuple>, requires_grad: bool) -> PyResult<Self> {
        let t = if args.is_empty() {
            ops::creation::zeros(&[0], crate::dtype::default_float(), &default_device())?
        } else if args.len() == 1 && args.get_item(0)?.cast::<PyTensor>().is_ok() {
            args.get_item(0)?.cast::<PyTensor>()?.get().t.detach()
        } else if args.iter().all(|a| a.extract::<i64>().is_ok()) {
            let size = crate::bindings::convert::extract_size("Tensor", args)?;
            let dims = crate::ops::to_dims("Tensor", &size)?;
            ops::creation::zeros(&dims, crate::dtype::default_float(), &default_device())?
        } else {
            tensor_from_data(&args.get_item(0)?, Some(crate::dtype::default_float()))?
        };
        t.set_requires_grad(requires_grad)?;
        Ok(PyTensor { t })
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

    // ---- conversions ----

    /// `to(dtype)`, `to(device)`, `to(other)`, `to(device, dtype)`, with `copy=` and
    /// `memory_format=`.
    #[pyo3(signature = (*args, dtype=None, device=None, copy=false, non_blocking=false,
        memory_format=None))]
    fn to(
        &self,
        args: &Bound<'_, PyTuple>,
        dtype: Option<&Obj<'_>>,
        device: Option<&Obj<'_>>,
        copy: bool,
        non_blocking: bool,
        memory_format: Option<&Obj<'_>>,
    ) -> PyResult<Tensor> {
        let _ = non_blocking;
        let format = memory_format
            .filter(|f| !f.is_none())
            .map(|f| extract_memory_format("to", "memory_format", f))
            .transpose()?;
        let mut target = opt_dtype(dtype)?;
        let mut place = opt_device(device)?;
        for a in args.iter() {
            if let Ok(t) = a.cast::<PyTensor>() {
                target = Some(t.get().t.dtype());
                place = Some(t.get().t.device());
            } else if a.cast::<PyDType>().is_ok() {
                target = Some(extract_dtype(&a)?);
            } else if a.cast::<PyDevice>().is_ok()
                || a.extract::<String>().is_ok()
                || (a.is_instance_of::<PyInt>() && !a.is_instance_of::<PyBool>())
                || a.hasattr("index")?
            {
                place = Some(extract_device(&a)?);
            } else if !a.is_none() {
                return Err(PyTypeError::new_err(format!(
                    "to() received an invalid combination of arguments: {}",
                    a.repr()?
                )));
            }
        }
        let moved = match place {
            Some(d) => ops::convert::to_device(&self.t, &d)?,
            None => self.t.clone(),
        };
        let out = match target {
            Some(dt) => ops::convert::to_dtype(&moved, dt)?,
            None => moved,
        };
        let out = match format {
            Some(f) if f != MemoryFormat::Preserve => ops::memory_format::contiguous_as(&out, f)?,
            _ => out,
        };
        if copy && out.same(&self.t) {
            return Ok(ops::memory_format::clone_as(
                &self.t,
                MemoryFormat::Preserve,
            )?);
        }
        Ok(out)
    }

    #[setter]
    fn set_data(&self, value: &Obj<'_>) -> PyResult<()> {
        let v = crate::bindings::convert::extract_tensor("data", "value", value)?;
        self.t.set_data(v.data(), v.dtype());
        Ok(())
    }
}

tensor_ops! { mod assign_fns;
    /// `copy_(src)`: in place, broadcasting `src`; differentiable like PyTorch's.
    method fn copy_(x: Py<PyTensor>, src: Operand, non_blocking: bool = false) -> Py<PyTensor> {
        let _ = non_blocking;
        match src {
            ops::Operand::Tensor(s) => ops::index::assign(&x.get().t, None, &s)?,
            number => ops::index::fill_(&x.get().t, number)?,
        }
        Ok(x)
    }
    method fn fill_(x: Py<PyTensor>, value: Operand) -> Py<PyTensor> {
        ops::index::fill_(&x.get().t, value)?;
        Ok(x)
    }
    /// `contiguous(memory_format=contiguous_format)`: `x` itself when laid out so.
    method fn contiguous(x: Tensor, memory_format: Option<MemoryFormat> = None) -> Tensor {
        let f = memory_format.unwrap_or(MemoryFormat::Contiguous);
        Ok(ops::memory_format::contiguous_as(&x, f)?)
    }
    /// `clone(memory_format=preserve_format)`: a copy; a channels-last tensor stays so.
    method fn clone(x: Tensor, memory_format: Option<MemoryFormat> = None) -> Tensor {
        let f = memory_format.unwrap_or(MemoryFormat::Preserve);
        Ok(ops::memory_format::clone_as(&x, f)?)
    }
    /// `is_contiguous(memory_format=contiguous_format)`.
    method fn is_contiguous(x: Tensor, memory_format: Option<MemoryFormat> = None) -> bool {
        let f = memory_format.unwrap_or(MemoryFormat::Contiguous);
        Ok(ops::memory_format::is_contiguous_as(&x, f)?)
    }
    method fn zero_(x: Py<PyTensor>) -> Py<PyTensor> {
        ops::index::fill_(&x.get().t, ops::Operand::Scalar(ops::Scalar::Int(0)))?;
        Ok(x)
    }
}

attributes! { PyTensor.t;
    /// Mark this tensor's buffer as a parameter in memory accounting (`nn.Parameter`).
    fn _mark_parameter(t) -> () = t.mark_parameter();
    #[getter] fn shape(t, py) -> PyResult<Bound<'py, PyAny>> = make_size(py, &t.dims());
    #[getter] fn dtype(t, py) -> PyResult<Py<PyDType>> = PyDType::object(py, t.dtype());
    #[getter] fn device(t) -> PyDevice = PyDevice::of(&t.device());
    fn dim(t) -> usize = t.rank();
    fn numel(t) -> usize = t.numel();
    fn stride(t, py) -> PyResult<Bound<'py, PyTuple>> = PyTuple::new(py, t.data().stride());
    /// The offset of the first element in the buffer, in elements.
    fn storage_offset(t) -> usize = t.data().layout().start_offset();
    /// The address of the first element (a CUDA device pointer on CUDA).
    fn data_ptr(t) -> PyResult<usize> = Ok(crate::dlpack::data_ptr(&t.data())?);
    fn is_floating_point(t) -> bool = t.dtype().is_floating_point();
    fn item(t, py) -> PyResult<Bound<'py, PyAny>> = scalar_to_py(py, t);
    fn __hash__(t) -> usize = t.id();
    /// `.data`: the same buffer without history; assigning replaces the buffer.
    #[getter] fn get_data(t) -> Tensor = t.detach();
    /// The in-place version counter (bumped by every in-place change of the buffer).
    #[getter] fn _version(t) -> u64 = t.version();
}
