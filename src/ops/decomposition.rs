//! Decompositions and solves of `gradstream.linalg`: inv, solve, det/slogdet, cholesky,
//! solve_triangular, LU (here), and QR, SVD and eigh (`decomposition/spectral.rs`).
//!
//! Each op checks its input as PyTorch does (rank, squareness, dtype), runs the `LinalgOps`
//! kernel of the input's device, and records its backward written with gradstream ops
//! (inverses and triangular solves are themselves recorded ops), so double backward works.
//! Singular and non-positive-definite input raises `LinAlgError`; the `_ex` forms return
//! LAPACK's `info` (int32, one per matrix) instead.

pub mod spectral;

use crate::autograd::function::record;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{mul, mul_scalar};
use crate::ops::broadcast_shape;
use crate::ops::creation::eye;
use crate::ops::linalg::matmul;
use crate::ops::shape::{expand, reshape, transpose, tri, unsqueeze};
use crate::tensor::{shape_str, Tensor};

/// `x` with its last two dims swapped (a view).
pub(crate) fn mt(x: &Tensor) -> Result<Tensor> {
    let r = x.rank();
    transpose(x, r - 2, r - 1)
}

/// PyTorch's checks of a matrix argument: at least 2-D, float32/float64.
pub(crate) fn check_matrix(op: &str, what: &str, a: &Tensor) -> Result<()> {
    if a.rank() < 2 {
        return Err(Error::shape(format!(
            "{op}: The input tensor {what} must have at least 2 dimensions."
        )));
    }
    match a.dtype() {
        DType::Float32 | DType::Float64 => Ok(()),
        DType::Float16 | DType::BFloat16 => Err(Error::NotImplemented(format!(
            "{op}: not implemented for '{}' (shape {})",
            a.dtype().name(),
            shape_str(&a.dims())
        ))),
        other => Err(Error::dtype(format!(
            "{op}: Expected a floating point or complex tensor as input. Got {} (shape {})",
            other.name(),
            shape_str(&a.dims())
        ))),
    }
}

/// `check_matrix` plus squareness.
pub(crate) fn check_square(op: &str, what: &str, a: &Tensor) -> Result<usize> {
    check_matrix(op, what, a)?;
    let d = a.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    if m != n {
        return Err(Error::shape(format!(
            "{op}: {what} must be batches of square matrices, but they are {m} by {n} matrices"
        )));
    }
    Ok(n)
}

/// The batch dims of a matrix argument.
pub(crate) fn batch_of(a: &Tensor) -> Vec<usize> {
    let d = a.dims();
    d[..d.len() - 2].to_vec()
}

/// A kernel's result wrapped as a tensor of the input's dtype.
pub(crate) fn wrap(data: candle_core::Tensor, dtype: DType) -> Tensor {
    Tensor::new(data, dtype)
}

/// A kernel's `info` (int32, of the batch shape) as PyTorch's tensor.
pub(crate) fn info_tensor(info: candle_core::Tensor) -> Tensor {
    Tensor::new(info, DType::Int32)
}

/// The values of `info`, read back to raise LinAlgError.
fn info_values(info: &Tensor) -> Result<Vec<i32>> {
    info.to_vec::<i32>("linalg info")
}

/// PyTorch's LinAlgError for the first matrix whose `info` is not 0.
fn raise(op: &str, info: &[i32], batched: bool, what: impl Fn(i32) -> String) -> Result<()> {
    match info.iter().position(|&i| i != 0) {
        None => Ok(()),
        Some(b) if batched => Err(Error::linalg(format!(
            "{op}: (Batch element {b}): {}",
            what(info[b])
        ))),
        Some(b) => Err(Error::linalg(format!("{op}: {}", what(info[b])))),
    }
}

fn singular(i: i32) -> String {
    format!(
        "The diagonal element {i} is zero, the inversion could not be completed because the \
         input matrix is singular."
    )
}

fn not_pd(i: i32) -> String {
    format!(
        "The factorization could not be completed because the input is not positive-definite \
         (the leading minor of order {i} is not positive-definite)."
    )
}

/// Identity matrices of `a`'s shape and dtype (dense).
fn identity_like(a: &Tensor, n: usize) -> Result<Tensor> {
    let e = eye(n as i64, n as i64, a.dtype(), &a.device())?;
    let mut dims = batch_of(a);
    dims.extend([n, n]);
    expand(&e, &dims)
}

