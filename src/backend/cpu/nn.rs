//! Fused nn kernels on the CPU: layer_norm's row statistics and normalised rows in one
//! pass per row (f64 accumulation), the row gather/scatter under nll_loss, embedding and
//! its backward. Why not candle's: layer_norm from candle's ops takes six passes and
//! five temporaries on one thread; candle's gather/index_add need index tensors and
//! cannot skip `ignore_index`/`padding_idx` rows.

use candle_core::Tensor;
use rayon::prelude::*;

use std::mem::MaybeUninit;

use super::dense::{by_float, from_vec, with_slice};
use super::elementwise::build;
use super::norm::lane_sum;
use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::nn::{Affine, NnOps, Targets};
use crate::error::Result;

/// Rows per parallel task: about `PAR_MIN` elements each.
fn rows_per_task(n: usize) -> usize {
    (PAR_MIN / n.max(1)).max(1)
}

fn layer_norm_rows<T: Real>(
    s: &[T],
    w: Option<&[T]>,
    b: Option<&[T]>,
    n: usize,
    eps: f64,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let rows = s.len().checked_div(n).unwrap_or(0);
    let (mut mu, mut rs) = (vec![T::of(0.0); rows], vec![T::of(0.0); rows]);
    let row = |o: &mut [MaybeUninit<T>], r: &[T], m: &mut T, q: &mut T| {
        let mean = lane_sum(r, |e| e) / n as f64;
        let var = lane_sum(r, |e| (e - mean).powi(2)) / n as f64;
        let (mt, rt) = (T::of(mean), T::of(1.0 / (var + eps).sqrt()));
        match (w, b) {
            (Some(w), Some(b)) => {
                for (((o, &e), &w), &b) in o.iter_mut().zip(r).zip(w).zip(b) {
                    o.write((e - mt) * rt * w + b);
                }
            }
            (Some(w), None) => {
                for ((o, &e), &w) in o.iter_mut().zip(r).zip(w) {
                    o.write((e - mt) * rt * w);
                }
            }
            (None, Some(b)) => {
                for ((o, &e), &b) in o.iter_mut().zip(r).zip(b) {
                    o.write((e - mt) * rt + b);
                }
            }
            (None, None) => {
                for (o, &e) in o.iter_mut().zip(r) {
                    o.write((e - mt) * rt);
                }
            }
        }
        *m = mt;
        *q = rt;
    };
    let y = build(s.len(), |y| {
        if n == 0 {
            return;
        }
        let k = rows_per_task(n);
        let task = |((o, r), (m, q)): RowTask<'_, T>| {
            for (((o, r), m), q) in o.chunks_mut(n).zip(r.chunks(n)).zip(m).zip(q) {
                row(o, r, m, q);
            }
        };
        if s.len() >= PAR_MIN {
            y.par_chunks_mut(k * n)
                .zip(s.par_chunks(k * n))
                .zip(mu.par_chunks_mut(k).zip(rs.par_chunks_mut(k)))
                .for_each(task);
        } else {
            task(((y, s), (&mut mu[..], &mut rs[..])));
        }
    });
    (y, mu, rs)
}

/// A task's rows: (output, input), (means, rstds).
type RowTask<'a, T> = (
    (&'a mut [MaybeUninit<T>], &'a [T]),
    (&'a mut [T], &'a mut [T]),
);

/// A backward task's rows: ((input gradient, output gradient), input), (means, rstds).
type GradTask<'a, T> = (
    ((&'a mut [MaybeUninit<T>], &'a [T]), &'a [T]),
    (&'a [T], &'a [T]),
);

/// Per-column sums of g·x̂ and of g over a task's rows (the weight's and bias' gradients).
type ParamSums = Option<(Vec<f64>, Vec<f64>)>;

/// A row's Σ g·w and Σ g·w·x̂ in f64, with 8 partial sums each so the loop vectorises.
#[inline(always)]
fn grad_row_sums<T: Real>(g: &[T], x: &[T], w: &[T], m: T, r: T) -> (f64, f64) {
    let (mut s, mut sx) = ([0.0f64; 8], [0.0f64; 8]);
    let (gc, xc, wc) = (g.chunks_exact(8), x.chunks_exact(8), w.chunks_exact(8));
    let tail = (gc.remainder(), xc.remainder(), wc.remainder());
    for ((g, x), w) in gc.zip(xc).zip(wc) {
        for l in 0..8 {
            let h = (g[l] * w[l]).widen();
            s[l] += h;
            sx[l] += h * ((x[l] - m) * r).widen();
        }
    }
    let (mut s1, mut sx1) = (s.iter().sum::<f64>(), sx.iter().sum::<f64>());
    for ((&g, &x), &w) in tail.0.iter().zip(tail.1).zip(tail.2) {
        let h = (g * w).widen();
        s1 += h;
        sx1 += h * ((x - m) * r).widen();
    }
    (s1, sx1)
}

