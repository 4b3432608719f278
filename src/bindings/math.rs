//! Element-wise math: `gradstream.add(...)`, `Tensor.add(...)`, the operators and their
//! reflected and in-place forms, and the in-place methods (`add_`, `clamp_`...).

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::bindings::convert::{extract_operand, extract_tensor};
use crate::bindings::tensor::PyTensor;
use crate::error::Error;
use crate::ops::binary::{
    arith_inplace, binary, clamp, compare, inplace, logical, scale, where_, BinaryOp, CompareOp,
    LogicalOp,
};
use crate::ops::unary::{self, predicate, unary, Predicate, UnaryOp};
use crate::ops::Operand;
use crate::tensor::Tensor;

// ---------------------------------------------------------------- argument helpers

fn operand(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Operand> {
    extract_operand(op, obj)
}

/// An optional bound (`clamp(min=None)`): absent, a number or a tensor.
fn opt_operand(op: &str, obj: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Operand>> {
    match obj {
        Some(o) if !o.is_none() => Ok(Some(operand(op, o)?)),
        _ => Ok(None),
    }
}

/// An operator's other operand, or `None` so Python can try the reflected form.
fn op_operand(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Option<Operand>> {
    match extract_operand(op, obj) {
        Ok(o) => Ok(Some(o)),
        Err(e) if e.is_instance_of::<PyTypeError>(obj.py()) => Ok(None),
        Err(e) => Err(e),
    }
}

fn not_implemented(py: Python<'_>) -> Py<PyAny> {
    py.NotImplemented()
}

/// `t op other` (or `other op t` when reflected), `NotImplemented` for unsupported types.
fn dunder(
    py: Python<'_>,
    op: BinaryOp,
    t: &Tensor,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Py<PyAny>> {
    let Some(o) = op_operand(op.name(), other)? else {
        return Ok(not_implemented(py));
    };
    let s = Operand::Tensor(t.clone());
    let r = if reflected {
        binary(op, &o, &s)?
    } else {
        binary(op, &s, &o)?
    };
    Ok(r.into_pyobject(py)?.into_any().unbind())
}

fn cmp_dunder(
    py: Python<'_>,
    op: CompareOp,
    t: &Tensor,
    other: &Bound<'_, PyAny>,
) -> PyResult<Py<PyAny>> {
    let Some(o) = op_operand(op.name(), other)? else {
        return Ok(not_implemented(py));
    };
    Ok(compare(op, &Operand::Tensor(t.clone()), &o)?
        .into_pyobject(py)?
        .into_any()
        .unbind())
}

fn bin_self(op: BinaryOp, t: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let o = operand(op.name(), other)?;
    Ok(binary(op, &Operand::Tensor(t.clone()), &o)?)
}

/// `a + alpha * b` / `a - alpha * b`.
fn with_alpha(op: BinaryOp, a: &Operand, other: &Operand, alpha: Option<f64>) -> PyResult<Tensor> {
    let b = match alpha {
        None => other.clone(),
        Some(al) => scale(other, al)?,
    };
    Ok(binary(op, a, &b)?)
}

fn rounding_op(mode: Option<&str>) -> PyResult<BinaryOp> {
    match mode {
        None => Ok(BinaryOp::Div),
        Some("trunc") => Ok(BinaryOp::TruncDivide),
        Some("floor") => Ok(BinaryOp::FloorDivide),
        Some(m) => Err(Error::dtype(format!(
            "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{m}'"
        ))
        .into()),
    }
}

fn cmp_self(op: CompareOp, t: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let o = operand(op.name(), other)?;
    Ok(compare(op, &Operand::Tensor(t.clone()), &o)?)
}

fn logical_self(
    op: LogicalOp,
    name: &str,
    t: &Tensor,
    other: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let o = extract_tensor(name, "other", other)?;
    Ok(logical(op, t, &o)?)
}

fn clamp_args(
    t: &Tensor,
    min: Option<&Bound<'_, PyAny>>,
    max: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let lo = opt_operand("clamp", min)?;
    let hi = opt_operand("clamp", max)?;
    Ok(clamp(t, lo.as_ref(), hi.as_ref())?)
}

/// `round(x, decimals=d)`: scale, round half to even, scale back.
fn round_decimals(t: &Tensor, decimals: i64) -> PyResult<Tensor> {
    if decimals == 0 {
        return Ok(unary(UnaryOp::Round, t)?);
    }
    let m = 10f64.powi(decimals as i32);
    let scaled = binary(BinaryOp::Mul, &t.into(), &m.into())?;
    Ok(binary(
        BinaryOp::Div,
        &(&unary(UnaryOp::Round, &scaled)?).into(),
        &m.into(),
    )?)
}

/// `input + value * t1 * t2` (or `/ t2`).
fn addc(
    op: BinaryOp,
    input: &Tensor,
    t1: &Bound<'_, PyAny>,
    t2: &Bound<'_, PyAny>,
    value: f64,
) -> PyResult<Tensor> {
    let name = if op == BinaryOp::Mul {
        "addcmul"
    } else {
        "addcdiv"
    };
    let a = extract_tensor(name, "tensor1", t1)?;
    let b = extract_tensor(name, "tensor2", t2)?;
    let prod = binary(op, &(&a).into(), &(&b).into())?;
    with_alpha(BinaryOp::Add, &input.into(), &(&prod).into(), Some(value))
}

/// `input + weight * (end - input)`.
fn lerp_value(
    input: &Tensor,
    end: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let e = extract_tensor("lerp", "end", end)?;
    let w = operand("lerp", weight)?;
    let diff = binary(BinaryOp::Sub, &(&e).into(), &input.into())?;
    let step = binary(BinaryOp::Mul, &w, &(&diff).into())?;
    Ok(binary(BinaryOp::Add, &input.into(), &(&step).into())?)
}

/// Run an in-place update and hand back `self`.
fn done<'py>(
    slf: &Bound<'py, PyTensor>,
    r: crate::error::Result<()>,
) -> PyResult<Bound<'py, PyTensor>> {
    r?;
    crate::autograd::saved_hooks::check()?;
    Ok(slf.clone())
}

fn unary_inplace<'py>(
    slf: &Bound<'py, PyTensor>,
    name: &str,
    op: UnaryOp,
) -> PyResult<Bound<'py, PyTensor>> {
    let t = &slf.get().t;
    // Ops whose backward reads their input need the old value kept aside when recording.
    let saves_input = matches!(
        op,
        UnaryOp::Abs | UnaryOp::Log | UnaryOp::Sin | UnaryOp::Cos
    );
    done(slf, inplace(name, t, &[], saves_input, |x| unary(op, x)))
}

