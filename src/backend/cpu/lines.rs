//! Kernels that walk a tensor as independent lines along one dim: reductions
//! (max, argmax, prod), scans (cumsum, cumprod, a linear recurrence) and softmax.
//! Why not candle's: its cumsum multiplies by an n×n triangular matrix (O(n²) memory),
//! it has no cumprod, prod, linear recurrence or softmax, and its max/argmax run on one
//! thread.
//!
//! A contiguous tensor seen along `dim` is `outer × n × inner`. Each kernel processes
//! `w` lines side by side (`w = inner` neighbours share every row), so the inner loop
//! runs over contiguous memory whatever the dim. Work is split across rayon threads by
//! outer blocks, or by column groups of a block when there are few blocks.

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape, Tensor};
use num_traits::{Num, One, Zero};
use rayon::prelude::*;

use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::{LineKernel, Lines, ReduceOps};
use crate::error::{CandleContext, Result};

/// An element and the type its sums and products accumulate in (f64 for f32, as
/// PyTorch's CPU kernels accumulate): a type mapping; the arithmetic is num-traits'.
pub trait Elem: Copy + Send + Sync + PartialOrd + Default + 'static {
    type Acc: Num + Copy + Send + Sync;
    fn to_acc(self) -> Self::Acc;
    fn from_acc(a: Self::Acc) -> Self;
}

macro_rules! elem {
    ($t:ty, $acc:ty) => {
        impl Elem for $t {
            type Acc = $acc;
            #[inline(always)]
            fn to_acc(self) -> $acc {
                self as $acc
            }
            #[inline(always)]
            fn from_acc(a: $acc) -> Self {
                a as $t
            }
        }
    };
}

elem!(f32, f64);
elem!(f64, f64);
elem!(i64, i64);

/// NaN (never for integers).
#[inline(always)]
#[allow(clippy::eq_op)]
fn is_nan<T: PartialOrd>(v: T) -> bool {
    v != v
}

/// `w` lines side by side: input row `k` of the lines starts at `k * si` in each of `xs`,
/// output row `r` at `r * so` in `out`.
struct Lanes<'a, T> {
    xs: [&'a [T]; 2],
    si: usize,
    n: usize,
    w: usize,
}

impl<T: Copy> Lanes<'_, T> {
    #[inline(always)]
    fn row(&self, input: usize, k: usize) -> &[T] {
        &self.xs[input][k * self.si..k * self.si + self.w]
    }
}

impl<T: Copy> Lanes<'_, T> {
    /// The single line, when `w == 1` and its elements are adjacent.
    #[inline(always)]
    fn line(&self, input: usize) -> Option<&[T]> {
        (self.w == 1 && self.si == 1).then(|| &self.xs[input][..self.n])
    }
}

fn scan_lanes<T: Elem>(l: &Lanes<T>, out: &mut [T], so: usize, prod: bool, reverse: bool) {
    let init = if prod { T::Acc::one() } else { T::Acc::zero() };
    if let (Some(x), 1) = (l.line(0), so) {
        let mut acc = init;
        let mut step = |(o, &v): (&mut T, &T)| {
            acc = if prod {
                acc * v.to_acc()
            } else {
                acc + v.to_acc()
            };
            *o = T::from_acc(acc);
        };
        if reverse {
            out[..l.n].iter_mut().zip(x).rev().for_each(&mut step);
        } else {
            out[..l.n].iter_mut().zip(x).for_each(&mut step);
        }
        return;
    }
    let mut acc = vec![init; l.w];
    for step in 0..l.n {
        let k = if reverse { l.n - 1 - step } else { step };
        let x = l.row(0, k);
        let o = &mut out[k * so..k * so + l.w];
        for ((a, &v), o) in acc.iter_mut().zip(x).zip(o) {
            *a = if prod {
                *a * v.to_acc()
            } else {
                *a + v.to_acc()
            };
            *o = T::from_acc(*a);
        }
    }
}

