//! Where two gradients for the same tensor meet: one rule for pending gradients, `.grad`
//! of leaves and of tensors that retain their gradient.

use crate::error::Result;
use crate::ops;
use crate::tensor::Tensor;

/// `acc + new`. In place into `acc` only when nothing else holds its buffer (the caller
/// gives up its own handle) and the sum is not differentiated (`create_graph` off); else
/// a new tensor, so no other holder ever sees the sum.
pub fn add_grads(acc: Tensor, new: &Tensor, create_graph: bool) -> Result<Tensor> {
    if !create_graph && acc.is_uniquely_owned() && ops::inplace::can_add_into(&acc, new) {
        ops::inplace::add_into(&acc, new)?;
        Ok(acc)
    } else {
        ops::binary::add(&acc, new)
    }
}
