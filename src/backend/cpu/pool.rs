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
use crate::backend::pool::{PoolOps, Taps, Window, WindowAxis};
use crate::error::Result;

/// Planes per rayon task: small planes are batched so a task is worth its scheduling.
fn grain(plane: usize) -> usize {
    (8192 / plane.max(1)).max(1)
}

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
            .with_min_len(grain(in_plane + out_plane))
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

/// Whether every window of an axis lies inside the input with no gaps (no padding,
/// dilation 1, not adaptive, no ceil_mode overhang): the kernel's fast path.
fn dense(a: &WindowAxis) -> bool {
    !a.adaptive
        && a.padding == 0
        && a.dilation == 1
        && (a.output.max(1) - 1) * a.stride + a.kernel <= a.input
}

fn max_pool_plane<T: Real, A: Copy + 'static>(w: &Window, x: &[T], vals: &mut [T], args: &mut [A])
where
    usize: AsPrimitive<A>,
{
    let (iw_n, ow_n, kw_n) = (w.w.input, w.w.output, w.w.kernel);
    if dense(&w.h) && dense(&w.w) {
        for oh in 0..w.h.output {
            let h0 = oh * w.h.stride;
            for ow in 0..ow_n {
                let w0 = ow * w.w.stride;
                let mut best = x[h0 * iw_n + w0];
                let mut arg = 0;
                for kh in 0..w.h.kernel {
                    let row = &x[(h0 + kh) * iw_n + w0..(h0 + kh) * iw_n + w0 + kw_n];
                    for (kw, &v) in row.iter().enumerate() {
                        // PyTorch's rule: the first maximum wins, and the last NaN does.
                        if v > best || v.is_nan() {
                            best = v;
                            arg = kh * kw_n + kw;
                        }
                    }
                }
                vals[oh * ow_n + ow] = best;
                args[oh * ow_n + ow] = arg.as_();
            }
        }
        return;
    }
    for oh in 0..w.h.output {
        for ow in 0..ow_n {
            let mut best = T::neg_infinity();
            let mut arg = None;
            for kh in 0..w.h.kernel {
                let Some(ih) = w.h.pos(oh, kh) else {
                    continue;
                };
                let row = &x[ih * iw_n..(ih + 1) * iw_n];
                for kw in 0..kw_n {
                    let Some(iw) = w.w.pos(ow, kw) else {
                        continue;
                    };
                    let v = row[iw];
                    let k = kh * kw_n + kw;
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
            vals[oh * ow_n + ow] = best;
            args[oh * ow_n + ow] = arg.unwrap_or(0).as_();
        }
    }
}

fn max_pool_typed<T: Real, A: WithDType>(w: &Window, s: &[T]) -> Result<(Tensor, Tensor)>
where
    usize: AsPrimitive<A>,
{
    let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
    let planes = s.len().checked_div(ip).unwrap_or(0);
    let mut vals = vec![T::of(0.0); planes * op];
    let mut args: Vec<A> = vec![0usize.as_(); planes * op];
    if op > 0 && ip > 0 {
        let plane = |((v, a), x): ((&mut [T], &mut [A]), &[T])| max_pool_plane(w, x, v, a);
        if s.len() >= PAR_MIN {
            vals.par_chunks_mut(op)
                .zip(args.par_chunks_mut(op))
                .zip(s.par_chunks(ip))
                .with_min_len(grain(ip))
                .for_each(plane);
        } else {
            vals.chunks_mut(op)
                .zip(args.chunks_mut(op))
                .zip(s.chunks(ip))
                .for_each(plane);
        }
    }
    let dims = [planes, w.h.output, w.w.output];
    Ok((from_vec(vals, &dims)?, from_vec(args, &dims)?))
}

/// Run `$body` with `$a` the argmax positions as a slice of their storage type (u8, i32).
macro_rules! with_args {
    ($argmax:expr, |$a:ident| $body:expr) => {
        match $argmax.dtype() {
            candle_core::DType::U8 => with_slice::<u8, _>($argmax, |$a| $body),
            _ => with_slice::<i32, _>($argmax, |$a| $body),
        }
    };
}

/// The adjoint of max pooling on one plane: `g` added at each window's maximum.
fn scatter_plane<T: Real, A: AsPrimitive<usize>>(w: &Window, g: &[T], a: &[A], out: &mut [T]) {
    for (idx, (&gv, &k)) in g.iter().zip(a).enumerate() {
        let (oh, ow) = (idx / w.w.output, idx % w.w.output);
        if let Some((ih, iw)) = position(w, oh, ow, k.as_()) {
            out[ih * w.w.input + iw] += gv;
        }
    }
}

fn scatter_typed<T: Real, A: AsPrimitive<usize> + Sync>(w: &Window, g: &[T], a: &[A]) -> Vec<T> {
    let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
    let planes = a.len().checked_div(op).unwrap_or(0);
    let mut out = vec![T::of(0.0); planes * ip];
    if op == 0 || ip == 0 {
        return out;
    }
    let plane = |(o, (gs, a)): (&mut [T], (&[T], &[A]))| scatter_plane(w, gs, a, o);
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(ip)
            .zip(g.par_chunks(op).zip(a.par_chunks(op)))
            .with_min_len(grain(ip))
            .for_each(plane);
    } else {
        out.chunks_mut(ip)
            .zip(g.chunks(op).zip(a.chunks(op)))
            .for_each(plane);
    }
    out
}

fn gather_typed<T: Real, A: AsPrimitive<usize>>(w: &Window, x: &[T], a: &[A]) -> Vec<T> {
    let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
    a.iter()
        .enumerate()
        .map(|(idx, &k)| {
            let (p, r) = (idx / op, idx % op);
            match position(w, r / w.w.output, r % w.w.output, k.as_()) {
                Some((ih, iw)) => x[p * ip + ih * w.w.input + iw],
                None => T::of(0.0),
            }
        })
        .collect()
}

/// The first position of output `o`'s window at or after 0 (adaptive windows start there).
fn first_unpadded(a: &WindowAxis, o: usize) -> usize {
    if a.adaptive {
        return o * a.input / a.output.max(1);
    }
    let mut i = a.start(o);
    while i < 0 {
        i += a.dilation as isize;
    }
    i as usize
}

fn indices_typed<A: AsPrimitive<usize>>(w: &Window, a: &[A]) -> Vec<i64> {
    let op = (w.h.output * w.w.output).max(1);
    a.iter()
        .enumerate()
        .map(|(idx, &k)| {
            let r = idx % op;
            let (oh, ow) = (r / w.w.output, r % w.w.output);
            // A window wholly in the padding: PyTorch reports its first position past the
            // padding, even though it lies outside the input.
            let (ih, iw) = position(w, oh, ow, k.as_())
                .unwrap_or_else(|| (first_unpadded(&w.h, oh), first_unpadded(&w.w, ow)));
            (ih * w.w.input + iw) as i64
        })
        .collect()
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

/// `resample` of each plane of `x` (from (rows.input, cols.input) to their outputs), or with
/// `adjoint` its adjoint (from the outputs back to the inputs).
fn resample_planes(x: &Tensor, rows: &Taps, cols: &Taps, adjoint: bool) -> Result<Tensor> {
    let inputs = [rows.input, cols.input];
    let outputs = [rows.output(), cols.output()];
    let (from, to) = match adjoint {
        false => (inputs, outputs),
        true => (outputs, inputs),
    };
    let (n_from, n_to) = (from[0] * from[1], to[0] * to[1]);
    Ok(by_float!(x.dtype(), |T| {
        let (v, planes) = with_slice::<T, _>(x, |s| {
            let planes = s.len().checked_div(n_from).unwrap_or(0);
            let v = per_plane(T::of(0.0), s, n_from, n_to, planes, |o, xs| {
                let mut tmp = vec![T::of(0.0); cols.input];
                match adjoint {
                    false => resample_plane(rows, cols, xs, o, &mut tmp),
                    true => resample_adjoint_plane(rows, cols, xs, o, &mut tmp),
                }
            });
            (v, planes)
        })?;
        from_vec(v, &[planes, to[0], to[1]])?
    }))
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
        let planes = argmax.elem_count() / (w.h.output * w.w.output).max(1);
        Ok(by_float!(g.dtype(), |T| {
            let v = with_slice::<T, _>(g, |gs| with_args!(argmax, |a| scatter_typed(&w, gs, a)))??;
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
        let planes = argmax.elem_count() / (w.h.output * w.w.output).max(1);
        Ok(by_float!(x.dtype(), |T| {
            let v = with_slice::<T, _>(x, |xs| with_args!(argmax, |a| gather_typed(&w, xs, a)))??;
            from_vec(v, &[planes, w.h.output, w.w.output])?
        }))
    }

    /// See `PoolOps::max_pool_indices`.
    fn max_pool_indices(&self, _name: &'static str, argmax: &Tensor, w: Window) -> Result<Tensor> {
        let planes = argmax.elem_count() / (w.h.output * w.w.output).max(1);
        let v = with_args!(argmax, |a| indices_typed(&w, a))?;
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
        resample_planes(x, rows, cols, false)
    }

    /// See `PoolOps::resample_adjoint`.
    fn resample_adjoint(
        &self,
        _name: &'static str,
        g: &Tensor,
        rows: &Taps,
        cols: &Taps,
    ) -> Result<Tensor> {
        resample_planes(g, rows, cols, true)
    }
}
