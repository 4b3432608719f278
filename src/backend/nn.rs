//! Fused neural-network kernels: layer_norm's statistics and normalised rows, the row
//! gather/scatter under nll_loss, embedding and its backward. Inputs are dense, in a
//! compute dtype (f32 or f64); indices come as host `i64`s, already checked.

use candle_core::Tensor;

use super::{no_fallback, not_implemented};
use crate::error::{CandleContext, Result};

/// The class of each row under nll_loss (already checked), and the ignored class.
#[derive(Clone, Copy, Debug)]
pub struct Targets<'a> {
    pub classes: &'a [i64],
    pub ignore: i64,
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

    no_fallback! {
        /// `out[i] = x[i, t[i]]` for `x` (N, C), 0 where `t[i]` is the ignored class.
        fn gather_rows(&self, name: &'static str, x: &Tensor, t: Targets<'_>)
            -> Result<Tensor> = name, x;
        /// The adjoint of `gather_rows`: (N, C) zeros with `out[i, t[i]] = g[i]`.
        fn scatter_rows(&self, name: &'static str, g: &Tensor, t: Targets, c: usize)
            -> Result<Tensor> = name, g;
    }

    /// Rows `ids` of `w` (V, D), as (len, D); rows looked up at `zero_index` are zeros.
    fn embedding(
        &self,
        name: &'static str,
        w: &Tensor,
        ids: &[i64],
        zero_index: Option<i64>,
    ) -> Result<Tensor> {
        if zero_index.is_some() {
            return Err(not_implemented(name, w.device()));
        }
        let idx = Tensor::new(ids, w.device()).op(name)?;
        w.index_select(&idx, 0).op(name)
    }

    /// The rows of `g` (len, D) summed into (V, D) at `ids`; `padding` rows get none.
    fn embedding_backward(
        &self,
        name: &'static str,
        g: &Tensor,
        ids: &[i64],
        v: usize,
        padding: Option<i64>,
    ) -> Result<Tensor> {
        if padding.is_some() {
            return Err(not_implemented(name, g.device()));
        }
        let idx = Tensor::new(ids, g.device()).op(name)?;
        let zeros = Tensor::zeros((v, g.dim(1).op(name)?), g.dtype(), g.device()).op(name)?;
        zeros.index_add(&idx, g, 0).op(name)
    }
}
