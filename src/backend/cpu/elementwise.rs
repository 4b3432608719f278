//! Element-wise CPU kernels: one strided, rayon-parallel map for unary ops and one for
//! binary ops (operands already broadcast to the output shape), each specialised per
//! dtype and per op so the inner loop is a plain closure the compiler can vectorise.
//!
//! Why not candle's: its element-wise CPU ops run on one thread, and it lacks sigmoid,
//! softplus, Python-style floor division and remainder, integer powers, and the fused
//! one-pass backward of the pointwise activations.

use std::f64::consts::PI;
use std::mem::MaybeUninit;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, DType, InplaceOp2, Layout, Shape, Tensor};
use half::{bf16, f16};
use multiversion::multiversion;
use rayon::prelude::*;

use super::scalar::{signed, Int, Real};
use super::{Cpu, PAR_MIN};
use crate::backend::strided::row_offset;
use crate::backend::{Bin, ElementwiseOps, Pred, UnaryOp};
use crate::error::{CandleContext, Result};

// ---------------------------------------------------------------- traversal

fn is_scalar_like(l: &Layout) -> bool {
    l.stride()
        .iter()
        .zip(l.dims())
        .all(|(&s, &d)| s == 0 || d == 1)
}

/// Fill `out` (uninitialised) row by row, for operands with any last-dim stride:
/// `f(row_off_a, row_off_b, k)` is called with the row's first offsets and the column.
fn fill_rows<U: Send>(
    out: &mut [MaybeUninit<U>],
    dims: &[usize],
    row_starts: impl Fn(usize) -> (usize, usize) + Sync,
    f: impl Fn(usize, usize, usize) -> U + Sync,
) {
    let inner = dims.last().copied().unwrap_or(1);
    each_row(out, inner, row_starts, |o, (a0, b0)| {
        for (k, o) in o.iter_mut().enumerate() {
            o.write(f(a0, b0, k));
        }
    });
}

/// `row(out_row, row_starts(r))` for every row of `out` (rows of `inner` elements), on all
/// threads above `PAR_MIN` elements.
fn each_row<U: Send, S>(
    out: &mut [MaybeUninit<U>],
    inner: usize,
    row_starts: impl Fn(usize) -> S + Sync,
    row: impl Fn(&mut [MaybeUninit<U>], S) + Sync,
) {
    let inner = inner.max(1);
    let body = |(r, o): (usize, &mut [MaybeUninit<U>])| row(o, row_starts(r));
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(inner)
            .enumerate()
            .with_min_len((PAR_MIN / inner).max(1))
            .for_each(body);
    } else {
        out.chunks_mut(inner).enumerate().for_each(body);
    }
}

/// `out[i] = f(src[i])` on one thread.
#[inline(always)]
fn map_rows<T: Copy, U>(out: &mut [MaybeUninit<U>], src: &[T], f: impl Fn(T) -> U) {
    out.iter_mut().zip(src).for_each(|(o, &x)| {
        o.write(f(x));
    });
}

/// A vector of `n` elements written by `init`, which must write every element.
pub(crate) fn build<U>(n: usize, init: impl FnOnce(&mut [MaybeUninit<U>])) -> Vec<U> {
    let mut v: Vec<U> = Vec::with_capacity(n);
    init(&mut v.spare_capacity_mut()[..n]);
    // SAFETY: every caller's `init` writes all `n` elements (one write per output index).
    unsafe { v.set_len(n) };
    v
}

/// Contiguous map, parallel above `PAR_MIN` elements.
fn map_slice<T: Copy + Sync, U: Send>(
    src: &[T],
    out: &mut [MaybeUninit<U>],
    f: impl Fn(T) -> U + Sync,
) {
    map_slice_by(src, out, |o, s| map_rows(o, s, &f))
}

/// `map_slice` with the loop over a run of elements given; `out` may be any slice of
/// `src`'s length (a new buffer's, or one the loop writes over).
fn map_slice_by<T: Copy + Sync, O: Send>(
    src: &[T],
    out: &mut [O],
    rows: impl Fn(&mut [O], &[T]) + Sync,
) {
    if src.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_MIN / 4)
            .zip(src.par_chunks(PAR_MIN / 4))
            .for_each(|(o, s)| rows(o, s));
    } else {
        rows(out, src);
    }
}