// ---------------------------------------------------------------- Tensor methods

#[pymethods]
impl PyTensor {
    // operators
    fn __add__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Add, &self.t, o, false)
    }
    fn __radd__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Add, &self.t, o, true)
    }
    fn __sub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Sub, &self.t, o, false)
    }
    fn __rsub__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Sub, &self.t, o, true)
    }
    fn __mul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Mul, &self.t, o, false)
    }
    fn __rmul__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Mul, &self.t, o, true)
    }
    fn __truediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Div, &self.t, o, false)
    }
    fn __rtruediv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Div, &self.t, o, true)
    }
    fn __floordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::FloorDivide, &self.t, o, false)
    }
    fn __rfloordiv__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::FloorDivide, &self.t, o, true)
    }
    fn __mod__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Remainder, &self.t, o, false)
    }
    fn __rmod__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::Remainder, &self.t, o, true)
    }
    fn __pow__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _ = modulo;
        dunder(py, BinaryOp::Pow, &self.t, o, false)
    }
    fn __rpow__(
        &self,
        py: Python<'_>,
        o: &Bound<'_, PyAny>,
        modulo: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Py<PyAny>> {
        let _ = modulo;
        dunder(py, BinaryOp::Pow, &self.t, o, true)
    }
    fn __and__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseAnd, &self.t, o, false)
    }
    fn __rand__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseAnd, &self.t, o, true)
    }
    fn __or__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseOr, &self.t, o, false)
    }
    fn __ror__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseOr, &self.t, o, true)
    }
    fn __xor__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseXor, &self.t, o, false)
    }
    fn __rxor__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        dunder(py, BinaryOp::BitwiseXor, &self.t, o, true)
    }
    fn __invert__(&self) -> PyResult<Tensor> {
        Ok(unary::bitwise_not(&self.t)?)
    }
    fn __neg__(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Neg, &self.t)?)
    }
    fn __pos__(&self) -> Tensor {
        self.t.clone()
    }
    fn __abs__(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Abs, &self.t)?)
    }
    fn __iadd__(&self, o: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(arith_inplace(
            BinaryOp::Add,
            &self.t,
            &operand("add_", o)?,
            None,
        )?)
    }
    fn __isub__(&self, o: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(arith_inplace(
            BinaryOp::Sub,
            &self.t,
            &operand("sub_", o)?,
            None,
        )?)
    }
    fn __imul__(&self, o: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(arith_inplace(
            BinaryOp::Mul,
            &self.t,
            &operand("mul_", o)?,
            None,
        )?)
    }
    fn __itruediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<()> {
        Ok(arith_inplace(
            BinaryOp::Div,
            &self.t,
            &operand("div_", o)?,
            None,
        )?)
    }
    fn __eq__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Eq, &self.t, o)
    }
    fn __ne__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Ne, &self.t, o)
    }
    fn __lt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Lt, &self.t, o)
    }
    fn __le__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Le, &self.t, o)
    }
    fn __gt__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Gt, &self.t, o)
    }
    fn __ge__(&self, py: Python<'_>, o: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        cmp_dunder(py, CompareOp::Ge, &self.t, o)
    }

    // binary methods
    #[pyo3(signature = (other, *, alpha=None))]
    fn add(&self, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
        with_alpha(
            BinaryOp::Add,
            &(&self.t).into(),
            &operand("add", other)?,
            alpha,
        )
    }
    #[pyo3(signature = (other, *, alpha=None))]
    fn sub(&self, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
        with_alpha(
            BinaryOp::Sub,
            &(&self.t).into(),
            &operand("sub", other)?,
            alpha,
        )
    }
    fn mul(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Mul, &self.t, other)
    }
    #[pyo3(signature = (other, *, rounding_mode=None))]
    fn div(&self, other: &Bound<'_, PyAny>, rounding_mode: Option<&str>) -> PyResult<Tensor> {
        bin_self(rounding_op(rounding_mode)?, &self.t, other)
    }
    #[pyo3(signature = (other, *, alpha=None))]
    fn subtract(&self, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
        with_alpha(
            BinaryOp::Sub,
            &(&self.t).into(),
            &operand("subtract", other)?,
            alpha,
        )
    }
    fn multiply(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Mul, &self.t, other)
    }
    #[pyo3(signature = (other, *, rounding_mode=None))]
    fn divide(&self, other: &Bound<'_, PyAny>, rounding_mode: Option<&str>) -> PyResult<Tensor> {
        bin_self(rounding_op(rounding_mode)?, &self.t, other)
    }
    fn absolute(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Abs, &self.t)?)
    }
    fn true_divide(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Div, &self.t, other)
    }
    fn floor_divide(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::FloorDivide, &self.t, other)
    }
    fn remainder(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Remainder, &self.t, other)
    }
    fn fmod(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Fmod, &self.t, other)
    }
    fn pow(&self, exponent: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Pow, &self.t, exponent)
    }
    fn maximum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Maximum, &self.t, other)
    }
    fn minimum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Minimum, &self.t, other)
    }
    fn bitwise_and(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::BitwiseAnd, &self.t, other)
    }
    fn bitwise_or(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::BitwiseOr, &self.t, other)
    }
    fn bitwise_xor(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::BitwiseXor, &self.t, other)
    }
    fn bitwise_not(&self) -> PyResult<Tensor> {
        Ok(unary::bitwise_not(&self.t)?)
    }
    fn logical_and(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        logical_self(LogicalOp::And, "logical_and", &self.t, other)
    }
    fn logical_or(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        logical_self(LogicalOp::Or, "logical_or", &self.t, other)
    }
    fn logical_xor(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        logical_self(LogicalOp::Xor, "logical_xor", &self.t, other)
    }
    fn logical_not(&self) -> PyResult<Tensor> {
        Ok(unary::logical_not(&self.t)?)
    }
    fn eq(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Eq, &self.t, o)
    }
    fn ne(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Ne, &self.t, o)
    }
    fn lt(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Lt, &self.t, o)
    }
    fn le(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Le, &self.t, o)
    }
    fn gt(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Gt, &self.t, o)
    }
    fn ge(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Ge, &self.t, o)
    }

    // where, clamp, fused
    #[pyo3(name = "where")]
    fn where_method(
        &self,
        condition: &Bound<'_, PyAny>,
        other: &Bound<'_, PyAny>,
    ) -> PyResult<Tensor> {
        let c = extract_tensor("where", "condition", condition)?;
        Ok(where_(&c, &(&self.t).into(), &operand("where", other)?)?)
    }
    #[pyo3(signature = (min=None, max=None))]
    fn clamp(
        &self,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        clamp_args(&self.t, min, max)
    }
    #[pyo3(signature = (min=None, max=None))]
    fn clip(
        &self,
        min: Option<&Bound<'_, PyAny>>,
        max: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        clamp_args(&self.t, min, max)
    }
    fn clamp_min(&self, min: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        clamp_args(&self.t, Some(min), None)
    }
    fn clamp_max(&self, max: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        clamp_args(&self.t, None, Some(max))
    }
    #[pyo3(signature = (tensor1, tensor2, *, value=1.0))]
    fn addcmul(
        &self,
        tensor1: &Bound<'_, PyAny>,
        tensor2: &Bound<'_, PyAny>,
        value: f64,
    ) -> PyResult<Tensor> {
        addc(BinaryOp::Mul, &self.t, tensor1, tensor2, value)
    }
    #[pyo3(signature = (tensor1, tensor2, *, value=1.0))]
    fn addcdiv(
        &self,
        tensor1: &Bound<'_, PyAny>,
        tensor2: &Bound<'_, PyAny>,
        value: f64,
    ) -> PyResult<Tensor> {
        addc(BinaryOp::Div, &self.t, tensor1, tensor2, value)
    }
    fn lerp(&self, end: &Bound<'_, PyAny>, weight: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        lerp_value(&self.t, end, weight)
    }

    // unary methods
    fn neg(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Neg, &self.t)?)
    }
    fn negative(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Neg, &self.t)?)
    }
    fn abs(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Abs, &self.t)?)
    }
    fn sign(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sign, &self.t)?)
    }
    fn square(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Square, &self.t)?)
    }
    fn reciprocal(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Reciprocal, &self.t)?)
    }
    fn exp(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Exp, &self.t)?)
    }
    fn log(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Log, &self.t)?)
    }
    fn log2(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Log2, &self.t)?)
    }
    fn log10(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Log10, &self.t)?)
    }
    fn log1p(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Log1p, &self.t)?)
    }
    fn expm1(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Expm1, &self.t)?)
    }
    fn sqrt(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sqrt, &self.t)?)
    }
    fn rsqrt(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Rsqrt, &self.t)?)
    }
    fn sin(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sin, &self.t)?)
    }
    fn cos(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Cos, &self.t)?)
    }
    fn tan(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Tan, &self.t)?)
    }
    fn tanh(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Tanh, &self.t)?)
    }
    fn sigmoid(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sigmoid, &self.t)?)
    }
    fn relu(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Relu, &self.t)?)
    }
    fn erf(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Erf, &self.t)?)
    }
    fn floor(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Floor, &self.t)?)
    }
    fn ceil(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Ceil, &self.t)?)
    }
    #[pyo3(signature = (decimals=0))]
    fn round(&self, decimals: i64) -> PyResult<Tensor> {
        round_decimals(&self.t, decimals)
    }
    fn trunc(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Trunc, &self.t)?)
    }
    fn frac(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Frac, &self.t)?)
    }
    fn isnan(&self) -> PyResult<Tensor> {
        Ok(predicate(Predicate::IsNan, &self.t)?)
    }
    fn isinf(&self) -> PyResult<Tensor> {
        Ok(predicate(Predicate::IsInf, &self.t)?)
    }
    fn isfinite(&self) -> PyResult<Tensor> {
        Ok(predicate(Predicate::IsFinite, &self.t)?)
    }

    // in place
    #[pyo3(signature = (other, *, alpha=None))]
    fn add_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<f64>,
    ) -> PyResult<Bound<'py, Self>> {
        let o = operand("add_", other)?;
        done(slf, arith_inplace(BinaryOp::Add, &slf.get().t, &o, alpha))
    }
    #[pyo3(signature = (other, *, alpha=None))]
    fn sub_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        alpha: Option<f64>,
    ) -> PyResult<Bound<'py, Self>> {
        let o = operand("sub_", other)?;
        done(slf, arith_inplace(BinaryOp::Sub, &slf.get().t, &o, alpha))
    }
    fn mul_<'py>(slf: &Bound<'py, Self>, other: &Bound<'py, PyAny>) -> PyResult<Bound<'py, Self>> {
        let o = operand("mul_", other)?;
        done(slf, arith_inplace(BinaryOp::Mul, &slf.get().t, &o, None))
    }
    #[pyo3(signature = (other, *, rounding_mode=None))]
    fn div_<'py>(
        slf: &Bound<'py, Self>,
        other: &Bound<'py, PyAny>,
        rounding_mode: Option<&str>,
    ) -> PyResult<Bound<'py, Self>> {
        let o = operand("div_", other)?;
        let op = rounding_op(rounding_mode)?;
        done(slf, arith_inplace(op, &slf.get().t, &o, None))
    }
    fn pow_<'py>(
        slf: &Bound<'py, Self>,
        exponent: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        let o = operand("pow_", exponent)?;
        done(slf, arith_inplace(BinaryOp::Pow, &slf.get().t, &o, None))
    }
    #[pyo3(signature = (min=None, max=None))]
    fn clamp_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<&Bound<'py, PyAny>>,
        max: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        let lo = opt_operand("clamp_", min)?;
        let hi = opt_operand("clamp_", max)?;
        let t = &slf.get().t;
        let bounds: Vec<&Tensor> = [&lo, &hi]
            .into_iter()
            .filter_map(|b| match b {
                Some(Operand::Tensor(x)) => Some(x),
                _ => None,
            })
            .collect();
        done(
            slf,
            inplace("clamp_", t, &bounds, true, |x| {
                clamp(x, lo.as_ref(), hi.as_ref())
            }),
        )
    }
    #[pyo3(signature = (min=None, max=None))]
    fn clip_<'py>(
        slf: &Bound<'py, Self>,
        min: Option<&Bound<'py, PyAny>>,
        max: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, Self>> {
        Self::clamp_(slf, min, max)
    }
    fn neg_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "neg_", UnaryOp::Neg)
    }
    fn exp_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "exp_", UnaryOp::Exp)
    }
    fn log_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "log_", UnaryOp::Log)
    }
    fn sqrt_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "sqrt_", UnaryOp::Sqrt)
    }
    fn relu_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "relu_", UnaryOp::Relu)
    }
    fn sigmoid_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "sigmoid_", UnaryOp::Sigmoid)
    }
    fn tanh_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "tanh_", UnaryOp::Tanh)
    }
    fn abs_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "abs_", UnaryOp::Abs)
    }
    fn reciprocal_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "reciprocal_", UnaryOp::Reciprocal)
    }
    fn floor_<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, Self>> {
        unary_inplace(slf, "floor_", UnaryOp::Floor)
    }
    #[pyo3(signature = (tensor1, tensor2, *, value=1.0))]
    fn addcmul_<'py>(
        slf: &Bound<'py, Self>,
        tensor1: &Bound<'py, PyAny>,
        tensor2: &Bound<'py, PyAny>,
        value: f64,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        let new = addc(BinaryOp::Mul, t, tensor1, tensor2, value)?;
        done(slf, inplace("addcmul_", t, &[], false, move |_| Ok(new)))
    }
    #[pyo3(signature = (tensor1, tensor2, *, value=1.0))]
    fn addcdiv_<'py>(
        slf: &Bound<'py, Self>,
        tensor1: &Bound<'py, PyAny>,
        tensor2: &Bound<'py, PyAny>,
        value: f64,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        let new = addc(BinaryOp::Div, t, tensor1, tensor2, value)?;
        done(slf, inplace("addcdiv_", t, &[], false, move |_| Ok(new)))
    }
    fn lerp_<'py>(
        slf: &Bound<'py, Self>,
        end: &Bound<'py, PyAny>,
        weight: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        // lerp's graph keeps only `weight`, never the old value of `self`
        let new = lerp_value(t, end, weight)?;
        done(slf, inplace("lerp_", t, &[], false, move |_| Ok(new)))
    }
}

