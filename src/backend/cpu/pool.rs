//! Pooling and resampling on the CPU, one plane per rayon task. Why not candle's: candle's
//! `max_pool2d`/`avg_pool2d` have no padding, dilation, ceil_mode or argmax, its
//! `upsample_nearest2d` has no bilinear, align_corners or PyTorch's index rule, and none of
//! them has a backward.

use candle_core::{Tensor, WithDType};
use num_traits::AsPrimitive;
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice};
use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::pool::{PoolOps, Taps, Window};
use crate::error::Result;

/// Run `f(out_plane, in_plane)` over matching planes, in parallel above `PAR_MIN`.
fn per_plane<T: Send + Sync, U: Send + Sync + Copy>(
    zero: U,
    input: &[T],
    in_plane: usize,
    out_plane: usize,
    planes: usize,
    f: impl Fn(&mut [U], &[T]) + Send + Sync,
) -> Vec<U> {
    let mut out = vec![zero; planes * out_plane];
    if in_plane == 0 || out_plane == 0 || planes == 0 {
        return out;
    }
    if out.len() + input.len() >= PAR_MIN {
        out.par_chunks_mut(out_plane)
            .zip(input.par_chunks(in_plane))
            .for_each(|(o, i)| f(o, i));
    } else {
        out.chunks_mut(out_plane)
            .zip(input.chunks(in_plane))
            .for_each(|(o, i)| f(o, i));
    }
    out
}

/// The input position (row, col) of window position `k` of output (oh, ow), if inside.
#[inline(always)]
fn position(w: &Window, oh: usize, ow: usize, k: usize) -> Option<(usize, usize)> {
    let (kh, kw) = (k / w.w.kernel, k % w.w.kernel);
    Some((w.h.pos(oh, kh)?, w.w.pos(ow, kw)?))
}

fn max_pool_plane<T: Real, A: Copy + 'static>(w: &Window, x: &[T], out: &mut [(T, A)])
where
    usize: AsPrimitive<A>,
{
    let (iw_n, ow_n) = (w.w.input, w.w.output);
    for oh in 0..w.h.output {
        for ow in 0..ow_n {
            let mut best = T::neg_infinity();
            let mut arg = None;
            for kh in 0..w.h.kernel {
                let Some(ih) = w.h.pos(oh, kh) else {
                    continue;
                };
                let row = &x[ih * iw_n..(ih + 1) * iw_n];
                for kw in 0..w.w.kernel {
                    let Some(iw) = w.w.pos(ow, kw) else {
                        continue;
                    };
                    let v = row[iw];
                    let k = kh * w.w.kernel + kw;
                    // PyTorch's rule: the first valid position unless a larger value or
                    // a NaN comes later (the first maximum wins, the last NaN does).
                    if arg.is_none() {
                        arg = Some(k);
                    }
                    if v > best || v.is_nan() {
                        best = v;
                        arg = Some(k);
                    }
                }
            }
            out[oh * ow_n + ow] = (best, arg.unwrap_or(0).as_());
        }
    }
}

fn max_pool_typed<T: Real, A: WithDType>(w: &Window, s: &[T]) -> Result<(Tensor, Tensor)>
where
    usize: AsPrimitive<A>,
{
    let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
    let planes = s.len().checked_div(ip).unwrap_or(0);
    let both: Vec<(T, A)> = per_plane((T::of(0.0), 0usize.as_()), s, ip, op, planes, |o, x| {
        max_pool_plane(w, x, o)
    });
    let (vals, args): (Vec<T>, Vec<A>) = both.into_iter().unzip();
    let dims = [planes, w.h.output, w.w.output];
    Ok((from_vec(vals, &dims)?, from_vec(args, &dims)?))
}

