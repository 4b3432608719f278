//! Advanced indexing: read the elements an `IndexPlan` names out of any strided layout,
//! or write/accumulate into them in place. candle's `index_select` covers one index
//! tensor on one dim only, so there is no default.

use std::sync::Arc;

use candle_core::Tensor;

use super::not_implemented;
use crate::error::Result;
use crate::ops::index::IndexPlan;

pub trait IndexOps {
    /// A new dense tensor of `plan.out_dims()` read from `x` (any layout).
    fn take(&self, name: &'static str, x: &Tensor, _plan: &Arc<IndexPlan>) -> Result<Tensor> {
        Err(not_implemented(name, x.device()))
    }

    /// Write (or add, with `accumulate`) `src`, shaped like the indexing result, into
    /// the elements of `dst` that `plan` names; repeated positions accumulate one by one.
    fn put(
        &self,
        name: &'static str,
        dst: &Tensor,
        _src: &Tensor,
        _plan: &Arc<IndexPlan>,
        _accumulate: bool,
    ) -> Result<()> {
        Err(not_implemented(name, dst.device()))
    }
}