// ---------------------------------------------------------------- functions

macro_rules! binary_fn {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(
            #[pyfunction]
            fn $name(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
                let op: BinaryOp = $op;
                let a = operand(op.name(), input)?;
                let b = operand(op.name(), other)?;
                Ok(binary(op, &a, &b)?)
            }
        )*
    };
}

binary_fn! {
    mul => BinaryOp::Mul,
    multiply => BinaryOp::Mul,
    true_divide => BinaryOp::Div,
    floor_divide => BinaryOp::FloorDivide,
    remainder => BinaryOp::Remainder,
    fmod => BinaryOp::Fmod,
    pow => BinaryOp::Pow,
    maximum => BinaryOp::Maximum,
    minimum => BinaryOp::Minimum,
    bitwise_and => BinaryOp::BitwiseAnd,
    bitwise_or => BinaryOp::BitwiseOr,
    bitwise_xor => BinaryOp::BitwiseXor,
}

#[pyfunction]
#[pyo3(signature = (input, other, *, rounding_mode=None))]
fn div(
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
    rounding_mode: Option<&str>,
) -> PyResult<Tensor> {
    let op = rounding_op(rounding_mode)?;
    Ok(binary(
        op,
        &operand("div", input)?,
        &operand("div", other)?,
    )?)
}

