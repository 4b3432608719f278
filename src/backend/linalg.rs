//! Dense decompositions for `gradstream.linalg`: LU, Cholesky, QR, SVD, symmetric
//! eigendecomposition and triangular solves of a batch of matrices `(*, m, n)`.
//!
//! Inputs are f32 or f64 (the op has checked shapes and dtypes); outputs keep the input's
//! dtype and batch dims. Where LAPACK reports an `info` per matrix (a zero pivot, a minor
//! that is not positive-definite) the kernel returns it, one entry per matrix, 0 for
//! success, so the op can raise PyTorch's LinAlgError or hand it back (`*_ex`); the op
//! reads it back to the host only to raise.

use candle_core::Tensor;

use super::cpu::Cpu;
use super::on_host::on_host;
use crate::error::Result;

/// A factorisation and its per-matrix LAPACK-style `info`: an int32 tensor of the batch
/// dims, on the input's device.
pub type WithInfo<T> = (T, Tensor);

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
        on_host(WHY, &[a], |h| Cpu.lu_factor(name, &h[0]))
    }
    /// `A⁻¹ B` (or `A⁻ᵀ B` when `transpose`) from `lu_factor`'s `LU` and `pivots`, `B`
    /// `(*, n, k)` with the same batch dims.
    fn lu_solve(
        &self,
        name: &'static str,
        lu: &Tensor,
        pivots: &Tensor,
        b: &Tensor,
        transpose: bool,
    ) -> Result<Tensor> {
        on_host(WHY, &[lu, pivots, b], |h| {
            Cpu.lu_solve(name, &h[0], &h[1], &h[2], transpose)
        })
    }
    /// `(sign, log|det|)` of each square matrix, from its LU factorisation.
    fn slogdet(&self, name: &'static str, a: &Tensor) -> Result<(Tensor, Tensor)> {
        on_host(WHY, &[a], |h| Cpu.slogdet(name, &h[0]))
    }
    /// The lower (or upper) Cholesky factor; `info` is the order of the first leading minor
    /// that is not positive-definite.
    fn cholesky(&self, name: &'static str, a: &Tensor, upper: bool) -> Result<WithInfo<Tensor>> {
        on_host(WHY, &[a], |h| Cpu.cholesky(name, &h[0], upper))
    }
    /// `(Q, R)`; with `QrMode::R`, Q is an empty `(0,)` tensor.
    fn qr(&self, name: &'static str, a: &Tensor, mode: QrMode) -> Result<(Tensor, Tensor)> {
        on_host(WHY, &[a], |h| Cpu.qr(name, &h[0], mode))
    }
    /// `(U, S, Vh)` with singular values in descending order; without `vectors`, U and Vh
    /// are empty `(0,)` tensors.
    fn svd(
        &self,
        name: &'static str,
        a: &Tensor,
        full_matrices: bool,
        vectors: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        on_host(WHY, &[a], |h| Cpu.svd(name, &h[0], full_matrices, vectors))
    }
    /// Eigenvalues in ascending order and eigenvectors (columns) of symmetric matrices, read
    /// from their lower (or upper) triangle; without `vectors`, the eigenvectors are an
    /// empty `(0,)` tensor.
    fn eigh(
        &self,
        name: &'static str,
        a: &Tensor,
        upper: bool,
        vectors: bool,
    ) -> Result<(Tensor, Tensor)> {
        on_host(WHY, &[a], |h| Cpu.eigh(name, &h[0], upper, vectors))
    }
    /// `A⁻¹ B` for triangular `A` `(*, n, n)` (its other triangle is ignored) and `B`
    /// `(*, n, k)` with the same batch dims.
    fn solve_triangular(
        &self,
        name: &'static str,
        a: &Tensor,
        b: &Tensor,
        upper: bool,
        unitriangular: bool,
    ) -> Result<Tensor> {
        on_host(WHY, &[a, b], |h| {
            Cpu.solve_triangular(name, &h[0], &h[1], upper, unitriangular)
        })
    }
}

/// The dense decompositions run on the host on every device but the CPU: gradstream links
/// no GPU linear-algebra library.
const WHY: &str = "linalg runs on the host";