/// `f` over every element of a strided tensor, into a new dense vector.
pub fn map1<T: Copy + Send + Sync, U: Send>(
    src: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    map1_by(src, l, &f, |o, s| map_rows(o, s, &f))
}

/// `map1` with the loop over a run of adjacent elements given.
pub(crate) fn map1_by<T: Copy + Send + Sync, U: Send>(
    src: &[T],
    l: &Layout,
    f: &(impl Fn(T) -> U + Sync),
    rows: impl Fn(&mut [MaybeUninit<U>], &[T]) + Sync,
) -> Vec<U> {
    let n = l.shape().elem_count();
    build(n, |out| {
        if n == 0 {
            return;
        }
        if let Some((a, b)) = l.contiguous_offsets() {
            map_slice_by(&src[a..b], out, rows);
        } else {
            let (dims, strides) = (l.dims(), l.stride());
            let last = strides.last().copied().unwrap_or(0);
            if last == 1 {
                let inner = dims.last().copied().unwrap_or(1);
                let start = |r| row_offset(dims, strides, l.start_offset(), r);
                return each_row(out, inner, start, |o, a0| rows(o, &src[a0..a0 + inner]));
            }
            fill_rows(
                out,
                dims,
                |r| (row_offset(dims, strides, l.start_offset(), r), 0),
                |a0, _, k| f(src[a0 + k * last]),
            );
        }
    })
}

#[inline(always)]
fn zip_write<T: Copy, U>(out: &mut [MaybeUninit<U>], a: &[T], b: &[T], f: &impl Fn(T, T) -> U) {
    out.iter_mut()
        .zip(a.iter().zip(b))
        .for_each(|(o, (&x, &y))| {
            o.write(f(x, y));
        });
}

/// `f(a, b)` over two strided tensors of the same shape (broadcast views allowed).
pub fn map2<T: Copy + Send + Sync, U: Send>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: impl Fn(T, T) -> U + Sync,
) -> Vec<U> {
    map2_by(a, la, b, lb, &f, |o, x, y| zip_write(o, x, y, &f))
}

/// `map2` with the loop over runs of adjacent elements in both operands given.
pub(crate) fn map2_by<T: Copy + Send + Sync, U: Send>(
    a: &[T],
    la: &Layout,
    b: &[T],
    lb: &Layout,
    f: &(impl Fn(T, T) -> U + Sync),
    zip: impl Fn(&mut [MaybeUninit<U>], &[T], &[T]) + Sync,
) -> Vec<U> {
    let n = la.shape().elem_count();
    build(n, |out| {
        if n == 0 {
            return;
        }
        match (la.contiguous_offsets(), lb.contiguous_offsets()) {
            (Some((a0, a1)), Some((b0, b1))) => {
                let (a, b) = (&a[a0..a1], &b[b0..b1]);
                if n >= PAR_MIN {
                    let c = PAR_MIN / 4;
                    out.par_chunks_mut(c)
                        .zip(a.par_chunks(c).zip(b.par_chunks(c)))
                        .for_each(|(o, (x, y))| zip(o, x, y));
                } else {
                    zip(out, a, b);
                }
            }
            (Some((a0, a1)), None) if is_scalar_like(lb) => {
                let y = b[lb.start_offset()];
                map_slice(&a[a0..a1], out, |x| f(x, y));
            }
            (None, Some((b0, b1))) if is_scalar_like(la) => {
                let x = a[la.start_offset()];
                map_slice(&b[b0..b1], out, |y| f(x, y));
            }
            _ => {
                let dims = la.dims();
                let (sa, sb) = (la.stride(), lb.stride());
                let (ka, kb) = (
                    sa.last().copied().unwrap_or(0),
                    sb.last().copied().unwrap_or(0),
                );
                let inner = dims.last().copied().unwrap_or(1);
                let starts = |r| {
                    (
                        row_offset(dims, sa, la.start_offset(), r),
                        row_offset(dims, sb, lb.start_offset(), r),
                    )
                };
                // Rows whose elements are adjacent (a bias added to every row, a slice of
                // a wider matrix) run the contiguous loop, which vectorises, row by row.
                match (ka, kb) {
                    (1, 1) => {
                        return each_row(out, inner, starts, |o, (a0, b0)| {
                            zip(o, &a[a0..a0 + inner], &b[b0..b0 + inner])
                        })
                    }
                    (1, 0) => {
                        return each_row(out, inner, starts, |o, (a0, b0)| {
                            let y = b[b0];
                            map_rows(o, &a[a0..a0 + inner], |x| f(x, y))
                        })
                    }
                    (0, 1) => {
                        return each_row(out, inner, starts, |o, (a0, b0)| {
                            let x = a[a0];
                            map_rows(o, &b[b0..b0 + inner], |y| f(x, y))
                        })
                    }
                    _ => {}
                }
                fill_rows(
                    out,
                    dims,
                    |r| {
                        (
                            row_offset(dims, sa, la.start_offset(), r),
                            row_offset(dims, sb, lb.start_offset(), r),
                        )
                    },
                    |a0, b0, k| f(a[a0 + k * ka], b[b0 + k * kb]),
                );
            }
        }
    })
}

