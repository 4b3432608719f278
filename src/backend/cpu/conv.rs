//! Convolution on the CPU: im2col + GEMM (the `gemm` crate candle's matmul uses, on
//! strided views, so transposed operands are never copied). Why not candle's: candle's
//! CPU conv2d has no groups in its backward, no weight-gradient kernel, and builds the
//! im2col buffer of the whole batch at once.
//!
//! Memory: the batch is split into one contiguous run of samples per worker; a worker
//! turns one sample at a time into columns, a tile of output rows at a time, so no
//! column buffer of the whole batch (or of a whole large sample) ever exists. A tile's
//! columns are about [`COLUMN_TILE`] bytes, so that the GEMM reads them from cache right
//! after im2col wrote them (or col2im reads them right after the GEMM); all workers'
//! buffers together never pass [`COLUMN_BUDGET`] (unless a single output row does).

use std::ops::Range;

use candle_core::{Tensor, WithDType};
use gemm::Parallelism;
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice};
use super::scalar::Real;
use super::Cpu;
use crate::backend::conv::{ConvGeometry, ConvOps};
use crate::error::{Error, Result};

/// The most bytes of im2col columns alive at once, over all workers.
pub const COLUMN_BUDGET: usize = 32 << 20;

/// The bytes of columns one GEMM takes at a time: about half a core's L2 cache.
pub const COLUMN_TILE: usize = 1 << 20;

/// How the work is split: `workers` runs of samples in parallel, each turning `rows`
/// output rows at a time into columns; `gemm` is the GEMM's own parallelism (used when
/// there are fewer samples than threads).
struct Plan {
    workers: usize,
    per_worker: usize,
    rows: usize,
    gemm: Parallelism,
}

fn plan<T>(geo: &ConvGeometry) -> Plan {
    let threads = rayon::current_num_threads().max(1);
    let workers = threads.min(geo.n).max(1);
    let per_worker = geo.n.div_ceil(workers).max(1);
    let row_bytes = geo.k() * geo.ow * std::mem::size_of::<T>();
    let tile = COLUMN_TILE.min(COLUMN_BUDGET / workers);
    let rows = (tile / row_bytes.max(1)).clamp(1, geo.oh.max(1));
    let gemm = if workers < threads {
        Parallelism::Rayon(threads)
    } else {
        Parallelism::None
    };
    Plan {
        workers,
        per_worker,
        rows,
        gemm,
    }
}

/// The tiles of output rows: `0..oh` in steps of `rows`.
fn tiles(oh: usize, rows: usize) -> impl Iterator<Item = Range<usize>> {
    (0..oh)
        .step_by(rows.max(1))
        .map(move |a| a..(a + rows).min(oh))
}

/// The output columns `ox` whose input column `ox * s + off` lies in `0..w`.
fn valid(ow: usize, w: usize, s: usize, off: isize) -> Range<usize> {
    let (s, w) = (s as isize, w as isize);
    let lo = if off >= 0 { 0 } else { (-off + s - 1) / s };
    let hi = if w - off <= 0 {
        0
    } else {
        (w - off + s - 1) / s
    };
    let (lo, hi) = (lo.max(0) as usize, (hi.max(0) as usize).min(ow));
    lo.min(hi)..hi
}

/// One im2col row at a time: calls `f(k, r, range, iy, ix0)` for row `k` of the columns,
/// tile row `r`, the output columns `range` whose input is in bounds, the input row `iy`
/// and the input column of `range.start`.
fn walk(
    geo: &ConvGeometry,
    rows: &Range<usize>,
    mut f: impl FnMut(usize, usize, Range<usize>, usize, usize),
) {
    let (sh, sw) = geo.stride;
    let (ph, pw) = geo.padding;
    let (dh, dw) = geo.dilation;
    for c in 0..geo.cin_g() {
        for i in 0..geo.kh {
            for j in 0..geo.kw {
                let k = (c * geo.kh + i) * geo.kw + j;
                let off = (j * dw) as isize - pw as isize;
                let xs = valid(geo.ow, geo.w, sw, off);
                for (r, oy) in rows.clone().enumerate() {
                    let iy = (oy * sh + i * dh) as isize - ph as isize;
                    if iy < 0 || iy >= geo.h as isize || xs.is_empty() {
                        f(k, r, 0..0, 0, 0);
                        continue;
                    }
                    let ix0 = (xs.start as isize * sw as isize + off) as usize;
                    f(k, r, xs.clone(), iy as usize, ix0);
                }
            }
        }
    }
}

