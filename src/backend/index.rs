//! Advanced indexing: read the elements an `IndexPlan` names out of any strided layout,
//! or write/accumulate into them in place. candle's `index_select` covers one index
//! tensor on one dim only, so there is no default.

use std::sync::Arc;

use candle_core::Tensor;

use super::no_fallback;
use crate::error::Result;
use crate::ops::index::IndexPlan;

pub trait IndexOps {
    no_fallback! {
        /// A new dense tensor of `plan.out_dims()` read from `x` (any layout).
        fn take(&self, name: &'static str, x: &Tensor, plan: &Arc<IndexPlan>)
            -> Result<Tensor> = name, x;
        /// Write (or add, with `accumulate`) `src`, shaped like the indexing result, into
        /// the elements of `dst` that `plan` names; repeated positions accumulate one by one.
        fn put(&self, name: &'static str, dst: &Tensor, src: &Tensor, plan: &Arc<IndexPlan>,
            accumulate: bool) -> Result<()> = name, dst;
    }
}
