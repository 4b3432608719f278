//! `gradstream.autograd.Function`: a backward node whose rule is Python code.

use std::sync::Arc;

use parking_lot::Mutex;
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::autograd::node::{EdgeGrads, Node, NodeBase, Run};
use crate::autograd::remat;
use crate::bindings::convert::extract_tensor;
use crate::bindings::op::functions;
use crate::bindings::Obj;
use crate::error::Error;
use crate::tensor::{shape_str, Tensor};

/// Runs a Python `backward(grad) -> [grad per input]`; `release()` frees what the
/// function saved once the node has run (unless the graph is retained).
pub struct PyFunctionNode {
    name: String,
    base: NodeBase,
    input_dims: Vec<Vec<usize>>,
    backward: Py<PyAny>,
    release: Mutex<Option<Py<PyAny>>>,
}

impl Node for PyFunctionNode {
    fn name(&self) -> &str {
        &self.name
    }

    fn base(&self) -> &NodeBase {
        &self.base
    }

    fn apply(&self, _me: &Arc<dyn Node>, grads: &[Option<Tensor>], run: &Run) -> EdgeGrads {
        let [Some(grad)] = grads else {
            return Ok(vec![None; self.base.edges.len()]);
        };
        Python::attach(|py| {
            let out = self.backward.call1(py, (grad.clone(),))?;
            let out = out.bind(py);
            let n = self.base.edges.len();
            let items: Vec<Obj<'_>> = out.try_iter()?.collect::<PyResult<_>>()?;
            if items.len() != n {
                return Err(Error::autograd(format!(
                    "function {} returned an incorrect number of gradients (expected {n}, got {})",
                    self.name,
                    items.len()
                )));
            }
            items
                .iter()
                .enumerate()
                .map(|(i, g)| {
                    if g.is_none() || !run.needs[i] {
                        return Ok(None);
                    }
                    let g = extract_tensor(&self.name, "gradient", g)?;
                    if g.dims() != self.input_dims[i] {
                        return Err(Error::shape(format!(
                            "Function {} returned an invalid gradient at index {i} - got {} but \
                             expected shape compatible with {}",
                            self.name,
                            shape_str(&g.dims()),
                            shape_str(&self.input_dims[i])
                        )));
                    }
                    Ok(Some(g))
                })
                .collect()
        })
    }

    fn release_saved(&self) {
        if let Some(f) = self.release.lock().take() {
            Python::attach(|py| {
                if let Err(e) = f.call0(py) {
                    e.write_unraisable(py, None);
                }
            });
        }
    }
}

functions! { mod functions;
    /// Attach a Python-defined backward to `output`: gradients flow to `inputs` (those that
    /// require grad). The caller ran the forward without recording.
    ///
    /// `recompute(inputs) -> output`, when given, is the forward again on the inputs' values
    /// (grad mode off), and `seconds` what the forward took: under a memory budget the
    /// output can then be evicted and remade like any op's (a checkpointed region's).
    fn _function_node["Function"](output: Object, inputs: List, backward: Py<PyAny>,
        release: Py<PyAny>, name: String, recompute: Option<Py<PyAny>> = None,
        seconds: f64 = 0.0) -> () {
        let out = extract_tensor(&name, "output", output)?;
        if !out.is_leaf() || out.requires_grad() {
            return Err(PyTypeError::new_err(format!(
                "{name}: the forward output must be a new tensor without history"
            )));
        }
        let ins = inputs
            .iter()
            .map(|t| extract_tensor(&name, "input", &t))
            .collect::<PyResult<Vec<_>>>()?;
        if !ins.iter().any(Tensor::requires_grad) {
            return Ok(());
        }
        if !out.dtype().is_floating_point() {
            return Err(PyTypeError::new_err(format!(
                "{name}: only floating point outputs can have a gradient (got {})",
                out.dtype().name()
            )));
        }
        if let Some(recompute) = recompute {
            let started = remat::start().and_then(|now| {
                now.checked_sub(std::time::Duration::from_secs_f64(seconds.max(0.0)))
            });
            let label = name.clone();
            let refs: Vec<&Tensor> = ins.iter().collect();
            remat::note("function", &out, &refs, started, move |values: &[Tensor]| {
                Python::attach(|py| {
                    let r = recompute.call1(py, (values.to_vec(),))?;
                    Ok(extract_tensor(&label, "recomputed output", r.bind(py))?)
                })
            });
        }
        let node = PyFunctionNode {
            base: NodeBase::new(ins.iter().map(Tensor::gradient_edge).collect()),
            input_dims: ins.iter().map(Tensor::dims).collect(),
            name,
            backward,
            release: Mutex::new(Some(release)),
        };
        out.set_grad_fn(Some(Arc::new(node)));
        Ok(())
    }
    /// Turn structure-only recording on or off (see `autograd::function::set_structure_only`);
    /// returns the previous setting.
    fn _set_structure_only["_set_structure_only"](on: bool) -> bool {
        Ok(crate::autograd::function::set_structure_only(on))
    }
    /// The leaf tensors that require grad and that `t`'s graph leads to, in discovery order.
    fn _graph_leaves["_graph_leaves"](t: Tensor) -> Vec<Tensor> {
        Ok(crate::autograd::node::graph_leaves(&t))
    }
}