#[pyfunction]
#[pyo3(signature = (input, other, *, rounding_mode=None))]
fn divide(
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
    rounding_mode: Option<&str>,
) -> PyResult<Tensor> {
    div(input, other, rounding_mode)
}

#[pyfunction]
#[pyo3(signature = (input, other, *, alpha=None))]
fn add(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
    with_alpha(
        BinaryOp::Add,
        &operand("add", input)?,
        &operand("add", other)?,
        alpha,
    )
}

#[pyfunction]
#[pyo3(signature = (input, other, *, alpha=None))]
fn sub(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
    with_alpha(
        BinaryOp::Sub,
        &operand("sub", input)?,
        &operand("sub", other)?,
        alpha,
    )
}

#[pyfunction]
#[pyo3(signature = (input, other, *, alpha=None))]
fn subtract(
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
    alpha: Option<f64>,
) -> PyResult<Tensor> {
    sub(input, other, alpha)
}

macro_rules! compare_fn {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(
            #[pyfunction]
            fn $name(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
                let op: CompareOp = $op;
                let a = operand(op.name(), input)?;
                let b = operand(op.name(), other)?;
                Ok(compare(op, &a, &b)?)
            }
        )*
    };
}

compare_fn! {
    eq => CompareOp::Eq,
    ne => CompareOp::Ne,
    lt => CompareOp::Lt,
    le => CompareOp::Le,
    gt => CompareOp::Gt,
    ge => CompareOp::Ge,
}

