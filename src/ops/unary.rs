//! Element-wise unary ops, the pointwise activations (sigmoid, silu, gelu, softplus)
//! among them. One table: forward, what is saved, backward. Also the non-differentiable
//! predicates (`isnan`...) and logical/bitwise not.
//!
//! The activations' backward is one fused pass `g * f'(s)` (`Bin::Grad`); when the
//! backward is itself recorded (`create_graph=True`) it is the composite of gradstream
//! ops below instead, so it can be differentiated again.

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend::Compare;
pub use crate::backend::UnaryOp;
use crate::backend::{self, Bin, Pred};
use crate::dtype::{default_float, DType};
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{
    add_scalar, binary, compare, div, mul, mul_scalar, pow_scalar, rsub_scalar, where_, BinaryOp,
    CompareOp,
};
use crate::ops::convert::to_dtype;
use crate::ops::creation;
use crate::tensor::Tensor;
use candle_core::op::CmpOp;

/// What a backward rule needs kept alive.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Saves {
    Nothing,
    Input,
    Output,
}

/// How an op treats bool and integer inputs.
#[derive(Clone, Copy, PartialEq, Eq)]
enum IntInputs {
    /// Computed in the default float dtype (`exp(int) -> float32`).
    ToFloat,
    /// Computed in the input's dtype (`abs(int) -> int`); bool is refused.
    Keep,
    /// Rounding: integers (and bools) come back unchanged.
    Identity,
    /// Floating point only, as in PyTorch.
    Refuse,
}

impl UnaryOp {
    /// The op's name and its backward node's (PyTorch's names).
    fn names(self) -> (&'static str, &'static str) {
        match self {
            UnaryOp::Neg => ("neg", "NegBackward0"),
            UnaryOp::Abs => ("abs", "AbsBackward0"),
            UnaryOp::Sign => ("sign", "SignBackward0"),
            UnaryOp::Square => ("square", "PowBackward0"),
            UnaryOp::Reciprocal => ("reciprocal", "ReciprocalBackward0"),
            UnaryOp::Exp => ("exp", "ExpBackward0"),
            UnaryOp::Log => ("log", "LogBackward0"),
            UnaryOp::Sqrt => ("sqrt", "SqrtBackward0"),
            UnaryOp::Rsqrt => ("rsqrt", "RsqrtBackward0"),
            UnaryOp::Sin => ("sin", "SinBackward0"),
            UnaryOp::Cos => ("cos", "CosBackward0"),
            UnaryOp::Log2 => ("log2", "Log2Backward0"),
            UnaryOp::Log10 => ("log10", "Log10Backward0"),
            UnaryOp::Log1p => ("log1p", "Log1PBackward0"),
            UnaryOp::Expm1 => ("expm1", "Expm1Backward0"),
            UnaryOp::Tan => ("tan", "TanBackward0"),
            UnaryOp::Tanh => ("tanh", "TanhBackward0"),
            UnaryOp::Asin => ("asin", "AsinBackward0"),
            UnaryOp::Acos => ("acos", "AcosBackward0"),
            UnaryOp::Atan => ("atan", "AtanBackward0"),
            UnaryOp::Sinh => ("sinh", "SinhBackward0"),
            UnaryOp::Cosh => ("cosh", "CoshBackward0"),
            UnaryOp::Asinh => ("asinh", "AsinhBackward0"),
            UnaryOp::Acosh => ("acosh", "AcoshBackward0"),
            UnaryOp::Atanh => ("atanh", "AtanhBackward0"),
            UnaryOp::Sigmoid => ("sigmoid", "SigmoidBackward0"),
            UnaryOp::Softplus { .. } => ("softplus", "SoftplusBackward0"),
            UnaryOp::Gelu | UnaryOp::GeluTanh => ("gelu", "GeluBackward0"),
            UnaryOp::Silu => ("silu", "SiluBackward0"),
            UnaryOp::Erf => ("erf", "ErfBackward0"),
            UnaryOp::Floor => ("floor", "FloorBackward0"),
            UnaryOp::Ceil => ("ceil", "CeilBackward0"),
            UnaryOp::Round => ("round", "RoundBackward0"),
            UnaryOp::Trunc => ("trunc", "TruncBackward0"),
            UnaryOp::Frac => ("frac", "FracBackward0"),
            UnaryOp::Relu => ("relu", "ReluBackward0"),
            UnaryOp::PowScalar(_) => ("pow", "PowBackward0"),
            UnaryOp::ScalarPow(_) => ("pow", "PowBackward1"),
            UnaryOp::BitNot => ("bitwise_not", "BitwiseNotBackward0"),
        }
    }

