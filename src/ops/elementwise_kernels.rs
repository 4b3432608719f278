//! Element-wise CPU kernels: one strided, rayon-parallel map for unary ops and one for
//! binary ops (operands already broadcast to the output shape), each specialised per
//! dtype and per op so the inner loop is a plain closure the compiler can vectorise.
//!
//! candle's own element-wise CPU ops run on one thread and lack sigmoid, softplus,
//! Python-style floor division and remainder, and integer powers; these fill the gaps.

use std::mem::MaybeUninit;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, CustomOp2, Layout, Shape};
use half::{bf16, f16};
use rayon::prelude::*;

use crate::ops::inplace::PAR_MIN;

// ---------------------------------------------------------------- traversal

/// The element offset of the first element of row `row` (rows = all dims but the last).
fn row_offset(dims: &[usize], strides: &[usize], start: usize, mut row: usize) -> usize {
    let mut off = start;
    for d in (0..dims.len().saturating_sub(1)).rev() {
        let n = dims[d];
        off += (row % n) * strides[d];
        row /= n;
    }
    off
}

fn is_scalar_like(l: &Layout) -> bool {
    l.stride()
        .iter()
        .zip(l.dims())
        .all(|(&s, &d)| s == 0 || d == 1)
}

/// Fill `out` (uninitialised, `n` elements) by `f(i_a, i_b)`-style access, row by row.
/// `get(row_off_a, row_off_b, k)` is called with the row's first offsets and the column.
fn fill_rows<U: Send>(
    out: &mut [MaybeUninit<U>],
    dims: &[usize],
    row_starts: impl Fn(usize) -> (usize, usize) + Sync,
    f: impl Fn(usize, usize, usize) -> U + Sync,
) {
    let inner = dims.last().copied().unwrap_or(1).max(1);
    let body = |(r, chunk): (usize, &mut [MaybeUninit<U>])| {
        let (a0, b0) = row_starts(r);
        for (k, o) in chunk.iter_mut().enumerate() {
            o.write(f(a0, b0, k));
        }
    };
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(inner)
            .enumerate()
            .with_min_len((PAR_MIN / inner).max(1))
            .for_each(body);
    } else {
        out.chunks_mut(inner).enumerate().for_each(body);
    }
}

/// A vector of `n` elements written by `init`, which must write every element.
fn build<U>(n: usize, init: impl FnOnce(&mut [MaybeUninit<U>])) -> Vec<U> {
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
    if src.len() >= PAR_MIN {
        out.par_chunks_mut(PAR_MIN / 4)
            .zip(src.par_chunks(PAR_MIN / 4))
            .for_each(|(o, s)| {
                o.iter_mut().zip(s).for_each(|(o, &x)| {
                    o.write(f(x));
                })
            });
    } else {
        out.iter_mut().zip(src).for_each(|(o, &x)| {
            o.write(f(x));
        });
    }
}

