//! Batch norm's per-channel kernels on the CPU: statistics and gradient sums in f64, one
//! rayon task per channel; the normalisation and the input gradient in one pass each,
//! one task per (n, c) row. Why not candle's ops: a batch norm from them takes a transpose
//! and five temporaries per pass, each on one thread.

use candle_core::Tensor;
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice};
use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::norm::{ChannelCoef, NormOps};
use crate::error::{Error, Result};

/// The values of an f64 `(C,)` vector.
fn channels(v: &Tensor) -> Result<Vec<f64>> {
    with_slice::<f64, _>(v, <[f64]>::to_vec)
}

/// Per-channel pairs as two f64 `(C,)` tensors.
fn two_vectors(pairs: Vec<(f64, f64)>) -> Result<(Tensor, Tensor)> {
    let c = pairs.len();
    let (a, b): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
    Ok((from_vec(a, &[c])?, from_vec(b, &[c])?))
}

/// (N, C, S) of a tensor the op layer has already shaped so.
fn ncs(x: &Tensor) -> Result<(usize, usize, usize)> {
    match x.dims() {
        &[n, c, s] => Ok((n, c, s)),
        d => Err(Error::shape(format!(
            "batch_norm: expected (N, C, S), got {d:?}"
        ))),
    }
}

/// `f(c)` for every channel, in parallel when the tensor is large.
fn per_channel<R: Send>(c: usize, big: bool, f: impl Fn(usize) -> R + Send + Sync) -> Vec<R> {
    if big {
        (0..c).into_par_iter().map(f).collect()
    } else {
        (0..c).map(f).collect()
    }
}

/// `f(row, c, out_row)` over the rows of S elements of an (N, C, S) output.
fn per_row<T: Real>(
    n: usize,
    c: usize,
    s: usize,
    f: impl Fn(usize, usize, &mut [T]) + Send + Sync,
) -> Vec<T> {
    let mut out = vec![T::of(0.0); n * c * s];
    if s == 0 || c == 0 {
        return out;
    }
    let row = |(r, o): (usize, &mut [T])| f(r, r % c, o);
    if out.len() >= PAR_MIN {
        // Rows of a few elements are batched so a rayon task is worth its scheduling.
        out.par_chunks_mut(s)
            .enumerate()
            .with_min_len((8192 / s).max(1))
            .for_each(row);
    } else {
        out.chunks_mut(s).enumerate().for_each(row);
    }
    out
}

/// `sum f(e)` over `row` in f64 with 8 independent accumulators, so the adds pipeline
/// instead of waiting on each other.
#[inline]
pub(super) fn lane_sum<T: Real>(row: &[T], f: impl Fn(f64) -> f64) -> f64 {
    let mut acc = [0.0f64; 8];
    let chunks = row.chunks_exact(8);
    let rest = chunks.remainder();
    for c in chunks {
        for (a, &e) in acc.iter_mut().zip(c) {
            *a += f(e.widen());
        }
    }
    acc.iter().sum::<f64>() + rest.iter().map(|&e| f(e.widen())).sum::<f64>()
}

/// `(sum g, sum g * (x - centre))` over two rows, with 4 accumulators each.
#[inline]
fn lane_sums2<T: Real>(g: &[T], x: &[T], centre: f64) -> (f64, f64) {
    let (mut sg, mut sgx) = ([0.0f64; 4], [0.0f64; 4]);
    let (gc, xc) = (g.chunks_exact(4), x.chunks_exact(4));
    let (gr, xr) = (gc.remainder(), xc.remainder());
    for (a, b) in gc.zip(xc) {
        for i in 0..4 {
            let ge = a[i].widen();
            sg[i] += ge;
            sgx[i] += ge * (b[i].widen() - centre);
        }
    }
    let (mut s1, mut s2) = (sg.iter().sum::<f64>(), sgx.iter().sum::<f64>());
    for (&a, &b) in gr.iter().zip(xr) {
        s1 += a.widen();
        s2 += a.widen() * (b.widen() - centre);
    }
    (s1, s2)
}

