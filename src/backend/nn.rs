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

pub trait NnOps {
    /// Rows of `n` elements of `x`, normalised: `(x - mean) * rstd` in x's shape, and
    /// per row `mean` and `rstd = 1 / sqrt(var + eps)` (biased variance), flat.
    fn layer_norm(
        &self,
        name: &'static str,
        x: &Tensor,
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
            let xhat = centred.broadcast_mul(&rstd)?.reshape(x.shape())?;
            Ok((xhat, mean.flatten_all()?, rstd.flatten_all()?))
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
