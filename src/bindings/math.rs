//! Element-wise math: the operators, and `add`, `exp`, `clamp`... with their in-place
//! forms, each one `tensor_ops!` row (`gradstream.X` and `Tensor.X`).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::bindings::convert::{extract_operand, extract_tensor};
use crate::bindings::op::tensor_ops;
use crate::bindings::part;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::error::Result;
use crate::ops::binary::{self, arith_inplace, binary, compare, inplace, BinaryOp, CompareOp};
use crate::ops::binary::{logical, scale, LogicalOp};
use crate::ops::threshold as thresh;
use crate::ops::unary::{self, predicate, unary, Predicate, UnaryOp};
use crate::ops::Operand;
use crate::tensor::Tensor;

/// `a + alpha * b` / `a - alpha * b`.
fn with_alpha(op: BinaryOp, a: &Operand, b: Operand, alpha: Option<f64>) -> PyResult<Tensor> {
    let b = match alpha {
        None => b,
        Some(al) => scale(&b, al)?,
    };
    Ok(binary(op, a, &b)?)
}

/// `addcmul` (`mul`) or `addcdiv`.
fn addc_op(mul: bool) -> BinaryOp {
    if mul {
        BinaryOp::Mul
    } else {
        BinaryOp::Div
    }
}

/// Write `f(x)` into `x` (the op named `name`) and hand `x` back.
fn update(
    x: Py<PyTensor>,
    name: &str,
    others: &[&Tensor],
    saves_input: bool,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> PyResult<Py<PyTensor>> {
    inplace(name, &x.get().t, others, saves_input, f)?;
    crate::autograd::saved_hooks::check()?;
    Ok(x)
}

/// An in-place unary op; those whose backward reads their input keep its old value aside.
fn unary_(x: Py<PyTensor>, name: &str, op: UnaryOp) -> PyResult<Py<PyTensor>> {
    update(x, name, &[], op.saves_input(), |t| unary(op, t))
}

/// `x op= other` (`add_`...), handing `x` back.
fn arith_(
    x: Py<PyTensor>,
    op: BinaryOp,
    other: Operand,
    alpha: Option<f64>,
) -> PyResult<Py<PyTensor>> {
    arith_inplace(op, &x.get().t, &other, alpha)?;
    crate::autograd::saved_hooks::check()?;
    Ok(x)
}

// ---------------------------------------------------------------- operators

#[derive(Clone, Copy)]
enum Operator {
    Arith(BinaryOp),
    Compare(CompareOp),
}

/// `t op other` (or `other op t` when reflected), `NotImplemented` for unsupported types.
fn dunder(slf: &Obj<'_>, op: Operator, other: &Obj<'_>, reflected: bool) -> PyResult<Py<PyAny>> {
    let py = slf.py();
    let name = match op {
        Operator::Arith(b) => b.name(),
        Operator::Compare(c) => c.name(),
    };
    let o = match extract_operand(name, other) {
        Ok(o) => o,
        Err(e) if e.is_instance_of::<PyTypeError>(py) => return Ok(py.NotImplemented()),
        Err(e) => return Err(e),
    };
    let s = Operand::Tensor(slf.cast::<PyTensor>()?.get().t.clone());
    let (a, b) = if reflected { (&o, &s) } else { (&s, &o) };
    let r = match op {
        Operator::Arith(op) => binary(op, a, b)?,
        Operator::Compare(op) => compare(op, a, b)?,
    };
    Ok(r.into_pyobject(py)?.into_any().unbind())
}

macro_rules! operators {
    (
        arith: $($name:ident / $rname:ident => $op:ident),*;
        pow: $($pname:ident => $preflected:expr),*;
        compare: $($cname:ident => $cop:ident),*;
        in_place: $($iname:ident => $method:ident $iop:ident),*;
    ) => {
        #[pymethods]
        impl PyTensor {
            $(fn $name(slf: &Bound<'_, Self>, other: &Obj<'_>) -> PyResult<Py<PyAny>> {
                dunder(slf.as_any(), Operator::Arith(BinaryOp::$op), other, false)
            }
            fn $rname(slf: &Bound<'_, Self>, other: &Obj<'_>) -> PyResult<Py<PyAny>> {
                dunder(slf.as_any(), Operator::Arith(BinaryOp::$op), other, true)
            })*
            $(fn $cname(slf: &Bound<'_, Self>, other: &Obj<'_>) -> PyResult<Py<PyAny>> {
                dunder(slf.as_any(), Operator::Compare(CompareOp::$cop), other, false)
            })*
            // `pow(self, other, modulo)`: Python passes a modulo slot, which tensors ignore.
            $(fn $pname(
                slf: &Bound<'_, Self>,
                other: &Obj<'_>,
                modulo: Option<&Obj<'_>>,
            ) -> PyResult<Py<PyAny>> {
                let _ = modulo;
                dunder(slf.as_any(), Operator::Arith(BinaryOp::Pow), other, $preflected)
            })*
            fn __invert__(&self) -> PyResult<Tensor> { Ok(unary::bitwise_not(&self.t)?) }
            fn __neg__(&self) -> PyResult<Tensor> { Ok(unary(UnaryOp::Neg, &self.t)?) }
            fn __pos__(&self) -> Tensor { self.t.clone() }
            fn __abs__(&self) -> PyResult<Tensor> { Ok(unary(UnaryOp::Abs, &self.t)?) }
            $(fn $iname(slf: &Bound<'_, Self>, other: &Obj<'_>) -> PyResult<()> {
                let x = slf.clone().unbind();
                let o = extract_operand(stringify!($method), other)?;
                arith_(x, BinaryOp::$iop, o, None).map(drop)
            })*
        }
    };
}

operators! {
    arith: __add__ / __radd__ => Add, __sub__ / __rsub__ => Sub, __mul__ / __rmul__ => Mul,
        __truediv__ / __rtruediv__ => Div, __floordiv__ / __rfloordiv__ => FloorDivide,
        __mod__ / __rmod__ => Remainder, __and__ / __rand__ => BitwiseAnd,
        __or__ / __ror__ => BitwiseOr, __xor__ / __rxor__ => BitwiseXor;
    pow: __pow__ => false, __rpow__ => true;
    compare: __eq__ => Eq, __ne__ => Ne, __lt__ => Lt, __le__ => Le, __gt__ => Gt, __ge__ => Ge;
    in_place: __iadd__ => add_ Add, __isub__ => sub_ Sub, __imul__ => mul_ Mul,
        __itruediv__ => div_ Div;
}

// ---------------------------------------------------------------- binary ops

/// A binary op's input: a tensor, or a number where PyTorch takes one.
trait IntoOperand {
    fn into_operand(self) -> Operand;
}

impl IntoOperand for Tensor {
    fn into_operand(self) -> Operand {
        Operand::Tensor(self)
    }
}

impl IntoOperand for Operand {
    fn into_operand(self) -> Operand {
        self
    }
}

/// The binary ops with one `other`, by the type of their input: PyTorch takes a number as
/// the arithmetic ops' `input`, and only a tensor as the others'.
macro_rules! binary_ops {
    ($($xty:ty: $($name:ident($arg:ident) => $op:ident),*;)*) => {
        tensor_ops! { mod binary_fns; $($(
            both fn $name(x: $xty, $arg: Operand) -> Tensor {
                Ok(binary(BinaryOp::$op, &x.into_operand(), &$arg)?)
            }
        )*)* }
    };
}

binary_ops! {
    Operand: mul(other) => Mul, multiply(other) => Mul, true_divide(other) => Div,
        floor_divide(other) => FloorDivide, remainder(other) => Remainder, pow(exponent) => Pow,
        bitwise_and(other) => BitwiseAnd, bitwise_or(other) => BitwiseOr,
        bitwise_xor(other) => BitwiseXor;
    Tensor: fmod(other) => Fmod, maximum(other) => Maximum, minimum(other) => Minimum;
}

macro_rules! compare_ops {
    ($($name:ident => $op:ident),*) => {
        tensor_ops! { mod compare_fns; $(
            both fn $name(x: Tensor, other: Operand) -> Tensor {
                Ok(compare(CompareOp::$op, &(&x).into(), &other)?)
            }
        )* }
    };
}

compare_ops!(eq => Eq, ne => Ne, lt => Lt, le => Le, gt => Gt, ge => Ge);

/// The binary ops whose `other` must be a tensor, as in PyTorch (no number overload).
macro_rules! tensor_pair_ops {
    ($($name:ident => $f:expr),*) => {
        tensor_ops! { mod tensor_pair_fns; $(
            both fn $name(x: Tensor, other: Tensor) -> Tensor {
                Ok(($f)(&x, &other)?)
            }
        )* }
    };
}

tensor_pair_ops!(
    logical_and => |a: &Tensor, b: &Tensor| logical(LogicalOp::And, a, b),
    logical_or => |a: &Tensor, b: &Tensor| logical(LogicalOp::Or, a, b),
    logical_xor => |a: &Tensor, b: &Tensor| logical(LogicalOp::Xor, a, b),
    atan2 => |a: &Tensor, b: &Tensor| binary(BinaryOp::Atan2, &a.into(), &b.into()),
    arctan2 => |a: &Tensor, b: &Tensor| binary(BinaryOp::Atan2, &a.into(), &b.into()),
    hypot => |a: &Tensor, b: &Tensor| binary(BinaryOp::Hypot, &a.into(), &b.into())
);

tensor_ops! { mod arith_fns;
    both fn add(x: Operand, other: Operand; alpha: Option<f64> = None) -> Tensor {
        with_alpha(BinaryOp::Add, &x, other, alpha)
    }
    both fn sub | subtract(x: Operand, other: Operand; alpha: Option<f64> = None) -> Tensor {
        with_alpha(BinaryOp::Sub, &x, other, alpha)
    }
    both fn div | divide(x: Operand, other: Operand; rounding_mode: Option<Str> = None) -> Tensor {
        Ok(binary(BinaryOp::division(rounding_mode)?, &x, &other)?)
    }
    method fn add_(x: Py<PyTensor>, other: Operand; alpha: Option<f64> = None) -> Py<PyTensor> {
        arith_(x, BinaryOp::Add, other, alpha)
    }
    method fn sub_(x: Py<PyTensor>, other: Operand; alpha: Option<f64> = None) -> Py<PyTensor> {
        arith_(x, BinaryOp::Sub, other, alpha)
    }
    method fn mul_(x: Py<PyTensor>, other: Operand) -> Py<PyTensor> {
        arith_(x, BinaryOp::Mul, other, None)
    }
    method fn div_(x: Py<PyTensor>, other: Operand; rounding_mode: Option<Str> = None)
        -> Py<PyTensor> {
        arith_(x, BinaryOp::division(rounding_mode)?, other, None)
    }
    method fn pow_(x: Py<PyTensor>, exponent: Operand) -> Py<PyTensor> {
        arith_(x, BinaryOp::Pow, exponent, None)
    }
}

// ---------------------------------------------------------------- unary ops

/// `name(name_) => op`: `gradstream.name(input)` and `Tensor.name()`, and where PyTorch has
/// it the in-place form `gradstream.name_(input)` and `Tensor.name_()`.
macro_rules! unary_ops {
    ($($name:ident $(($iname:ident))? => $op:ident),* $(,)?) => {
        tensor_ops! { mod unary_fns; $(
            both fn $name(x: Tensor) -> Tensor { Ok(unary(UnaryOp::$op, &x)?) }
            $(both fn $iname(x: Py<PyTensor>) -> Py<PyTensor> {
                unary_(x, stringify!($iname), UnaryOp::$op)
            })?
        )* }
    };
}

unary_ops! {
    neg(neg_) => Neg, negative => Neg, abs(abs_) => Abs, absolute => Abs, sign(sign_) => Sign,
    square(square_) => Square, reciprocal(reciprocal_) => Reciprocal, exp(exp_) => Exp,
    log(log_) => Log, log2(log2_) => Log2, log10(log10_) => Log10, log1p(log1p_) => Log1p,
    expm1(expm1_) => Expm1, sqrt(sqrt_) => Sqrt, rsqrt(rsqrt_) => Rsqrt, sin(sin_) => Sin,
    cos(cos_) => Cos, tan(tan_) => Tan, tanh(tanh_) => Tanh, asin(asin_) => Asin,
    arcsin => Asin, acos(acos_) => Acos, arccos => Acos, atan(atan_) => Atan, arctan => Atan,
    sinh(sinh_) => Sinh, cosh(cosh_) => Cosh, asinh(asinh_) => Asinh, arcsinh => Asinh,
    acosh(acosh_) => Acosh, arccosh => Acosh, atanh(atanh_) => Atanh, arctanh => Atanh,
    sigmoid(sigmoid_) => Sigmoid, erf => Erf, floor(floor_) => Floor, ceil(ceil_) => Ceil,
    trunc(trunc_) => Trunc, fix => Trunc, frac => Frac,
}

tensor_ops! { mod other_fns;
    both fn round(x: Tensor; decimals: i64 = 0) -> Tensor {
        Ok(unary::round(&x, decimals)?)
    }
    /// `max(x, 0)`; its backward keeps a 1-bit mask (`ops/threshold.rs`).
    both fn relu(x: Tensor) -> Tensor { Ok(thresh::relu(&x)?) }
    both fn relu_(x: Py<PyTensor>) -> Py<PyTensor> {
        update(x, "relu_", &[], false, thresh::relu)
    }
    both fn isnan(x: Tensor) -> Tensor { Ok(predicate(Predicate::IsNan, &x)?) }
    both fn isinf(x: Tensor) -> Tensor { Ok(predicate(Predicate::IsInf, &x)?) }
    both fn isfinite(x: Tensor) -> Tensor { Ok(predicate(Predicate::IsFinite, &x)?) }
    both fn logical_not(x: Tensor) -> Tensor { Ok(unary::logical_not(&x)?) }
    both fn bitwise_not(x: Tensor) -> Tensor { Ok(unary::bitwise_not(&x)?) }

    /// `silu(x) = x * sigmoid(x)`; `inplace=True` writes it into `x` (`nn.functional.silu`).
    function fn silu(x: Py<PyTensor>, inplace: bool = false) -> Py<PyTensor> {
        if inplace {
            return unary_(x, "silu_", UnaryOp::Silu);
        }
        let t = unary(UnaryOp::Silu, &x.get().t)?;
        Python::attach(|py| Ok(t.into_pyobject(py)?.unbind()))
    }
    /// `softplus(x, beta=1, threshold=20)`: `log(1 + exp(beta x)) / beta`, linear above the
    /// threshold.
    function fn softplus(x: Tensor, beta: f64 = 1.0, threshold: f64 = 20.0) -> Tensor {
        Ok(unary::softplus(&x, beta, threshold)?)
    }
    /// `gelu(x, approximate='none')`: exact (erf) or the tanh approximation.
    function fn gelu(x: Tensor; approximate: Str = "none") -> Tensor {
        Ok(unary::gelu(&x, approximate)?)
    }

    /// `threshold(input, threshold, value)`: `input` where `input > threshold`, else `value`.
    /// Its backward saves one bit per element.
    function fn threshold(x: Tensor, threshold: f64, value: f64) -> Tensor {
        Ok(thresh::threshold(&x, threshold, value)?)
    }
    /// `threshold_(input, threshold, value)`: `threshold` in place, returning `input`.
    function fn threshold_(x: Py<PyTensor>, threshold: f64, value: f64) -> Py<PyTensor> {
        // Without masks the backward reads the input, which is about to be overwritten.
        let saves_input = thresh::saves_input(&x.get().t);
        update(x, "threshold_", &[], saves_input, |t| {
            thresh::threshold(t, threshold, value)
        })
    }

    /// Clamp to `[min, max]`; either bound may be None, a number or a tensor.
    both fn clamp | clip(x: Tensor, min: Option<Operand> = None, max: Option<Operand> = None)
        -> Tensor {
        Ok(binary::clamp(&x, min.as_ref(), max.as_ref())?)
    }
    both fn clamp_min(x: Tensor, min: Operand) -> Tensor {
        Ok(binary::clamp(&x, Some(&min), None)?)
    }
    both fn clamp_max(x: Tensor, max: Operand) -> Tensor {
        Ok(binary::clamp(&x, None, Some(&max))?)
    }
    both fn clamp_ | clip_(x: Py<PyTensor>, min: Option<Operand> = None,
        max: Option<Operand> = None) -> Py<PyTensor> {
        clamp_inplace(x, min, max)
    }

    /// `input + value * tensor1 * tensor2` (`addcdiv`: `/ tensor2`).
    both fn addcmul[true] | addcdiv[false](x: Tensor, tensor1: Tensor, tensor2: Tensor;
        value: f64 = 1.0) -> Tensor {
        Ok(binary::addc(addc_op(FLAG), &x, &tensor1, &tensor2, value)?)
    }
    /// `input + weight * (end - input)`.
    both fn lerp(x: Tensor, end: Tensor, weight: Operand) -> Tensor {
        Ok(binary::lerp(&x, &end, &weight)?)
    }
    method fn addcmul_[true] | addcdiv_[false](x: Py<PyTensor>, tensor1: Tensor,
        tensor2: Tensor; value: f64 = 1.0) -> Py<PyTensor> {
        let new = binary::addc(addc_op(FLAG), &x.get().t, &tensor1, &tensor2, value)?;
        update(x, OP, &[], false, move |_| Ok(new))
    }
    method fn lerp_(x: Py<PyTensor>, end: Tensor, weight: Operand) -> Py<PyTensor> {
        // lerp's graph keeps only `weight`, never the old value of `self`
        let new = binary::lerp(&x.get().t, &end, &weight)?;
        update(x, "lerp_", &[], false, move |_| Ok(new))
    }
}

fn clamp_inplace(
    x: Py<PyTensor>,
    lo: Option<Operand>,
    hi: Option<Operand>,
) -> PyResult<Py<PyTensor>> {
    let bounds: Vec<Tensor> = [&lo, &hi]
        .into_iter()
        .filter_map(|b| match b {
            Some(Operand::Tensor(t)) => Some(t.clone()),
            _ => None,
        })
        .collect();
    let bounds: Vec<&Tensor> = bounds.iter().collect();
    update(x, "clamp_", &bounds, true, |t| {
        binary::clamp(t, lo.as_ref(), hi.as_ref())
    })
}

/// `where(condition, input, other)`: `input` where `condition`, else `other`.
fn select_where(condition: &Obj<'_>, input: &Operand, other: &Obj<'_>) -> PyResult<Tensor> {
    let c = extract_tensor("where", "condition", condition)?;
    Ok(binary::where_(
        &c,
        input,
        &extract_operand("where", other)?,
    )?)
}

#[pymethods]
impl PyTensor {
    /// `self` where `condition`, else `other`.
    #[pyo3(name = "where")]
    fn where_method(&self, condition: &Obj<'_>, other: &Obj<'_>) -> PyResult<Tensor> {
        select_where(condition, &(&self.t).into(), other)
    }
}

/// `where(condition, input, other)`: `input` where `condition`, else `other`.
#[pyfunction(name = "where")]
fn where_fn(condition: &Obj<'_>, input: &Obj<'_>, other: &Obj<'_>) -> PyResult<Tensor> {
    select_where(condition, &extract_operand("where", input)?, other)
}

part!(|m| m.add_function(wrap_pyfunction!(where_fn, m)?));
