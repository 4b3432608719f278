//! Python surface of the engine: `backward`, `autograd.grad`, grad mode, hooks, `grad_fn`.

use std::sync::{Arc, Weak};

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple, PyWeakrefReference};

use crate::autocast;
use crate::autograd::engine::{run_backward, BackwardOptions};
use crate::autograd::function::backward_calls;
use crate::autograd::grad_mode;
use crate::autograd::node::{node_key, Node};
use crate::bindings::convert::{extract_tensor, PyDType};
use crate::bindings::hook_refs::{self, HookFunction};
use crate::bindings::op::{attributes, functions};
use crate::bindings::part;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::error::{Error, Result};
use crate::tensor::{Tensor, TensorImpl};

/// `grad_fn`: a read-only view of a backward node.
#[pyclass(name = "Node", module = "gradstream.autograd", frozen)]
pub struct PyNode {
    pub node: Arc<dyn Node>,
}

#[pymethods]
impl PyNode {
    /// `((next_node, 0), ...)` per input, `(None, 0)` for inputs without a gradient.
    #[getter]
    fn next_functions<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        let items = self.node.base().edges.iter().map(|e| {
            let next = e.as_ref().map(|e| PyNode {
                node: e.node.clone(),
            });
            (next, e.as_ref().map_or(0, |e| e.input_nr)).into_pyobject(py)
        });
        let items = items.collect::<PyResult<Vec<_>>>()?;
        PyTuple::new(py, items)
    }

    fn __eq__(&self, other: &Obj<'_>) -> bool {
        other
            .cast::<PyNode>()
            .is_ok_and(|o| Arc::ptr_eq(&self.node, &o.get().node))
    }
}

attributes! { PyNode.node;
    fn name(node) -> String = node.name().to_string();
    /// The leaf tensor of an `AccumulateGrad` node.
    #[getter] fn variable(node) -> Option<Tensor> =
        node.leaf().and_then(|w| w.upgrade()).map(Tensor);
    fn __repr__(node) -> String = format!("<{} object at {:#x}>", node.name(), node_key(node));
    fn __hash__(node) -> usize = node_key(node);
}

#[derive(Clone, Copy)]
enum HookKind {
    Grad,
    PostAccumulate,
}

/// Returned by `register_hook` and friends; `remove()` unregisters.
#[pyclass(name = "RemovableHandle", module = "gradstream.utils.hooks", frozen)]
pub struct PyHookHandle {
    tensor: Weak<TensorImpl>,
    id: u64,
    kind: HookKind,
}

#[pymethods]
impl PyHookHandle {
    fn remove(&self) {
        if let Some(t) = self.tensor.upgrade().map(Tensor) {
            match self.kind {
                HookKind::Grad => t.remove_grad_hook(self.id),
                HookKind::PostAccumulate => t.remove_post_accumulate_hook(self.id),
            }
        }
    }
    fn __enter__(slf: Py<Self>) -> Py<Self> {
        slf
    }
    fn __exit__(&self, _a: &Obj<'_>, _b: &Obj<'_>, _c: &Obj<'_>) {
        self.remove()
    }
}

fn hookable(t: &Tensor) -> PyResult<()> {
    if t.requires_grad() {
        return Ok(());
    }
    Err(PyRuntimeError::new_err(
        "cannot register a hook on a tensor that doesn't require gradient",
    ))
}

fn interrupt_check() -> Result<()> {
    Python::attach(|py| py.check_signals()).map_err(Error::Python)
}

fn tensors(name: &str, list: &Bound<'_, PyList>) -> PyResult<Vec<Tensor>> {
    list.iter()
        .map(|t| extract_tensor("backward", name, &t))
        .collect()
}

#[pymethods]
impl PyTensor {
    #[setter(requires_grad)]
    fn set_requires_grad_attr(&self, value: bool) -> PyResult<()> {
        Ok(self.t.set_requires_grad(value)?)
    }

