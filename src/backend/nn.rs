//! Fused neural-network kernels: layer_norm's statistics and normalised rows, the row
//! gather/scatter under nll_loss, embedding and its backward. Inputs are dense, in a
//! compute dtype (f32 or f64); indices are dense int64 tensors on the same device, already
//! checked (`IndexOps::find_out_of_bounds`).

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use crate::error::{CandleContext, Result};

/// The class of each row under nll_loss (int64 `(N,)`, already checked), and the ignored
/// class.
#[derive(Clone, Copy, Debug)]
pub struct Targets<'a> {
    pub classes: &'a Tensor,
    pub ignore: i64,
}

impl Targets<'_> {
    /// The classes with the ignored ones set to 0, as `(N, 1)`, and `1` where a row counts
    /// (else `0`), as `(N, 1)` in `dtype`.
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn safe(&self, dtype: DType) -> candle_core::Result<(Tensor, Tensor)> {
        let t = self.classes.reshape(((), 1))?;
        let ignored = t.eq(self.ignore as f64)?;
        let safe = ignored.where_cond(&t.zeros_like()?, &t)?;
        let keep = ignored.where_cond(&t.zeros_like()?, &t.ones_like()?)?;
        Ok((safe, keep.cast(dtype)?))
    }
}

/// `1` for the rows of `ids` (int64, flat) that are not `skip`, else `0`, as `(len, 1)` in
/// `dtype`; `None` when nothing is skipped.
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn row_keep(ids: &Tensor, skip: Option<i64>, dtype: DType) -> candle_core::Result<Option<Tensor>> {
    let Some(s) = skip else { return Ok(None) };
    let ids = ids.reshape(((), 1))?;
    Ok(Some(ids.ne(s as f64)?.cast(dtype)?))
}

/// layer_norm's elementwise affine parameters, where given: n elements each, dense, in the
/// input's compute dtype.
#[derive(Clone, Copy, Default)]
pub struct Affine<'a> {
    pub weight: Option<&'a Tensor>,
    pub bias: Option<&'a Tensor>,
}

pub trait NnOps {
    /// Rows of `n` elements of `x`, normalised and, where given, scaled by `w` and shifted
    /// by `b` (n elements each, x's dtype): `(x - mean) * rstd * w + b` in x's shape, and
    /// per row `mean` and `rstd = 1 / sqrt(var + eps)` (biased variance), flat.
    fn layer_norm(
        &self,
        name: &'static str,
        x: &Tensor,
        affine: Affine<'_>,
        n: usize,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        (|| {
            let rows = x.reshape(((), n))?;
            let mean = rows.mean_keepdim(1)?;
            let centred = rows.broadcast_sub(&mean)?;
            let rstd = centred
                .sqr()?
                .mean_keepdim(1)?
                .affine(1.0, eps)?
                .sqrt()?
                .recip()?;
            let mut y = centred.broadcast_mul(&rstd)?;
            if let Some(w) = affine.weight {
                y = y.broadcast_mul(&w.reshape((1, n))?)?;
            }
            if let Some(b) = affine.bias {
                y = y.broadcast_add(&b.reshape((1, n))?)?;
            }
            Ok((
                y.reshape(x.shape())?,
                mean.flatten_all()?,
                rstd.flatten_all()?,
            ))
        })()
        .op(name)
    }

    /// layer_norm's backward over rows of `n`, from the gradient `g` of its output, its
    /// input `x`, the rows' `mean` and `rstd` and the weight `w`: the input's gradient and,
    /// with `params`, the weight's and the bias' (Σ over rows of g·x̂, and of g; n each).
    #[allow(clippy::too_many_arguments)]
    fn layer_norm_backward(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        stats: (&Tensor, &Tensor),
        w: Option<&Tensor>,
        n: usize,
        params: bool,
    ) -> Result<(Tensor, Option<(Tensor, Tensor)>)> {
        (|| {
            let (g2, x2) = (g.reshape(((), n))?, x.reshape(((), n))?);
            let (mu, rs) = (stats.0.reshape(((), 1))?, stats.1.reshape(((), 1))?);
            let xh = x2.broadcast_sub(&mu)?.broadcast_mul(&rs)?;
            let gh = match w {
                Some(w) => g2.broadcast_mul(&w.reshape((1, n))?)?,
                None => g2.clone(),
            };
            let mg = gh.mean_keepdim(1)?;
            let mgx = (&gh * &xh)?.mean_keepdim(1)?;
            let gx = gh
                .broadcast_sub(&mg)?
                .sub(&xh.broadcast_mul(&mgx)?)?
                .broadcast_mul(&rs)?
                .reshape(x.shape())?;
            let p = match params {
                true => Some(((&g2 * &xh)?.sum(0)?, g2.sum(0)?)),
                false => None,
            };
            Ok((gx, p))
        })()
        .op(name)
    }

    /// `out[i] = x[i, t[i]]` for `x` (N, C), 0 where `t[i]` is the ignored class.
    fn gather_rows(&self, name: &'static str, x: &Tensor, t: Targets<'_>) -> Result<Tensor> {
        (|| {
            let (safe, keep) = t.safe(x.dtype())?;
            (x.dense()?.gather(&safe.dense()?, 1)? * keep)?.flatten_all()
        })()
        .op(name)
    }

    /// The adjoint of `gather_rows`: (N, C) zeros with `out[i, t[i]] = g[i]`.
    fn scatter_rows(
        &self,
        name: &'static str,
        g: &Tensor,
        t: Targets<'_>,
        c: usize,
    ) -> Result<Tensor> {
        (|| {
            let (safe, keep) = t.safe(g.dtype())?;
            let src = (g.reshape(((), 1))? * keep)?;
            let zeros = crate::device::zeros((src.dim(0)?, c), g.dtype(), g.device())?;
            zeros.scatter_add(&safe.dense()?, &src.dense()?, 1)
        })()
        .op(name)
    }

    /// Rows `ids` (int64, flat) of `w` (V, D), as (len, D); rows looked up at `zero_index`
    /// are zeros.
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn embedding(
        &self,
        name: &'static str,
        w: &Tensor,
        ids: &Tensor,
        zero_index: Option<i64>,
    ) -> Result<Tensor> {
        (|| {
            let rows = w.index_select(ids, 0)?;
            match row_keep(ids, zero_index, w.dtype())? {
                Some(k) => rows.broadcast_mul(&k),
                None => Ok(rows),
            }
        })()
        .op(name)
    }

    /// The rows of `g` (len, D) summed into (V, D) at `ids` (int64, flat); `padding` rows
    /// get none.
    fn embedding_backward(
        &self,
        name: &'static str,
        g: &Tensor,
        ids: &Tensor,
        v: usize,
        padding: Option<i64>,
    ) -> Result<Tensor> {
        (|| {
            let g = match row_keep(ids, padding, g.dtype())? {
                Some(k) => g.broadcast_mul(&k)?,
                None => g.clone(),
            };
            let zeros = crate::device::zeros((v, g.dim(1)?), g.dtype(), g.device())?;
            zeros.index_add(ids, &g, 0)
        })()
        .op(name)
    }
}