/// `(inverse, info)`: the inverse of each square matrix; recorded as `LinalgInvExBackward0`.
pub fn inv_ex(a: &Tensor) -> Result<(Tensor, Tensor)> {
    let n = check_square("linalg.inv", "A", a)?;
    let ad = a.contiguous_data()?;
    let be = backend::on(&ad);
    let ((lu, piv), info) = be.lu_factor("linalg.inv", &ad)?;
    let id = identity_like(a, n)?.contiguous_data()?;
    let out = wrap(be.lu_solve("linalg.inv", &lu, &piv, &id, false)?, a.dtype());
    record(
        "LinalgInvExBackward0",
        &out,
        &[a],
        || vec![SavedTensor::output(&out)],
        |ctx, g| {
            // d(A⁻¹) = -A⁻¹ dA A⁻¹, so gA = -A⁻ᵀ g A⁻ᵀ.
            let yt = mt(&ctx.saved[0])?;
            Ok(vec![Some(mul_scalar(
                &matmul(&matmul(&yt, g)?, &yt)?,
                -1.0,
            )?)])
        },
    );
    Ok((out, info_tensor(info)))
}

/// `inv`: `inv_ex` that raises LinAlgError for a singular matrix.
pub fn inv(a: &Tensor) -> Result<Tensor> {
    let (out, info) = inv_ex(a)?;
    check_info("linalg.inv", &info, a.rank() > 2, singular)?;
    Ok(out)
}

fn check_info(op: &str, info: &Tensor, batched: bool, what: fn(i32) -> String) -> Result<()> {
    let v = info_values(info)?;
    raise(op, &v, batched, what)
}

/// `A X = B` for square `A` and `B` with the same batch dims, both recorded.
fn solve_same_batch(a: &Tensor, b: &Tensor) -> Result<(Tensor, candle_core::Tensor)> {
    let ad = a.contiguous_data()?;
    let be = backend::on(&ad);
    let ((lu, piv), info) = be.lu_factor("linalg.solve", &ad)?;
    let x = wrap(
        be.lu_solve("linalg.solve", &lu, &piv, &b.contiguous_data()?, false)?,
        a.dtype(),
    );
    record(
        "LinalgSolveExBackward0",
        &x,
        &[a, b],
        || vec![SavedTensor::input(a), SavedTensor::output(&x)],
        |ctx, g| {
            let (a, x) = (&ctx.saved[0], &ctx.saved[1]);
            // gB = A⁻ᵀ g; gA = -gB Xᵀ.
            let (gb, _) = solve_same_batch(&mt(a)?, g)?;
            let ga = if ctx.needs(0) {
                Some(mul_scalar(&matmul(&gb, &mt(x)?)?, -1.0)?)
            } else {
                None
            };
            Ok(vec![ga, ctx.needs(1).then_some(gb)])
        },
    );
    Ok((x, info))
}

/// `(X, info)` with `A X = B` (`left`) or `X A = B`, PyTorch's broadcasting and its rule for
/// a vector `B` (`B.ndim == 1`, or `B.shape == A.shape[:-1]`).
pub fn solve_ex(a: &Tensor, b: &Tensor, left: bool) -> Result<(Tensor, Tensor)> {
    let op = "linalg.solve";
    let n = check_square(op, "A", a)?;
    check_same_dtype(op, a, b)?;
    if b.rank() == 0 {
        return Err(Error::shape(format!(
            "{op}: The input tensor B must have at least 1 dimension, but got a 0-d tensor \
             (A of shape {})",
            shape_str(&a.dims())
        )));
    }
    let (ad, bd) = (a.dims(), b.dims());
    let vector = bd.len() == 1 || (bd.len() + 1 == ad.len() && bd[..] == ad[..ad.len() - 1]);
    let b2 = if vector {
        unsqueeze(b, b.rank())?
    } else {
        b.clone()
    };
    let b2 = if left { b2 } else { mt(&b2)? };
    let bdims = b2.dims();
    if b2.rank() < 2 || bdims[bdims.len() - 2] != n {
        let (r, c) = match bdims.len() {
            0 => (0, 1),
            1 => (bdims[0], 1),
            k => (bdims[k - 2], bdims[k - 1]),
        };
        return Err(Error::shape(format!(
            "{op}: Incompatible shapes of A and B for the equation {} ({n}x{n} and {r}x{c})",
            if left { "AX = B" } else { "XA = B" }
        )));
    }
    let batch = broadcast_shape(op, &batch_of(a), &bdims[..bdims.len() - 2])?;
    let k = bdims[bdims.len() - 1];
    let at = if left { a.clone() } else { mt(a)? };
    let a3 = expand(&at, &[batch.clone(), vec![n, n]].concat())?;
    let b3 = expand(&b2, &[batch.clone(), vec![n, k]].concat())?;
    let (x, info) = solve_same_batch(&a3, &b3)?;
    let x = if left { x } else { mt(&x)? };
    let x = if vector {
        let mut d = x.dims();
        d.pop();
        reshape(&x, &d)?
    } else {
        x
    };
    Ok((x, info_tensor(info)))
}