    pub fn name(self) -> &'static str {
        self.names().0
    }

    fn node_name(self) -> &'static str {
        self.names().1
    }

    fn int_inputs(self) -> IntInputs {
        match self {
            UnaryOp::Neg | UnaryOp::Abs | UnaryOp::Sign | UnaryOp::Square => IntInputs::Keep,
            UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => IntInputs::Identity,
            UnaryOp::Softplus { .. }
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Silu
            | UnaryOp::Frac => IntInputs::Refuse,
            UnaryOp::Relu | UnaryOp::BitNot => IntInputs::Keep,
            _ => IntInputs::ToFloat,
        }
    }

    /// Whether the backward reads the input: an in-place form must keep its old value.
    pub fn saves_input(self) -> bool {
        self.saves() == Saves::Input
    }

    fn saves(self) -> Saves {
        match self {
            UnaryOp::Neg
            | UnaryOp::Sign
            | UnaryOp::Floor
            | UnaryOp::Ceil
            | UnaryOp::Round
            | UnaryOp::Trunc
            | UnaryOp::Frac
            | UnaryOp::BitNot => Saves::Nothing,
            UnaryOp::Relu | UnaryOp::ScalarPow(_) => Saves::Output,
            UnaryOp::Reciprocal
            | UnaryOp::Exp
            | UnaryOp::Expm1
            | UnaryOp::Sqrt
            | UnaryOp::Rsqrt
            | UnaryOp::Tan
            | UnaryOp::Tanh
            | UnaryOp::Sigmoid => Saves::Output,
            _ => Saves::Input,
        }
    }

    /// The input gradient; `s` is the saved input or output, as `saves()` says.
    fn backward(self, g: &Tensor, s: Option<&Tensor>) -> Result<Tensor> {
        let s = || s.expect("saved tensor");
        match self {
            UnaryOp::Neg => neg(g),
            UnaryOp::Abs => mul(g, &sign(s())?),
            UnaryOp::Sign | UnaryOp::Floor | UnaryOp::Ceil | UnaryOp::Round | UnaryOp::Trunc => {
                creation::zeros_like(g)
            }
            UnaryOp::Frac => Ok(g.clone()),
            UnaryOp::BitNot => Err(Error::autograd("bitwise_not is not differentiable")),
            // g where y > 0
            UnaryOp::Relu => where_(
                &compare(CompareOp::Gt, &s().into(), &0.0.into())?,
                &g.into(),
                &0.0.into(),
            ),
            // g e x^(e-1)
            UnaryOp::PowScalar(e) => mul(g, &mul_scalar(&pow_scalar(s(), e - 1.0)?, e)?),
            // g y ln(b)
            UnaryOp::ScalarPow(b) => mul(g, &mul_scalar(s(), b.ln())?),
            UnaryOp::Square => mul(g, &mul_scalar(s(), 2.0)?),
            // -g * y^2
            UnaryOp::Reciprocal => mul(g, &unary(UnaryOp::Neg, &square(s())?)?),
            UnaryOp::Exp => mul(g, s()),
            UnaryOp::Log => div(g, s()),
            UnaryOp::Log2 => div(g, &mul_scalar(s(), std::f64::consts::LN_2)?),
            UnaryOp::Log10 => div(g, &mul_scalar(s(), std::f64::consts::LN_10)?),
            UnaryOp::Log1p => div(g, &add_scalar(s(), 1.0)?),
            UnaryOp::Expm1 => mul(g, &add_scalar(s(), 1.0)?),
            UnaryOp::Sqrt => div(g, &mul_scalar(s(), 2.0)?),
            // -0.5 * y^3
            UnaryOp::Rsqrt => mul(g, &mul_scalar(&pow_scalar(s(), 3.0)?, -0.5)?),
            UnaryOp::Sin => mul(g, &cos(s())?),
            UnaryOp::Cos => mul(g, &neg(&sin(s())?)?),
            // 1 + y^2
            UnaryOp::Tan => mul(g, &add_scalar(&square(s())?, 1.0)?),
            // 1 / sqrt(1 - x^2), its negation, 1 / (1 + x^2)
            UnaryOp::Asin => div(g, &sqrt(&rsub_scalar(1.0, &square(s())?)?)?),
            UnaryOp::Acos => neg(&div(g, &sqrt(&rsub_scalar(1.0, &square(s())?)?)?)?),
            UnaryOp::Atan => div(g, &add_scalar(&square(s())?, 1.0)?),
            UnaryOp::Sinh => mul(g, &unary(UnaryOp::Cosh, s())?),
            UnaryOp::Cosh => mul(g, &unary(UnaryOp::Sinh, s())?),
            // 1 / sqrt(x^2 + 1), 1 / sqrt((x - 1)(x + 1)), 1 / (1 - x^2)
            UnaryOp::Asinh => div(g, &sqrt(&add_scalar(&square(s())?, 1.0)?)?),
            UnaryOp::Acosh => {
                let x = s();
                div(
                    g,
                    &sqrt(&mul(&add_scalar(x, -1.0)?, &add_scalar(x, 1.0)?)?)?,
                )
            }
            UnaryOp::Atanh => div(g, &rsub_scalar(1.0, &square(s())?)?),
            // One fused pass unless the backward is itself recorded.
            UnaryOp::Sigmoid
            | UnaryOp::Tanh
            | UnaryOp::Silu
            | UnaryOp::Gelu
            | UnaryOp::GeluTanh
            | UnaryOp::Softplus { .. }
                if !grad_mode::is_enabled() =>
            {
                fused_grad(self, g, s())
            }
            // y (1 - y)
            UnaryOp::Sigmoid => mul(g, &mul(s(), &rsub_scalar(1.0, s())?)?),
            // 1 - y^2
            UnaryOp::Tanh => mul(g, &rsub_scalar(1.0, &square(s())?)?),
            UnaryOp::Softplus { beta, threshold } => {
                // sigmoid(beta x) below the threshold, 1 above it (where the forward is x)
                let bx = mul_scalar(s(), beta)?;
                let linear = compare(CompareOp::Gt, &(&bx).into(), &threshold.into())?;
                let d = where_(&linear, &1.0.into(), &(&sigmoid(&bx)?).into())?;
                mul(g, &d)
            }
            UnaryOp::Gelu => {
                // Phi(x) + x phi(x)
                let x = s();
                let cdf = mul_scalar(
                    &add_scalar(&erf(&mul_scalar(x, std::f64::consts::FRAC_1_SQRT_2)?)?, 1.0)?,
                    0.5,
                )?;
                let pdf = mul_scalar(
                    &exp(&mul_scalar(&square(x)?, -0.5)?)?,
                    1.0 / (2.0 * std::f64::consts::PI).sqrt(),
                )?;
                mul(g, &crate::ops::binary::add(&cdf, &mul(x, &pdf)?)?)
            }
            UnaryOp::GeluTanh => {
                let x = s();
                let k = (2.0 / std::f64::consts::PI).sqrt();
                let c = 0.044715;
                let x2 = square(x)?;
                let inner = mul_scalar(&mul(x, &add_scalar(&mul_scalar(&x2, c)?, 1.0)?)?, k)?;
                let t = tanh(&inner)?;
                // 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2)
                let left = mul_scalar(&add_scalar(&t, 1.0)?, 0.5)?;
                let dinner = mul_scalar(&add_scalar(&mul_scalar(&x2, 3.0 * c)?, 1.0)?, k)?;
                let right = mul(
                    &mul_scalar(x, 0.5)?,
                    &mul(&rsub_scalar(1.0, &square(&t)?)?, &dinner)?,
                )?;
                mul(g, &crate::ops::binary::add(&left, &right)?)
            }
            UnaryOp::Silu => {
                // s (1 + x (1 - s))
                let x = s();
                let sg = sigmoid(x)?;
                let d = mul(&sg, &add_scalar(&mul(x, &rsub_scalar(1.0, &sg)?)?, 1.0)?)?;
                mul(g, &d)
            }
            UnaryOp::Erf => {
                let d = mul_scalar(
                    &exp(&neg(&square(s())?)?)?,
                    2.0 / std::f64::consts::PI.sqrt(),
                )?;
                mul(g, &d)
            }
        }
    }
}