impl NormOps for Cpu {
    /// See `NormOps::channel_stats`.
    fn channel_stats(&self, _name: &'static str, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (n, c, s) = ncs(x)?;
        let m = (n * s) as f64;
        let stats = by_float!(x.dtype(), |T| {
            with_slice::<T, _>(x, |v| {
                per_channel(c, v.len() >= PAR_MIN, |ch| {
                    let rows = (0..n).map(|i| &v[(i * c + ch) * s..(i * c + ch + 1) * s]);
                    let sum: f64 = rows.clone().map(|r| lane_sum(r, |e| e)).sum();
                    let mean = sum / m;
                    let sq: f64 = rows
                        .map(|r| {
                            lane_sum(r, |e| {
                                let d = e - mean;
                                d * d
                            })
                        })
                        .sum();
                    (mean, sq / m)
                })
            })
        })?;
        two_vectors(stats)
    }

    /// See `NormOps::channel_affine`.
    fn channel_affine(
        &self,
        _name: &'static str,
        x: &Tensor,
        centre: &Tensor,
        scale: &Tensor,
        shift: &Tensor,
    ) -> Result<Tensor> {
        let (n, c, s) = ncs(x)?;
        let (centre, scale, shift) = (channels(centre)?, channels(scale)?, channels(shift)?);
        Ok(by_float!(x.dtype(), |T| {
            let v = with_slice::<T, _>(x, |v| {
                per_row::<T>(n, c, s, |r, ch, o| {
                    let (m, k, b) = (T::of(centre[ch]), T::of(scale[ch]), T::of(shift[ch]));
                    for (oi, &e) in o.iter_mut().zip(&v[r * s..(r + 1) * s]) {
                        *oi = (e - m) * k + b;
                    }
                })
            })?;
            from_vec(v, &[n, c, s])?
        }))
    }

    /// See `NormOps::channel_grad_sums`.
    fn channel_grad_sums(
        &self,
        _name: &'static str,
        g: &Tensor,
        x: &Tensor,
        centre: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        let (n, c, s) = ncs(x)?;
        let centre = channels(centre)?;
        let sums = by_float!(x.dtype(), |T| {
            with_slice::<T, _>(g, |gv| {
                with_slice::<T, _>(x, |xv| {
                    per_channel(c, gv.len() >= PAR_MIN, |ch| {
                        let (mut sg, mut sgx) = (0.0f64, 0.0f64);
                        for i in 0..n {
                            let r = (i * c + ch) * s..(i * c + ch + 1) * s;
                            let (a, b) = lane_sums2(&gv[r.clone()], &xv[r], centre[ch]);
                            sg += a;
                            sgx += b;
                        }
                        (sg, sgx)
                    })
                })
            })?
        })?;
        two_vectors(sums)
    }

    /// See `NormOps::channel_combine`.
    fn channel_combine(
        &self,
        _name: &'static str,
        g: &Tensor,
        x: &Tensor,
        k: ChannelCoef<'_>,
    ) -> Result<Tensor> {
        let (n, c, s) = ncs(x)?;
        let (ka, kc, kb, kd) = (
            channels(k.a)?,
            channels(k.centre)?,
            channels(k.b)?,
            channels(k.d)?,
        );
        Ok(by_float!(x.dtype(), |T| {
            let v = with_slice::<T, _>(g, |gv| {
                with_slice::<T, _>(x, |xv| {
                    per_row::<T>(n, c, s, |r, ch, o| {
                        let (a, m, b, d) =
                            (T::of(ka[ch]), T::of(kc[ch]), T::of(kb[ch]), T::of(kd[ch]));
                        let rg = &gv[r * s..(r + 1) * s];
                        let rx = &xv[r * s..(r + 1) * s];
                        for ((oi, &ge), &xe) in o.iter_mut().zip(rg).zip(rx) {
                            *oi = a * ge + b * (xe - m) + d;
                        }
                    })
                })
            })??;
            from_vec(v, &[n, c, s])?
        }))
    }
}