// ---------------------------------------------------------------- unary ops

#[inline(always)]
pub(crate) fn sigmoid<F: Real>(x: F) -> F {
    F::of(1.0) / (F::of(1.0) + (-x).exp())
}

// GELU's loops are compiled for each vector width (`multiversion`: the wheel's baseline is
// SSE2): f32's GELU is branch-free math (`vmath`) that vectorises.

#[multiversion(targets = "simd")]
fn gelu_rows<F: Real>(out: &mut [MaybeUninit<F>], x: &[F]) {
    for (o, &v) in out.iter_mut().zip(x) {
        o.write(v.gelu());
    }
}

#[multiversion(targets = "simd")]
fn gelu_grad_rows<F: Real>(out: &mut [MaybeUninit<F>], g: &[F], x: &[F]) {
    for (o, (&g, &v)) in out.iter_mut().zip(g.iter().zip(x)) {
        o.write(g * v.gelu_grad());
    }
}

fn float_un<F: Real>(op: UnaryOp, v: &[F], l: &Layout) -> candle_core::Result<Vec<F>> {
    let one = F::of(1.0);
    let zero = F::of(0.0);
    Ok(match op {
        UnaryOp::Neg => map1(v, l, |x| -x),
        UnaryOp::Abs => map1(v, l, |x| x.abs()),
        // sign(NaN) is 0, as PyTorch's kernel gives
        UnaryOp::Sign => map1(v, l, |x| {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }),
        UnaryOp::Square => map1(v, l, |x| x * x),
        UnaryOp::Reciprocal => map1(v, l, |x| one / x),
        UnaryOp::Exp => map1(v, l, |x| x.exp()),
        UnaryOp::Log => map1(v, l, |x| x.ln()),
        UnaryOp::Log2 => map1(v, l, |x| x.log2()),
        UnaryOp::Log10 => map1(v, l, |x| x.log10()),
        UnaryOp::Log1p => map1(v, l, |x| x.ln_1p()),
        UnaryOp::Expm1 => map1(v, l, |x| x.exp_m1()),
        UnaryOp::Sqrt => map1(v, l, |x| x.sqrt()),
        UnaryOp::Rsqrt => map1(v, l, |x| one / x.sqrt()),
        UnaryOp::Sin => map1(v, l, |x| x.sin()),
        UnaryOp::Cos => map1(v, l, |x| x.cos()),
        UnaryOp::Tan => map1(v, l, |x| x.tan()),
        UnaryOp::Tanh => map1(v, l, |x| x.tanh()),
        UnaryOp::Asin => map1(v, l, |x| x.asin()),
        UnaryOp::Acos => map1(v, l, |x| x.acos()),
        UnaryOp::Atan => map1(v, l, |x| x.atan()),
        UnaryOp::Sinh => map1(v, l, |x| x.sinh()),
        UnaryOp::Cosh => map1(v, l, |x| x.cosh()),
        UnaryOp::Asinh => map1(v, l, |x| x.asinh()),
        UnaryOp::Acosh => map1(v, l, |x| x.acosh()),
        UnaryOp::Atanh => map1(v, l, |x| x.atanh()),
        UnaryOp::Sigmoid => map1(v, l, sigmoid),
        // NaN propagates (a comparison with NaN is false).
        UnaryOp::Relu => map1(v, l, |x| if x < zero { zero } else { x }),
        UnaryOp::Softplus { beta, threshold } => {
            let (b, t) = (F::of(beta), F::of(threshold));
            map1(v, l, move |x| {
                let bx = x * b;
                if bx > t {
                    x
                } else {
                    bx.exp().ln_1p() / b
                }
            })
        }
        UnaryOp::Gelu => map1_by(v, l, &|x: F| x.gelu(), gelu_rows),
        UnaryOp::GeluTanh => {
            let k = F::of((2.0 / std::f64::consts::PI).sqrt());
            let c = F::of(0.044715);
            map1(v, l, move |x| {
                F::of(0.5) * x * (one + (k * (x + c * x * x * x)).tanh())
            })
        }
        UnaryOp::Silu => map1(v, l, |x| x * sigmoid(x)),
        UnaryOp::Erf => map1(v, l, |x| x.erf()),
        UnaryOp::Floor => map1(v, l, |x| x.floor()),
        UnaryOp::Ceil => map1(v, l, |x| x.ceil()),
        UnaryOp::Round => map1(v, l, |x| x.round_even()),
        UnaryOp::Trunc => map1(v, l, |x| x.trunc()),
        UnaryOp::Frac => map1(v, l, |x| x - x.trunc()),
        UnaryOp::PowScalar(e) => {
            if e == 2.0 {
                map1(v, l, |x| x * x)
            } else if e == 1.0 {
                map1(v, l, |x| x)
            } else if e == 0.5 {
                map1(v, l, |x| x.sqrt())
            } else {
                let e = F::of(e);
                map1(v, l, move |x| x.powf(e))
            }
        }
        UnaryOp::ScalarPow(b) => {
            let b = F::of(b);
            map1(v, l, move |x| b.powf(x))
        }
        UnaryOp::BitNot => candle_core::bail!("bitwise not is not implemented for floating point"),
    })
}

