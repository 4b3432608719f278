//! `saved_tensors_hooks(pack_hook, unpack_hook)` with Python callables, the saved
//! tensors of Python `Function`s, and the relu/threshold bit-mask switch.

use std::any::Any;
use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;

use crate::autograd::saved::SavedTensor;
use crate::autograd::saved_hooks::{self, Packed, SavedHooks};
use crate::bindings::convert::extract_tensor;
use crate::bindings::op::functions;
use crate::bindings::part;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::ops::threshold;
use crate::tensor::Tensor;

/// A policy made of two Python callables.
struct PySavedHooks {
    pack: Py<PyAny>,
    unpack: Py<PyAny>,
}

/// What the pack hook returned. A tensor it returned counts as a saved activation in the
/// memory accounting while it is held here.
struct PyPacked {
    obj: Option<Py<PyAny>>,
    unpack: Option<Py<PyAny>>,
    counted: Option<Tensor>,
}

impl SavedHooks for PySavedHooks {
    fn pack(&self, t: &Tensor) -> Result<Box<dyn Packed>> {
        Python::attach(|py| {
            let obj = self.pack.call1(py, (t.clone(),))?;
            let counted = obj
                .bind(py)
                .cast::<PyTensor>()
                .ok()
                .map(|p| p.get().t.clone());
            if let Some(c) = &counted {
                c.set_role(Role::Activation, true);
            }
            Ok(Box::new(PyPacked {
                obj: Some(obj),
                unpack: Some(self.unpack.clone_ref(py)),
                counted,
            }) as Box<dyn Packed>)
        })
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Packed for PyPacked {
    fn unpack(&self) -> Result<Tensor> {
        Python::attach(|py| {
            let (Some(f), Some(obj)) = (&self.unpack, &self.obj) else {
                return Err(Error::autograd("saved tensor already released"));
            };
            let r = f.call1(py, (obj.clone_ref(py),))?;
            let r = r.bind(py);
            match r.cast::<PyTensor>() {
                Ok(t) => Ok(t.get().t.clone()),
                Err(_) => Err(Error::Python(PyTypeError::new_err(format!(
                    "Output of saved tensor unpack_hook expected to be a Tensor but got result \
                     of type {}",
                    r.get_type()
                        .name()
                        .map(|n| n.to_string())
                        .unwrap_or_default()
                )))),
            }
        })
    }
}

impl Drop for PyPacked {
    fn drop(&mut self) {
        if let Some(c) = &self.counted {
            c.set_role(Role::Activation, false);
        }
        let (obj, f) = (self.obj.take(), self.unpack.take());
        // Release now (a file-backed policy deletes its file), not at the next attach.
        Python::try_attach(|_py| drop((obj, f)));
    }
}

functions! { mod functions;
    /// Push a (pack_hook, unpack_hook) policy for this thread (`saved_tensors_hooks.__enter__`).
    fn _push_saved_tensors_hooks["saved_tensors_hooks"](py: Python<'_>, pack_hook: Py<PyAny>,
        unpack_hook: Py<PyAny>) -> () {
        for (name, f) in [("pack_hook", &pack_hook), ("unpack_hook", &unpack_hook)] {
            if !f.bind(py).is_callable() {
                return Err(PyTypeError::new_err(format!(
                    "saved_tensors_hooks: {name} must be callable"
                )));
            }
        }
        let (pack, unpack) = (pack_hook, unpack_hook);
        saved_hooks::push(Arc::new(PySavedHooks { pack, unpack }));
        Ok(())
    }
    /// Pop the innermost policy (`saved_tensors_hooks.__exit__`).
    fn _pop_saved_tensors_hooks["saved_tensors_hooks"]() -> () {
        match saved_hooks::pop() {
            true => Ok(()),
            false => Err(PyRuntimeError::new_err(
                "saved_tensors_hooks: no hooks to pop (exited more often than entered)",
            )),
        }
    }
    /// Push the built-in `save_in_bfloat16` policy (native: no Python call per tensor).
    fn _push_saved_tensors_bf16["save_in_bfloat16"]() -> () {
        saved_hooks::push(Arc::new(saved_hooks::SaveInBf16));
        Ok(())
    }
    /// Whether the tensor's buffer is a parameter's (the built-in policies keep those as
    /// they are).
    fn _holds_parameter["_holds_parameter"](t: Tensor) -> bool {
        Ok(saved_hooks::holds_parameter(&t))
    }
    /// How many saved-tensor policies are active on this thread.
    fn _saved_tensors_hooks_depth["saved_tensors_hooks"]() -> usize {
        Ok(saved_hooks::depth())
    }
    /// Raise the exception a pack hook raised, if it has not been raised yet.
    fn _raise_saved_tensors_pack_error["saved_tensors_hooks"]() -> () {
        Ok(saved_hooks::check()?)
    }
    /// Save 1-bit masks for relu/threshold backward (on by default); returns the previous
    /// setting.
    fn _set_relu_bitmask["relu"](enabled: bool) -> bool {
        Ok(threshold::set_bitmask(enabled))
    }
    /// Whether relu/threshold save 1-bit masks.
    fn _relu_bitmask_enabled["relu"]() -> bool { Ok(threshold::bitmask_enabled()) }
}

/// A tensor saved by a Python `Function` (`ctx.save_for_backward`): version-checked, and
/// packed by the innermost `saved_tensors_hooks`, like the tensors ops save.
#[pyclass(name = "_SavedTensor", module = "gradstream", frozen)]
pub struct PySavedTensor {
    saved: Mutex<Option<SavedTensor>>,
}

#[pymethods]
impl PySavedTensor {
    #[new]
    fn new(t: &Obj<'_>) -> PyResult<Self> {
        let t = extract_tensor("save_for_backward", "tensor", t)?;
        let saved = SavedTensor::input(&t);
        saved_hooks::check()?;
        Ok(PySavedTensor {
            saved: Mutex::new(Some(saved)),
        })
    }

    /// The saved tensor (through the unpack hook); `name` names the function in errors.
    fn unpack(&self, name: &str) -> PyResult<Tensor> {
        let guard = self.saved.lock();
        let s = guard
            .as_ref()
            .ok_or_else(|| PyRuntimeError::new_err("saved tensor already released"))?;
        Ok(s.unpack_named(name)?)
    }

    /// Drop the saved tensor (and what its pack hook returned).
    fn release(&self) {
        let s = self.saved.lock().take();
        drop(s);
    }
}

part!(|m| m.add_class::<PySavedTensor>());