/// `g * f'(s)` for a pointwise activation, in one fused kernel pass (records nothing).
fn fused_grad(op: UnaryOp, g: &Tensor, s: &Tensor) -> Result<Tensor> {
    let (gd, sd) = (g.data(), s.data());
    // The engine's incoming gradient, which nothing else holds: written where it lies, the
    // backward takes no second activation-sized buffer.
    if g.is_uniquely_owned() && backend::on(&gd).grad_in_place(op.name(), op, &gd, &sd)? {
        return Ok(g.clone());
    }
    let data = backend::on(&gd).binary(op.name(), Bin::Grad(op), &gd, &sd)?;
    Ok(Tensor::new(data, g.dtype()))
}

/// The input converted as the op wants it, or PyTorch's error.
fn prepare(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let dt = x.dtype();
    if dt.is_floating_point() {
        return Ok(x.clone());
    }
    match op.int_inputs() {
        IntInputs::ToFloat => to_dtype(x, default_float()),
        IntInputs::Keep if dt == DType::Bool => {
            match op {
                UnaryOp::Square => return to_dtype(x, DType::Int64),
                UnaryOp::Sign => return Ok(x.clone()),
                _ => {}
            }
            Err(if op == UnaryOp::Neg {
                Error::dtype(
                    "neg: Negation, the `-` operator, on a bool tensor is not supported. If you \
                     are trying to invert a mask, use the `~` or `logical_not()` operator instead.",
                )
            } else {
                Error::NotImplemented(format!("{}: not implemented for bool tensors", op.name()))
            })
        }
        IntInputs::Keep | IntInputs::Identity if dt != DType::Bool => Ok(x.clone()),
        IntInputs::Identity | IntInputs::Keep | IntInputs::Refuse => {
            Err(Error::NotImplemented(format!(
                "{}: not implemented for {} tensors (floating point only)",
                op.name(),
                dt.name()
            )))
        }
    }
}

