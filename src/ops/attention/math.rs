//! The attention backward written with recorded ops (matmul, softmax, where...): what runs
//! under `create_graph=True`, so the gradients can be differentiated again, and when a
//! float mask wants its gradient (the L×S score gradient is then the result anyway).

use super::{reduce_to, Call};
use candle_core::Device;

use crate::autograd::grad_mode::GradModeGuard;
use crate::backend::attention::{dropout_keep, dropout_threshold, AttnNeeds};
use crate::dtype::DType;
use crate::error::Result;
use crate::ops::binary::{add, compare, mul, mul_scalar, sub, where_, CompareOp};
use crate::ops::creation::{from_vec, zeros_like};
use crate::ops::linalg::matmul;
use crate::ops::reduce::minmax::amax;
use crate::ops::reduce::softmax::softmax;
use crate::ops::reduce::sum;
use crate::ops::shape::{expand, reshape, transpose, unsqueeze};
use crate::ops::sum_to;
use crate::tensor::Tensor;

/// `t`'s last two dims swapped.
fn t_(t: &Tensor) -> Result<Tensor> {
    let r = t.rank();
    transpose(t, r - 2, r - 1)
}

/// Each head of `x` (..., H, S, D) repeated `rep` times in place: (..., H·rep, S, D).
fn repeat_heads(x: &Tensor, rep: usize) -> Result<Tensor> {
    if rep == 1 {
        return Ok(x.clone());
    }
    let d = x.dims();
    let r = d.len();
    let mut wide = d[..r - 2].to_vec();
    wide.extend([rep, d[r - 2], d[r - 1]]);
    let mut merged = d[..r - 3].to_vec();
    merged.extend([d[r - 3] * rep, d[r - 2], d[r - 1]]);
    let e = expand(&unsqueeze(x, r - 2)?, &wide)?;
    reshape(&crate::ops::convert::contiguous(&e)?, &merged)
}

/// The lower-triangular (j <= i) bool mask of shape (L, S).
fn causal_mask(l: usize, s: usize, device: &Device) -> Result<Tensor> {
    let v: Vec<u8> = (0..l * s).map(|x| u8::from(x % s <= x / s)).collect();
    from_vec(v, &[l, s], DType::Bool, device)
}

/// The dropout factor (keep / (1 - p), else 0) of every score, shaped `batch + [L, S]`.
fn dropout_factor(call: &Call, dtype: DType, device: &Device) -> Result<Option<Tensor>> {
    let Some(d) = call.dropout else {
        return Ok(None);
    };
    let s = call.plan.shape;
    let (thr, keep) = (dropout_threshold(d.p), 1.0 / (1.0 - d.p));
    let v: Vec<f64> = (0..(s.n * s.l * s.s) as u64)
        .map(|i| {
            if dropout_keep(d.seed, i, thr) {
                keep
            } else {
                0.0
            }
        })
        .collect();
    let mut dims = call.plan.batch.clone();
    dims.extend([s.l, s.s]);
    from_vec(v, &dims, dtype, device).map(Some)
}

/// The gradients of q, k, v (and of a float mask) for the incoming `g`.
#[allow(clippy::too_many_arguments)]
pub fn backward(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    g: &Tensor,
    call: &Call,
    needs: AttnNeeds,
    mask_needs: bool,
) -> Result<Vec<Option<Tensor>>> {
    let p = &call.plan;
    let s = p.shape;
    if s.n * s.l * s.s == 0 {
        let z = |on: bool, t: &Tensor| on.then(|| zeros_like(t)).transpose();
        let mz = match mask {
            Some(m) if mask_needs => Some(zeros_like(m)?),
            _ => None,
        };
        return Ok(vec![z(needs.q, q)?, z(needs.k, k)?, z(needs.v, v)?, mz]);
    }
    let (kx, vx) = (repeat_heads(k, p.rep_k)?, repeat_heads(v, p.rep_v)?);
    let ninf = f64::NEG_INFINITY;
    let mut scores = mul_scalar(&matmul(q, &t_(&kx)?)?, call.scale)?;
    match mask {
        Some(m) if m.dtype() == DType::Bool => scores = where_(m, &(&scores).into(), &ninf.into())?,
        Some(m) => scores = add(&scores, m)?,
        None => {}
    }
    if call.causal {
        scores = where_(
            &causal_mask(s.l, s.s, &q.device())?,
            &(&scores).into(),
            &ninf.into(),
        )?;
    }
    let last = scores.rank() - 1;
    // Rows where every key is masked attend to nothing (zeros, as PyTorch).
    let live = {
        let _g = GradModeGuard::new(false);
        let m = amax(&scores.detach(), Some(&[last]), true, true)?;
        compare(CompareOp::Gt, &(&m).into(), &ninf.into())?
    };
    let safe = where_(&live, &(&scores).into(), &0.0.into())?;
    let probs = where_(&live, &(&softmax(&safe, last, false)?).into(), &0.0.into())?;
    let factor = dropout_factor(call, q.dtype(), &q.device())?;
    let dropped = match &factor {
        Some(f) => mul(&probs, f)?,
        None => probs.clone(),
    };
    let dv = if needs.v {
        let d = matmul(&t_(&dropped)?, g)?;
        Some(reduce_to(d, &p.batch, &v.dims(), p.rep_v, v.dtype())?)
    } else {
        None
    };
    if !(needs.q || needs.k || mask_needs) {
        return Ok(vec![None, None, dv, None]);
    }
    let mut dp = matmul(g, &t_(&vx)?)?;
    if let Some(f) = &factor {
        dp = mul(&dp, f)?;
    }
    let ds = mul(
        &probs,
        &sub(&dp, &sum(&mul(&dp, &probs)?, Some(&[last]), true)?)?,
    )?;
    let dq = if needs.q {
        let d = mul_scalar(&matmul(&ds, &kx)?, call.scale)?;
        Some(reduce_to(d, &p.batch, &q.dims(), 1, q.dtype())?)
    } else {
        None
    };
    let dk = if needs.k {
        let d = mul_scalar(&matmul(&t_(&ds)?, q)?, call.scale)?;
        Some(reduce_to(d, &p.batch, &k.dims(), p.rep_k, k.dtype())?)
    } else {
        None
    };
    let dm = match mask {
        Some(m) if mask_needs => Some(sum_to(&ds, &m.dims())?),
        _ => None,
    };
    Ok(vec![dq, dk, dv, dm])
}