/// `b ** e` on integers; a negative exponent gives 1/b**|e| truncated, as PyTorch's kernel.
#[inline]
fn int_pow<I: Int>(b: I, ei: i64) -> I {
    if ei < 0 {
        let bi: i64 = b.as_();
        return if bi == 1 {
            I::one()
        } else if bi == -1 {
            if ei % 2 == 0 {
                I::one()
            } else {
                b
            }
        } else {
            I::zero()
        };
    }
    let (mut base, mut exp, mut acc) = (b, ei as u64, I::one());
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wrapping_mul(&base);
        }
        base = base.wrapping_mul(&base);
        exp >>= 1;
    }
    acc
}

fn int_un<I: Int>(op: UnaryOp, v: &[I], l: &Layout) -> candle_core::Result<Vec<I>> {
    let zero = I::zero();
    Ok(match op {
        UnaryOp::Neg => map1(v, l, |x| x.wrapping_neg()),
        UnaryOp::Abs => map1(v, l, |x| {
            if signed::<I>() && x < zero {
                x.wrapping_neg()
            } else {
                x
            }
        }),
        UnaryOp::Sign => map1(v, l, |x| {
            if x > zero {
                I::one()
            } else if x < zero {
                I::one().wrapping_neg()
            } else {
                zero
            }
        }),
        UnaryOp::Square => map1(v, l, |x| x.wrapping_mul(&x)),
        UnaryOp::Relu => map1(v, l, |x| if x < zero { zero } else { x }),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => map1(v, l, |x| x),
        UnaryOp::BitNot => map1(v, l, |x| !x),
        UnaryOp::PowScalar(e) => {
            let e = e as i64;
            map1(v, l, move |x| int_pow(x, e))
        }
        other => candle_core::bail!("{other:?} is not implemented for integer tensors"),
    })
}

fn to_f32<T: Copy + Send + Sync>(v: &[T], l: &Layout, f: impl Fn(T) -> f32 + Sync) -> Vec<f32> {
    map1(v, l, f)
}