/// Run a kernel on a tensor's data (no autograd).
pub fn apply_kernel(name: &'static str, x: &Tensor, k: UnaryOp) -> Result<candle_core::Tensor> {
    let d = x.data();
    backend::on(&d).unary(name, k, &d)
}

pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let started = remat::start();
    let x = prepare(op, x)?;
    let data = if !x.dtype().is_floating_point() && op.int_inputs() == IntInputs::Identity {
        crate::ops::convert::dense_copy(&x.data())?
    } else {
        apply_kernel(op.name(), &x, op)?
    };
    let out = Tensor::new(data, x.dtype());
    let saves = op.saves();
    remat::note(op.name(), &out, &[&x], started, move |ins| {
        unary(op, &ins[0])
    });
    record(
        op.node_name(),
        &out,
        &[&x],
        || match saves {
            Saves::Nothing => vec![],
            Saves::Input => vec![SavedTensor::input(&x)],
            Saves::Output => vec![SavedTensor::output(&out)],
        },
        move |ctx, g| {
            let s = (saves != Saves::Nothing).then(|| &ctx.saved[0]);
            Ok(vec![Some(op.backward(g, s)?)])
        },
    );
    Ok(out)
}

macro_rules! unary_fns {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(pub fn $name(x: &Tensor) -> Result<Tensor> {
            unary($op, x)
        })*
    };
}

