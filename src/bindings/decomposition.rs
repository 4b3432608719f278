//! `gradstream.linalg`'s decompositions and solves (`_linalg_*` in `_core`; the Python
//! module `gradstream.linalg` gives them PyTorch's names and named-tuple results), and
//! `LinAlgError`. Argument parsing only; the ops are in `ops::decomposition`, run with the
//! interpreter released.

use pyo3::prelude::*;

use crate::bindings::detached;
use crate::bindings::op::functions;
use crate::bindings::part;
use crate::error::LinAlgError;
use crate::ops::decomposition::{self as dec, spectral};
use crate::tensor::Tensor;

type Two = (Tensor, Tensor);
type Three = (Tensor, Tensor, Tensor);

functions! { mod functions;
    /// `linalg.inv_ex(A)`: `(inverse, info)`.
    fn _linalg_inv_ex["linalg.inv_ex"](py: Python<'_>, A: Tensor) -> Two {
        detached(py, || dec::inv_ex(&A))
    }
    /// `linalg.inv(A)`: raises LinAlgError for a singular matrix.
    fn _linalg_inv["linalg.inv"](py: Python<'_>, A: Tensor) -> Tensor {
        detached(py, || dec::inv(&A))
    }
    /// `linalg.solve_ex(A, B, *, left=True)`: `(X, info)`.
    fn _linalg_solve_ex["linalg.solve_ex"](py: Python<'_>, A: Tensor, B: Tensor;
        left: bool = true) -> Two {
        detached(py, || dec::solve_ex(&A, &B, left))
    }
    /// `linalg.solve(A, B, *, left=True)`.
    fn _linalg_solve["linalg.solve"](py: Python<'_>, A: Tensor, B: Tensor;
        left: bool = true) -> Tensor {
        detached(py, || dec::solve(&A, &B, left))
    }
    /// `linalg.det(A)`.
    fn _linalg_det["linalg.det"](py: Python<'_>, A: Tensor) -> Tensor {
        detached(py, || dec::det(&A))
    }
    /// `linalg.slogdet(A)`: `(sign, logabsdet)`.
    fn _linalg_slogdet["linalg.slogdet"](py: Python<'_>, A: Tensor) -> Two {
        detached(py, || dec::slogdet(&A))
    }
    /// `linalg.cholesky_ex(A, *, upper=False)`: `(L, info)`.
    fn _linalg_cholesky_ex["linalg.cholesky_ex"](py: Python<'_>, A: Tensor;
        upper: bool = false) -> Two {
        detached(py, || dec::cholesky_ex(&A, upper))
    }
    /// `linalg.cholesky(A, *, upper=False)`.
    fn _linalg_cholesky["linalg.cholesky"](py: Python<'_>, A: Tensor;
        upper: bool = false) -> Tensor {
        detached(py, || dec::cholesky(&A, upper))
    }
    /// `linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False)`.
    fn _linalg_solve_triangular["linalg.solve_triangular"](py: Python<'_>, A: Tensor, B: Tensor;
        upper: bool, left: bool = true, unitriangular: bool = false) -> Tensor {
        detached(py, || dec::solve_triangular(&A, &B, upper, left, unitriangular))
    }
    /// `linalg.lu_factor_ex(A)`: `(LU, pivots, info)`.
    fn _linalg_lu_factor_ex["linalg.lu_factor_ex"](py: Python<'_>, A: Tensor) -> Three {
        detached(py, || dec::lu_factor_ex(&A))
    }
    /// `linalg.lu_factor(A)`: `(LU, pivots)`; raises for an exactly singular U.
    fn _linalg_lu_factor["linalg.lu_factor"](py: Python<'_>, A: Tensor) -> Two {
        detached(py, || dec::lu_factor(&A))
    }
    /// `linalg.lu_solve(LU, pivots, B, *, left=True, adjoint=False)`.
    fn _linalg_lu_solve["linalg.lu_solve"](py: Python<'_>, LU: Tensor, pivots: Tensor, B: Tensor;
        left: bool = true, adjoint: bool = false) -> Tensor {
        detached(py, || dec::lu_solve(&LU, &pivots, &B, left, adjoint))
    }
    /// `linalg.qr(A, mode='reduced')`: `(Q, R)`.
    fn _linalg_qr["linalg.qr"](py: Python<'_>, A: Tensor, mode: Str = "reduced") -> Two {
        detached(py, || spectral::qr(&A, mode))
    }
    /// `linalg.svd(A, full_matrices=True)`: `(U, S, Vh)`.
    fn _linalg_svd["linalg.svd"](py: Python<'_>, A: Tensor, full_matrices: bool = true) -> Three {
        detached(py, || spectral::svd(&A, full_matrices))
    }
    /// `linalg.svdvals(A)`.
    fn _linalg_svdvals["linalg.svdvals"](py: Python<'_>, A: Tensor) -> Tensor {
        detached(py, || spectral::svdvals(&A))
    }
    /// `linalg.eigh(A, UPLO='L')`: `(eigenvalues, eigenvectors)`.
    fn _linalg_eigh["linalg.eigh"](py: Python<'_>, A: Tensor, uplo: Str = "L") -> Two {
        detached(py, || spectral::eigh(&A, uplo))
    }
    /// `linalg.eigvalsh(A, UPLO='L')`.
    fn _linalg_eigvalsh["linalg.eigvalsh"](py: Python<'_>, A: Tensor, uplo: Str = "L") -> Tensor {
        detached(py, || spectral::eigvalsh(&A, uplo))
    }
}

part!(|m| m.add("LinAlgError", m.py().get_type::<LinAlgError>()));
