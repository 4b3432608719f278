//! Dense decompositions for `gradstream.linalg`: LU, Cholesky, QR, SVD, symmetric
//! eigendecomposition and triangular solves of a batch of matrices `(*, m, n)`.
//!
//! Inputs are f32 or f64 (the op has checked shapes and dtypes); outputs keep the input's
//! dtype and batch dims. Where LAPACK reports an `info` per matrix (a zero pivot, a minor
//! that is not positive-definite) the kernel returns it, one entry per matrix, 0 for
//! success, so the op can raise PyTorch's LinAlgError or hand it back (`*_ex`).

use candle_core::Tensor;

use super::not_implemented;
use crate::error::Result;

/// A factorisation and its per-matrix LAPACK-style `info`.
pub type WithInfo<T> = (T, Vec<i32>);

/// What `qr` computes: PyTorch's modes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QrMode {
    Reduced,
    Complete,
    R,
}

pub trait LinalgOps {
    /// `A = P L U` with partial pivoting: `LU` packed as LAPACK's getrf packs it (`(*, m, n)`),
    /// 1-based int32 `pivots` (`(*, min(m, n))`, sequential row swaps), and `info`: the
    /// 1-based index of the first exactly-zero diagonal element of U, 0 if none.
    fn lu_factor(&self, name: &'static str, a: &Tensor) -> Result<WithInfo<(Tensor, Tensor)>> {
        Err(not_implemented(name, a.device()))
    }

    /// `A⁻¹ B` (or `A⁻ᵀ B` when `transpose`) from `lu_factor`'s `LU` and `pivots`, `B`
    /// `(*, n, k)` with the same batch dims.
    fn lu_solve(
        &self,
        name: &'static str,
        lu: &Tensor,
        _pivots: &Tensor,
        _b: &Tensor,
        _transpose: bool,
    ) -> Result<Tensor> {
        Err(not_implemented(name, lu.device()))
    }

    /// `(sign, log|det|)` of each square matrix, from its LU factorisation.
    fn slogdet(&self, name: &'static str, a: &Tensor) -> Result<(Tensor, Tensor)> {
        Err(not_implemented(name, a.device()))
    }

    /// The lower (or upper) Cholesky factor; `info` is the order of the first leading minor
    /// that is not positive-definite.
    fn cholesky(&self, name: &'static str, a: &Tensor, _upper: bool) -> Result<WithInfo<Tensor>> {
        Err(not_implemented(name, a.device()))
    }

    /// `(Q, R)`; with `QrMode::R`, Q is an empty `(0,)` tensor.
    fn qr(&self, name: &'static str, a: &Tensor, _mode: QrMode) -> Result<(Tensor, Tensor)> {
        Err(not_implemented(name, a.device()))
    }

    /// `(U, S, Vh)` with singular values in descending order; without `vectors`, U and Vh
    /// are empty `(0,)` tensors.
    fn svd(
        &self,
        name: &'static str,
        a: &Tensor,
        _full_matrices: bool,
        _vectors: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        Err(not_implemented(name, a.device()))
    }

    /// Eigenvalues in ascending order and eigenvectors (columns) of symmetric matrices, read
    /// from their lower (or upper) triangle; without `vectors`, the eigenvectors are an
    /// empty `(0,)` tensor.
    fn eigh(
        &self,
        name: &'static str,
        a: &Tensor,
        _upper: bool,
        _vectors: bool,
    ) -> Result<(Tensor, Tensor)> {
        Err(not_implemented(name, a.device()))
    }

    /// `A⁻¹ B` for triangular `A` `(*, n, n)` (its other triangle is ignored) and `B`
    /// `(*, n, k)` with the same batch dims.
    fn solve_triangular(
        &self,
        name: &'static str,
        a: &Tensor,
        _b: &Tensor,
        _upper: bool,
        _unitriangular: bool,
    ) -> Result<Tensor> {
        Err(not_implemented(name, a.device()))
    }
}
