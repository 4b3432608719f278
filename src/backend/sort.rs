//! Sorting and searching: a stable argsort of independent lines, a lexicographic argsort
//! of rows, the runs of equal consecutive rows, and a binary search of values in sorted
//! lines. candle's `arg_sort_last_dim` is not stable, returns u32, and on CUDA only sorts
//! lines that fit one block; it has no search. So the default runs the CPU kernels on the
//! host (`on_host`): a device round trip, as PyTorch's sort-based ops wait for the device.
//!
//! Every method takes contiguous tensors in a compute dtype (f32, f64 or i64). Order is
//! PyTorch's: NaN is larger than every number (and equal to NaN), `-0.0 == 0.0`, and equal
//! elements keep their order. Equality of rows (for runs) is `==`, so NaN never repeats.

use candle_core::Tensor;

use super::cpu::Cpu;
use super::on_host::on_host;
use crate::error::Result;

pub trait SortOps {
    /// The stable sorting permutation of each row of `x` (`rows × n`): int64 `rows × n`,
    /// row `r`'s `j`-th entry the position in row `r` of its `j`-th smallest (largest with
    /// `descending`) element.
    fn argsort(&self, x: &Tensor, descending: bool) -> Result<Tensor> {
        on_host("sort runs on the host", &[x], |h| {
            Cpu.argsort(&h[0], descending)
        })
    }
    /// The stable permutation (int64, `rows`) that orders the rows of `x` (`rows × m`)
    /// lexicographically.
    fn argsort_rows(&self, x: &Tensor) -> Result<Tensor> {
        on_host("unique runs on the host", &[x], |h| Cpu.argsort_rows(&h[0]))
    }
    /// For each row of `x` (`rows × m`), the number (int64, from 0) of the run of equal
    /// consecutive rows it belongs to.
    fn run_ids(&self, x: &Tensor) -> Result<Tensor> {
        on_host("unique runs on the host", &[x], |h| Cpu.run_ids(&h[0]))
    }
    /// For each `values[r][j]` (`rows × n`), the insertion point (int64) in the sorted
    /// line `seq[r]` (`rows × m`, or `1 × m` shared by every row): the first position
    /// whose element is not less than the value (greater than it, with `right`).
    fn search(&self, seq: &Tensor, values: &Tensor, right: bool) -> Result<Tensor> {
        on_host("searchsorted runs on the host", &[seq, values], |h| {
            Cpu.search(&h[0], &h[1], right)
        })
    }
}
