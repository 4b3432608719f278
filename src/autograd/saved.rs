//! Tensors a node saves for its backward, with the version check that catches a saved
//! tensor modified in place.

use std::sync::Arc;

use crate::autograd::grad_mode;
use crate::autograd::node::Node;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::tensor::{shape_str, Tensor};

pub struct SavedTensor {
    /// An alias of the saved tensor without history (shares buffer and version counter).
    data: Tensor,
    /// The original, when it is an input with history (needed for double backward).
    original: Option<Tensor>,
    is_output: bool,
    version: u64,
}

impl SavedTensor {
    /// Save an input of the op.
    pub fn input(t: &Tensor) -> SavedTensor {
        let data = t.detach();
        data.set_role(Role::Activation, true);
        SavedTensor {
            original: t.requires_grad().then(|| t.clone()),
            data,
            is_output: false,
            version: t.version(),
        }
    }

    /// Save the op's own output. It is stored without its history (which would be a cycle)
    /// and reconnected to the node when unpacked under `create_graph`.
    pub fn output(t: &Tensor) -> SavedTensor {
        let data = t.detach();
        data.set_role(Role::Activation, true);
        SavedTensor {
            original: None,
            data,
            is_output: true,
            version: t.version(),
        }
    }

    pub fn unpack(&self, node: &Arc<dyn Node>) -> Result<Tensor> {
        if self.data.version() != self.version {
            let dims = self.data.dims();
            return Err(Error::autograd(format!(
                "one of the variables needed for gradient computation has been modified by an \
                 inplace operation: [{} {}], which is {} of {}, is at version {}; expected \
                 version {} instead.",
                self.data.dtype().name(),
                shape_str(&dims),
                if self.is_output {
                    "output 0"
                } else {
                    "an input"
                },
                node.name(),
                self.data.version(),
                self.version
            )));
        }
        if grad_mode::is_enabled() {
            // create_graph: hand back tensors with their history so the backward is recorded.
            if let Some(o) = &self.original {
                return Ok(o.clone());
            }
            if self.is_output {
                let t = self.data.detach();
                t.set_grad_fn(Some(node.clone()));
                return Ok(t);
            }
        }
        Ok(self.data.clone())
    }
}

impl Drop for SavedTensor {
    fn drop(&mut self) {
        self.data.set_role(Role::Activation, false);
    }
}