macro_rules! logical_fn {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(
            #[pyfunction]
            fn $name(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
                let a = extract_tensor(stringify!($name), "input", input)?;
                logical_self($op, stringify!($name), &a, other)
            }
        )*
    };
}

logical_fn! {
    logical_and => LogicalOp::And,
    logical_or => LogicalOp::Or,
    logical_xor => LogicalOp::Xor,
}

macro_rules! unary_fn {
    ($($name:ident => $op:expr),* $(,)?) => {
        $(
            #[pyfunction]
            fn $name(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
                let t = extract_tensor(stringify!($name), "input", input)?;
                Ok(unary($op, &t)?)
            }
        )*
    };
}

unary_fn! {
    neg => UnaryOp::Neg,
    negative => UnaryOp::Neg,
    abs => UnaryOp::Abs,
    absolute => UnaryOp::Abs,
    sign => UnaryOp::Sign,
    square => UnaryOp::Square,
    reciprocal => UnaryOp::Reciprocal,
    exp => UnaryOp::Exp,
    log => UnaryOp::Log,
    log2 => UnaryOp::Log2,
    log10 => UnaryOp::Log10,
    log1p => UnaryOp::Log1p,
    expm1 => UnaryOp::Expm1,
    sqrt => UnaryOp::Sqrt,
    rsqrt => UnaryOp::Rsqrt,
    sin => UnaryOp::Sin,
    cos => UnaryOp::Cos,
    tan => UnaryOp::Tan,
    tanh => UnaryOp::Tanh,
    sigmoid => UnaryOp::Sigmoid,
    relu => UnaryOp::Relu,
    silu => UnaryOp::Silu,
    erf => UnaryOp::Erf,
    floor => UnaryOp::Floor,
    ceil => UnaryOp::Ceil,
    trunc => UnaryOp::Trunc,
    fix => UnaryOp::Trunc,
    frac => UnaryOp::Frac,
}