/// `CustomOp1` applying a `UnaryOp` to any storage dtype (half types compute in f32).
pub struct UnaryKernel(pub UnaryOp);

impl CustomOp1 for UnaryKernel {
    fn name(&self) -> &'static str {
        "elementwise-unary"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.0;
        let dense = Layout::contiguous(l.shape());
        let out = match s {
            CpuStorage::F32(v) => CpuStorage::F32(float_un(op, v, l)?),
            CpuStorage::F64(v) => CpuStorage::F64(float_un(op, v, l)?),
            CpuStorage::F16(v) => {
                let r = float_un(op, &to_f32(v, l, f16::to_f32), &dense)?;
                CpuStorage::F16(map1(&r, &dense, f16::from_f32))
            }
            CpuStorage::BF16(v) => {
                let r = float_un(op, &to_f32(v, l, bf16::to_f32), &dense)?;
                CpuStorage::BF16(map1(&r, &dense, bf16::from_f32))
            }
            CpuStorage::U8(v) => CpuStorage::U8(int_un(op, v, l)?),
            CpuStorage::I32(v) => CpuStorage::I32(int_un(op, v, l)?),
            CpuStorage::I64(v) => CpuStorage::I64(int_un(op, v, l)?),
            d => candle_core::bail!("{op:?}: unsupported dtype {:?}", d.dtype()),
        };
        Ok((out, l.shape().clone()))
    }
}

pub struct PredKernel(pub Pred);

fn pred<F: Real>(p: Pred, v: &[F], l: &Layout) -> Vec<u8> {
    match p {
        Pred::IsNan => map1(v, l, |x| x.is_nan() as u8),
        Pred::IsInf => map1(v, l, |x| x.is_infinite() as u8),
        Pred::IsFinite => map1(v, l, |x| x.is_finite() as u8),
    }
}

impl CustomOp1 for PredKernel {
    fn name(&self) -> &'static str {
        "elementwise-predicate"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let dense = Layout::contiguous(l.shape());
        let out = match s {
            CpuStorage::F32(v) => pred(self.0, v, l),
            CpuStorage::F64(v) => pred(self.0, v, l),
            CpuStorage::F16(v) => pred(self.0, &to_f32(v, l, f16::to_f32), &dense),
            CpuStorage::BF16(v) => pred(self.0, &to_f32(v, l, bf16::to_f32), &dense),
            d => candle_core::bail!("{:?}: unsupported dtype {:?}", self.0, d.dtype()),
        };
        Ok((CpuStorage::U8(out), l.shape().clone()))
    }
}

// ---------------------------------------------------------------- binary ops

#[inline(always)]
fn nan_max<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    if a != a || a > b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn nan_min<T: PartialOrd + Copy>(a: T, b: T) -> T {
    #[allow(clippy::eq_op)]
    if a != a || a < b {
        a
    } else {
        b
    }
}