fn linear_scan_lanes<T: Elem>(l: &Lanes<T>, out: &mut [T], so: usize, reverse: bool) {
    if let (Some(a), Some(b), 1) = (l.line(0), l.line(1), so) {
        let mut h = T::Acc::zero();
        let mut step = |((o, &a), &b): ((&mut T, &T), &T)| {
            h = a.to_acc() * h + b.to_acc();
            *o = T::from_acc(h);
        };
        if reverse {
            out[..l.n]
                .iter_mut()
                .zip(a)
                .zip(b)
                .rev()
                .for_each(&mut step);
        } else {
            out[..l.n].iter_mut().zip(a).zip(b).for_each(&mut step);
        }
        return;
    }
    let mut h = vec![T::Acc::zero(); l.w];
    for step in 0..l.n {
        let k = if reverse { l.n - 1 - step } else { step };
        let (a, b) = (l.row(0, k), l.row(1, k));
        let o = &mut out[k * so..k * so + l.w];
        for (((h, &a), &b), o) in h.iter_mut().zip(a).zip(b).zip(o) {
            *h = a.to_acc() * *h + b.to_acc();
            *o = T::from_acc(*h);
        }
    }
}

fn prod_lanes<T: Elem>(l: &Lanes<T>, out: &mut [T]) {
    if let Some(x) = l.line(0) {
        out[0] = T::from_acc(x.iter().fold(T::Acc::one(), |a, &v| a * v.to_acc()));
        return;
    }
    let mut acc = vec![T::Acc::one(); l.w];
    for k in 0..l.n {
        for (a, &v) in acc.iter_mut().zip(l.row(0, k)) {
            *a = *a * v.to_acc();
        }
    }
    for (o, a) in out[..l.w].iter_mut().zip(acc) {
        *o = T::from_acc(a);
    }
}

/// Whether `v` replaces the current best `cur` (NaN sticks; ties keep the first).
#[inline(always)]
fn beats<T: Elem>(v: T, cur: T, max: bool) -> bool {
    !is_nan(cur) && (is_nan(v) || if max { v > cur } else { v < cur })
}

fn extreme_lanes<T: Elem>(l: &Lanes<T>, out: &mut [T], max: bool) {
    if l.n == 0 {
        return;
    }
    if let Some(x) = l.line(0) {
        out[0] = x[1..]
            .iter()
            .fold(x[0], |b, &v| if beats(v, b, max) { v } else { b });
        return;
    }
    let best = &mut out[..l.w];
    best.copy_from_slice(l.row(0, 0));
    for k in 1..l.n {
        for (b, &v) in best.iter_mut().zip(l.row(0, k)) {
            if beats(v, *b, max) {
                *b = v;
            }
        }
    }
}

fn arg_extreme_lanes<T: Elem>(l: &Lanes<T>, out: &mut [i64], max: bool) {
    if l.n == 0 {
        return;
    }
    if let Some(x) = l.line(0) {
        let (mut best, mut at) = (x[0], 0);
        for (k, &v) in x.iter().enumerate().skip(1) {
            if beats(v, best, max) {
                best = v;
                at = k;
            }
        }
        out[0] = at as i64;
        return;
    }
    let mut best = l.row(0, 0).to_vec();
    let idx = &mut out[..l.w];
    idx.fill(0);
    for k in 1..l.n {
        for ((b, i), &v) in best.iter_mut().zip(idx.iter_mut()).zip(l.row(0, k)) {
            if beats(v, *b, max) {
                *b = v;
                *i = k as i64;
            }
        }
    }
}

fn softmax_line<T: Real + Elem>(x: &[T], out: &mut [T], log: bool) {
    // NaN is skipped by the max but propagates through the exp below, as in PyTorch.
    let m = x.iter().fold(
        f64::NEG_INFINITY,
        |m, &v| {
            if v.widen() > m {
                v.widen()
            } else {
                m
            }
        },
    );
    let mut s = 0f64;
    if log {
        s = x.iter().map(|&v| (v - T::of(m)).exp().to_f64()).sum();
        let shift = m + s.ln();
        for (o, &v) in out.iter_mut().zip(x) {
            *o = T::of(v.widen() - shift);
        }
    } else {
        for (o, &v) in out.iter_mut().zip(x) {
            *o = (v - T::of(m)).exp();
            s += o.widen();
        }
        let inv = 1.0 / s;
        for o in out.iter_mut() {
            *o = T::of(o.widen() * inv);
        }
    }
}

