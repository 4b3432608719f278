//! A node of the backward graph: one per recorded op, with edges only to the inputs
//! that need a gradient (pruning starts at record time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::autograd::accumulate::AccumulateGrad;
use crate::error::{Error, Result};
use crate::tensor::{check_like, shape_str, GradHook, Tensor, TensorImpl};

/// Where a gradient goes: output `input_nr` of the node that produced a tensor (0 but for
/// ops with several outputs, like `split`), or a leaf's sink.
#[derive(Clone)]
pub struct Edge {
    pub node: Arc<dyn Node>,
    pub input_nr: usize,
}

impl Edge {
    pub fn key(&self) -> usize {
        node_key(&self.node)
    }
}

pub fn node_key(node: &Arc<dyn Node>) -> usize {
    Arc::as_ptr(node) as *const () as usize
}

/// The leaf tensors that require grad and that `t`'s graph leads to, in discovery order.
pub fn graph_leaves(t: &Tensor) -> Vec<Tensor> {
    let mut out = Vec::new();
    let mut seen = std::collections::HashSet::new();
    let mut stack: Vec<Arc<dyn Node>> = t.grad_fn().into_iter().collect();
    while let Some(n) = stack.pop() {
        if !seen.insert(node_key(&n)) {
            continue;
        }
        if let Some(leaf) = n.leaf().and_then(|w| w.upgrade()) {
            out.push(Tensor(leaf));
        }
        stack.extend(n.base().edges.iter().flatten().map(|e| e.node.clone()));
    }
    out
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// The sequence number the next node will get (a node's saved tensors are made just
/// before it).
pub fn next_sequence_nr() -> u64 {
    SEQUENCE.load(Ordering::Relaxed)
}

/// What every node has: its creation order, its edges, and the hooks on its outputs.
pub struct NodeBase {
    pub sequence_nr: u64,
    pub edges: Vec<Option<Edge>>,
    /// `register_hook` on an output tensor: (hook id, output, hook).
    pre_hooks: Mutex<Vec<(u64, usize, GradHook)>>,
    /// The outputs that called `retain_grad()`.
    retained: Mutex<Vec<(usize, Weak<TensorImpl>)>>,
}

impl NodeBase {
    pub fn new(edges: Vec<Option<Edge>>) -> Self {
        NodeBase::numbered(SEQUENCE.fetch_add(1, Ordering::Relaxed), edges)
    }

    /// Leaf sinks run the moment they are ready: highest priority.
    pub fn sink() -> Self {
        NodeBase::numbered(u64::MAX, Vec::new())
    }

    fn numbered(sequence_nr: u64, edges: Vec<Option<Edge>>) -> Self {
        NodeBase {
            sequence_nr,
            edges,
            pre_hooks: Mutex::new(Vec::new()),
            retained: Mutex::new(Vec::new()),
        }
    }

    pub fn set_retained(&self, output: usize, t: Weak<TensorImpl>) {
        self.retained.lock().push((output, t));
    }

    /// The tensor of `output`, when it called `retain_grad()` and is alive.
    pub fn retained(&self, output: usize) -> Option<Tensor> {
        self.retained
            .lock()
            .iter()
            .find(|(o, _)| *o == output)
            .and_then(|(_, t)| t.upgrade())
            .map(Tensor)
    }

    pub fn add_pre_hook(&self, output: usize, id: u64, hook: GradHook) {
        self.pre_hooks.lock().push((id, output, hook));
    }

    pub fn remove_pre_hook(&self, id: u64) {
        self.pre_hooks.lock().retain(|(i, _, _)| *i != id);
    }

    /// The ids of the hooks on its outputs (for the garbage collector's traversal).
    pub fn pre_hook_ids(&self) -> Vec<u64> {
        self.pre_hooks.lock().iter().map(|(id, _, _)| *id).collect()
    }

    /// The hooks of `output`, in registration order; each may replace the gradient.
    pub fn run_pre_hooks(&self, output: usize, grad: Tensor) -> Result<Tensor> {
        let hooks: Vec<GradHook> = self
            .pre_hooks
            .lock()
            .iter()
            .filter(|(_, o, _)| *o == output)
            .map(|(_, _, h)| h.clone())
            .collect();
        run_hooks(&hooks, grad)
    }
}

/// Run gradient hooks in order; a hook that returns a tensor replaces the gradient, which
/// must keep its shape and dtype.
pub fn run_hooks(hooks: &[GradHook], mut grad: Tensor) -> Result<Tensor> {
    for h in hooks {
        let Some(g) = h(&grad)? else { continue };
        check_like(
            &g,
            &grad,
            |got, want| {
                Error::shape(format!(
                    "hook: hook has changed the size of value: it returned a gradient of shape \
                     {got} but the gradient has shape {want}"
                ))
            },
            |got, want| {
                Error::type_(format!(
                    "hook: hook has changed the type of value (was {want} got {got}), shape {}",
                    shape_str(&grad.dims())
                ))
            },
        )?;
        grad = g;
    }
    Ok(grad)
}

/// What the engine asks of one run of a node.
pub struct Run<'a> {
    /// `needs[i]`: the engine will use edge i's gradient in this backward (it leads to a
    /// wanted input); the others are not computed.
    pub needs: &'a [bool],
    /// The engine drops the node's saved tensors when it has run (the graph is not
    /// retained), so the node may drop them sooner.
    pub releases: bool,
}

/// What a node's backward gives: a gradient per edge, `None` where none is computed.
pub type EdgeGrads = Result<Vec<Option<Tensor>>>;

pub trait Node: Send + Sync {
    /// PyTorch-style name, e.g. `MulBackward0`.
    fn name(&self) -> &str;
    fn base(&self) -> &NodeBase;
    /// Gradients for each edge from the gradients of the node's outputs: `grads[i]` for
    /// output i, `None` where none came (a node runs when at least one came).
    fn apply(&self, me: &Arc<dyn Node>, grads: &[Option<Tensor>], run: &Run) -> EdgeGrads;
    /// How many outputs the op has, each with its own gradient (`split`: one per piece).
    fn num_outputs(&self) -> usize {
        1
    }
    /// Drop saved tensors (after the node ran, unless the graph is retained).
    fn release_saved(&self) {}
    /// The leaf this node accumulates into, for leaf sinks.
    fn leaf(&self) -> Option<Weak<TensorImpl>> {
        None
    }
    /// The sink itself, for the engine to hand it a leaf's final gradient.
    fn as_accumulate(&self) -> Option<&AccumulateGrad> {
        None
    }
}