/// `solve`: `solve_ex` that raises LinAlgError for a singular matrix.
pub fn solve(a: &Tensor, b: &Tensor, left: bool) -> Result<Tensor> {
    let (x, info) = solve_ex(a, b, left)?;
    let v = info_values(&info)?;
    if v.iter().any(|&i| i != 0) {
        return Err(Error::linalg(
            "torch.linalg.solve: The solver failed because the input matrix is singular.",
        ));
    }
    Ok(x)
}

/// `(sign, logabsdet)`; the log's gradient is `g A⁻ᵀ` (`LinalgSlogdetBackward0`).
pub fn slogdet(a: &Tensor) -> Result<(Tensor, Tensor)> {
    check_square("linalg.slogdet", "A", a)?;
    let ad = a.contiguous_data()?;
    let (sign, log) = backend::on(&ad).slogdet("linalg.slogdet", &ad)?;
    let (sign, log) = (wrap(sign, a.dtype()), wrap(log, a.dtype()));
    record(
        "LinalgSlogdetBackward0",
        &log,
        &[a],
        || vec![SavedTensor::input(a)],
        |ctx, g| {
            let ginv = mt(&inv(&ctx.saved[0])?)?;
            Ok(vec![Some(mul(
                &unsqueeze(&unsqueeze(g, g.rank())?, g.rank() + 1)?,
                &ginv,
            )?)])
        },
    );
    Ok((sign, log))
}

/// `det`: `sign * exp(logabsdet)` of the LU factors; gradient `g det A⁻ᵀ` (`LinalgDetBackward0`).
/// A singular input's gradient raises LinAlgError (PyTorch goes through an SVD there).
pub fn det(a: &Tensor) -> Result<Tensor> {
    check_square("linalg.det", "A", a)?;
    let ad = a.contiguous_data()?;
    let (sign, log) = backend::on(&ad).slogdet("linalg.det", &ad)?;
    let out = wrap(
        (sign * log.exp().op("linalg.det")?).op("linalg.det")?,
        a.dtype(),
    );
    record(
        "LinalgDetBackward0",
        &out,
        &[a],
        || vec![SavedTensor::input(a), SavedTensor::output(&out)],
        |ctx, g| {
            let (a, d) = (&ctx.saved[0], &ctx.saved[1]);
            let gd = mul(g, d)?;
            let r = gd.rank();
            let ginv = mt(&inv(a)?)?;
            Ok(vec![Some(mul(
                &unsqueeze(&unsqueeze(&gd, r)?, r + 1)?,
                &ginv,
            )?)])
        },
    );
    Ok(out)
}

/// `(L, info)`: the Cholesky factor, lower (`A = L Lᵀ`) or upper (`A = Uᵀ U`).
pub fn cholesky_ex(a: &Tensor, upper: bool) -> Result<(Tensor, Tensor)> {
    check_square("linalg.cholesky", "A", a)?;
    let ad = a.contiguous_data()?;
    let (l, info) = backend::on(&ad).cholesky("linalg.cholesky", &ad, upper)?;
    let out = wrap(l, a.dtype());
    record(
        "LinalgCholeskyExBackward0",
        &out,
        &[a],
        || vec![SavedTensor::output(&out)],
        move |ctx, g| {
            let (l, gl) = if upper {
                (mt(&ctx.saved[0])?, mt(g)?)
            } else {
                (ctx.saved[0].clone(), g.clone())
            };
            // gA = L⁻ᵀ Φ L⁻¹ with Φ the symmetric matrix whose lower triangle is that of
            // Lᵀ gL, halved (PyTorch's cholesky_backward).
            let x = tri(&matmul(&mt(&l)?, &gl)?, 0, false)?;
            let phi = mul_scalar(
                &crate::ops::binary::add(&x, &mt(&tri(&x, -1, false)?)?)?,
                0.5,
            )?;
            let left = solve_triangular_left(&mt(&l)?, &phi, true, false)?;
            let ga = mt(&solve_triangular_left(&mt(&l)?, &mt(&left)?, true, false)?)?;
            Ok(vec![Some(ga)])
        },
    );
    Ok((out, info_tensor(info)))
}