#[pyfunction]
#[pyo3(signature = (input, *, decimals=0))]
fn round(input: &Bound<'_, PyAny>, decimals: i64) -> PyResult<Tensor> {
    round_decimals(&extract_tensor("round", "input", input)?, decimals)
}

/// `softplus(x, beta=1, threshold=20)`: `log(1 + exp(beta x)) / beta`, linear above the threshold.
#[pyfunction]
#[pyo3(signature = (input, beta=1.0, threshold=20.0))]
fn softplus(input: &Bound<'_, PyAny>, beta: f64, threshold: f64) -> PyResult<Tensor> {
    let t = extract_tensor("softplus", "input", input)?;
    Ok(unary::softplus(&t, beta, threshold)?)
}

/// `gelu(x, approximate='none')`: exact (erf) or the tanh approximation.
#[pyfunction]
#[pyo3(signature = (input, approximate="none"))]
fn gelu(input: &Bound<'_, PyAny>, approximate: &str) -> PyResult<Tensor> {
    let t = extract_tensor("gelu", "input", input)?;
    Ok(unary::gelu(&t, approximate)?)
}

macro_rules! predicate_fn {
    ($($name:ident => $p:expr),* $(,)?) => {
        $(
            #[pyfunction]
            fn $name(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
                let t = extract_tensor(stringify!($name), "input", input)?;
                Ok(predicate($p, &t)?)
            }
        )*
    };
}

