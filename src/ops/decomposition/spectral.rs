//! QR, SVD and the symmetric eigendecomposition, with PyTorch's backward rules (real case).
//!
//! These ops have several differentiable outputs, so their node sees each output's gradient
//! (`None` where none came) and keeps detached copies of the factors it needs. Their
//! backward is not itself differentiable here: under `create_graph=True` it raises.

use crate::autograd::function::{record, record_outputs};
use crate::autograd::grad_mode;
use crate::backend;
use crate::backend::linalg::QrMode;
use crate::error::{Error, Result};
use crate::ops::binary::{add, div, mul, mul_scalar, sub};
use crate::ops::creation::eye;
use crate::ops::index::narrow;
use crate::ops::linalg::matmul;
use crate::ops::shape::{tri, unsqueeze};
use crate::tensor::Tensor;

use super::{check_matrix, check_square, mt, wrap};

fn no_double_backward(op: &str) -> Result<()> {
    if grad_mode::is_enabled() {
        return Err(Error::NotImplemented(format!(
            "{op}: double backward (create_graph=True) through this decomposition is not \
             implemented in gradstream"
        )));
    }
    Ok(())
}

/// `diag_embed(v)`: `(*, k)` to `(*, k, k)`.
fn diag_embed(v: &Tensor) -> Result<Tensor> {
    let k = v.dims()[v.rank() - 1];
    let e = eye(k as i64, k as i64, v.dtype(), &v.device())?;
    mul(&unsqueeze(v, v.rank() - 1)?, &e)
}

/// `x - xᵀ`.
fn skew(x: &Tensor) -> Result<Tensor> {
    sub(x, &mt(x)?)
}

/// `e[i, j] = s[j] - s[i]` with ones on the diagonal (the divisor of the off-diagonal terms).
fn gaps(s: &Tensor) -> Result<Tensor> {
    let r = s.rank();
    let e = sub(&unsqueeze(s, r - 1)?, &unsqueeze(s, r)?)?;
    let k = s.dims()[r - 1];
    let id = eye(k as i64, k as i64, s.dtype(), &s.device())?;
    add(&e, &id)
}

/// The first `n` entries of `t` along its `back`-th dim from the end (a factor's leading
/// columns or rows).
fn leading(t: &Tensor, back: usize, n: usize) -> Result<Tensor> {
    narrow(t, t.rank() - back, 0, n as i64)
}

/// `(Q, R)` in PyTorch's modes `reduced`, `complete`, `r`.
pub fn qr(a: &Tensor, mode: &str) -> Result<(Tensor, Tensor)> {
    let op = "linalg.qr";
    let mode = match mode {
        "reduced" => QrMode::Reduced,
        "complete" => QrMode::Complete,
        "r" => QrMode::R,
        other => {
            return Err(Error::runtime(format!(
                "qr received unrecognized mode '{other}' but expected one of 'reduced' \
                 (default), 'r', or 'complete'"
            )))
        }
    };
    check_matrix(op, "A", a)?;
    let ad = a.contiguous_data()?;
    let (q, r) = backend::on(&ad).qr(op, &ad, mode)?;
    let (q, r) = (wrap(q, a.dtype()), wrap(r, a.dtype()));
    let d = a.dims();
    let (m, n) = (d[d.len() - 2], d[d.len() - 1]);
    let (qs, rs) = (q.detach(), r.detach());
    let outs = [q.clone(), r.clone()];
    record_outputs("LinalgQrBackward0", &outs, &[a], move |_, grads| {
        no_double_backward(op)?;
        if mode == QrMode::R {
            return Err(Error::runtime(
                "The derivative of linalg.qr depends on Q, which is not computed when mode='r'. \
                 Please use linalg.qr(A, mode='reduced') if you are going to differentiate \
                 through linalg.qr.",
            ));
        }
        if m < n {
            return Err(Error::NotImplemented(format!(
                "linalg.qr: the derivative for wide matrices ({m}x{n}, m < n) is not \
                 implemented in gradstream"
            )));
        }
        let (q, r) = (leading(&qs, 1, n)?, leading(&rs, 2, n)?);
        let gq = grads[0].as_ref().map(|g| leading(g, 1, n)).transpose()?;
        let gr = grads[1].as_ref().map(|g| leading(g, 2, n)).transpose()?;
        // M = R gRᵀ - gQᵀ Q; gA = (gQ + Q copyltu(M)) R⁻ᵀ.
        let mut mm: Option<Tensor> = None;
        if let Some(gr) = &gr {
            mm = Some(matmul(&r, &mt(gr)?)?);
        }
        if let Some(gq) = &gq {
            let t = matmul(&mt(gq)?, &q)?;
            mm = Some(match mm {
                Some(x) => sub(&x, &t)?,
                None => mul_scalar(&t, -1.0)?,
            });
        }
        let Some(mm) = mm else {
            return Ok(vec![None]);
        };
        let sym = add(&tri(&mm, 0, false)?, &mt(&tri(&mm, -1, false)?)?)?;
        let mut b = matmul(&q, &sym)?;
        if let Some(gq) = &gq {
            b = add(&b, gq)?;
        }
        // b R⁻ᵀ = (R⁻¹ bᵀ)ᵀ.
        let x = super::solve_triangular(&r, &mt(&b)?, true, true, false)?;
        Ok(vec![Some(mt(&x)?)])
    });
    if mode == QrMode::R {
        return Ok((q, r));
    }
    Ok((outs[0].clone(), outs[1].clone()))
}