/// Columns `[k, rows * ow]` of the group of channels starting at `c0` of one sample.
fn im2col<T: Real>(x: &[T], geo: &ConvGeometry, c0: usize, rows: &Range<usize>, cols: &mut [T]) {
    let (plane, ow, sw) = (geo.h * geo.w, geo.ow, geo.stride.1);
    let t = rows.len() * ow;
    let per_c = geo.kh * geo.kw;
    walk(geo, rows, |k, r, xs, iy, ix0| {
        let out = &mut cols[k * t + r * ow..k * t + (r + 1) * ow];
        if xs.is_empty() {
            out.fill(T::zero());
            return;
        }
        let src = &x[(c0 + k / per_c) * plane + iy * geo.w..][..geo.w];
        out[..xs.start].fill(T::zero());
        out[xs.end..].fill(T::zero());
        if sw == 1 {
            out[xs.clone()].copy_from_slice(&src[ix0..ix0 + xs.len()]);
        } else {
            for (o, e) in out[xs].iter_mut().zip(src[ix0..].iter().step_by(sw)) {
                *o = *e;
            }
        }
    });
}

/// The adjoint of `im2col`: add columns `[k, rows * ow]` back into a sample's channels.
fn col2im<T: Real>(cols: &[T], geo: &ConvGeometry, c0: usize, rows: &Range<usize>, x: &mut [T]) {
    let (plane, ow, sw) = (geo.h * geo.w, geo.ow, geo.stride.1);
    let t = rows.len() * ow;
    let per_c = geo.kh * geo.kw;
    walk(geo, rows, |k, r, xs, iy, ix0| {
        if xs.is_empty() {
            return;
        }
        let src = &cols[k * t + r * ow..k * t + (r + 1) * ow];
        let dst = &mut x[(c0 + k / per_c) * plane + iy * geo.w..][..geo.w];
        for (d, e) in dst[ix0..].iter_mut().step_by(sw).zip(&src[xs]) {
            *d += *e;
        }
    });
}

/// A strided matrix view: base offset into a slice, row and column strides.
#[derive(Clone, Copy)]
struct View {
    at: usize,
    rs: isize,
    cs: isize,
}

impl View {
    fn rows(at: usize, rs: usize) -> View {
        View {
            at,
            rs: rs as isize,
            cs: 1,
        }
    }
    fn t(self) -> View {
        View {
            at: self.at,
            rs: self.cs,
            cs: self.rs,
        }
    }
    /// The last element index of an `m x n` view, to bounds-check before the GEMM.
    fn end(&self, m: usize, n: usize) -> usize {
        if m == 0 || n == 0 {
            return self.at;
        }
        self.at + (m - 1) * self.rs as usize + (n - 1) * self.cs as usize
    }
}

/// `dst[m, n] (+)= lhs[m, k] · rhs[k, n]` on strided views of slices.
#[allow(clippy::too_many_arguments)]
fn matmul<T: Real>(
    (m, n, k): (usize, usize, usize),
    dst: &mut [T],
    d: View,
    accumulate: bool,
    lhs: &[T],
    a: View,
    rhs: &[T],
    b: View,
    par: Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    let fits =
        d.end(m, n) < dst.len() && (k == 0 || (a.end(m, k) < lhs.len() && b.end(k, n) < rhs.len()));
    assert!(fits, "conv: GEMM view out of bounds");
    // SAFETY: every element the views reach is inside its slice (checked just above);
    // dst does not alias lhs or rhs (distinct borrows).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr().add(d.at),
            d.cs,
            d.rs,
            accumulate,
            lhs.as_ptr().add(a.at.min(lhs.len())),
            a.cs,
            a.rs,
            rhs.as_ptr().add(b.at.min(rhs.len())),
            b.cs,
            b.rs,
            T::one(),
            T::one(),
            false,
            false,
            false,
            par,
        )
    }
}