fn softmax_lanes<T: Real + Elem>(l: &Lanes<T>, out: &mut [T], so: usize, log: bool) {
    if let (Some(x), 1) = (l.line(0), so) {
        softmax_line(x, &mut out[..l.n], log);
        return;
    }
    let w = l.w;
    let mut m = vec![f64::NEG_INFINITY; w];
    for k in 0..l.n {
        for (m, &v) in m.iter_mut().zip(l.row(0, k)) {
            let v = v.widen();
            if v > *m {
                *m = v;
            }
        }
    }
    let mut s = vec![0f64; w];
    for k in 0..l.n {
        let o = &mut out[k * so..k * so + w];
        for (((o, s), &m), &v) in o.iter_mut().zip(s.iter_mut()).zip(&m).zip(l.row(0, k)) {
            let e = (v - T::of(m)).exp();
            *s += e.to_f64();
            if !log {
                *o = e;
            }
        }
    }
    for k in 0..l.n {
        let o = &mut out[k * so..k * so + w];
        if log {
            for (((o, s), &m), &v) in o.iter_mut().zip(&s).zip(&m).zip(l.row(0, k)) {
                *o = T::of(v.widen() - m - s.ln());
            }
        } else {
            for (o, s) in o.iter_mut().zip(&s) {
                *o = T::of(o.widen() / s);
            }
        }
    }
}

/// Run `f(lanes, out, so)` over every line. `m` output rows per line.
fn run_lines<T, U, F>(xs: &[&[T]], lines: Lines, m: usize, f: F) -> Vec<U>
where
    T: Copy + Send + Sync,
    U: Copy + Send + Sync + Default,
    F: Fn(&Lanes<T>, &mut [U], usize) + Sync,
{
    let Lines { outer, n, inner } = lines;
    let mut out = vec![U::default(); outer * m * inner];
    if out.is_empty() {
        return out;
    }
    let pair = |o: usize, lo: usize, len: usize| -> [&[T]; 2] {
        let mut p: [&[T]; 2] = [&[], &[]];
        if len > 0 {
            for (slot, x) in p.iter_mut().zip(xs) {
                *slot = &x[o + lo..o + lo + len];
            }
        }
        p
    };
    let total = outer * n.max(1) * inner;
    let threads = rayon::current_num_threads();
    let parallel = total >= PAR_MIN && threads > 1;
    let block_in = n * inner;
    let block_out = m * inner;
    let run_block = |o: usize, dst: &mut [U]| {
        let lanes = Lanes {
            xs: pair(o * block_in, 0, block_in),
            si: inner,
            n,
            w: inner,
        };
        f(&lanes, dst, inner);
    };
    if !parallel {
        out.chunks_mut(block_out)
            .enumerate()
            .for_each(|(o, dst)| run_block(o, dst));
    } else if inner == 1 || outer >= 2 * threads {
        // Enough blocks (or single lines): one task per run of blocks.
        let min_len = (PAR_MIN / block_in.max(1)).max(1);
        out.par_chunks_mut(block_out)
            .enumerate()
            .with_min_len(min_len)
            .for_each(|(o, dst)| run_block(o, dst));
    } else {
        // Few wide blocks: split each block's columns into groups, each computed into a
        // small buffer, then copied into place.
        let groups = (2 * threads).min(inner);
        let gw = inner.div_ceil(groups);
        for (o, dst) in out.chunks_mut(block_out).enumerate() {
            let parts: Vec<(usize, usize, Vec<U>)> = (0..inner.div_ceil(gw))
                .into_par_iter()
                .map(|g| {
                    let lo = g * gw;
                    let w = gw.min(inner - lo);
                    let span = if n == 0 { 0 } else { (n - 1) * inner + w };
                    let lanes = Lanes {
                        xs: pair(o * block_in, lo, span),
                        si: inner,
                        n,
                        w,
                    };
                    let mut buf = vec![U::default(); m * w];
                    f(&lanes, &mut buf, w);
                    (lo, w, buf)
                })
                .collect();
            for (lo, w, buf) in parts {
                for r in 0..m {
                    dst[r * inner + lo..r * inner + lo + w].copy_from_slice(&buf[r * w..r * w + w]);
                }
            }
        }
    }
    out
}