predicate_fn! {
    isnan => Predicate::IsNan,
    isinf => Predicate::IsInf,
    isfinite => Predicate::IsFinite,
}

#[pyfunction]
fn logical_not(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(unary::logical_not(&extract_tensor(
        "logical_not",
        "input",
        input,
    )?)?)
}

#[pyfunction]
fn bitwise_not(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(unary::bitwise_not(&extract_tensor(
        "bitwise_not",
        "input",
        input,
    )?)?)
}

/// `where(condition, input, other)`: `input` where `condition`, else `other`.
#[pyfunction]
#[pyo3(name = "where")]
fn where_fn(
    condition: &Bound<'_, PyAny>,
    input: &Bound<'_, PyAny>,
    other: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let c = extract_tensor("where", "condition", condition)?;
    Ok(where_(
        &c,
        &operand("where", input)?,
        &operand("where", other)?,
    )?)
}

#[pyfunction]
#[pyo3(name = "clamp", signature = (input, min=None, max=None))]
fn clamp_fn(
    input: &Bound<'_, PyAny>,
    min: Option<&Bound<'_, PyAny>>,
    max: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    clamp_args(&extract_tensor("clamp", "input", input)?, min, max)
}

#[pyfunction]
#[pyo3(signature = (input, min=None, max=None))]
fn clip(
    input: &Bound<'_, PyAny>,
    min: Option<&Bound<'_, PyAny>>,
    max: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    clamp_args(&extract_tensor("clip", "input", input)?, min, max)
}