/// `f` over every element of a strided tensor, into a new dense vector.
pub fn map1<T: Copy + Send + Sync, U: Send>(
    src: &[T],
    l: &Layout,
    f: impl Fn(T) -> U + Sync,
) -> Vec<U> {
    let n = l.shape().elem_count();
    build(n, |out| {
        if n == 0 {
            return;
        }
        if let Some((a, b)) = l.contiguous_offsets() {
            map_slice(&src[a..b], out, f);
        } else {
            let (dims, strides) = (l.dims(), l.stride());
            let last = strides.last().copied().unwrap_or(0);
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
                        .for_each(|(o, (x, y))| zip_write(o, x, y, &f));
                } else {
                    zip_write(out, a, b, &f);
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

// ---------------------------------------------------------------- element types

/// Floating-point element math (f32, f64).
pub trait Real:
    Copy
    + Send
    + Sync
    + PartialOrd
    + std::ops::Add<Output = Self>
    + std::ops::Sub<Output = Self>
    + std::ops::Mul<Output = Self>
    + std::ops::Div<Output = Self>
    + std::ops::Rem<Output = Self>
    + std::ops::Neg<Output = Self>
{
    fn c(v: f64) -> Self;
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn log2(self) -> Self;
    fn log10(self) -> Self;
    fn ln_1p(self) -> Self;
    fn exp_m1(self) -> Self;
    fn sqrt(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn tan(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn floor(self) -> Self;
    fn ceil(self) -> Self;
    fn round_even(self) -> Self;
    fn trunc(self) -> Self;
    fn abs(self) -> Self;
    fn powf(self, e: Self) -> Self;
    fn is_nan(self) -> bool;
    fn is_infinite(self) -> bool;
    fn is_finite(self) -> bool;
    fn copysign(self, s: Self) -> Self;
}

macro_rules! impl_real {
    ($t:ty, $erf:path) => {
        impl Real for $t {
            #[inline(always)]
            fn c(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn exp(self) -> Self {
                <$t>::exp(self)
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn log2(self) -> Self {
                <$t>::log2(self)
            }
            #[inline(always)]
            fn log10(self) -> Self {
                <$t>::log10(self)
            }
            #[inline(always)]
            fn ln_1p(self) -> Self {
                <$t>::ln_1p(self)
            }
            #[inline(always)]
            fn exp_m1(self) -> Self {
                <$t>::exp_m1(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn tan(self) -> Self {
                <$t>::tan(self)
            }
            #[inline(always)]
            fn tanh(self) -> Self {
                <$t>::tanh(self)
            }
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn ceil(self) -> Self {
                <$t>::ceil(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                <$t>::round_ties_even(self)
            }
            #[inline(always)]
            fn trunc(self) -> Self {
                <$t>::trunc(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn powf(self, e: Self) -> Self {
                <$t>::powf(self, e)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            #[inline(always)]
            fn is_infinite(self) -> bool {
                <$t>::is_infinite(self)
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn copysign(self, s: Self) -> Self {
                <$t>::copysign(self, s)
            }
        }
    };
}

impl_real!(f32, candle_core::cpu::erf::erf_f32);
impl_real!(f64, candle_core::cpu::erf::erf_f64);

/// Integer element math (u8, i32, i64): wrapping like PyTorch's integer kernels.
pub trait Int: Copy + Send + Sync + PartialOrd + Eq {
    const ZERO: Self;
    const ONE: Self;
    const SIGNED: bool;
    fn wadd(self, o: Self) -> Self;
    fn wsub(self, o: Self) -> Self;
    fn wmul(self, o: Self) -> Self;
    fn wneg(self) -> Self;
    fn trunc_div(self, o: Self) -> Self;
    fn trunc_rem(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
    fn to_i64(self) -> i64;
    fn from_i64(v: i64) -> Self;
}

macro_rules! impl_int {
    ($t:ty, $signed:expr) => {
        impl Int for $t {
            const ZERO: Self = 0;
            const ONE: Self = 1;
            const SIGNED: bool = $signed;
            #[inline(always)]
            fn wadd(self, o: Self) -> Self {
                self.wrapping_add(o)
            }
            #[inline(always)]
            fn wsub(self, o: Self) -> Self {
                self.wrapping_sub(o)
            }
            #[inline(always)]
            fn wmul(self, o: Self) -> Self {
                self.wrapping_mul(o)
            }
            #[inline(always)]
            fn wneg(self) -> Self {
                self.wrapping_neg()
            }
            #[inline(always)]
            fn trunc_div(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_div(o)
                }
            }
            #[inline(always)]
            fn trunc_rem(self, o: Self) -> Self {
                if o == 0 {
                    0
                } else {
                    self.wrapping_rem(o)
                }
            }
            #[inline(always)]
            fn and(self, o: Self) -> Self {
                self & o
            }
            #[inline(always)]
            fn or(self, o: Self) -> Self {
                self | o
            }
            #[inline(always)]
            fn xor(self, o: Self) -> Self {
                self ^ o
            }
            #[inline(always)]
            fn not(self) -> Self {
                !self
            }
            #[inline(always)]
            fn to_i64(self) -> i64 {
                self as i64
            }
            #[inline(always)]
            fn from_i64(v: i64) -> Self {
                v as $t
            }
        }
    };
}

impl_int!(u8, false);
impl_int!(i32, true);
impl_int!(i64, true);

// ---------------------------------------------------------------- unary ops

/// A unary element-wise function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Un {
    Neg,
    Abs,
    Sign,
    Square,
    Reciprocal,
    Exp,
    Log,
    Log2,
    Log10,
    Log1p,
    Expm1,
    Sqrt,
    Rsqrt,
    Sin,
    Cos,
    Tan,
    Tanh,
    Sigmoid,
    Relu,
    Softplus {
        beta: f64,
        threshold: f64,
    },
    Gelu,
    GeluTanh,
    Silu,
    Erf,
    Floor,
    Ceil,
    Round,
    Trunc,
    Frac,
    /// `x ** e` for a scalar exponent.
    PowScalar(f64),
    /// `b ** x` for a scalar base.
    ScalarPow(f64),
    /// Bitwise not (logical not on bool data 0/1 is handled by the caller).
    BitNot,
}

#[inline(always)]
fn sigmoid<F: Real>(x: F) -> F {
    F::c(1.0) / (F::c(1.0) + (-x).exp())
}

fn float_un<F: Real>(op: Un, v: &[F], l: &Layout) -> Vec<F> {
    let one = F::c(1.0);
    let zero = F::c(0.0);
    match op {
        Un::Neg => map1(v, l, |x| -x),
        Un::Abs => map1(v, l, |x| x.abs()),
        // sign(NaN) is 0, as PyTorch's kernel gives
        Un::Sign => map1(v, l, |x| {
            if x > zero {
                one
            } else if x < zero {
                -one
            } else {
                zero
            }
        }),
        Un::Square => map1(v, l, |x| x * x),
        Un::Reciprocal => map1(v, l, |x| one / x),
        Un::Exp => map1(v, l, |x| x.exp()),
        Un::Log => map1(v, l, |x| x.ln()),
        Un::Log2 => map1(v, l, |x| x.log2()),
        Un::Log10 => map1(v, l, |x| x.log10()),
        Un::Log1p => map1(v, l, |x| x.ln_1p()),
        Un::Expm1 => map1(v, l, |x| x.exp_m1()),
        Un::Sqrt => map1(v, l, |x| x.sqrt()),
        Un::Rsqrt => map1(v, l, |x| one / x.sqrt()),
        Un::Sin => map1(v, l, |x| x.sin()),
        Un::Cos => map1(v, l, |x| x.cos()),
        Un::Tan => map1(v, l, |x| x.tan()),
        Un::Tanh => map1(v, l, |x| x.tanh()),
        Un::Sigmoid => map1(v, l, sigmoid),
        // NaN propagates (a comparison with NaN is false).
        Un::Relu => map1(v, l, |x| if x < zero { zero } else { x }),
        Un::Softplus { beta, threshold } => {
            let (b, t) = (F::c(beta), F::c(threshold));
            map1(v, l, move |x| {
                let bx = x * b;
                if bx > t {
                    x
                } else {
                    bx.exp().ln_1p() / b
                }
            })
        }
        Un::Gelu => {
            let r = F::c(std::f64::consts::FRAC_1_SQRT_2);
            map1(v, l, move |x| F::c(0.5) * x * (one + (x * r).erf()))
        }
        Un::GeluTanh => {
            let k = F::c((2.0 / std::f64::consts::PI).sqrt());
            let c = F::c(0.044715);
            map1(v, l, move |x| {
                F::c(0.5) * x * (one + (k * (x + c * x * x * x)).tanh())
            })
        }
        Un::Silu => map1(v, l, |x| x * sigmoid(x)),
        Un::Erf => map1(v, l, |x| x.erf()),
        Un::Floor => map1(v, l, |x| x.floor()),
        Un::Ceil => map1(v, l, |x| x.ceil()),
        Un::Round => map1(v, l, |x| x.round_even()),
        Un::Trunc => map1(v, l, |x| x.trunc()),
        Un::Frac => map1(v, l, |x| x - x.trunc()),
        Un::PowScalar(e) => {
            if e == 2.0 {
                map1(v, l, |x| x * x)
            } else if e == 1.0 {
                map1(v, l, |x| x)
            } else if e == 0.5 {
                map1(v, l, |x| x.sqrt())
            } else {
                let e = F::c(e);
                map1(v, l, move |x| x.powf(e))
            }
        }
        Un::ScalarPow(b) => {
            let b = F::c(b);
            map1(v, l, move |x| b.powf(x))
        }
        Un::BitNot => unreachable!("bitwise not on floats is rejected by the op"),
    }
}

/// `b ** e` on integers; a negative exponent gives 1/b**|e| truncated, as PyTorch's kernel.
#[inline]
fn int_pow<I: Int>(b: I, e: I) -> I {
    let ei = e.to_i64();
    if ei < 0 {
        let bi = b.to_i64();
        return if bi == 1 {
            I::ONE
        } else if bi == -1 {
            if ei % 2 == 0 {
                I::ONE
            } else {
                b
            }
        } else {
            I::ZERO
        };
    }
    let (mut base, mut exp, mut acc) = (b, ei as u64, I::ONE);
    while exp > 0 {
        if exp & 1 == 1 {
            acc = acc.wmul(base);
        }
        base = base.wmul(base);
        exp >>= 1;
    }
    acc
}

fn int_un<I: Int>(op: Un, v: &[I], l: &Layout) -> candle_core::Result<Vec<I>> {
    let zero = I::ZERO;
    Ok(match op {
        Un::Neg => map1(v, l, |x| x.wneg()),
        Un::Abs => map1(v, l, |x| if I::SIGNED && x < zero { x.wneg() } else { x }),
        Un::Sign => map1(v, l, |x| {
            if x > zero {
                I::ONE
            } else if x < zero {
                I::ONE.wneg()
            } else {
                zero
            }
        }),
        Un::Square => map1(v, l, |x| x.wmul(x)),
        Un::Relu => map1(v, l, |x| if x < zero { zero } else { x }),
        Un::Floor | Un::Ceil | Un::Round | Un::Trunc => map1(v, l, |x| x),
        Un::BitNot => map1(v, l, |x| x.not()),
        Un::PowScalar(e) => {
            let e = I::from_i64(e as i64);
            map1(v, l, move |x| int_pow(x, e))
        }
        other => candle_core::bail!("{other:?} is not implemented for integer tensors"),
    })
}

fn to_f32<T: Copy + Send + Sync>(v: &[T], l: &Layout, f: impl Fn(T) -> f32 + Sync) -> Vec<f32> {
    map1(v, l, f)
}

/// `CustomOp1` applying a `Un` to any storage dtype (half types compute in f32).
pub struct UnaryKernel(pub Un);

impl CustomOp1 for UnaryKernel {
    fn name(&self) -> &'static str {
        "elementwise-unary"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let op = self.0;
        let dense = Layout::contiguous(l.shape());
        let out = match s {
            CpuStorage::F32(v) => CpuStorage::F32(float_un(op, v, l)),
            CpuStorage::F64(v) => CpuStorage::F64(float_un(op, v, l)),
            CpuStorage::F16(v) => {
                let r = float_un(op, &to_f32(v, l, f16::to_f32), &dense);
                CpuStorage::F16(map1(&r, &dense, f16::from_f32))
            }
            CpuStorage::BF16(v) => {
                let r = float_un(op, &to_f32(v, l, bf16::to_f32), &dense);
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

/// A float predicate (`isnan`...) giving 0/1 bytes.
#[derive(Clone, Copy, Debug)]
pub enum Pred {
    IsNan,
    IsInf,
    IsFinite,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Bin {
    Add,
    Sub,
    Mul,
    Div,
    Pow,
    /// Python's `//`: rounds toward negative infinity.
    FloorDiv,
    /// Division rounded toward zero (`div(rounding_mode='trunc')`).
    TruncDiv,
    /// Python's `%`: the result has the divisor's sign.
    Rem,
    /// C's `fmod`: the result has the dividend's sign.
    Fmod,
    Max,
    Min,
    And,
    Or,
    Xor,
}

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
    let zero = F::c(0.0);
    if b == zero {
        return a / b;
    }
    let m = a % b;
    let mut div = (a - m) / b;
    if m != zero && ((b < zero) != (m < zero)) {
        div = div - F::c(1.0);
    }
    if div != zero {
        let f = div.floor();
        if div - f > F::c(0.5) {
            f + F::c(1.0)
        } else {
            f
        }
    } else {
        zero.copysign(a / b)
    }
}

#[inline(always)]
fn float_rem<F: Real>(a: F, b: F) -> F {
    let zero = F::c(0.0);
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
        Bin::Max => map2(a, la, b, lb, nan_max),
        Bin::Min => map2(a, la, b, lb, nan_min),
        Bin::And | Bin::Or | Bin::Xor => {
            candle_core::bail!("bitwise {op:?} is not implemented for floating point tensors")
        }
    })
}

#[inline(always)]
fn int_floor_div<I: Int>(a: I, b: I) -> I {
    let q = a.trunc_div(b);
    if I::SIGNED && a.trunc_rem(b) != I::ZERO && ((a < I::ZERO) != (b < I::ZERO)) {
        q.wsub(I::ONE)
    } else {
        q
    }
}

#[inline(always)]
fn int_rem<I: Int>(a: I, b: I) -> I {
    let r = a.trunc_rem(b);
    if I::SIGNED && r != I::ZERO && ((r < I::ZERO) != (b < I::ZERO)) {
        r.wadd(b)
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
        Bin::Add => map2(a, la, b, lb, |x, y| x.wadd(y)),
        Bin::Sub => map2(a, la, b, lb, |x, y| x.wsub(y)),
        Bin::Mul => map2(a, la, b, lb, |x, y| x.wmul(y)),
        Bin::Pow => map2(a, la, b, lb, int_pow),
        Bin::FloorDiv => map2(a, la, b, lb, int_floor_div),
        Bin::TruncDiv => map2(a, la, b, lb, |x, y| x.trunc_div(y)),
        Bin::Rem => map2(a, la, b, lb, int_rem),
        Bin::Fmod => map2(a, la, b, lb, |x, y| x.trunc_rem(y)),
        Bin::Max => map2(a, la, b, lb, nan_max),
        Bin::Min => map2(a, la, b, lb, nan_min),
        Bin::And => map2(a, la, b, lb, |x, y| x.and(y)),
        Bin::Or => map2(a, la, b, lb, |x, y| x.or(y)),
        Bin::Xor => map2(a, la, b, lb, |x, y| x.xor(y)),
        Bin::Div => candle_core::bail!("true division of integers is done in floating point"),
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

/// Whether any element of an integer tensor is zero (integer division by zero is an error).
pub fn has_zero(t: &candle_core::Tensor) -> candle_core::Result<bool> {
    if t.elem_count() == 0 {
        return Ok(false);
    }
    let z = t.eq(0f64)?.to_dtype(candle_core::DType::U32)?;
    Ok(z.flatten_all()?.max(0)?.to_scalar::<u32>()? > 0)
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