/// Kernels on one element type.
fn run_typed<T: Elem>(k: LineKernel, xs: &[&[T]], lines: Lines) -> candle_core::Result<Vec<T>> {
    let m = k.out_len(lines.n);
    Ok(match k {
        LineKernel::Scan { prod, reverse } => {
            run_lines(xs, lines, m, |l, o, so| scan_lanes(l, o, so, prod, reverse))
        }
        LineKernel::LinearScan { reverse } => run_lines(xs, lines, m, |l, o, so| {
            linear_scan_lanes(l, o, so, reverse)
        }),
        LineKernel::Extreme { max } => run_lines(xs, lines, m, |l, o, _| extreme_lanes(l, o, max)),
        LineKernel::Prod => run_lines(xs, lines, m, |l, o, _| prod_lanes(l, o)),
        LineKernel::ArgExtreme { .. } | LineKernel::Softmax { .. } => {
            candle_core::bail!("{}: wrong kernel dispatch", k.name())
        }
    })
}

fn slice<'a, T>(v: &'a [T], l: &Layout, op: &str) -> candle_core::Result<&'a [T]> {
    match l.contiguous_offsets() {
        Some((a, b)) => Ok(&v[a..b]),
        None => candle_core::bail!("{op}: expected a contiguous input"),
    }
}

/// A line kernel along `dim`, as a candle custom op.
pub struct LineOp {
    pub kernel: LineKernel,
    pub dim: usize,
}

impl LineOp {
    fn out_shape(&self, l: &Layout) -> Shape {
        let mut d = l.dims().to_vec();
        d[self.dim] = self.kernel.out_len(d[self.dim]);
        Shape::from(d)
    }
}

impl CustomOp1 for LineOp {
    fn name(&self) -> &'static str {
        self.kernel.name()
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let lines = Lines::new(l.dims(), self.dim);
        let k = self.kernel;
        let name = k.name();
        let out = match (k, s) {
            (LineKernel::ArgExtreme { max }, CpuStorage::F32(v)) => {
                CpuStorage::I64(run_lines(&[slice(v, l, name)?], lines, 1, |l, o, _| {
                    arg_extreme_lanes(l, o, max)
                }))
            }
            (LineKernel::ArgExtreme { max }, CpuStorage::F64(v)) => {
                CpuStorage::I64(run_lines(&[slice(v, l, name)?], lines, 1, |l, o, _| {
                    arg_extreme_lanes(l, o, max)
                }))
            }
            (LineKernel::ArgExtreme { max }, CpuStorage::I64(v)) => {
                CpuStorage::I64(run_lines(&[slice(v, l, name)?], lines, 1, |l, o, _| {
                    arg_extreme_lanes(l, o, max)
                }))
            }
            (LineKernel::Softmax { log }, CpuStorage::F32(v)) => CpuStorage::F32(run_lines(
                &[slice(v, l, name)?],
                lines,
                lines.n,
                |l, o, so| softmax_lanes(l, o, so, log),
            )),
            (LineKernel::Softmax { log }, CpuStorage::F64(v)) => CpuStorage::F64(run_lines(
                &[slice(v, l, name)?],
                lines,
                lines.n,
                |l, o, so| softmax_lanes(l, o, so, log),
            )),
            (LineKernel::Softmax { .. }, _) => {
                candle_core::bail!("{name}: expected a float32 or float64 input")
            }
            (_, CpuStorage::F32(v)) => CpuStorage::F32(run_typed(k, &[slice(v, l, name)?], lines)?),
            (_, CpuStorage::F64(v)) => CpuStorage::F64(run_typed(k, &[slice(v, l, name)?], lines)?),
            (_, CpuStorage::I64(v)) => CpuStorage::I64(run_typed(k, &[slice(v, l, name)?], lines)?),
            (_, s) => candle_core::bail!("{name}: unsupported storage dtype {:?}", s.dtype()),
        };
        Ok((out, self.out_shape(l)))
    }
}

