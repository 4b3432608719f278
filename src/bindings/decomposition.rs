//! `gradstream.linalg`'s decompositions and solves (`_linalg_*` in `_core`; the Python
//! module `gradstream.linalg` gives them PyTorch's names and named-tuple results), and
//! `LinAlgError`. Argument parsing only; the ops are in `ops::decomposition`.

use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::{add_functions, detached, Obj};
use crate::error::LinAlgError;
use crate::ops::decomposition::{self as dec, spectral};
use crate::tensor::Tensor;

/// `linalg.inv_ex(A)`: `(inverse, info)`.
#[pyfunction]
fn _linalg_inv_ex(py: Python<'_>, a: &Obj<'_>) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.inv_ex", || {
        let a = extract_tensor("linalg.inv_ex", "A", a)?;
        detached(py, || dec::inv_ex(&a))
    })
}

/// `linalg.inv(A)`: raises LinAlgError for a singular matrix.
#[pyfunction]
fn _linalg_inv(py: Python<'_>, a: &Obj<'_>) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.inv", || {
        let a = extract_tensor("linalg.inv", "A", a)?;
        detached(py, || dec::inv(&a))
    })
}

/// `linalg.solve_ex(A, B, *, left=True)`: `(X, info)`.
#[pyfunction]
#[pyo3(signature = (a, b, *, left=true))]
fn _linalg_solve_ex(
    py: Python<'_>,
    a: &Obj<'_>,
    b: &Obj<'_>,
    left: bool,
) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.solve_ex", || {
        let a = extract_tensor("linalg.solve_ex", "A", a)?;
        let b = extract_tensor("linalg.solve_ex", "B", b)?;
        detached(py, || dec::solve_ex(&a, &b, left))
    })
}

/// `linalg.solve(A, B, *, left=True)`.
#[pyfunction]
#[pyo3(signature = (a, b, *, left=true))]
fn _linalg_solve(py: Python<'_>, a: &Obj<'_>, b: &Obj<'_>, left: bool) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.solve", || {
        let a = extract_tensor("linalg.solve", "A", a)?;
        let b = extract_tensor("linalg.solve", "B", b)?;
        detached(py, || dec::solve(&a, &b, left))
    })
}

/// `linalg.det(A)`.
#[pyfunction]
fn _linalg_det(py: Python<'_>, a: &Obj<'_>) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.det", || {
        let a = extract_tensor("linalg.det", "A", a)?;
        detached(py, || dec::det(&a))
    })
}

/// `linalg.slogdet(A)`: `(sign, logabsdet)`.
#[pyfunction]
fn _linalg_slogdet(py: Python<'_>, a: &Obj<'_>) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.slogdet", || {
        let a = extract_tensor("linalg.slogdet", "A", a)?;
        detached(py, || dec::slogdet(&a))
    })
}

/// `linalg.cholesky_ex(A, *, upper=False)`: `(L, info)`.
#[pyfunction]
#[pyo3(signature = (a, *, upper=false))]
fn _linalg_cholesky_ex(py: Python<'_>, a: &Obj<'_>, upper: bool) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.cholesky_ex", || {
        let a = extract_tensor("linalg.cholesky_ex", "A", a)?;
        detached(py, || dec::cholesky_ex(&a, upper))
    })
}

/// `linalg.cholesky(A, *, upper=False)`.
#[pyfunction]
#[pyo3(signature = (a, *, upper=false))]
fn _linalg_cholesky(py: Python<'_>, a: &Obj<'_>, upper: bool) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.cholesky", || {
        let a = extract_tensor("linalg.cholesky", "A", a)?;
        detached(py, || dec::cholesky(&a, upper))
    })
}

/// `linalg.solve_triangular(A, B, *, upper, left=True, unitriangular=False)`.
#[pyfunction]
#[pyo3(signature = (a, b, *, upper, left=true, unitriangular=false))]
fn _linalg_solve_triangular(
    py: Python<'_>,
    a: &Obj<'_>,
    b: &Obj<'_>,
    upper: bool,
    left: bool,
    unitriangular: bool,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.solve_triangular", || {
        let a = extract_tensor("linalg.solve_triangular", "A", a)?;
        let b = extract_tensor("linalg.solve_triangular", "B", b)?;
        detached(py, || {
            dec::solve_triangular(&a, &b, upper, left, unitriangular)
        })
    })
}