#[inline(always)]
fn float_floor_div<F: Real>(a: F, b: F) -> F {
    let zero = F::of(0.0);
    if b == zero {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != zero && ((b < zero) != (m < zero)) {
        div -= F::of(1.0);
    }
    if div != zero {
        let f = div.floor();
        if div - f > F::of(0.5) {
            f + F::of(1.0)
        } else {
            f
        }
    } else {
        zero.copysign(a / b)
    }
}

#[inline(always)]
fn float_rem<F: Real>(a: F, b: F) -> F {
    let zero = F::of(0.0);
    let m = a % b;
    if m != zero && ((b < zero) != (m < zero)) {
        m + b
    } else {
        m
    }
}

fn float_bin<F: Real>(
    op: Bin,
    a: &[F],
    la: &Layout,
    b: &[F],
    lb: &Layout,
) -> candle_core::Result<Vec<F>> {
    Ok(match op {
        Bin::Add => map2(a, la, b, lb, |x, y| x + y),
        Bin::Sub => map2(a, la, b, lb, |x, y| x - y),
        Bin::Mul => map2(a, la, b, lb, |x, y| x * y),
        Bin::Div => map2(a, la, b, lb, |x, y| x / y),
        Bin::Pow => map2(a, la, b, lb, |x, y| x.powf(y)),
        Bin::FloorDiv => map2(a, la, b, lb, float_floor_div),
        Bin::TruncDiv => map2(a, la, b, lb, |x, y| (x / y).trunc()),
        Bin::Rem => map2(a, la, b, lb, float_rem),
        Bin::Fmod => map2(a, la, b, lb, |x, y| x % y),
        Bin::Atan2 => map2(a, la, b, lb, |x, y| x.atan2(y)),
        Bin::Hypot => map2(a, la, b, lb, |x, y| x.hypot(y)),
        Bin::Max => map2(a, la, b, lb, nan_max),
        Bin::Min => map2(a, la, b, lb, nan_min),
        Bin::Grad(f) => float_grad(f, a, la, b, lb)?,
        Bin::And | Bin::Or | Bin::Xor => {
            candle_core::bail!("bitwise {op:?} is not implemented for floating point tensors")
        }
    })
}

/// The fused backward `g * f'(s)` of one element, as a closure bound to `$k` for `$body`
/// (`s` is sigmoid's and tanh's output, the other functions' input): written once for the
/// kernel that makes a new buffer and the one that overwrites the incoming gradient.
macro_rules! with_grad_kernel {
    ($f:expr, $F:ty, |$k:ident| $body:expr) => {{
        let (one, half) = (<$F>::of(1.0), <$F>::of(0.5));
        match $f {
            UnaryOp::Sigmoid => {
                let $k = move |g: $F, y: $F| g * y * (one - y);
                $body
            }
            UnaryOp::Tanh => {
                let $k = move |g: $F, y: $F| g * (one - y * y);
                $body
            }
            UnaryOp::Silu => {
                let $k = move |g: $F, x: $F| {
                    let sg = sigmoid(x);
                    g * sg * (one + x * (one - sg))
                };
                $body
            }
            UnaryOp::Gelu => {
                let $k = move |g: $F, x: $F| g * x.gelu_grad();
                $body
            }
            UnaryOp::GeluTanh => {
                let (k, c) = (<$F>::of((2.0 / PI).sqrt()), <$F>::of(0.044715));
                let c3 = <$F>::of(3.0 * 0.044715);
                let $k = move |g: $F, x: $F| {
                    let x2 = x * x;
                    let t = (k * (x + c * x * x2)).tanh();
                    g * (half * (one + t) + half * x * (one - t * t) * k * (one + c3 * x2))
                };
                $body
            }
            UnaryOp::Softplus { beta, threshold } => {
                let (b, th) = (<$F>::of(beta), <$F>::of(threshold));
                let $k = move |g: $F, x: $F| {
                    let bx = x * b;
                    if bx > th {
                        g
                    } else {
                        g * sigmoid(bx)
                    }
                };
                $body
            }
            other => candle_core::bail!("{other:?} has no fused backward kernel"),
        }
    }};
}

/// `g * f'(s)` in one pass, into a new buffer.
fn float_grad<F: Real>(
    f: UnaryOp,
    g: &[F],
    lg: &Layout,
    s: &[F],
    ls: &Layout,
) -> candle_core::Result<Vec<F>> {
    with_grad_kernel!(f, F, |k| Ok(map2(g, lg, s, ls, k)))
}

/// `g * f'(s)` written over `g` (both dense, of one length).
fn float_grad_over<F: Real>(f: UnaryOp, g: &mut [F], s: &[F]) -> candle_core::Result<()> {
    with_grad_kernel!(f, F, |k| {
        map_slice_by(s, g, |g, s| {
            g.iter_mut().zip(s).for_each(|(g, &s)| *g = k(*g, s))
        });
        Ok(())
    })
}

/// The fused backward of `UnaryOp` written over the incoming gradient (`Cpu::grad_in_place`).
struct GradOver(UnaryOp);

impl InplaceOp2 for GradOver {
    fn name(&self) -> &'static str {
        "fused-grad-in-place"
    }
    fn cpu_fwd(
        &self,
        g: &mut CpuStorage,
        lg: &Layout,
        s: &CpuStorage,
        ls: &Layout,
    ) -> candle_core::Result<()> {
        let (Some((g0, g1)), Some((s0, s1))) = (lg.contiguous_offsets(), ls.contiguous_offsets())
        else {
            candle_core::bail!("{:?}: in-place gradient of a strided layout", self.0);
        };
        if g1 - g0 != s1 - s0 {
            candle_core::bail!("{:?}: gradient and saved tensor differ in length", self.0);
        }
        match (g, s) {
            (CpuStorage::F32(g), CpuStorage::F32(s)) => {
                float_grad_over(self.0, &mut g[g0..g1], &s[s0..s1])
            }
            (CpuStorage::F64(g), CpuStorage::F64(s)) => {
                float_grad_over(self.0, &mut g[g0..g1], &s[s0..s1])
            }
            (g, s) => candle_core::bail!(
                "{:?}: in-place gradient of {:?} with {:?}",
                self.0,
                g.dtype(),
                s.dtype()
            ),
        }
    }
}

