//! The shapes of an attention call: PyTorch's checks, the broadcast batch, and for each
//! output batch item the query, key, value and mask it reads.

use crate::backend::attention::{AttnMask, AttnShape};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::broadcast_shape;
use crate::tensor::{shape_str, Tensor};

pub const OP: &str = "scaled_dot_product_attention";

/// Everything derived from the shapes of (q, k, v, mask).
pub struct Plan {
    pub shape: AttnShape,
    /// The output's batch dims (the broadcast of q's, k's and v's).
    pub batch: Vec<usize>,
    pub q_of: Vec<usize>,
    pub k_of: Vec<usize>,
    pub v_of: Vec<usize>,
    /// Query heads per key (value) head under grouped-query attention, else 1.
    pub rep_k: usize,
    pub rep_v: usize,
    pub mask_base: Vec<usize>,
    pub mask_row: usize,
    pub mask_col: usize,
}

impl Plan {
    pub fn mask<'a>(&'a self, data: &'a candle_core::Tensor) -> AttnMask<'a> {
        AttnMask {
            data,
            base: &self.mask_base,
            row: self.mask_row,
            col: self.mask_col,
        }
    }
}

fn runtime(msg: String) -> Error {
    Error::runtime(format!("{OP}: {msg}"))
}

/// PyTorch's checks on dtypes and ranks.
pub fn check(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    causal: bool,
) -> Result<()> {
    let (dq, dk, dv) = (q.dims(), k.dims(), v.dims());
    if dq.len() < 2 || dk.len() < 2 || dv.len() < 2 {
        return Err(runtime(format!(
            "Expected query, key, and value to all be at least 2 dimensional, but got query.dim: \
             {} key.dim: {} and value.dim: {} instead (shapes {}, {}, {}).",
            dq.len(),
            dk.len(),
            dv.len(),
            shape_str(&dq),
            shape_str(&dk),
            shape_str(&dv)
        )));
    }
    if q.dtype() != k.dtype() || q.dtype() != v.dtype() {
        return Err(runtime(format!(
            "Expected query, key, and value to have the same dtype, but got query.dtype: {} \
             key.dtype: {} and value.dtype: {} instead.",
            q.dtype().name(),
            k.dtype().name(),
            v.dtype().name()
        )));
    }
    if !q.dtype().is_floating_point() {
        return Err(runtime(format!(
            "expected floating point query, key and value, got {}",
            q.dtype().name()
        )));
    }
    if let Some(m) = mask {
        if causal {
            return Err(runtime(
                "Explicit attn_mask should not be set when is_causal=True".into(),
            ));
        }
        if m.dtype() != DType::Bool && m.dtype() != q.dtype() {
            return Err(runtime(format!(
                "Expected attn_mask dtype to be bool or float or to match query dtype, but got \
                 attn_mask.dtype: {} and query.dtype: {} instead.",
                m.dtype().name(),
                q.dtype().name()
            )));
        }
    }
    let (e, ek) = (dq[dq.len() - 1], dk[dk.len() - 1]);
    let (s, sv) = (dk[dk.len() - 2], dv[dv.len() - 2]);
    if e != ek || s != sv {
        return Err(runtime(format!(
            "query {}, key {} and value {} do not fit: expected query (..., L, E), key (..., S, \
             E) and value (..., S, Ev)",
            shape_str(&dq),
            shape_str(&dk),
            shape_str(&dv)
        )));
    }
    Ok(())
}

/// Query heads per head of `kv` under grouped-query attention (1 without it).
fn heads_rep(q: &[usize], kv: &[usize], gqa: bool) -> Result<usize> {
    if !gqa || q.len() < 3 || kv.len() < 3 {
        return Ok(1);
    }
    let (hq, hk) = (q[q.len() - 3], kv[kv.len() - 3]);
    if hq == hk {
        return Ok(1);
    }
    if hk == 0 || hq % hk != 0 {
        return Err(runtime(format!(
            "Number of heads in key and value must divide the number of heads in query (query \
             {}, key/value {})",
            shape_str(q),
            shape_str(kv)
        )));
    }
    Ok(hq / hk)
}

/// For each flat index of `out`, the flat index of `src` (aligned right, size-1 dims
/// broadcast), the last dim of `src` read at `index / rep`.
fn batch_map(src: &[usize], out: &[usize], rep: usize) -> Vec<usize> {
    let r = out.len();
    let off = r - src.len();
    let mut strides = vec![0usize; r];
    let mut acc = 1;
    for d in (off..r).rev() {
        let sz = src[d - off];
        strides[d] = if sz == 1 { 0 } else { acc };
        acc *= sz;
    }
    let n: usize = out.iter().product();
    let mut idx = vec![0usize; r];
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        let mut at = 0;
        for d in 0..r {
            let i = if d == r - 1 && rep > 1 {
                idx[d] / rep
            } else {
                idx[d]
            };
            at += i * strides[d];
        }
        v.push(at);
        for d in (0..r).rev() {
            idx[d] += 1;
            if idx[d] < out[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    v
}

/// The plan of an attention call whose inputs passed [`check`].
pub fn plan(
    q: &[usize],
    k: &[usize],
    v: &[usize],
    mask: Option<&[usize]>,
    gqa: bool,
) -> Result<Plan> {
    let (rep_k, rep_v) = (heads_rep(q, k, gqa)?, heads_rep(q, v, gqa)?);
    let (qb, kb, vb) = (&q[..q.len() - 2], &k[..k.len() - 2], &v[..v.len() - 2]);
    // Under grouped-query attention k and v broadcast as if their heads were repeated.
    let widen = |b: &[usize], rep: usize| {
        let mut b = b.to_vec();
        if let Some(h) = b.last_mut() {
            *h *= rep;
        }
        b
    };
    let batch = broadcast_shape(OP, qb, &widen(kb, rep_k))?;
    let batch = broadcast_shape(OP, &batch, &widen(vb, rep_v))?;
    let shape = AttnShape {
        n: batch.iter().product(),
        l: q[q.len() - 2],
        s: k[k.len() - 2],
        e: q[q.len() - 1],
        ev: v[v.len() - 1],
    };
    let (mut mask_base, mut mask_row, mut mask_col) = (Vec::new(), 0, 0);
    if let Some(md) = mask {
        let mut target = batch.clone();
        target.extend([shape.l, shape.s]);
        if broadcast_shape(OP, md, &target)? != target {
            return Err(runtime(format!(
                "attn_mask of shape {} does not broadcast to the attention scores' shape {}",
                shape_str(md),
                shape_str(&target)
            )));
        }
        let mut full = vec![1usize; target.len() - md.len()];
        full.extend_from_slice(md);
        let (ml, ms) = (full[full.len() - 2], full[full.len() - 1]);
        mask_col = usize::from(ms != 1);
        mask_row = if ml == 1 { 0 } else { ms };
        mask_base = batch_map(&full[..full.len() - 2], &batch, 1)
            .into_iter()
            .map(|i| i * ml * ms)
            .collect();
    }
    Ok(Plan {
        shape,
        q_of: batch_map(qb, &batch, 1),
        k_of: batch_map(kb, &batch, rep_k),
        v_of: batch_map(vb, &batch, rep_v),
        batch,
        rep_k,
        rep_v,
        mask_base,
        mask_row,
        mask_col,
    })
}