/// Whether the columns of a sample are its input itself (1x1 kernel, stride 1, no padding).
fn pointwise(geo: &ConvGeometry) -> bool {
    geo.kh == 1 && geo.kw == 1 && geo.stride == (1, 1) && geo.padding == (0, 0)
}

fn forward<T: Real>(x: &[T], w: &[T], bias: Option<&[T]>, geo: &ConvGeometry) -> Vec<T> {
    let (xs, ys, l) = (geo.c_in * geo.h * geo.w, geo.c_out * geo.l(), geo.l());
    let (k, cg, og) = (geo.k(), geo.cin_g(), geo.cout_g());
    let mut y = vec![T::zero(); geo.n * ys];
    if let Some(b) = bias {
        for yc in y.chunks_mut(l.max(1)).zip(b.iter().cycle()) {
            yc.0.fill(*yc.1);
        }
    }
    if xs == 0 || ys == 0 {
        return y; // no input channels (or no output): y is the bias
    }
    let p = plan::<T>(geo);
    let direct = pointwise(geo);
    let run = |(yw, xw): (&mut [T], &[T])| {
        let mut cols = if direct {
            Vec::new()
        } else {
            vec![T::zero(); k * p.rows * geo.ow]
        };
        for (yn, xn) in yw.chunks_mut(ys).zip(xw.chunks(xs)) {
            for gi in 0..geo.groups {
                for rows in tiles(geo.oh, p.rows) {
                    let t = rows.len() * geo.ow;
                    let d = View::rows((gi * og) * l + rows.start * geo.ow, l);
                    let a = View::rows(gi * og * k, k);
                    if direct {
                        let b = View::rows(gi * cg * l + rows.start * geo.ow, l);
                        matmul((og, t, k), yn, d, bias.is_some(), w, a, xn, b, p.gemm);
                    } else {
                        im2col(xn, geo, gi * cg, &rows, &mut cols);
                        let b = View::rows(0, t);
                        matmul((og, t, k), yn, d, bias.is_some(), w, a, &cols, b, p.gemm);
                    }
                }
            }
        }
    };
    let per = p.per_worker;
    if p.workers > 1 {
        y.par_chunks_mut(per * ys)
            .zip(x.par_chunks(per * xs))
            .for_each(run);
    } else {
        y.chunks_mut((per * ys).max(1))
            .zip(x.chunks((per * xs).max(1)))
            .for_each(run);
    }
    y
}

/// For stride 1, the input gradient as a forward convolution of `g`: with the kernel
/// flipped and its channel dims swapped, and padding `d * (k - 1) - p`. Its GEMMs sum over
/// `c_out * kh * kw` (not over `c_out` alone, as col2im's do) and it needs no scatter.
/// `None` where that geometry does not give back exactly `h` x `w`.
fn flipped(geo: &ConvGeometry) -> Option<ConvGeometry> {
    if geo.stride != (1, 1) {
        return None;
    }
    let pad = |d: usize, k: usize, p: usize| (d * (k - 1)).checked_sub(p);
    let ph = pad(geo.dilation.0, geo.kh, geo.padding.0)?;
    let pw = pad(geo.dilation.1, geo.kw, geo.padding.1)?;
    let size = |o: usize, p: usize, d: usize, k: usize| (o + 2 * p).checked_sub(d * (k - 1));
    let h = size(geo.oh, ph, geo.dilation.0, geo.kh)?;
    let w = size(geo.ow, pw, geo.dilation.1, geo.kw)?;
    (h == geo.h && w == geo.w).then_some(ConvGeometry {
        c_in: geo.c_out,
        h: geo.oh,
        w: geo.ow,
        c_out: geo.c_in,
        padding: (ph, pw),
        oh: geo.h,
        ow: geo.w,
        ..*geo
    })
}