/// `a / b` rounded toward zero, wrapping (`MIN / -1 == MIN`); 0 for a zero divisor (the
/// op refuses those first).
#[inline(always)]
fn trunc_div<I: Int>(a: I, b: I) -> I {
    if b == I::zero() {
        I::zero()
    } else if signed::<I>() && b == I::one().wrapping_neg() {
        a.wrapping_neg()
    } else {
        a / b
    }
}

/// The remainder of `trunc_div`, with the dividend's sign.
#[inline(always)]
fn trunc_rem<I: Int>(a: I, b: I) -> I {
    if b == I::zero() || (signed::<I>() && b == I::one().wrapping_neg()) {
        I::zero()
    } else {
        a % b
    }
}

#[inline(always)]
fn int_floor_div<I: Int>(a: I, b: I) -> I {
    let q = trunc_div(a, b);
    if signed::<I>() && trunc_rem(a, b) != I::zero() && ((a < I::zero()) != (b < I::zero())) {
        q.wrapping_sub(&I::one())
    } else {
        q
    }
}

#[inline(always)]
fn int_rem<I: Int>(a: I, b: I) -> I {
    let r = trunc_rem(a, b);
    if signed::<I>() && r != I::zero() && ((r < I::zero()) != (b < I::zero())) {
        r.wrapping_add(&b)
    } else {
        r
    }
}

fn int_bin<I: Int>(
    op: Bin,
    a: &[I],
    la: &Layout,
    b: &[I],
    lb: &Layout,
) -> candle_core::Result<Vec<I>> {
    Ok(match op {
        Bin::Add => map2(a, la, b, lb, |x, y| x.wrapping_add(&y)),
        Bin::Sub => map2(a, la, b, lb, |x, y| x.wrapping_sub(&y)),
        Bin::Mul => map2(a, la, b, lb, |x, y| x.wrapping_mul(&y)),
        Bin::Pow => map2(a, la, b, lb, |x, y| int_pow(x, y.as_())),
        Bin::FloorDiv => map2(a, la, b, lb, int_floor_div),
        Bin::TruncDiv => map2(a, la, b, lb, |x, y| trunc_div(x, y)),
        Bin::Rem => map2(a, la, b, lb, int_rem),
        Bin::Fmod => map2(a, la, b, lb, |x, y| trunc_rem(x, y)),
        Bin::Max => map2(a, la, b, lb, nan_max),
        Bin::Min => map2(a, la, b, lb, nan_min),
        Bin::And => map2(a, la, b, lb, |x, y| x & y),
        Bin::Or => map2(a, la, b, lb, |x, y| x | y),
        Bin::Xor => map2(a, la, b, lb, |x, y| x ^ y),
        Bin::Div | Bin::Atan2 | Bin::Hypot => {
            candle_core::bail!("{op:?} of integers is done in floating point")
        }
        Bin::Grad(f) => candle_core::bail!("{f:?} backward is for floating point tensors"),
    })
}

/// `CustomOp2` applying a `Bin` to two operands of one dtype and one (broadcast) shape.
pub struct BinaryKernel(pub Bin);