/// PyTorch's svd_backward (real case) for reduced factors `u (m,k)`, `s (k)`, `vh (k,n)`.
fn svd_backward(
    u: &Tensor,
    s: &Tensor,
    vh: &Tensor,
    gu: Option<&Tensor>,
    gs: Option<&Tensor>,
    gvh: Option<&Tensor>,
) -> Result<Option<Tensor>> {
    let (m, n) = (u.dims()[u.rank() - 2], vh.dims()[vh.rank() - 1]);
    let r = s.rank();
    let s_row = unsqueeze(s, r - 1)?; // (*, 1, k): scales columns
    let s_col = unsqueeze(s, r)?; // (*, k, 1): scales rows
    if gu.is_none() && gvh.is_none() {
        let Some(gs) = gs else { return Ok(None) };
        return Ok(Some(matmul(&matmul(u, &diag_embed(gs)?)?, vh)?));
    }
    let s2 = mul(s, s)?;
    let e = gaps(&s2)?;
    let uhgu = gu.map(|g| skew(&matmul(&mt(u)?, g)?)).transpose()?;
    let vhgv = gvh.map(|g| skew(&matmul(vh, &mt(g)?)?)).transpose()?;
    let mut ga = match (&uhgu, &vhgv) {
        (Some(a), Some(b)) => div(&add(&mul(a, &s_row)?, &mul(&s_col, b)?)?, &e)?,
        (Some(a), None) => mul(&div(a, &e)?, &s_row)?,
        (None, Some(b)) => mul(&s_col, &div(b, &e)?)?,
        (None, None) => unreachable_none()?,
    };
    if let Some(gs) = gs {
        ga = add(&ga, &diag_embed(gs)?)?;
    }
    let out = match (gu, gvh) {
        (Some(gu), _) if m > n => {
            let gus = div(gu, &s_row)?;
            let proj = sub(&gus, &matmul(u, &matmul(&mt(u)?, &gus)?)?)?;
            matmul(&add(&matmul(u, &ga)?, &proj)?, vh)?
        }
        (_, Some(gvh)) if m < n => {
            let gvs = div(gvh, &s_col)?;
            let proj = sub(&gvs, &matmul(&matmul(&gvs, &mt(vh)?)?, vh)?)?;
            matmul(u, &add(&matmul(&ga, vh)?, &proj)?)?
        }
        _ => matmul(&matmul(u, &ga)?, vh)?,
    };
    Ok(Some(out))
}

fn unreachable_none() -> Result<Tensor> {
    Err(Error::runtime("linalg.svd: no gradient to propagate"))
}

/// `(U, S, Vh)` with `A = U diag(S) Vh`, singular values descending.
pub fn svd(a: &Tensor, full_matrices: bool) -> Result<(Tensor, Tensor, Tensor)> {
    let op = "linalg.svd";
    check_matrix(op, "A", a)?;
    let ad = a.contiguous_data()?;
    let (u, s, vh) = backend::on(&ad).svd(op, &ad, full_matrices, true)?;
    let outs = [wrap(u, a.dtype()), wrap(s, a.dtype()), wrap(vh, a.dtype())];
    let (us, ss, vhs) = (outs[0].detach(), outs[1].detach(), outs[2].detach());
    let k = ss.dims()[ss.rank() - 1];
    record_outputs("LinalgSvdBackward0", &outs, &[a], move |_, grads| {
        no_double_backward(op)?;
        // With full_matrices the extra columns of U and rows of Vh do not enter the rule.
        let (u, vh) = (leading(&us, 1, k)?, leading(&vhs, 2, k)?);
        let gu = grads[0].as_ref().map(|g| leading(g, 1, k)).transpose()?;
        let gvh = grads[2].as_ref().map(|g| leading(g, 2, k)).transpose()?;
        Ok(vec![svd_backward(
            &u,
            &ss,
            &vh,
            gu.as_ref(),
            grads[1].as_ref(),
            gvh.as_ref(),
        )?])
    });
    let [u, s, vh] = outs;
    Ok((u, s, vh))
}