impl CustomOp2 for LineOp {
    fn name(&self) -> &'static str {
        self.kernel.name()
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let lines = Lines::new(l1.dims(), self.dim);
        let k = self.kernel;
        let name = k.name();
        if l1.dims() != l2.dims() {
            candle_core::bail!("{name}: inputs differ in shape");
        }
        let out = match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => CpuStorage::F32(run_typed(
                k,
                &[slice(a, l1, name)?, slice(b, l2, name)?],
                lines,
            )?),
            (CpuStorage::F64(a), CpuStorage::F64(b)) => CpuStorage::F64(run_typed(
                k,
                &[slice(a, l1, name)?, slice(b, l2, name)?],
                lines,
            )?),
            (a, b) => candle_core::bail!(
                "{name}: unsupported storage dtypes {:?} and {:?}",
                a.dtype(),
                b.dtype()
            ),
        };
        Ok((out, self.out_shape(l1)))
    }
}

impl ReduceOps for Cpu {
    fn lines(&self, x: &Tensor, dim: usize, k: LineKernel) -> Result<Tensor> {
        x.apply_op1_no_bwd(&LineOp { kernel: k, dim }).op(k.name())
    }
    fn lines2(&self, a: &Tensor, b: &Tensor, dim: usize, k: LineKernel) -> Result<Tensor> {
        a.apply_op2_no_bwd(b, &LineOp { kernel: k, dim })
            .op(k.name())
    }
    fn block_sum(&self, x: &Tensor, reduced: &[usize]) -> Result<Option<Tensor>> {
        super::block_sum::block_sum(x, reduced)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reference_cumsum(x: &[f64], l: Lines) -> Vec<f64> {
        let mut out = x.to_vec();
        for o in 0..l.outer {
            for i in 0..l.inner {
                let mut acc = 0.0;
                for k in 0..l.n {
                    let p = o * l.n * l.inner + k * l.inner + i;
                    acc += x[p];
                    out[p] = acc;
                }
            }
        }
        out
    }

    #[test]
    fn scan_matches_reference_on_every_path() {
        // Shapes that take the serial, per-block and column-group paths.
        for dims in [[3usize, 5, 4], [1, 4000, 64], [512, 3, 40], [70000, 1, 1]] {
            for dim in 0..3 {
                let l = Lines::new(&dims, dim);
                let total: usize = dims.iter().product();
                let x: Vec<f64> = (0..total).map(|i| ((i * 7919) % 13) as f64 - 6.0).collect();
                let got = run_typed(
                    LineKernel::Scan {
                        prod: false,
                        reverse: false,
                    },
                    &[&x],
                    l,
                )
                .unwrap();
                assert_eq!(got, reference_cumsum(&x, l), "dims {dims:?} dim {dim}");
            }
        }
    }

    #[test]
    fn argmax_keeps_first_tie_and_nan() {
        let x = [1.0f64, 3.0, 3.0, f64::NAN, 5.0];
        let l = Lines::new(&[5], 0);
        let got = run_lines(&[&x[..]], l, 1, |l, o, _| arg_extreme_lanes(l, o, true));
        assert_eq!(got, vec![3]);
        let y = [1.0f64, 3.0, 3.0];
        let got = run_lines(&[&y[..]], Lines::new(&[3], 0), 1, |l, o, _| {
            arg_extreme_lanes(l, o, true)
        });
        assert_eq!(got, vec![1]);
    }
}
