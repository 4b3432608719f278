//! Fused nn kernels on the CPU: layer_norm's row statistics and normalised rows in one
//! pass per row (f64 accumulation), the row gather/scatter under nll_loss, embedding and
//! its backward. Why not candle's: layer_norm from candle's ops takes six passes and
//! five temporaries on one thread; candle's gather/index_add need index tensors and
//! cannot skip `ignore_index`/`padding_idx` rows.

use candle_core::Tensor;
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice};
use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::nn::{NnOps, Targets};
use crate::error::Result;

/// One row of a row-wise kernel: (output, input), (mean, rstd).
type RowChunk<'a, T> = ((&'a mut [T], &'a [T]), (&'a mut T, &'a mut T));

fn layer_norm_rows<T: Real>(s: &[T], n: usize, eps: f64) -> (Vec<T>, Vec<T>, Vec<T>) {
    let rows = s.len().checked_div(n).unwrap_or(0);
    let mut xh = vec![T::of(0.0); s.len()];
    let mut mu = vec![T::of(0.0); rows];
    let mut rs = vec![T::of(0.0); rows];
    let row = |((o, r), (m, q)): RowChunk<'_, T>| {
        let mut acc = 0.0f64;
        for &e in r {
            acc += e.widen();
        }
        let mean = acc / n as f64;
        let mut var = 0.0f64;
        for &e in r {
            let c = e.widen() - mean;
            var += c * c;
        }
        let rstd = 1.0 / (var / n as f64 + eps).sqrt();
        let (mt, rt) = (T::of(mean), T::of(rstd));
        for (oi, &e) in o.iter_mut().zip(r) {
            *oi = (e - mt) * rt;
        }
        *m = mt;
        *q = rt;
    };
    if n > 0 {
        if s.len() >= PAR_MIN {
            xh.par_chunks_mut(n)
                .zip(s.par_chunks(n))
                .zip(mu.par_iter_mut().zip(rs.par_iter_mut()))
                .for_each(row);
        } else {
            xh.chunks_mut(n)
                .zip(s.chunks(n))
                .zip(mu.iter_mut().zip(rs.iter_mut()))
                .for_each(row);
        }
    }
    (xh, mu, rs)
}

impl NnOps for Cpu {
    /// See `NnOps::layer_norm`.
    fn layer_norm(
        &self,
        _name: &'static str,
        x: &Tensor,
        n: usize,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let dims = x.dims().to_vec();
        Ok(by_float!(x.dtype(), |T| {
            let (xh, mu, rs) = with_slice::<T, _>(x, |s| layer_norm_rows(s, n, eps))?;
            let rows = mu.len();
            (
                from_vec(xh, &dims)?,
                from_vec(mu, &[rows])?,
                from_vec(rs, &[rows])?,
            )
        }))
    }

    /// See `NnOps::gather_rows`.
    fn gather_rows(&self, _name: &'static str, x: &Tensor, t: Targets<'_>) -> Result<Tensor> {
        let Targets { classes: t, ignore } = t;
        let (nr, c) = (t.len(), x.dims().last().copied().unwrap_or(1));
        Ok(by_float!(x.dtype(), |T| {
            let v = with_slice::<T, _>(x, |s| {
                t.iter()
                    .enumerate()
                    .map(|(i, &ti)| {
                        if ti == ignore {
                            T::of(0.0)
                        } else {
                            s[i * c + ti as usize]
                        }
                    })
                    .collect::<Vec<T>>()
            })?;
            from_vec(v, &[nr])?
        }))
    }

    /// See `NnOps::scatter_rows`.
    fn scatter_rows(
        &self,
        _name: &'static str,
        g: &Tensor,
        t: Targets,
        c: usize,
    ) -> Result<Tensor> {
        let Targets { classes: t, ignore } = t;
        let nr = t.len();
        Ok(by_float!(g.dtype(), |T| {
            let v = with_slice::<T, _>(g, |s| {
                let mut out = vec![T::of(0.0); nr * c];
                for (i, &ti) in t.iter().enumerate() {
                    if ti != ignore {
                        out[i * c + ti as usize] = s[i];
                    }
                }
                out
            })?;
            from_vec(v, &[nr, c])?
        }))
    }

    /// See `NnOps::embedding`.
    fn embedding(
        &self,
        _name: &'static str,
        w: &Tensor,
        ids: &[i64],
        zero_index: Option<i64>,
    ) -> Result<Tensor> {
        let dim = w.dims().last().copied().unwrap_or(1);
        Ok(by_float!(w.dtype(), |T| {
            let o = with_slice::<T, _>(w, |s| {
                let mut out = Vec::with_capacity(ids.len() * dim);
                for &i in ids {
                    if Some(i) == zero_index {
                        out.extend(std::iter::repeat_n(T::of(0.0), dim));
                    } else {
                        let r = i as usize * dim;
                        out.extend_from_slice(&s[r..r + dim]);
                    }
                }
                out
            })?;
            from_vec(o, &[ids.len(), dim])?
        }))
    }

    /// See `NnOps::embedding_backward`.
    fn embedding_backward(
        &self,
        _name: &'static str,
        g: &Tensor,
        ids: &[i64],
        v: usize,
        padding: Option<i64>,
    ) -> Result<Tensor> {
        let dim = g.dims().last().copied().unwrap_or(1);
        Ok(by_float!(g.dtype(), |T| {
            let o = with_slice::<T, _>(g, |s| {
                let mut out = vec![T::of(0.0); v * dim];
                for (k, &i) in ids.iter().enumerate() {
                    if Some(i) == padding {
                        continue;
                    }
                    let r = i as usize * dim;
                    for (o, &e) in out[r..r + dim].iter_mut().zip(&s[k * dim..(k + 1) * dim]) {
                        *o += e;
                    }
                }
                out
            })?;
            from_vec(o, &[v, dim])?
        }))
    }
}