/// layer_norm's backward in two passes per row: the row's Σ g·w and Σ g·w·x̂, then
/// `gx = rstd · (g·w - mean(g·w) - x̂ · mean(g·w·x̂))`; with `params`, each task also sums
/// g·x̂ and g per column.
fn layer_norm_grad_rows<T: Real>(
    g: &[T],
    x: &[T],
    (mu, rs): (&[T], &[T]),
    w: Option<&[T]>,
    n: usize,
    params: bool,
) -> (Vec<T>, ParamSums) {
    let ones;
    let w = match w {
        Some(w) => w,
        None => {
            ones = vec![T::of(1.0); n];
            &ones
        }
    };
    let mut sums: ParamSums = None;
    let gx = build(g.len(), |gx| {
        if n == 0 {
            return;
        }
        let task = |(((o, g), x), (mu, rs)): GradTask<'_, T>| {
            let mut p = params.then(|| (vec![0.0f64; n], vec![0.0f64; n]));
            let rows = o.chunks_mut(n).zip(g.chunks(n)).zip(x.chunks(n));
            for (((o, g), x), (&m, &r)) in rows.zip(mu.iter().zip(rs)) {
                let (s, sx) = grad_row_sums(g, x, w, m, r);
                let (mg, mgx) = (T::of(s / n as f64), T::of(sx / n as f64));
                for (((o, &g), &x), &w) in o.iter_mut().zip(g).zip(x).zip(w) {
                    o.write(r * (g * w - mg - (x - m) * r * mgx));
                }
                if let Some((dw, db)) = p.as_mut() {
                    for (((dw, db), &g), &x) in dw.iter_mut().zip(db.iter_mut()).zip(g).zip(x) {
                        *dw += (g * ((x - m) * r)).widen();
                        *db += g.widen();
                    }
                }
            }
            p
        };
        let add = |a: ParamSums, b: ParamSums| match (a, b) {
            (Some((mut aw, mut ab)), Some((bw, bb))) => {
                aw.iter_mut().zip(bw).for_each(|(a, b)| *a += b);
                ab.iter_mut().zip(bb).for_each(|(a, b)| *a += b);
                Some((aw, ab))
            }
            (a, b) => a.or(b),
        };
        let k = rows_per_task(n);
        sums = if g.len() >= PAR_MIN {
            gx.par_chunks_mut(k * n)
                .zip(g.par_chunks(k * n))
                .zip(x.par_chunks(k * n))
                .zip(mu.par_chunks(k).zip(rs.par_chunks(k)))
                .map(task)
                .reduce(|| None, add)
        } else {
            task((((gx, g), x), (mu, rs)))
        };
    });
    (gx, sums)
}

/// The values of a dense int64 index tensor.
fn indices(t: &Tensor) -> Result<Vec<i64>> {
    with_slice::<i64, _>(t, <[i64]>::to_vec)
}

impl NnOps for Cpu {
    /// See `NnOps::layer_norm`.
    fn layer_norm(
        &self,
        _name: &'static str,
        x: &Tensor,
        affine: Affine<'_>,
        n: usize,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let dims = x.dims().to_vec();
        Ok(by_float!(x.dtype(), |T| {
            let param =
                |p: Option<&Tensor>| p.map(|p| with_slice::<T, _>(p, <[T]>::to_vec)).transpose();
            let (w, b) = (param(affine.weight)?, param(affine.bias)?);
            let (y, mu, rs) = with_slice::<T, _>(x, |s| {
                layer_norm_rows(s, w.as_deref(), b.as_deref(), n, eps)
            })?;
            let rows = mu.len();
            (
                from_vec(y, &dims)?,
                from_vec(mu, &[rows])?,
                from_vec(rs, &[rows])?,
            )
        }))
    }

    /// See `NnOps::layer_norm_backward`.
    fn layer_norm_backward(
        &self,
        _name: &'static str,
        g: &Tensor,
        x: &Tensor,
        stats: (&Tensor, &Tensor),
        w: Option<&Tensor>,
        n: usize,
        params: bool,
    ) -> Result<(Tensor, Option<(Tensor, Tensor)>)> {
        let dims = x.dims().to_vec();
        Ok(by_float!(x.dtype(), |T| {
            let w = w
                .map(|w| with_slice::<T, _>(w, <[T]>::to_vec))
                .transpose()?;
            let (mu, rs) = (
                with_slice::<T, _>(stats.0, <[T]>::to_vec)?,
                with_slice::<T, _>(stats.1, <[T]>::to_vec)?,
            );
            let (gx, sums) = with_slice::<T, _>(g, |g| {
                with_slice::<T, _>(x, |x| {
                    layer_norm_grad_rows(g, x, (&mu, &rs), w.as_deref(), n, params)
                })
            })??;
            let column = |v: Vec<f64>| from_vec(v.into_iter().map(T::of).collect(), &[n]);
            let sums = match sums {
                Some((dw, db)) => Some((column(dw)?, column(db)?)),
                None if params => Some((column(vec![0.0; n])?, column(vec![0.0; n])?)),
                None => None,
            };
            (from_vec(gx, &dims)?, sums)
        }))
    }

    /// See `NnOps::gather_rows`.
    fn gather_rows(&self, _name: &'static str, x: &Tensor, t: Targets<'_>) -> Result<Tensor> {
        let Targets { classes, ignore } = t;
        let t = &indices(classes)?;
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
        let Targets { classes, ignore } = t;
        let t = &indices(classes)?;
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
        ids: &Tensor,
        zero_index: Option<i64>,
    ) -> Result<Tensor> {
        let ids = &indices(ids)?;
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
        ids: &Tensor,
        v: usize,
        padding: Option<i64>,
    ) -> Result<Tensor> {
        let ids = &indices(ids)?;
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