/// `w` (c_out, cin_g, kh, kw) as the flipped kernel (c_in, cout_g, kh, kw) of `flipped`.
fn flip_kernel<T: Real>(w: &[T], geo: &ConvGeometry) -> Vec<T> {
    let (cg, og, kk) = (geo.cin_g(), geo.cout_g(), geo.kh * geo.kw);
    let mut out = vec![T::zero(); w.len()];
    for gi in 0..geo.groups {
        for o in 0..og {
            for c in 0..cg {
                let src = &w[((gi * og + o) * cg + c) * kk..][..kk];
                let dst = &mut out[((gi * cg + c) * og + o) * kk..][..kk];
                for (d, e) in dst.iter_mut().zip(src.iter().rev()) {
                    *d = *e;
                }
            }
        }
    }
    out
}

fn input_grad<T: Real>(g: &[T], w: &[T], geo: &ConvGeometry) -> Vec<T> {
    if let Some(f) = flipped(geo).filter(|_| !pointwise(geo)) {
        return forward(g, &flip_kernel(w, geo), None, &f);
    }
    let (xs, ys, l) = (geo.c_in * geo.h * geo.w, geo.c_out * geo.l(), geo.l());
    let (k, cg, og) = (geo.k(), geo.cin_g(), geo.cout_g());
    let mut dx = vec![T::zero(); geo.n * xs];
    if xs == 0 || ys == 0 {
        return dx;
    }
    let p = plan::<T>(geo);
    let direct = pointwise(geo);
    let run = |(dxw, gw): (&mut [T], &[T])| {
        let mut cols = vec![T::zero(); if direct { 0 } else { k * p.rows * geo.ow }];
        for (dxn, gn) in dxw.chunks_mut(xs).zip(gw.chunks(ys)) {
            for gi in 0..geo.groups {
                for rows in tiles(geo.oh, p.rows) {
                    let t = rows.len() * geo.ow;
                    let a = View::rows(gi * og * k, k).t();
                    let b = View::rows(gi * og * l + rows.start * geo.ow, l);
                    if direct {
                        let d = View::rows(gi * cg * l + rows.start * geo.ow, l);
                        matmul((k, t, og), dxn, d, false, w, a, gn, b, p.gemm);
                    } else {
                        matmul(
                            (k, t, og),
                            &mut cols,
                            View::rows(0, t),
                            false,
                            w,
                            a,
                            gn,
                            b,
                            p.gemm,
                        );
                        col2im(&cols, geo, gi * cg, &rows, dxn);
                    }
                }
            }
        }
    };
    let per = p.per_worker;
    if p.workers > 1 {
        dx.par_chunks_mut(per * xs)
            .zip(g.par_chunks(per * ys))
            .for_each(run);
    } else {
        dx.chunks_mut((per * xs).max(1))
            .zip(g.chunks((per * ys).max(1)))
            .for_each(run);
    }
    dx
}

