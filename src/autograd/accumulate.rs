//! The sink of a leaf tensor: where its gradient ends up, the moment it is final.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::autograd::grad_sum::add_grads;
use crate::autograd::node::{run_hooks, EdgeGrads, Node, NodeBase, Run};
use crate::error::Result;
use crate::ops;
use crate::tensor::{Tensor, TensorImpl};

/// Called for each leaf whose gradient is final, instead of storing `.grad`.
pub type GradConsumer<'a> = &'a (dyn Fn(&Tensor, &Tensor) -> Result<()> + Sync);

/// Holds its leaf weakly: a graph never keeps a parameter alive, and no cycle forms.
pub struct AccumulateGrad {
    base: NodeBase,
    leaf: Weak<TensorImpl>,
}

impl AccumulateGrad {
    pub fn new(leaf: Weak<TensorImpl>) -> Self {
        AccumulateGrad {
            base: NodeBase::sink(),
            leaf,
        }
    }

    /// Accepting a gradient has effects beyond `.grad`: a consumer takes it, or the leaf
    /// has post-accumulate hooks (an in-backward optimizer's step).
    pub fn has_effects(&self, consumer: Option<GradConsumer>) -> bool {
        consumer.is_some()
            || self
                .leaf
                .upgrade()
                .is_some_and(|l| !l.meta.lock().post_accumulate_hooks.is_empty())
    }

    /// The leaf's gradient is final: its hooks (`register_hook`), then `.grad` (or the
    /// consumer, which gets the gradient instead), then the post-accumulate hooks, which
    /// may take the gradient away (`set_to_none`).
    pub fn accept(
        &self,
        grad: Tensor,
        consumer: Option<GradConsumer>,
        create_graph: bool,
    ) -> Result<()> {
        let Some(leaf) = self.leaf.upgrade().map(Tensor) else {
            return Ok(());
        };
        // As PyTorch's engine does (validate_outputs), a gradient takes its leaf's dtype: a
        // mixed-precision op (autocast, batch norm on bfloat16 input) may compute it in another.
        let grad = if grad.dtype() != leaf.dtype()
            && grad.dtype().is_floating_point()
            && leaf.dtype().is_floating_point()
        {
            ops::convert::to_dtype(&grad, leaf.dtype())?
        } else {
            grad
        };
        let hooks = handles(&leaf.0.meta.lock().grad_hooks);
        let grad = run_hooks(&hooks, grad)?;
        if let Some(consumer) = consumer {
            return consumer(&leaf, &grad);
        }
        let guard = leaf_lock(&leaf);
        let new_grad = match leaf.take_grad() {
            None => first_grad(grad, create_graph)?,
            // `.grad` belongs to its leaf (the engine never stores a shared buffer there), so
            // it is summed in place even while the user holds it, as PyTorch does.
            Some(old) if !create_graph && ops::inplace::can_add_into(&old, &grad) => {
                ops::inplace::add_into(&old, &grad)?;
                old
            }
            Some(old) => add_grads(old, &grad, create_graph)?,
        };
        leaf.set_grad(Some(new_grad))?;
        drop(guard);
        let post = handles(&leaf.0.meta.lock().post_accumulate_hooks);
        for h in post {
            h(&leaf)?;
        }
        Ok(())
    }
}

/// The lock of a leaf's `.grad` (one of a few, by address): two backward passes on other
/// threads that reach the same leaf sum into it one after the other, never both from the
/// same old value. Held over Rust work only, never while Python runs.
fn leaf_lock(leaf: &Tensor) -> MutexGuard<'static, ()> {
    const STRIPES: usize = 64;
    static LOCKS: [Mutex<()>; STRIPES] = [const { Mutex::new(()) }; STRIPES];
    let addr = Arc::as_ptr(&leaf.0) as usize;
    LOCKS[(addr >> 6) % STRIPES]
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The hooks of a list of (hook id, hook), taken out so that none runs under the lock.
fn handles<H: Clone>(hooks: &[(u64, H)]) -> Vec<H> {
    hooks.iter().map(|(_, h)| h.clone()).collect()
}

/// The first gradient becomes `.grad` without a copy when nothing else holds it and it is
/// dense; under `create_graph` it is kept as is, with its history.
fn first_grad(grad: Tensor, create_graph: bool) -> Result<Tensor> {
    if create_graph || (grad.is_uniquely_owned() && grad.data().is_contiguous()) {
        Ok(grad)
    } else {
        ops::convert::clone(&grad)
    }
}

impl Node for AccumulateGrad {
    fn name(&self) -> &str {
        "AccumulateGrad"
    }
    fn base(&self) -> &NodeBase {
        &self.base
    }
    fn apply(&self, _me: &Arc<dyn Node>, _grads: &[Option<Tensor>], _run: &Run) -> EdgeGrads {
        // A sink has no edges; the engine hands it the gradient through `accept`.
        Ok(Vec::new())
    }
    fn leaf(&self) -> Option<Weak<TensorImpl>> {
        Some(self.leaf.clone())
    }
    fn as_accumulate(&self) -> Option<&AccumulateGrad> {
        Some(self)
    }
}
