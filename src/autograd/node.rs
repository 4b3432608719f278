//! A node of the backward graph: one per recorded op, with edges only to the inputs
//! that need a gradient (pruning starts at record time).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::Mutex;

use crate::error::Result;
use crate::tensor::{GradHook, Tensor, TensorImpl};

/// Where a gradient goes: the node that produced a tensor, or a leaf's sink.
/// Every gradstream op has one output, so a node is its own input slot.
#[derive(Clone)]
pub struct Edge {
    pub node: Arc<dyn Node>,
}

impl Edge {
    pub fn key(&self) -> usize {
        node_key(&self.node)
    }
}

pub fn node_key(node: &Arc<dyn Node>) -> usize {
    Arc::as_ptr(node) as *const () as usize
}

static SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// What every node has: its creation order, its edges, and the hooks on its output.
pub struct NodeBase {
    pub sequence_nr: u64,
    pub edges: Vec<Option<Edge>>,
    /// `register_hook` on the node's output tensor.
    pub pre_hooks: Mutex<Vec<(u64, GradHook)>>,
    /// The output tensor, when it called `retain_grad()`.
    retained: Mutex<Option<Weak<TensorImpl>>>,
}

impl NodeBase {
    pub fn new(edges: Vec<Option<Edge>>) -> Self {
        NodeBase {
            sequence_nr: SEQUENCE.fetch_add(1, Ordering::Relaxed),
            edges,
            pre_hooks: Mutex::new(Vec::new()),
            retained: Mutex::new(None),
        }
    }

    /// Leaf sinks run the moment they are ready: highest priority.
    pub fn sink() -> Self {
        NodeBase {
            sequence_nr: u64::MAX,
            edges: Vec::new(),
            pre_hooks: Mutex::new(Vec::new()),
            retained: Mutex::new(None),
        }
    }

    pub fn set_retained(&self, t: Weak<TensorImpl>) {
        *self.retained.lock() = Some(t);
    }

    pub fn retained(&self) -> Option<Tensor> {
        self.retained
            .lock()
            .as_ref()
            .and_then(Weak::upgrade)
            .map(Tensor)
    }

    pub fn run_pre_hooks(&self, mut grad: Tensor) -> Result<Tensor> {
        let hooks: Vec<GradHook> = self
            .pre_hooks
            .lock()
            .iter()
            .map(|(_, h)| h.clone())
            .collect();
        for h in hooks {
            if let Some(g) = h(&grad)? {
                grad = g;
            }
        }
        Ok(grad)
    }
}

pub trait Node: Send + Sync {
    /// PyTorch-style name, e.g. `MulBackward0`.
    fn name(&self) -> &str;
    fn base(&self) -> &NodeBase;
    /// Gradients for each edge from the gradient of the node's output. `needs[i]`: the
    /// engine will use edge i's gradient in this backward (it leads to a wanted input);
    /// the others are not computed.
    fn apply(
        &self,
        me: &Arc<dyn Node>,
        grad: &Tensor,
        needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>>;
    /// Drop saved tensors (after the node ran, unless the graph is retained).
    fn release_saved(&self) {}
    /// The leaf this node accumulates into, for leaf sinks.
    fn leaf(&self) -> Option<Weak<TensorImpl>> {
        None
    }
}