/// `svdvals`: the singular values alone; the vectors are computed only when a gradient
/// will need them (`U diag(g) Vh`).
pub fn svdvals(a: &Tensor) -> Result<Tensor> {
    let op = "linalg.svdvals";
    check_matrix(op, "A", a)?;
    let ad = a.contiguous_data()?;
    let needs = crate::autograd::function::should_record(&[a]);
    let (u, s, vh) = backend::on(&ad).svd(op, &ad, false, needs)?;
    let out = wrap(s, a.dtype());
    let (u, vh) = (wrap(u, a.dtype()), wrap(vh, a.dtype()));
    record("LinalgSvdBackward0", &out, &[a], Vec::new, move |_, g| {
        no_double_backward(op)?;
        Ok(vec![Some(matmul(&matmul(&u, &diag_embed(g)?)?, &vh)?)])
    });
    Ok(out)
}

fn uplo(op: &str, uplo: &str) -> Result<bool> {
    match uplo {
        "L" | "l" => Ok(false),
        "U" | "u" => Ok(true),
        other => Err(Error::runtime(format!(
            "{op}: Expected UPLO argument to be 'L' or 'U', but got {other}"
        ))),
    }
}

/// `(eigenvalues, eigenvectors)` of symmetric matrices read from the `UPLO` triangle.
pub fn eigh(a: &Tensor, uplo_s: &str) -> Result<(Tensor, Tensor)> {
    let op = "linalg.eigh";
    let upper = uplo(op, uplo_s)?;
    check_square(op, "A", a)?;
    let ad = a.contiguous_data()?;
    let (w, v) = backend::on(&ad).eigh(op, &ad, upper, true)?;
    let outs = [wrap(w, a.dtype()), wrap(v, a.dtype())];
    let (ws, vs) = (outs[0].detach(), outs[1].detach());
    record_outputs("LinalgEighBackward0", &outs, &[a], move |_, grads| {
        no_double_backward(op)?;
        // gA = V (diag(gw) + skew(Vᵀ gV) / (2 E)) Vᵀ, E[i, j] = w[j] - w[i] (PyTorch's
        // linalg_eig_backward projected on symmetric matrices).
        let mut inner = match &grads[1] {
            Some(gv) => div(
                &mul_scalar(&skew(&matmul(&mt(&vs)?, gv)?)?, 0.5)?,
                &gaps(&ws)?,
            )?,
            None => match &grads[0] {
                Some(gw) => diag_embed(gw)?,
                None => return Ok(vec![None]),
            },
        };
        if let (Some(gw), Some(_)) = (&grads[0], &grads[1]) {
            inner = add(&inner, &diag_embed(gw)?)?;
        }
        Ok(vec![Some(matmul(&matmul(&vs, &inner)?, &mt(&vs)?)?)])
    });
    let [w, v] = outs;
    Ok((w, v))
}

/// `eigvalsh`: the eigenvalues alone; gradient `V diag(g) Vᵀ`.
pub fn eigvalsh(a: &Tensor, uplo_s: &str) -> Result<Tensor> {
    let op = "linalg.eigvalsh";
    let upper = uplo(op, uplo_s)?;
    check_square(op, "A", a)?;
    let ad = a.contiguous_data()?;
    let needs = crate::autograd::function::should_record(&[a]);
    let (w, v) = backend::on(&ad).eigh(op, &ad, upper, needs)?;
    let out = wrap(w, a.dtype());
    let v = wrap(v, a.dtype());
    record("LinalgEighBackward0", &out, &[a], Vec::new, move |_, g| {
        no_double_backward(op)?;
        Ok(vec![Some(matmul(&matmul(&v, &diag_embed(g)?)?, &mt(&v)?)?)])
    });
    Ok(out)
}