/// The argmax positions as usizes (U8 or U32 storage).
fn argmax_positions(argmax: &Tensor) -> Result<Vec<usize>> {
    Ok(match argmax.dtype() {
        candle_core::DType::U8 => {
            with_slice::<u8, _>(argmax, |a| a.iter().map(|&k| k as usize).collect())?
        }
        _ => with_slice::<i32, _>(argmax, |a| a.iter().map(|&k| k as usize).collect())?,
    })
}

/// One plane of `resample`; `tmp` holds one input row.
fn resample_plane<T: Real>(rows: &Taps, cols: &Taps, x: &[T], out: &mut [T], tmp: &mut [T]) {
    let (w_in, w_out) = (cols.input, cols.output());
    for i in 0..rows.output() {
        let (a0, rw) = rows.tap(i);
        tmp.iter_mut().for_each(|t| *t = T::of(0.0));
        for (k, &wk) in rw.iter().enumerate() {
            let (wk, r) = (T::of(wk), &x[(a0 + k) * w_in..(a0 + k + 1) * w_in]);
            for (t, &e) in tmp.iter_mut().zip(r) {
                *t += wk * e;
            }
        }
        let o = &mut out[i * w_out..(i + 1) * w_out];
        for (j, oj) in o.iter_mut().enumerate() {
            let (b0, cw) = cols.tap(j);
            let mut acc = T::of(0.0);
            for (&wk, &e) in cw.iter().zip(&tmp[b0..b0 + cw.len()]) {
                acc += T::of(wk) * e;
            }
            *oj = acc;
        }
    }
}

fn resample_adjoint_plane<T: Real>(
    rows: &Taps,
    cols: &Taps,
    g: &[T],
    out: &mut [T],
    tmp: &mut [T],
) {
    let (w_in, w_out) = (cols.input, cols.output());
    for i in 0..rows.output() {
        tmp.iter_mut().for_each(|t| *t = T::of(0.0));
        for (j, &gj) in g[i * w_out..(i + 1) * w_out].iter().enumerate() {
            let (b0, cw) = cols.tap(j);
            for (t, &wk) in tmp[b0..b0 + cw.len()].iter_mut().zip(cw) {
                *t += T::of(wk) * gj;
            }
        }
        let (a0, rw) = rows.tap(i);
        for (k, &wk) in rw.iter().enumerate() {
            let (wk, r) = (T::of(wk), &mut out[(a0 + k) * w_in..(a0 + k + 1) * w_in]);
            for (o, &t) in r.iter_mut().zip(tmp.iter()) {
                *o += wk * t;
            }
        }
    }
}

impl PoolOps for Cpu {
    /// See `PoolOps::max_pool`.
    fn max_pool(&self, _name: &'static str, x: &Tensor, w: Window) -> Result<(Tensor, Tensor)> {
        by_float!(x.dtype(), |T| {
            with_slice::<T, _>(x, |s| {
                if w.size() <= 256 {
                    max_pool_typed::<T, u8>(&w, s)
                } else {
                    max_pool_typed::<T, i32>(&w, s)
                }
            })?
        })
    }

    /// See `PoolOps::max_pool_scatter`.
    fn max_pool_scatter(
        &self,
        _name: &'static str,
        g: &Tensor,
        argmax: &Tensor,
        w: Window,
    ) -> Result<Tensor> {
        let args = argmax_positions(argmax)?;
        let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
        let planes = args.len().checked_div(op).unwrap_or(0);
        Ok(by_float!(g.dtype(), |T| {
            let v = with_slice::<T, _>(g, |s| {
                let mut out = vec![T::of(0.0); planes * ip];
                if op == 0 || ip == 0 {
                    return out;
                }
                let plane = |(o, (gs, a)): (&mut [T], (&[T], &[usize]))| {
                    for (idx, (&gv, &k)) in gs.iter().zip(a).enumerate() {
                        let (oh, ow) = (idx / w.w.output, idx % w.w.output);
                        if let Some((ih, iw)) = position(&w, oh, ow, k) {
                            o[ih * w.w.input + iw] += gv;
                        }
                    }
                };
                if out.len() >= PAR_MIN {
                    out.par_chunks_mut(ip)
                        .zip(s.par_chunks(op).zip(args.par_chunks(op)))
                        .for_each(plane);
                } else {
                    out.chunks_mut(ip)
                        .zip(s.chunks(op).zip(args.chunks(op)))
                        .for_each(plane);
                }
                out
            })?;
            from_vec(v, &[planes, w.h.input, w.w.input])?
        }))
    }

