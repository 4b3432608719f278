//! Element-wise kernels: unary functions, binary functions of two same-shape operands
//! (broadcast views allowed), float predicates. The defaults are candle's ops.

use crate::backend::cast::Convert;
use std::f64::consts::{FRAC_1_SQRT_2, LN_10, LN_2, PI};

use candle_core::op::CmpOp;
use candle_core::{DType, Tensor};

use super::not_implemented;
use crate::error::{CandleContext, Result};

/// A unary element-wise function.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum UnaryOp {
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
    Asin,
    Acos,
    Atan,
    Sinh,
    Cosh,
    Asinh,
    Acosh,
    Atanh,
    Sigmoid,
    Relu,
    /// `log(1 + exp(beta x)) / beta`, linear where `beta x > threshold`.
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

/// A binary element-wise function of two operands of one dtype and one shape.
#[derive(Clone, Copy, Debug, PartialEq)]
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
    /// The angle of the point (b, a): `atan(a / b)` in the right quadrant.
    Atan2,
    /// `sqrt(a^2 + b^2)` without overflow.
    Hypot,
    Max,
    Min,
    And,
    Or,
    Xor,
    /// A fused backward `g * f'(s)` of a pointwise `f`: the first operand is the
    /// gradient, the second what `f` saved (its output for sigmoid, else its input).
    Grad(UnaryOp),
}

/// A float predicate (`isnan`...) giving 0/1 bytes.
#[derive(Clone, Copy, Debug)]
pub enum Pred {
    IsNan,
    IsInf,
    IsFinite,
}

pub trait ElementwiseOps {
    /// `op(x)`, dense, in `x`'s dtype.
    fn unary(&self, name: &'static str, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
        candle_unary(name, op, x)
    }

    /// `op(a, b)` for `a` and `b` of one dtype and one shape, dense.
    fn binary(&self, name: &'static str, op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        candle_binary(name, op, a, b)
    }

    /// The fused backward `g * f'(s)` of `op` (`Bin::Grad`) written over `g`, the incoming
    /// gradient, which the caller knows nothing else holds: whether the device did (it
    /// leaves `g` as it was when not, and the caller makes a new buffer).
    fn grad_in_place(
        &self,
        _name: &'static str,
        _op: UnaryOp,
        _g: &Tensor,
        _s: &Tensor,
    ) -> Result<bool> {
        Ok(false)
    }

    /// `a op b` for `a` and `b` of one dtype and one shape, as 0/1 bytes (u8).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn compare(&self, name: &'static str, op: CmpOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        a.cmp(b, op).op(name)
    }

    /// `cond ? a : b` per element, all of one shape; `cond` holds 0/1 bytes (u8).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn select(&self, name: &'static str, cond: &Tensor, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        cond.where_cond(a, b).op(name)
    }

    /// `p(x)` as 0/1 bytes (u8).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn predicate(&self, name: &'static str, p: Pred, x: &Tensor) -> Result<Tensor> {
        let r = match p {
            Pred::IsNan => x.ne(x),
            Pred::IsInf => x.abs().and_then(|a| a.eq(f64::INFINITY)),
            // x - x is 0 exactly where x is finite (NaN for inf and NaN).
            Pred::IsFinite => x.sub(x).and_then(|d| d.eq(0f64)),
        };
        r.op(name)
    }
}

fn sigmoid(x: &Tensor) -> candle_core::Result<Tensor> {
    x.neg()?.exp()?.affine(1.0, 1.0)?.recip()
}

/// Unary ops on integers from candle's ops that take them (candle's float functions panic
/// on integers).
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn candle_unary_int(name: &'static str, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let r = match op {
        // PyTorch's uint8 negation wraps around: -x mod 256, by an i64 and a truncating cast.
        UnaryOp::Neg if x.dtype() == DType::U8 => x
            .cast(DType::I64)
            .and_then(|v| v.affine(-1.0, 0.0)?.cast(DType::U8)),
        UnaryOp::Neg => x.affine(-1.0, 0.0),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => (|| {
            let up = x.gt(0f64)?.cast(x.dtype())?;
            up.sub(&x.lt(0f64)?.cast(x.dtype())?)
        })(),
        UnaryOp::Square => x.mul(x),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => Ok(x.clone()),
        _ => return Err(not_implemented(name, x.device())),
    };
    r.op(name)
}

