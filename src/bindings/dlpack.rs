//! DLPack from Python: `Tensor.__dlpack__` / `__dlpack_device__` export a tensor's buffer
//! without a copy (NumPy, PyTorch, JAX then read and write gradstream's memory) in a
//! capsule; `from_dlpack` imports, and copies. The ABI and the layouts are `crate::dlpack`.

use std::ffi::{c_char, CStr};

use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::op::functions;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dlpack::{self, DLManagedTensor, DLManagedTensorVersioned, Managed, CPU};
use crate::tensor::Tensor;

/// A capsule nobody consumed still owns its export (the protocol: a consumer renames it).
unsafe extern "C" fn capsule_destructor<M: Managed>(cap: *mut pyo3::ffi::PyObject) {
    if pyo3::ffi::PyCapsule_IsValid(cap, M::NAME.as_ptr()) == 1 {
        dlpack::delete_export::<M>(pyo3::ffi::PyCapsule_GetPointer(cap, M::NAME.as_ptr()).cast());
    }
    // PyCapsule_GetPointer sets an error only for a capsule of another name, excluded above.
}

/// A DLPack capsule owning an export of `t` (a copy with `copy`).
fn capsule<M: Managed>(py: Python<'_>, t: &Tensor, copy: bool) -> PyResult<Py<PyAny>> {
    let ptr = Box::into_raw(dlpack::export::<M>(t, copy)?);
    // SAFETY: `ptr` is a live Box the capsule now owns; `capsule_destructor` frees it
    // unless a consumer renamed the capsule (and took ownership) first.
    unsafe {
        let cap =
            pyo3::ffi::PyCapsule_New(ptr.cast(), M::NAME.as_ptr(), Some(capsule_destructor::<M>));
        if cap.is_null() {
            drop(Box::from_raw(ptr));
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}

/// The tensor of a capsule of kind `M` (renaming it, as the protocol asks), copied and
/// handed back to its producer's deleter; None for a capsule of another kind.
fn import<M: Managed>(cap: &Obj<'_>) -> Option<PyResult<Tensor>> {
    let ptr = cap.as_ptr();
    // SAFETY: the name check makes sure the pointer is of the kind the name says; the
    // producer keeps the memory alive until its deleter runs, which happens after the copy.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(ptr, M::NAME.as_ptr()) != 1 {
            return None;
        }
        let m = pyo3::ffi::PyCapsule_GetPointer(ptr, M::NAME.as_ptr()).cast::<M>();
        if m.is_null() {
            return Some(Err(PyErr::fetch(cap.py())));
        }
        let (major, minor) = (*m).version();
        if major > 1 {
            return Some(Err(PyBufferError::new_err(format!(
                "from_dlpack: DLPack version {major}.{minor} is newer than gradstream reads (1.x)"
            ))));
        }
        pyo3::ffi::PyCapsule_SetName(ptr, M::USED.as_ptr());
        let out = dlpack::copy_in((*m).tensor());
        if let Some(del) = (*m).deleter() {
            del(m);
        }
        Some(out.map_err(PyErr::from))
    }
}

fn import_capsule(cap: &Obj<'_>) -> PyResult<Tensor> {
    if let Some(t) =
        import::<DLManagedTensorVersioned>(cap).or_else(|| import::<DLManagedTensor>(cap))
    {
        return t;
    }
    // SAFETY: `cap` is a live object; a non-capsule sets an error, cleared here.
    let name = unsafe {
        let name = pyo3::ffi::PyCapsule_GetName(cap.as_ptr());
        pyo3::ffi::PyErr_Clear();
        match name.is_null() {
            true => "None".to_string(),
            false => CStr::from_ptr(name as *const c_char)
                .to_string_lossy()
                .into_owned(),
        }
    };
    Err(PyValueError::new_err(format!(
        "from_dlpack: expected a capsule named 'dltensor' or 'dltensor_versioned' that was not \
         consumed yet, got one named '{name}'"
    )))
}

#[pymethods]
impl PyTensor {
    /// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`: a DLPack
    /// capsule over this tensor's memory, shared without a copy (strided views included).
    /// Raises BufferError for a tensor that requires grad, as PyTorch does.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Obj<'_>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        if self.t.requires_grad() {
            return Err(PyBufferError::new_err(
                "Can't export tensors that require gradient, use tensor.detach()",
            ));
        }
        let here = crate::dlpack::dl_device(&self.t.device())?;
        // A CPU tensor takes no stream; a CUDA export waits for the device, so any stream
        // the consumer names sees finished data.
        if here.0 == CPU {
            if let Some(s) = stream.filter(|s| !s.is_none() && s.extract::<i64>().ok() != Some(-1))
            {
                return Err(PyValueError::new_err(format!(
                    "__dlpack__: stream must be None or -1 for a CPU tensor, got {s}"
                )));
            }
        }
        if let Some((ty, id)) = dl_device.filter(|&d| d != here) {
            return Err(PyBufferError::new_err(format!(
                "__dlpack__: gradstream exports a tensor on its own device ({}, {}), \
                 dl_device=({ty}, {id}) asked",
                here.0, here.1
            )));
        }
        let copy = copy == Some(true);
        match max_version.is_some_and(|(major, _)| major >= 1) {
            true => capsule::<DLManagedTensorVersioned>(py, &self.t, copy),
            false => capsule::<DLManagedTensor>(py, &self.t, copy),
        }
    }

    /// `__dlpack_device__()`: `(device_type, device_id)` as DLPack numbers them (CPU:
    /// `(1, 0)`, CUDA: `(2, ordinal)`).
    fn __dlpack_device__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let (ty, id) = crate::dlpack::dl_device(&self.t.device())?;
        PyTuple::new(py, [ty, id])
    }
}

functions! { mod functions;
    /// `from_dlpack(ext_tensor)`: a tensor holding a copy of an object's data, taken through
    /// DLPack (`__dlpack__`, or a DLPack capsule). The result is a leaf that does not
    /// require grad, as in PyTorch; unlike PyTorch, it does not share the producer's memory.
    fn from_dlpack["from_dlpack"](py: Python<'_>, ext_tensor: Object) -> Tensor {
        let py = ext_tensor.py();
        if let Ok(t) = ext_tensor.cast::<PyTensor>() {
            return Ok(t.get().t.detach());
        }
        let cap = if ext_tensor.hasattr("__dlpack__")? {
            let kwargs = pyo3::types::PyDict::new(py);
            kwargs.set_item("max_version", (1, 1))?;
            match ext_tensor.call_method("__dlpack__", (), Some(&kwargs)) {
                Ok(c) => c,
                Err(e) if e.is_instance_of::<PyTypeError>(py) => {
                    ext_tensor.call_method0("__dlpack__")?
                }
                Err(e) => return Err(e),
            }
        } else if ext_tensor.is_instance_of::<pyo3::types::PyCapsule>() {
            ext_tensor.clone()
        } else {
            return Err(PyTypeError::new_err(format!(
                "from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got {}",
                ext_tensor.get_type().name()?
            )));
        };
        import_capsule(&cap)
    }
    /// `utils.dlpack.to_dlpack(tensor)`: the legacy capsule, as `torch.utils.dlpack.to_dlpack`
    /// (which, unlike `__dlpack__`, exports a tensor that requires grad: its data only).
    fn to_dlpack["to_dlpack"](py: Python<'_>, tensor: Tensor) -> Py<PyAny> {
        capsule::<DLManagedTensor>(py, &tensor, false)
    }
}