    /// See `PoolOps::max_pool_gather`.
    fn max_pool_gather(
        &self,
        _name: &'static str,
        x: &Tensor,
        argmax: &Tensor,
        w: Window,
    ) -> Result<Tensor> {
        let args = argmax_positions(argmax)?;
        let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
        let planes = args.len().checked_div(op).unwrap_or(0);
        Ok(by_float!(x.dtype(), |T| {
            let v = with_slice::<T, _>(x, |s| {
                args.iter()
                    .enumerate()
                    .map(|(idx, &k)| {
                        let (p, r) = (idx / op, idx % op);
                        match position(&w, r / w.w.output, r % w.w.output, k) {
                            Some((ih, iw)) => s[p * ip + ih * w.w.input + iw],
                            None => T::of(0.0),
                        }
                    })
                    .collect::<Vec<T>>()
            })?;
            from_vec(v, &[planes, w.h.output, w.w.output])?
        }))
    }

    /// See `PoolOps::max_pool_indices`.
    fn max_pool_indices(&self, _name: &'static str, argmax: &Tensor, w: Window) -> Result<Tensor> {
        let args = argmax_positions(argmax)?;
        let op = w.h.output * w.w.output;
        let planes = args.len().checked_div(op).unwrap_or(0);
        let v: Vec<i64> = args
            .iter()
            .enumerate()
            .map(|(idx, &k)| {
                let r = idx % op.max(1);
                position(&w, r / w.w.output, r % w.w.output, k)
                    .map_or(-1, |(ih, iw)| (ih * w.w.input + iw) as i64)
            })
            .collect();
        from_vec(v, &[planes, w.h.output, w.w.output])
    }

    /// See `PoolOps::resample`.
    fn resample(
        &self,
        _name: &'static str,
        x: &Tensor,
        rows: &Taps,
        cols: &Taps,
    ) -> Result<Tensor> {
        let (ip, op) = (rows.input * cols.input, rows.output() * cols.output());
        Ok(by_float!(x.dtype(), |T| {
            let (v, planes) = with_slice::<T, _>(x, |s| {
                let planes = s.len().checked_div(ip).unwrap_or(0);
                let v = per_plane(T::of(0.0), s, ip, op, planes, |o, xs| {
                    let mut tmp = vec![T::of(0.0); cols.input];
                    resample_plane(rows, cols, xs, o, &mut tmp)
                });
                (v, planes)
            })?;
            from_vec(v, &[planes, rows.output(), cols.output()])?
        }))
    }

    /// See `PoolOps::resample_adjoint`.
    fn resample_adjoint(
        &self,
        _name: &'static str,
        g: &Tensor,
        rows: &Taps,
        cols: &Taps,
    ) -> Result<Tensor> {
        let (ip, op) = (rows.input * cols.input, rows.output() * cols.output());
        Ok(by_float!(g.dtype(), |T| {
            let (v, planes) = with_slice::<T, _>(g, |s| {
                let planes = s.len().checked_div(op).unwrap_or(0);
                let v = per_plane(T::of(0.0), s, op, ip, planes, |o, gs| {
                    let mut tmp = vec![T::of(0.0); cols.input];
                    resample_adjoint_plane(rows, cols, gs, o, &mut tmp)
                });
                (v, planes)
            })?;
            from_vec(v, &[planes, rows.input, cols.input])?
        }))
    }
}
