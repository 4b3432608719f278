//! The sink of a leaf tensor: where its gradient ends up.

use std::sync::{Arc, Weak};

use crate::autograd::node::{Node, NodeBase};
use crate::error::Result;
use crate::tensor::{Tensor, TensorImpl};

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
}

impl Node for AccumulateGrad {
    fn name(&self) -> &str {
        "AccumulateGrad"
    }
    fn base(&self) -> &NodeBase {
        &self.base
    }
    fn apply(
        &self,
        _me: &Arc<dyn Node>,
        _grad: &Tensor,
        _needs: &[bool],
    ) -> Result<Vec<Option<Tensor>>> {
        // The engine runs sinks itself (hooks, accumulation, consumers).
        Ok(Vec::new())
    }
    fn leaf(&self) -> Option<Weak<TensorImpl>> {
        Some(self.leaf.clone())
    }
}