/// `linalg.lu_factor_ex(A)`: `(LU, pivots, info)`.
#[pyfunction]
fn _linalg_lu_factor_ex(py: Python<'_>, a: &Obj<'_>) -> PyResult<(Tensor, Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.lu_factor_ex", || {
        let a = extract_tensor("linalg.lu_factor_ex", "A", a)?;
        detached(py, || dec::lu_factor_ex(&a))
    })
}

/// `linalg.lu_factor(A)`: `(LU, pivots)`; raises for an exactly singular U.
#[pyfunction]
fn _linalg_lu_factor(py: Python<'_>, a: &Obj<'_>) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.lu_factor", || {
        let a = extract_tensor("linalg.lu_factor", "A", a)?;
        detached(py, || dec::lu_factor(&a))
    })
}

/// `linalg.lu_solve(LU, pivots, B, *, left=True, adjoint=False)`.
#[pyfunction]
#[pyo3(signature = (lu, pivots, b, *, left=true, adjoint=false))]
fn _linalg_lu_solve(
    py: Python<'_>,
    lu: &Obj<'_>,
    pivots: &Obj<'_>,
    b: &Obj<'_>,
    left: bool,
    adjoint: bool,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.lu_solve", || {
        let lu = extract_tensor("linalg.lu_solve", "LU", lu)?;
        let p = extract_tensor("linalg.lu_solve", "pivots", pivots)?;
        let b = extract_tensor("linalg.lu_solve", "B", b)?;
        detached(py, || dec::lu_solve(&lu, &p, &b, left, adjoint))
    })
}

/// `linalg.qr(A, mode='reduced')`: `(Q, R)`.
#[pyfunction]
#[pyo3(signature = (a, mode="reduced"))]
fn _linalg_qr(py: Python<'_>, a: &Obj<'_>, mode: &str) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.qr", || {
        let a = extract_tensor("linalg.qr", "A", a)?;
        detached(py, || spectral::qr(&a, mode))
    })
}

/// `linalg.svd(A, full_matrices=True)`: `(U, S, Vh)`.
#[pyfunction]
#[pyo3(signature = (a, full_matrices=true))]
fn _linalg_svd(
    py: Python<'_>,
    a: &Obj<'_>,
    full_matrices: bool,
) -> PyResult<(Tensor, Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.svd", || {
        let a = extract_tensor("linalg.svd", "A", a)?;
        detached(py, || spectral::svd(&a, full_matrices))
    })
}

/// `linalg.svdvals(A)`.
#[pyfunction]
fn _linalg_svdvals(py: Python<'_>, a: &Obj<'_>) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.svdvals", || {
        let a = extract_tensor("linalg.svdvals", "A", a)?;
        detached(py, || spectral::svdvals(&a))
    })
}

/// `linalg.eigh(A, UPLO='L')`: `(eigenvalues, eigenvectors)`.
#[pyfunction]
#[pyo3(signature = (a, uplo="L"))]
fn _linalg_eigh(py: Python<'_>, a: &Obj<'_>, uplo: &str) -> PyResult<(Tensor, Tensor)> {
    crate::bindings::op::guarded("linalg.eigh", || {
        let a = extract_tensor("linalg.eigh", "A", a)?;
        detached(py, || spectral::eigh(&a, uplo))
    })
}

/// `linalg.eigvalsh(A, UPLO='L')`.
#[pyfunction]
#[pyo3(signature = (a, uplo="L"))]
fn _linalg_eigvalsh(py: Python<'_>, a: &Obj<'_>, uplo: &str) -> PyResult<Tensor> {
    crate::bindings::op::guarded("linalg.eigvalsh", || {
        let a = extract_tensor("linalg.eigvalsh", "A", a)?;
        detached(py, || spectral::eigvalsh(&a, uplo))
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("LinAlgError", m.py().get_type::<LinAlgError>())?;
    add_functions!(
        m,
        _linalg_inv_ex,
        _linalg_inv,
        _linalg_solve_ex,
        _linalg_solve,
        _linalg_det,
        _linalg_slogdet,
        _linalg_cholesky_ex,
        _linalg_cholesky,
        _linalg_solve_triangular,
        _linalg_lu_factor_ex,
        _linalg_lu_factor,
        _linalg_lu_solve,
        _linalg_qr,
        _linalg_svd,
        _linalg_svdvals,
        _linalg_eigh,
        _linalg_eigvalsh
    );
    Ok(())
}
