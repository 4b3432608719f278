//! `gradstream.linalg`'s decompositions and solves (`_linalg_*` in `_core`; the Python
//! module `gradstream.linalg` gives them PyTorch's names and named-tuple results), and
//! `LinAlgError`. Argument parsing only; the ops are in `ops::decomposition`, run with the
//! interpreter released.

use pyo3::prelude::*;

use crate::bindings::op::functions;
use crate::bindings::part;
use crate::bindings::{detached, Obj};
use crate::error::LinAlgError;
use crate::ops::decomposition::{self as dec, spectral};
use crate::tensor::Tensor;

type Two = (Tensor, Tensor);
type Three = (Tensor, Tensor, Tensor);

functions! { mod functions;
    /// `linalg.inv_ex(A)`: `(inverse, info)`.
    fn _linalg_inv_ex["linalg.inv_ex"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Two {
        detached(py, || dec::inv_ex(&a))
    }
    /// `linalg.inv(A)`: raises LinAlgError for a singular matrix.
    fn _linalg_inv["linalg.inv"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Tensor {
        detached(py, || dec::inv(&a))
    }
    /// `linalg.solve_ex(A, B, *, left=True)`: `(X, info)`.
    fn _linalg_solve_ex["linalg.solve_ex"](py: Python<'_>, a as "A": &Obj<'_>,
        b as "B": &Obj<'_>, left: bool) [a, b, *, left=true] -> Two {
        detached(py, || dec::solve_ex(&a, &b, left))
    }
    /// `linalg.solve(A, B, *, left=True)`.
    fn _linalg_solve["linalg.solve"](py: Python<'_>, a as "A": &Obj<'_>, b as "B": &Obj<'_>,
        left: bool) [a, b, *, left=true] -> Tensor {
        detached(py, || dec::solve(&a, &b, left))
    }
    /// `linalg.det(A)`.
    fn _linalg_det["linalg.det"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Tensor {
        detached(py, || dec::det(&a))
    }
    /// `linalg.slogdet(A)`: `(sign, logabsdet)`.
    fn _linalg_slogdet["linalg.slogdet"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Two {
        detached(py, || dec::slogdet(&a))
    }
    /// `linalg.cholesky_ex(A, *, upper=False)`: `(L, info)`.
    fn _linalg_cholesky_ex["linalg.cholesky_ex"](py: Python<'_>, a as "A": &Obj<'_>, upper: bool)
        [a, *, upper=false] -> Two {
        detached(py, || dec::cholesky_ex(&a, upper))
    }
    /// `linalg.cholesky(A, *, upper=False)`.
    fn _linalg_cholesky["linalg.cholesky"](py: Python<'_>, a as "A": &Obj<'_>, upper: bool)
        [a, *, upper=false] -> Tensor {
        detached(py, || dec::cholesky(&a, upper))
    }
    /// `linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False)`.
    fn _linalg_solve_triangular["linalg.solve_triangular"](py: Python<'_>, a as "A": &Obj<'_>,
        b as "B": &Obj<'_>, upper: bool, left: bool, unitriangular: bool)
        [a, b, *, upper, left=true, unitriangular=false] -> Tensor {
        detached(py, || dec::solve_triangular(&a, &b, upper, left, unitriangular))
    }
    /// `linalg.lu_factor_ex(A)`: `(LU, pivots, info)`.
    fn _linalg_lu_factor_ex["linalg.lu_factor_ex"](py: Python<'_>, a as "A": &Obj<'_>)
        [a] -> Three {
        detached(py, || dec::lu_factor_ex(&a))
    }
    /// `linalg.lu_factor(A)`: `(LU, pivots)`; raises for an exactly singular U.
    fn _linalg_lu_factor["linalg.lu_factor"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Two {
        detached(py, || dec::lu_factor(&a))
    }
    /// `linalg.lu_solve(LU, pivots, B, *, left=True, adjoint=False)`.
    fn _linalg_lu_solve["linalg.lu_solve"](py: Python<'_>, lu as "LU": &Obj<'_>,
        pivots as "pivots": &Obj<'_>, b as "B": &Obj<'_>, left: bool, adjoint: bool)
        [lu, pivots, b, *, left=true, adjoint=false] -> Tensor {
        detached(py, || dec::lu_solve(&lu, &pivots, &b, left, adjoint))
    }
    /// `linalg.qr(A, mode='reduced')`: `(Q, R)`.
    fn _linalg_qr["linalg.qr"](py: Python<'_>, a as "A": &Obj<'_>, mode: &str)
        [a, mode="reduced"] -> Two {
        detached(py, || spectral::qr(&a, mode))
    }
    /// `linalg.svd(A, full_matrices=True)`: `(U, S, Vh)`.
    fn _linalg_svd["linalg.svd"](py: Python<'_>, a as "A": &Obj<'_>, full_matrices: bool)
        [a, full_matrices=true] -> Three {
        detached(py, || spectral::svd(&a, full_matrices))
    }
    /// `linalg.svdvals(A)`.
    fn _linalg_svdvals["linalg.svdvals"](py: Python<'_>, a as "A": &Obj<'_>) [a] -> Tensor {
        detached(py, || spectral::svdvals(&a))
    }
    /// `linalg.eigh(A, UPLO='L')`: `(eigenvalues, eigenvectors)`.
    fn _linalg_eigh["linalg.eigh"](py: Python<'_>, a as "A": &Obj<'_>, uplo: &str)
        [a, uplo="L"] -> Two {
        detached(py, || spectral::eigh(&a, uplo))
    }
    /// `linalg.eigvalsh(A, UPLO='L')`.
    fn _linalg_eigvalsh["linalg.eigvalsh"](py: Python<'_>, a as "A": &Obj<'_>, uplo: &str)
        [a, uplo="L"] -> Tensor {
        detached(py, || spectral::eigvalsh(&a, uplo))
    }
}

part!(|m| m.add("LinAlgError", m.py().get_type::<LinAlgError>()));