fn weight_grad<T: Real>(g: &[T], x: &[T], geo: &ConvGeometry) -> Vec<T> {
    let (xs, ys, l) = (geo.c_in * geo.h * geo.w, geo.c_out * geo.l(), geo.l());
    let (k, cg, og) = (geo.k(), geo.cin_g(), geo.cout_g());
    let size = geo.c_out * k;
    let p = plan::<T>(geo);
    let direct = pointwise(geo);
    let run = |(gw, xw): (&[T], &[T])| {
        let mut dw = vec![T::zero(); size];
        let mut cols = vec![T::zero(); if direct { 0 } else { k * p.rows * geo.ow }];
        for (gn, xn) in gw.chunks(ys).zip(xw.chunks(xs)) {
            for gi in 0..geo.groups {
                for rows in tiles(geo.oh, p.rows) {
                    let t = rows.len() * geo.ow;
                    let d = View::rows(gi * og * k, k);
                    let a = View::rows(gi * og * l + rows.start * geo.ow, l);
                    if direct {
                        let b = View::rows(gi * cg * l + rows.start * geo.ow, l).t();
                        matmul((og, k, t), &mut dw, d, true, gn, a, xn, b, p.gemm);
                    } else {
                        im2col(xn, geo, gi * cg, &rows, &mut cols);
                        let b = View::rows(0, t).t();
                        matmul((og, k, t), &mut dw, d, true, gn, a, &cols, b, p.gemm);
                    }
                }
            }
        }
        dw
    };
    let per = p.per_worker;
    let sum = |mut a: Vec<T>, b: Vec<T>| {
        for (u, v) in a.iter_mut().zip(b) {
            *u += v;
        }
        a
    };
    if geo.n * xs * ys == 0 {
        return vec![T::zero(); size];
    }
    if p.workers > 1 {
        g.par_chunks(per * ys)
            .zip(x.par_chunks(per * xs))
            .map(run)
            .reduce(|| vec![T::zero(); size], sum)
    } else {
        g.chunks((per * ys).max(1))
            .zip(x.chunks((per * xs).max(1)))
            .map(run)
            .fold(vec![T::zero(); size], sum)
    }
}

/// The elements of `t`, checked to number `len`.
fn check_len(name: &'static str, what: &str, got: usize, len: usize) -> Result<()> {
    if got != len {
        return Err(Error::shape(format!(
            "{name}: {what} has {got} elements, expected {len}"
        )));
    }
    Ok(())
}

fn product(d: [usize; 4]) -> usize {
    d.iter().product()
}

/// `f` over the elements of two operands, each given as (tensor, its name in errors, the
/// element count the geometry expects) and checked to hold that many.
fn with_operands<T: WithDType, R>(
    name: &'static str,
    (a, a_name, a_len): (&Tensor, &str, usize),
    (b, b_name, b_len): (&Tensor, &str, usize),
    f: impl FnOnce(&[T], &[T]) -> Result<R>,
) -> Result<R> {
    with_slice::<T, _>(a, |a_s| {
        with_slice::<T, _>(b, |b_s| {
            check_len(name, a_name, a_s.len(), a_len)?;
            check_len(name, b_name, b_s.len(), b_len)?;
            f(a_s, b_s)
        })?
    })?
}

impl ConvOps for Cpu {
    /// See `ConvOps::conv2d`.
    fn conv2d(
        &self,
        name: &'static str,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        Ok(by_float!(x.dtype(), |T| {
            let b = bias
                .map(|b| with_slice::<T, _>(b, |s| s.to_vec()))
                .transpose()?;
            let input = (x, "input", product(geo.input_dims()));
            let weight = (w, "weight", product(geo.weight_dims()));
            let y = with_operands::<T, _>(name, input, weight, |xs, ws| {
                if let Some(b) = &b {
                    check_len(name, "bias", b.len(), geo.c_out)?;
                }
                Ok(forward(xs, ws, b.as_deref(), geo))
            })?;
            from_vec(y, &geo.output_dims())?
        }))
    }

    /// See `ConvOps::conv2d_input_grad`.
    fn conv2d_input_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        w: &Tensor,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        Ok(by_float!(g.dtype(), |T| {
            let grad = (g, "grad_output", product(geo.output_dims()));
            let weight = (w, "weight", product(geo.weight_dims()));
            let dx =
                with_operands::<T, _>(name, grad, weight, |gs, ws| Ok(input_grad(gs, ws, geo)))?;
            from_vec(dx, &geo.input_dims())?
        }))
    }

    /// See `ConvOps::conv2d_weight_grad`.
    fn conv2d_weight_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        Ok(by_float!(g.dtype(), |T| {
            let grad = (g, "grad_output", product(geo.output_dims()));
            let input = (x, "input", product(geo.input_dims()));
            let dw =
                with_operands::<T, _>(name, grad, input, |gs, xs| Ok(weight_grad(gs, xs, geo)))?;
            from_vec(dw, &geo.weight_dims())?
        }))
    }
}