/// `cholesky`: `cholesky_ex` that raises LinAlgError for a matrix that is not
/// positive-definite.
pub fn cholesky(a: &Tensor, upper: bool) -> Result<Tensor> {
    let (l, info) = cholesky_ex(a, upper)?;
    check_info("linalg.cholesky", &info, a.rank() > 2, not_pd)?;
    Ok(l)
}

/// `A⁻¹ B` for triangular `A` and `B` with the same batch dims.
fn solve_triangular_left(a: &Tensor, b: &Tensor, upper: bool, unit: bool) -> Result<Tensor> {
    let ad = a.contiguous_data()?;
    let x = backend::on(&ad).solve_triangular(
        "linalg.solve_triangular",
        &ad,
        &b.contiguous_data()?,
        upper,
        unit,
    )?;
    let x = wrap(x, a.dtype());
    record(
        "LinalgSolveTriangularBackward0",
        &x,
        &[a, b],
        || vec![SavedTensor::input(a), SavedTensor::output(&x)],
        move |ctx, g| {
            let (a, x) = (&ctx.saved[0], &ctx.saved[1]);
            let gb = solve_triangular_left(&mt(a)?, g, !upper, unit)?;
            let ga = if ctx.needs(0) {
                let full = mul_scalar(&matmul(&gb, &mt(x)?)?, -1.0)?;
                let off = match (upper, unit) {
                    (true, true) => 1,
                    (false, true) => -1,
                    _ => 0,
                };
                Some(tri(&full, off, upper)?)
            } else {
                None
            };
            Ok(vec![ga, ctx.needs(1).then_some(gb)])
        },
    );
    Ok(x)
}

/// `solve_triangular(A, B, upper, left, unitriangular)` with broadcast batch dims.
pub fn solve_triangular(
    a: &Tensor,
    b: &Tensor,
    upper: bool,
    left: bool,
    unitriangular: bool,
) -> Result<Tensor> {
    let op = "linalg.solve_triangular";
    let n = check_square(op, "A", a)?;
    check_matrix(op, "B", b)?;
    check_same_dtype(op, a, b)?;
    let bd = b.dims();
    let (r, c) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if (left && r != n) || (!left && c != n) {
        return Err(Error::shape(format!(
            "{op}: Incompatible shapes of A and B for the equation {} ({n}x{n} and {r}x{c})",
            if left { "AX = B" } else { "XA = B" }
        )));
    }
    let batch = broadcast_shape(op, &batch_of(a), &bd[..bd.len() - 2])?;
    let (a2, b2, up) = if left {
        (a.clone(), b.clone(), upper)
    } else {
        (mt(a)?, mt(b)?, !upper)
    };
    let k = b2.dims()[b2.rank() - 1];
    let a3 = expand(&a2, &[batch.clone(), vec![n, n]].concat())?;
    let b3 = expand(&b2, &[batch, vec![n, k]].concat())?;
    let x = solve_triangular_left(&a3, &b3, up, unitriangular)?;
    if left {
        Ok(x)
    } else {
        mt(&x)
    }
}

/// `(LU, pivots, info)` of `A = P L U` with partial pivoting; LU's gradient is not
/// implemented (a backward through it raises).
pub fn lu_factor_ex(a: &Tensor) -> Result<(Tensor, Tensor, Tensor)> {
    check_matrix("linalg.lu_factor", "A", a)?;
    let ad = a.contiguous_data()?;
    let ((lu, piv), info) = backend::on(&ad).lu_factor("linalg.lu_factor", &ad)?;
    let lu = wrap(lu, a.dtype());
    record("LinalgLuFactorExBackward0", &lu, &[a], Vec::new, |_, _| {
        Err(Error::NotImplemented(
            "linalg.lu_factor: the derivative of the LU factorisation is not implemented in \
             gradstream"
                .into(),
        ))
    });
    Ok((lu, wrap(piv, DType::Int32), info_tensor(info)))
}