    #[pyo3(signature = (requires_grad=true))]
    fn requires_grad_<'py>(
        slf: &Bound<'py, Self>,
        requires_grad: bool,
    ) -> PyResult<Bound<'py, Self>> {
        slf.get().t.set_requires_grad(requires_grad)?;
        Ok(slf.clone())
    }

    #[setter(grad)]
    fn set_grad_attr(&self, value: Option<&Obj<'_>>) -> PyResult<()> {
        let g = match value {
            None => None,
            Some(v) if v.is_none() => None,
            Some(v) => Some(extract_tensor("grad", "value", v)?),
        };
        Ok(self.t.set_grad(g)?)
    }

    fn detach_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        t.set_grad_fn(None);
        t.set_requires_grad(false)?;
        Ok(slf.clone())
    }

    /// `register_hook(fn)`: `fn(grad)` runs before the gradient is used; it may return a
    /// replacement of the same shape.
    fn register_hook(&self, hook: Py<PyAny>) -> PyResult<PyHookHandle> {
        hookable(&self.t)?;
        let f = Arc::new(HookFunction(hook));
        let hook = f.clone();
        let h = Arc::new(move |g: &Tensor| -> Result<Option<Tensor>> {
            Python::attach(|py| {
                let r = hook.0.call1(py, (g.clone(),))?;
                let r = r.bind(py);
                if r.is_none() {
                    return Ok(None);
                }
                Ok(Some(extract_tensor("hook", "return value", r)?))
            })
        });
        let id = self.t.add_grad_hook(h);
        hook_refs::remember(id, &f);
        Ok(PyHookHandle {
            tensor: self.t.downgrade(),
            id,
            kind: HookKind::Grad,
        })
    }

    /// `register_post_accumulate_grad_hook(fn)`: `fn(tensor)` runs once per backward, the
    /// moment this leaf's `.grad` is final. The hook may set `tensor.grad = None`.
    fn register_post_accumulate_grad_hook(
        slf: &Bound<'_, Self>,
        hook: Py<PyAny>,
    ) -> PyResult<PyHookHandle> {
        let t = &slf.get().t;
        hookable(t)?;
        // The hook receives the very Python object it was registered on (a Parameter
        // stays a Parameter); held weakly, since the tensor holds the hook.
        let me: Py<PyWeakrefReference> = PyWeakrefReference::new(slf.as_any())?.unbind();
        let f = Arc::new(HookFunction(hook));
        let hook = f.clone();
        let h = Arc::new(move |t: &Tensor| -> Result<()> {
            Python::attach(|py| {
                let arg = match me.bind(py).upgrade() {
                    Some(obj) => obj,
                    None => t.clone().into_pyobject(py)?.into_any(),
                };
                hook.0.call1(py, (arg,))?;
                Ok(())
            })
        });
        let id = t.add_post_accumulate_hook(h)?;
        hook_refs::remember(id, &f);
        Ok(PyHookHandle {
            tensor: t.downgrade(),
            id,
            kind: HookKind::PostAccumulate,
        })
    }
}

attributes! { PyTensor.t;
    #[getter] fn requires_grad(t) -> bool = t.requires_grad();
    #[getter] fn is_leaf(t) -> bool = t.is_leaf();
    #[getter] fn grad_fn(t) -> Option<PyNode> = t.grad_fn().map(|node| PyNode { node });
    #[getter] fn grad(t) -> Option<Tensor> = t.grad();
    #[getter] fn retains_grad(t) -> bool = t.0.meta.lock().retains_grad;
    fn retain_grad(t) -> PyResult<()> = Ok(t.retain_grad()?);
    fn detach(t) -> Tensor = t.detach();
}

functions! { mod functions;
    /// `_run_backward(roots, grads, retain_graph, create_graph, accumulate, inputs, consumer)`:
    /// the engine, run with the interpreter released. `autograd.backward` and `autograd.grad`
    /// (Python) normalise their arguments into these lists. With `accumulate`, leaves' `.grad`
    /// are summed into (or `consumer(param, grad)` is called as each becomes final); without,
    /// the gradients of `inputs` are returned.
    fn _run_backward["backward"](py: Python<'_>, roots: List, grads: List, retain_graph: bool,
        create_graph: bool, accumulate: bool, inputs: Option<List>,
        consumer: Option<Py<PyAny>>) -> Vec<Option<Tensor>> {
        let roots = tensors("tensors", roots)?;
        let grads = grads
            .iter()
            .map(|g| match g.is_none() {
                true => Ok(None),
                false => extract_tensor("backward", "grad_tensors", &g).map(Some),
            })
            .collect::<PyResult<Vec<_>>>()?;
        if grads.len() != roots.len() {
            return Err(PyRuntimeError::new_err(format!(
                "backward: got {} tensors and {} gradients",
                roots.len(),
                grads.len()
            )));
        }
        let inputs = inputs.map(|i| tensors("inputs", i)).transpose()?;
        let consume = consumer.map(|f| {
            move |p: &Tensor, g: &Tensor| -> Result<()> {
                Python::attach(|py| {
                    f.call1(py, (p.clone(), g.clone()))?;
                    Ok(())
                })
            }
        });
        Ok(py.detach(|| {
            let opts = BackwardOptions {
                retain_graph,
                create_graph,
                accumulate,
                inputs: inputs.as_deref(),
                grad_consumer: consume
                    .as_ref()
                    .map(|c| c as &(dyn Fn(&Tensor, &Tensor) -> Result<()> + Sync)),
                check_interrupt: &interrupt_check,
            };
            run_backward(&roots, &grads, &opts)
        })?)
    }
    fn is_grad_enabled["is_grad_enabled"]() -> bool { Ok(grad_mode::is_enabled()) }
    fn _set_grad_enabled["set_grad_enabled"](enabled: bool) -> () {
        grad_mode::set_enabled(enabled);
        Ok(())
    }
    /// Whether an autocast region is active on this thread, for any device type.
    fn _autocast_active["autocast"]() -> bool { Ok(autocast::region().is_active()) }
    /// Set this thread's autocast regions: the CPU's dtype and CUDA's (None: off).
    fn _set_autocast_dtypes["autocast"](cpu: Option<PyDType>, cuda: Option<PyDType>) -> () {
        autocast::set_region(autocast::Region {
            cpu: cpu.map(|d| d.dt),
            cuda: cuda.map(|d| d.dt),
        });
        Ok(())
    }
    /// How many backward rules have run in this process (tests of path pruning use it).
    fn _backward_calls["backward"]() -> u64 { Ok(backward_calls()) }
}

part!(|m| {
    m.add_class::<PyNode>()?;
    m.add_class::<PyHookHandle>()
});