impl CustomOp2 for BinaryKernel {
    fn name(&self) -> &'static str {
        "elementwise-binary"
    }
    fn cpu_fwd(
        &self,
        s1: &CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.0;
        if l1.dims() != l2.dims() {
            candle_core::bail!(
                "{op:?}: operand shapes differ {:?} {:?}",
                l1.dims(),
                l2.dims()
            );
        }
        let dense = Layout::contiguous(l1.shape());
        let out = match (s1, s2) {
            (CpuStorage::F32(a), CpuStorage::F32(b)) => {
                CpuStorage::F32(float_bin(op, a, l1, b, l2)?)
            }
            (CpuStorage::F64(a), CpuStorage::F64(b)) => {
                CpuStorage::F64(float_bin(op, a, l1, b, l2)?)
            }
            (CpuStorage::F16(a), CpuStorage::F16(b)) => {
                let (x, y) = (to_f32(a, l1, f16::to_f32), to_f32(b, l2, f16::to_f32));
                let r = float_bin(op, &x, &dense, &y, &dense)?;
                CpuStorage::F16(map1(&r, &dense, f16::from_f32))
            }
            (CpuStorage::BF16(a), CpuStorage::BF16(b)) => {
                let (x, y) = (to_f32(a, l1, bf16::to_f32), to_f32(b, l2, bf16::to_f32));
                let r = float_bin(op, &x, &dense, &y, &dense)?;
                CpuStorage::BF16(map1(&r, &dense, bf16::from_f32))
            }
            (CpuStorage::U8(a), CpuStorage::U8(b)) => CpuStorage::U8(int_bin(op, a, l1, b, l2)?),
            (CpuStorage::I32(a), CpuStorage::I32(b)) => CpuStorage::I32(int_bin(op, a, l1, b, l2)?),
            (CpuStorage::I64(a), CpuStorage::I64(b)) => CpuStorage::I64(int_bin(op, a, l1, b, l2)?),
            (a, b) => candle_core::bail!(
                "{op:?}: operand dtypes differ ({:?} vs {:?})",
                a.dtype(),
                b.dtype()
            ),
        };
        Ok((out, l1.shape().clone()))
    }
}

impl ElementwiseOps for Cpu {
    fn unary(&self, name: &'static str, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        x.apply_op1_no_bwd(&UnaryKernel(op)).op(name)
    }
    fn binary(&self, name: &'static str, op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.apply_op2_no_bwd(b, &BinaryKernel(op)).op(name)
    }
    fn predicate(&self, name: &'static str, p: Pred, x: &Tensor) -> Result<Tensor> {
        x.apply_op1_no_bwd(&PredKernel(p)).op(name)
    }
    fn grad_in_place(
        &self,
        name: &'static str,
        op: UnaryOp,
        g: &Tensor,
        s: &Tensor,
    ) -> Result<bool> {
        let dense = |t: &Tensor| t.is_contiguous() && matches!(t.dtype(), DType::F32 | DType::F64);
        if g.dims() != s.dims() || g.dtype() != s.dtype() || !dense(g) || !dense(s) {
            return Ok(false);
        }
        g.inplace_op2(s, &GradOver(op)).op(name)?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_division_semantics() {
        assert_eq!(int_floor_div(-7i64, 2), -4);
        assert_eq!(int_floor_div(7i64, -2), -4);
        assert_eq!(int_rem(-7i64, 2), 1);
        assert_eq!(int_rem(7i64, -2), -1);
        assert_eq!(float_floor_div(-7.0f64, 2.0), -4.0);
        assert_eq!(float_rem(-7.0f64, 2.0), 1.0);
        assert_eq!(int_pow(-2i64, 3), -8);
        assert_eq!(int_pow(2i64, -1), 0);
        assert_eq!(int_pow(-1i64, -3), -1);
        assert!(nan_max(f32::NAN, 1.0).is_nan());
        assert!(nan_min(1.0, f32::NAN).is_nan());
    }

    #[test]
    fn strided_map_matches_dense() {
        let l = Layout::contiguous((2, 3)).transpose(0, 1).unwrap();
        let v: Vec<f32> = (0..6).map(|i| i as f32).collect();
        assert_eq!(map1(&v, &l, |x| x), vec![0., 3., 1., 4., 2., 5.]);
    }
}