/// Unary ops from candle's own; those candle lacks, or computes unlike PyTorch (log1p,
/// round-half-to-even), are not implemented.
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn candle_unary(name: &'static str, op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_float() {
        return candle_unary_int(name, op, x);
    }
    let r = match op {
        UnaryOp::Neg => x.neg(),
        UnaryOp::Abs => x.abs(),
        UnaryOp::Sign => x.sign(),
        UnaryOp::Square => x.sqr(),
        UnaryOp::Reciprocal => x.recip(),
        UnaryOp::Exp => x.exp(),
        UnaryOp::Log => x.log(),
        UnaryOp::Log2 => x.log().and_then(|l| l.affine(1.0 / LN_2, 0.0)),
        UnaryOp::Log10 => x.log().and_then(|l| l.affine(1.0 / LN_10, 0.0)),
        UnaryOp::Sqrt => x.sqrt(),
        UnaryOp::Rsqrt => x.sqrt().and_then(|s| s.recip()),
        UnaryOp::Sin => x.sin(),
        UnaryOp::Cos => x.cos(),
        UnaryOp::Tan => x.sin().and_then(|s| s.div(&x.cos()?)),
        UnaryOp::Tanh => x.tanh(),
        UnaryOp::Sigmoid => sigmoid(x),
        UnaryOp::Relu => x.relu(),
        UnaryOp::Softplus { beta, threshold } => (|| {
            let bx = x.affine(beta, 0.0)?;
            let soft = bx.exp()?.affine(1.0, 1.0)?.log()?.affine(1.0 / beta, 0.0)?;
            bx.gt(threshold)?.where_cond(x, &soft)
        })(),
        UnaryOp::Gelu => x.gelu_erf(),
        UnaryOp::GeluTanh => x.gelu(),
        UnaryOp::Silu => x.silu(),
        UnaryOp::Erf => x.erf(),
        UnaryOp::Floor => x.floor(),
        UnaryOp::Ceil => x.ceil(),
        UnaryOp::PowScalar(e) => x.powf(e),
        UnaryOp::ScalarPow(b) => x.affine(b.ln(), 0.0).and_then(|y| y.exp()),
        UnaryOp::Log1p
        | UnaryOp::Expm1
        | UnaryOp::Asin
        | UnaryOp::Acos
        | UnaryOp::Atan
        | UnaryOp::Sinh
        | UnaryOp::Cosh
        | UnaryOp::Asinh
        | UnaryOp::Acosh
        | UnaryOp::Atanh
        | UnaryOp::Round
        | UnaryOp::Trunc
        | UnaryOp::Frac
        | UnaryOp::BitNot => return Err(not_implemented(name, x.device())),
    };
    r.op(name)
}

/// `g * f'(s)` with candle's ops.
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn candle_grad(f: UnaryOp, g: &Tensor, s: &Tensor) -> candle_core::Result<Option<Tensor>> {
    let d = match f {
        // s is the output y: y (1 - y)
        UnaryOp::Sigmoid => s.mul(&s.affine(-1.0, 1.0)?)?,
        // s is the output y: 1 - y^2
        UnaryOp::Tanh => s.sqr()?.affine(-1.0, 1.0)?,
        UnaryOp::Silu => {
            let sg = sigmoid(s)?;
            sg.mul(&s.mul(&sg.affine(-1.0, 1.0)?)?.affine(1.0, 1.0)?)?
        }
        UnaryOp::Gelu => {
            let cdf = s.affine(FRAC_1_SQRT_2, 0.0)?.erf()?.affine(0.5, 0.5)?;
            let pdf = s.sqr()?.affine(-0.5, 0.0)?.exp()?;
            cdf.add(&s.mul(&pdf)?.affine(1.0 / (2.0 * PI).sqrt(), 0.0)?)?
        }
        UnaryOp::GeluTanh => {
            let (k, c) = ((2.0 / PI).sqrt(), 0.044715);
            let x2 = s.sqr()?;
            let t = s.mul(&x2.affine(c, 1.0)?)?.affine(k, 0.0)?.tanh()?;
            let slope = x2.affine(3.0 * c * k, k)?;
            let right = s.mul(&t.sqr()?.affine(-1.0, 1.0)?)?.mul(&slope)?;
            t.affine(0.5, 0.5)?.add(&right.affine(0.5, 0.0)?)?
        }
        UnaryOp::Softplus { beta, threshold } => {
            let bx = s.affine(beta, 0.0)?;
            bx.gt(threshold)?
                .where_cond(&bx.ones_like()?, &sigmoid(&bx)?)?
        }
        _ => return Ok(None),
    };
    g.mul(&d).map(Some)
}

#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn candle_binary(name: &'static str, op: Bin, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let r = match op {
        Bin::Add => a.add(b),
        Bin::Sub => a.sub(b),
        Bin::Mul => a.mul(b),
        Bin::Div => a.div(b),
        Bin::Max => a.maximum(b),
        Bin::Min => a.minimum(b),
        // Integer division truncates (a zero divisor was refused before the kernel).
        Bin::TruncDiv if !a.dtype().is_float() => a.div(b),
        Bin::TruncDiv => (|| {
            let q = a.div(b)?;
            q.lt(0f64)?.where_cond(&q.ceil()?, &q.floor()?)
        })(),
        Bin::Grad(f) => match candle_grad(f, a, b).op(name)? {
            Some(t) => return Ok(t),
            None => return Err(not_implemented(name, a.device())),
        },
        Bin::Pow
        | Bin::FloorDiv
        | Bin::Rem
        | Bin::Fmod
        | Bin::Atan2
        | Bin::Hypot
        | Bin::And
        | Bin::Or
        | Bin::Xor => return Err(not_implemented(name, a.device())),
    };
    r.op(name)
}