#[pyfunction]
fn clamp_min(input: &Bound<'_, PyAny>, min: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    clamp_args(
        &extract_tensor("clamp_min", "input", input)?,
        Some(min),
        None,
    )
}

#[pyfunction]
fn clamp_max(input: &Bound<'_, PyAny>, max: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    clamp_args(
        &extract_tensor("clamp_max", "input", input)?,
        None,
        Some(max),
    )
}

#[pyfunction]
#[pyo3(signature = (input, tensor1, tensor2, *, value=1.0))]
fn addcmul(
    input: &Bound<'_, PyAny>,
    tensor1: &Bound<'_, PyAny>,
    tensor2: &Bound<'_, PyAny>,
    value: f64,
) -> PyResult<Tensor> {
    let t = extract_tensor("addcmul", "input", input)?;
    addc(BinaryOp::Mul, &t, tensor1, tensor2, value)
}

#[pyfunction]
#[pyo3(signature = (input, tensor1, tensor2, *, value=1.0))]
fn addcdiv(
    input: &Bound<'_, PyAny>,
    tensor1: &Bound<'_, PyAny>,
    tensor2: &Bound<'_, PyAny>,
    value: f64,
) -> PyResult<Tensor> {
    let t = extract_tensor("addcdiv", "input", input)?;
    addc(BinaryOp::Div, &t, tensor1, tensor2, value)
}

#[pyfunction]
fn lerp(
    input: &Bound<'_, PyAny>,
    end: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    lerp_value(&extract_tensor("lerp", "input", input)?, end, weight)
}

/// `relu_(x)` / `sigmoid_(x)`: in place, returning `x`.
#[pyfunction]
fn relu_<'py>(input: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTensor>> {
    let t = input
        .cast::<PyTensor>()
        .map_err(|_| type_error("relu_", input))?;
    unary_inplace(t, "relu_", UnaryOp::Relu)
}

#[pyfunction]
fn sigmoid_<'py>(input: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyTensor>> {
    let t = input
        .cast::<PyTensor>()
        .map_err(|_| type_error("sigmoid_", input))?;
    unary_inplace(t, "sigmoid_", UnaryOp::Sigmoid)
}

fn type_error(op: &str, obj: &Bound<'_, PyAny>) -> PyErr {
    let name = obj
        .get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default();
    PyTypeError::new_err(format!(
        "{op}(): argument 'input' must be Tensor, not {name}"
    ))
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    macro_rules! reg {
        ($($f:ident),* $(,)?) => {
            $(m.add_function(wrap_pyfunction!($f, m)?)?;)*
        };
    }
    reg!(
        add,
        sub,
        subtract,
        mul,
        multiply,
        div,
        divide,
        true_divide,
        floor_divide,
        remainder,
        fmod,
        pow,
        maximum,
        minimum,
        bitwise_and,
        bitwise_or,
        bitwise_xor,
        bitwise_not,
        eq,
        ne,
        lt,
        le,
        gt,
        ge,
        logical_and,
        logical_or,
        logical_xor,
        logical_not,
        neg,
        negative,
        abs,
        absolute,
        sign,
        square,
        reciprocal,
        exp,
        log,
        log2,
        log10,
        log1p,
        expm1,
        sqrt,
        rsqrt,
        sin,
        cos,
        tan,
        tanh,
        sigmoid,
        relu,
        silu,
        erf,
        floor,
        ceil,
        round,
        trunc,
        fix,
        frac,
        softplus,
        gelu,
        isnan,
        isinf,
        isfinite,
        where_fn,
        clamp_fn,
        clip,
        clamp_min,
        clamp_max,
        addcmul,
        addcdiv,
        lerp,
        relu_,
        sigmoid_,
    );
    Ok(())
}
