//! Matrix products: `a (*, m, k) @ b (*, k, n)` for operands with the same batch dims, in a
//! float dtype the device's GEMM has (the op casts bool-free integer and, on the CPU,
//! bfloat16 operands first) and `k > 0` (the op gives zeros for an empty sum).

use candle_core::Tensor;

use super::on;
use crate::error::{CandleContext, Result};

pub trait MatmulOps {
    /// The product as a new dense tensor `(*, m, n)`.
    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        candle_matmul(a, b)
    }
}

/// candle's `Tensor::matmul`, which takes dense row- or column-major matrices (CUDA's
/// cuBLAS call takes no padded rows) under at most one batch stride: other layouts are made
/// dense first, and batch dims beyond one flattened.
pub fn candle_matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let dense = |t: &Tensor| -> Result<Tensor> {
        let l = t.layout();
        let r = l.dims().len();
        let s = l.stride();
        let (rows, cols) = (l.dims()[r - 2], l.dims()[r - 1]);
        let row_major = (s[r - 1] == 1 || cols == 1) && (s[r - 2] == cols || rows == 1);
        let col_major = (s[r - 2] == 1 || rows == 1) && (s[r - 1] == rows || cols == 1);
        let inner_ok = row_major || col_major;
        let batch_ok = (0..r - 2).all(|i| l.dims()[i] <= 1 || s[i] != 0);
        if inner_ok && batch_ok {
            Ok(t.clone())
        } else {
            on(t).dense_copy("matmul", t)
        }
    };
    let r = a.rank();
    if a.elem_count() == 0 || b.elem_count() == 0 {
        // an empty product: candle would ask its device for an empty buffer
        let mut dims = a.dims()[..r - 1].to_vec();
        dims.push(b.dims()[r - 1]);
        return crate::device::zeros(dims, a.dtype(), a.device()).op("matmul");
    }
    if r > 3 {
        // One batch dim with one stride (two when they collapse): a view when the batch dims
        // collapse, else a copy.
        let batch: usize = a.dims()[..r - 2].iter().product();
        let flat = |t: &Tensor| {
            let d = t.dims();
            t.reshape((batch, d[r - 2], d[r - 1])).op("matmul")
        };
        let out = candle_matmul(&flat(a)?, &flat(b)?)?;
        let mut dims = a.dims()[..r - 1].to_vec();
        dims.push(b.dims()[r - 1]);
        return out.reshape(dims).op("matmul");
    }
    dense(a)?.matmul(&dense(b)?).op("matmul")
}
