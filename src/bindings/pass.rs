//! Which backward pass stepped a parameter: what `Optimizer.stepped_in_backward()` reads.

use pyo3::prelude::*;

use crate::autograd::pass;
use crate::bindings::op::functions;
use crate::bindings::optim::PyParamState;

functions! { mod functions;
    /// `_backward_pass()`: the number of the backward pass this thread runs or ran last (0
    /// before any). A backward started inside another belongs to the outer pass.
    fn _backward_pass["_backward_pass"]() -> u64 { Ok(pass::latest()) }
    /// `_stepped_in_pass(state)`: the backward pass of the parameter's last in-backward step,
    /// or None when the in-backward mode never stepped it.
    fn _stepped_in_pass["_stepped_in_pass"](state: PyParamState) -> Option<u64> {
        Ok(state.s.lock().stepped_in_pass)
    }
}