unary_fns! {
    neg => UnaryOp::Neg,
    abs => UnaryOp::Abs,
    sign => UnaryOp::Sign,
    square => UnaryOp::Square,
    reciprocal => UnaryOp::Reciprocal,
    exp => UnaryOp::Exp,
    log => UnaryOp::Log,
    sqrt => UnaryOp::Sqrt,
    sin => UnaryOp::Sin,
    cos => UnaryOp::Cos,
    tanh => UnaryOp::Tanh,
    sigmoid => UnaryOp::Sigmoid,
    silu => UnaryOp::Silu,
    erf => UnaryOp::Erf,
}

/// `round(x, decimals=d)`: scale, round half to even, scale back.
pub fn round(x: &Tensor, decimals: i64) -> Result<Tensor> {
    if decimals == 0 {
        return unary(UnaryOp::Round, x);
    }
    let m = 10f64.powi(decimals as i32);
    let scaled = binary(BinaryOp::Mul, &x.into(), &m.into())?;
    let rounded = unary(UnaryOp::Round, &scaled)?;
    binary(BinaryOp::Div, &(&rounded).into(), &m.into())
}

pub fn softplus(x: &Tensor, beta: f64, threshold: f64) -> Result<Tensor> {
    unary(UnaryOp::Softplus { beta, threshold }, x)
}

/// `gelu(x, approximate)`: `"none"` (exact, erf) or `"tanh"`.
pub fn gelu(x: &Tensor, approximate: &str) -> Result<Tensor> {
    match approximate {
        "none" => unary(UnaryOp::Gelu, x),
        "tanh" => unary(UnaryOp::GeluTanh, x),
        other => Err(Error::dtype(format!(
            "gelu: approximate argument must be either none or tanh (got '{other}')."
        ))),
    }
}

#[derive(Clone, Copy, Debug)]
pub enum Predicate {
    IsNan,
    IsInf,
    IsFinite,
}

/// `isnan/isinf/isfinite`: a bool tensor; integers are always finite.
pub fn predicate(p: Predicate, x: &Tensor) -> Result<Tensor> {
    if !x.dtype().is_floating_point() {
        let v = matches!(p, Predicate::IsFinite) as i64;
        return creation::full(&x.dims(), v as f64, DType::Bool, &x.device());
    }
    let (k, name) = match p {
        Predicate::IsNan => (Pred::IsNan, "isnan"),
        Predicate::IsInf => (Pred::IsInf, "isinf"),
        Predicate::IsFinite => (Pred::IsFinite, "isfinite"),
    };
    let d = x.data();
    let data = backend::on(&d).predicate(name, k, &d)?;
    Ok(Tensor::new(data, DType::Bool))
}

/// `logical_not(x)`: `x == 0` as bool, any dtype.
pub fn logical_not(x: &Tensor) -> Result<Tensor> {
    Ok(Tensor::new(
        x.data().cmp_scalar(CmpOp::Eq, 0.0).op("logical_not")?,
        DType::Bool,
    ))
}

/// `~x`: logical not on bool, bitwise not on integers.
pub fn bitwise_not(x: &Tensor) -> Result<Tensor> {
    match x.dtype() {
        DType::Bool => logical_not(x),
        dt if dt.is_floating_point() => Err(Error::NotImplemented(format!(
            "bitwise_not: not implemented for floating point dtype {}",
            dt.name()
        ))),
        dt => Ok(Tensor::new(
            apply_kernel("bitwise_not", x, UnaryOp::BitNot)?,
            dt,
        )),
    }
}