/// `lu_factor`: `lu_factor_ex` that raises for an exactly singular U, as PyTorch does.
pub fn lu_factor(a: &Tensor) -> Result<(Tensor, Tensor)> {
    let (lu, piv, info) = lu_factor_ex(a)?;
    let v = info_values(&info)?;
    if let Some(b) = v.iter().position(|&i| i != 0) {
        let i = v[b] - 1;
        let at = if a.rank() > 2 {
            format!("(Batch element {b}): ")
        } else {
            String::new()
        };
        return Err(Error::linalg(format!(
            "torch.linalg.lu_factor: {at}U[{i},{i}] is zero and using it on lu_solve would \
             result in a division by zero. If you still want to perform the factorization, \
             consider calling linalg.lu(A, pivot) or linalg.lu_factor_ex(A, pivot)"
        )));
    }
    Ok((lu, piv))
}

/// `lu_solve(LU, pivots, B, left, adjoint)`: `A⁻¹ B` (or `A⁻ᵀ B`, `B A⁻¹`...) from
/// `lu_factor`'s output. Differentiable in B.
pub fn lu_solve(
    lu: &Tensor,
    pivots: &Tensor,
    b: &Tensor,
    left: bool,
    adjoint: bool,
) -> Result<Tensor> {
    let op = "linalg.lu_solve";
    let n = check_square(op, "LU", lu)?;
    check_matrix(op, "B", b)?;
    if pivots.dtype() != DType::Int32 {
        return Err(Error::dtype(format!(
            "{op}: Expected pivots to be int32, got {}",
            pivots.dtype().name()
        )));
    }
    if pivots.dims() != [batch_of(lu), vec![n]].concat() {
        return Err(Error::shape(format!(
            "{op}: Expected pivots of shape {} for LU of shape {}, got {}",
            shape_str(&[batch_of(lu), vec![n]].concat()),
            shape_str(&lu.dims()),
            shape_str(&pivots.dims())
        )));
    }
    let bd = b.dims();
    let (r, c) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if (left && r != n) || (!left && c != n) {
        return Err(Error::shape(format!(
            "{op}: Incompatible shapes of LU and B ({n}x{n} and {r}x{c})"
        )));
    }
    if batch_of(b) != batch_of(lu) {
        return Err(Error::shape(format!(
            "{op}: LU of shape {} and B of shape {} must have the same batch dims",
            shape_str(&lu.dims()),
            shape_str(&bd)
        )));
    }
    // X A = B  <=>  Aᵀ Xᵀ = Bᵀ: the right-side forms are the left ones on transposes, and
    // the kernel solves with Aᵀ (`transpose`) for exactly two of the four forms.
    let transpose = adjoint == left;
    let b2 = if left { b.clone() } else { mt(b)? };
    let lud = lu.contiguous_data()?;
    let x = backend::on(&lud).lu_solve(
        op,
        &lud,
        &pivots.contiguous_data()?,
        &b2.contiguous_data()?,
        transpose,
    )?;
    let x = wrap(x, b.dtype());
    let (lu_s, piv_s) = (lu.detach(), pivots.detach());
    record(
        "LinalgLuSolveBackward0",
        &x,
        &[lu, &b2],
        Vec::new,
        move |ctx, g| {
            if ctx.needs(0) {
                return Err(Error::NotImplemented(
                    "linalg.lu_solve: the derivative with respect to LU is not implemented in \
                 gradstream"
                        .into(),
                ));
            }
            Ok(vec![
                None,
                Some(lu_solve(&lu_s, &piv_s, g, true, !transpose)?),
            ])
        },
    );
    if left {
        Ok(x)
    } else {
        mt(&x)
    }
}

/// `A` and `B` of one dtype, with PyTorch's message otherwise.
fn check_same_dtype(op: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if b.dtype() != a.dtype() {
        return Err(Error::dtype(format!(
            "{op}: Expected A and B to have the same dtype, but found A of type {} and B of \
             type {} instead",
            a.dtype().name(),
            b.dtype().name()
        )));
    }
    Ok(())
}
