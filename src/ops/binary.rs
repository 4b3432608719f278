//! Element-wise binary ops with broadcasting and PyTorch's type promotion, `where`,
//! `clamp`, comparisons, logical ops and the in-place arithmetic (`add_`...).
//! One table: each op's forward, what it saves, and its backward.

use candle_core::op::CmpOp;
use candle_core::Device;

use crate::autograd::function::{record, should_record};
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend::{self, Bin};
use crate::dtype::{default_float, Category, DType};
use crate::error::{CandleContext, Error, Result};
use crate::ops::convert::{self, cast_data, to_dtype};
use crate::ops::inplace::{update_data, Update};
use crate::ops::{
    broadcast_shape, common_device, promote, promote_on, result_dtype, sum_to, unary, Operand,
    Scalar,
};
use crate::tensor::{shape_str, Tensor};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
    Pow,
    FloorDivide,
    /// `div(rounding_mode='trunc')`.
    TruncDivide,
    Remainder,
    Fmod,
    Atan2,
    Hypot,
    BitwiseAnd,
    BitwiseOr,
    BitwiseXor,
}

/// Which of (a, b, output) the backward keeps.
#[derive(Clone, Copy)]
struct Saves {
    a: bool,
    b: bool,
    out: bool,
}

impl BinaryOp {
    /// `div`'s `rounding_mode`: None (true division), `"trunc"` or `"floor"`.
    pub fn division(rounding_mode: Option<&str>) -> Result<BinaryOp> {
        match rounding_mode {
            None => Ok(BinaryOp::Div),
            Some("trunc") => Ok(BinaryOp::TruncDivide),
            Some("floor") => Ok(BinaryOp::FloorDivide),
            Some(m) => Err(Error::dtype(format!(
                "div expected rounding_mode to be one of None, 'trunc', or 'floor' but found '{m}'"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
            BinaryOp::Pow => "pow",
            BinaryOp::FloorDivide => "floor_divide",
            BinaryOp::TruncDivide => "div",
            BinaryOp::Remainder => "remainder",
            BinaryOp::Fmod => "fmod",
            BinaryOp::Atan2 => "atan2",
            BinaryOp::Hypot => "hypot",
            BinaryOp::BitwiseAnd => "bitwise_and",
            BinaryOp::BitwiseOr => "bitwise_or",
            BinaryOp::BitwiseXor => "bitwise_xor",
        }
    }

    fn node_name(self) -> &'static str {
        match self {
            BinaryOp::Add => "AddBackward0",
            BinaryOp::Sub => "SubBackward0",
            BinaryOp::Mul => "MulBackward0",
            BinaryOp::Div => "DivBackward0",
            BinaryOp::Maximum => "MaximumBackward0",
            BinaryOp::Minimum => "MinimumBackward0",
            BinaryOp::Pow => "PowBackward1",
            BinaryOp::Remainder => "RemainderBackward0",
            BinaryOp::Fmod => "FmodBackward0",
            BinaryOp::Atan2 => "Atan2Backward0",
            BinaryOp::Hypot => "HypotBackward0",
            _ => "NotDifferentiable",
        }
    }

    /// Rounding divisions and bitwise ops have no gradient.
    fn differentiable(self) -> bool {
        !matches!(
            self,
            BinaryOp::FloorDivide
                | BinaryOp::TruncDivide
                | BinaryOp::BitwiseAnd
                | BinaryOp::BitwiseOr
                | BinaryOp::BitwiseXor
        )
    }

    /// The kernel for operands of `dtype` (bool arithmetic is logical).
    fn kernel(self, dtype: DType) -> Bin {
        let boolean = dtype == DType::Bool;
        match self {
            // On 0/1 bytes, or is the maximum and and the minimum: ops every device has.
            BinaryOp::Add | BinaryOp::Maximum | BinaryOp::BitwiseOr if boolean => Bin::Max,
            BinaryOp::Mul | BinaryOp::Minimum | BinaryOp::BitwiseAnd if boolean => Bin::Min,
            BinaryOp::Add => Bin::Add,
            BinaryOp::Sub => Bin::Sub,
            BinaryOp::Mul => Bin::Mul,
            BinaryOp::Div => Bin::Div,
            BinaryOp::Maximum => Bin::Max,
            BinaryOp::Minimum => Bin::Min,
            BinaryOp::Pow => Bin::Pow,
            BinaryOp::FloorDivide => Bin::FloorDiv,
            BinaryOp::TruncDivide => Bin::TruncDiv,
            BinaryOp::Remainder => Bin::Rem,
            BinaryOp::Fmod => Bin::Fmod,
            BinaryOp::Atan2 => Bin::Atan2,
            BinaryOp::Hypot => Bin::Hypot,
            BinaryOp::BitwiseAnd => Bin::And,
            BinaryOp::BitwiseOr => Bin::Or,
            BinaryOp::BitwiseXor => Bin::Xor,
        }
    }

    /// What the backward needs kept, given which gradients are wanted.
    fn saves(self, na: bool, nb: bool) -> Saves {
        let (a, b, out) = match self {
            BinaryOp::Mul => (nb, na, false),
            BinaryOp::Div => (nb, na || nb, false),
            BinaryOp::Maximum | BinaryOp::Minimum => (true, true, false),
            BinaryOp::Pow => (true, true, nb),
            BinaryOp::Remainder | BinaryOp::Fmod => (nb, nb, false),
            BinaryOp::Atan2 => (true, true, false),
            BinaryOp::Hypot => (true, true, true),
            _ => (false, false, false),
        };
        Saves { a, b, out }
    }

    /// Gradients of (a, b) before reduction to their shapes.
    fn backward(
        self,
        g: &Tensor,
        a: Option<&Tensor>,
        b: Option<&Tensor>,
        out: Option<&Tensor>,
        need: (bool, bool),
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (na, nb) = need;
        let a = || a.expect("saved input a");
        let b = || b.expect("saved input b");
        let when = |n: bool, f: &dyn Fn() -> Result<Tensor>| n.then(f).transpose();
        Ok(match self {
            BinaryOp::Add => (na.then(|| g.clone()), nb.then(|| g.clone())),
            BinaryOp::Sub => (na.then(|| g.clone()), when(nb, &|| unary::neg(g))?),
            BinaryOp::Mul => (when(na, &|| mul(g, b()))?, when(nb, &|| mul(g, a()))?),
            BinaryOp::Div => (
                when(na, &|| div(g, b()))?,
                // -g * a / b^2
                when(nb, &|| unary::neg(&mul(&div(&div(g, b())?, b())?, a())?))?,
            ),
            BinaryOp::Maximum | BinaryOp::Minimum => {
                // Ties split the gradient evenly, as PyTorch does.
                let (a, b) = (a(), b());
                let pick = if self == BinaryOp::Maximum {
                    CompareOp::Gt
                } else {
                    CompareOp::Lt
                };
                let dt = g.dtype();
                let wa = add(
                    &to_dtype(&compare(pick, &a.into(), &b.into())?, dt)?,
                    &mul_scalar(
                        &to_dtype(&compare(CompareOp::Eq, &a.into(), &b.into())?, dt)?,
                        0.5,
                    )?,
                )?;
                let ga = mul(g, &wa)?;
                let gb = when(nb, &|| sub(g, &ga))?;
                (na.then_some(ga), gb)
            }
            BinaryOp::Pow => {
                let (a, b) = (a(), b());
                // d/da = b * a^(b-1), zero where b == 0 (so 0^0 has gradient 0, not NaN)
                let ga = when(na, &|| {
                    let d = mul(b, &pow(a, &add_scalar(b, -1.0)?)?)?;
                    let zero_exp = compare(CompareOp::Eq, &b.into(), &0.0.into())?;
                    mul(g, &where_(&zero_exp, &0.0.into(), &(&d).into())?)
                })?;
                // d/db = out * log(a), zero where a == 0 and b >= 0
                let gb = when(nb, &|| {
                    let d = mul(out.expect("saved output"), &unary::log(a)?)?;
                    let zero_base = logical(
                        LogicalOp::And,
                        &compare(CompareOp::Eq, &a.into(), &0.0.into())?,
                        &compare(CompareOp::Ge, &b.into(), &0.0.into())?,
                    )?;
                    mul(g, &where_(&zero_base, &0.0.into(), &(&d).into())?)
                })?;
                (ga, gb)
            }
            BinaryOp::Atan2 => {
                // d/da = b / (a^2 + b^2), d/db = -a / (a^2 + b^2)
                let (a, b) = (a(), b());
                let r2 = add(&mul(a, a)?, &mul(b, b)?)?;
                (
                    when(na, &|| mul(g, &div(b, &r2)?))?,
                    when(nb, &|| unary::neg(&mul(g, &div(a, &r2)?)?))?,
                )
            }
            BinaryOp::Hypot => {
                // d/da = a / out, d/db = b / out
                let r = out.expect("saved output");
                (
                    when(na, &|| mul(g, &div(a(), r)?))?,
                    when(nb, &|| mul(g, &div(b(), r)?))?,
                )
            }
            BinaryOp::Remainder | BinaryOp::Fmod => {
                let q = if self == BinaryOp::Remainder {
                    BinaryOp::FloorDivide
                } else {
                    BinaryOp::TruncDivide
                };
                (
                    na.then(|| g.clone()),
                    when(nb, &|| {
                        unary::neg(&mul(g, &binary(q, &a().into(), &b().into())?)?)
                    })?,
                )
            }
            _ => (None, None),
        })
    }
}

/// The dtype an op computes in, or the error PyTorch gives for its operands.
fn op_dtype(op: BinaryOp, a: &Operand, b: &Operand) -> Result<DType> {
    let dtype = result_dtype(&[a.clone(), b.clone()]);
    let category = dtype.category();
    let is_bool = |o: &Operand| match o {
        Operand::Tensor(t) => t.dtype() == DType::Bool,
        Operand::Scalar(s) => matches!(s, Scalar::Bool(_)),
    };
    match op {
        BinaryOp::Hypot if category != Category::Floating => Err(Error::NotImplemented(format!(
            "hypot: not implemented for {} tensors (floating point only)",
            dtype.name()
        ))),
        BinaryOp::Div | BinaryOp::Atan2 if category != Category::Floating => Ok(default_float()),
        BinaryOp::Sub if is_bool(a) || is_bool(b) => Err(Error::dtype(
            "sub: Subtraction, the `-` operator, with a bool tensor is not supported. If you are \
             trying to invert a mask, use the `~` or `logical_not()` operator instead.",
        )),
        // `bool_tensor ** True` is allowed (a scalar exponent), a bool tensor exponent is not
        BinaryOp::Pow if dtype == DType::Bool && matches!(b, Operand::Scalar(_)) => Ok(dtype),
        BinaryOp::Pow
        | BinaryOp::FloorDivide
        | BinaryOp::TruncDivide
        | BinaryOp::Remainder
        | BinaryOp::Fmod
            if dtype == DType::Bool =>
        {
            Err(Error::NotImplemented(format!(
                "{}: not implemented for bool tensors",
                op.name()
            )))
        }
        BinaryOp::BitwiseAnd | BinaryOp::BitwiseOr | BinaryOp::BitwiseXor
            if category == Category::Floating =>
        {
            Err(Error::NotImplemented(format!(
                "{}: not implemented for floating point dtype {}",
                op.name(),
                dtype.name()
            )))
        }
        BinaryOp::Pow if category == Category::Integral => match b {
            Operand::Scalar(Scalar::Int(e)) if *e < 0 => Err(Error::dtype(
                "pow: Integers to negative integer powers are not allowed.",
            )),
            _ => Ok(dtype),
        },
        _ => Ok(dtype),
    }
}

/// Bring operands to `dtype`; an integer scalar wraps into a narrower integer dtype
/// (`uint8 + 300` adds 44), as PyTorch's casts do.
/// They meet on `device`, their [`common_device`].
fn promote_wrapping(operands: &[Operand], dtype: DType, device: &Device) -> Result<Vec<Tensor>> {
    let fitted: Vec<Operand> = operands
        .iter()
        .map(|o| match (o, dtype) {
            (Operand::Scalar(Scalar::Int(i)), DType::UInt8) => {
                Operand::Scalar(Scalar::Int(*i as u8 as i64))
            }
            (Operand::Scalar(Scalar::Int(i)), DType::Int32) => {
                Operand::Scalar(Scalar::Int(*i as i32 as i64))
            }
            (o, _) => o.clone(),
        })
        .collect();
    promote_on(&fitted, dtype, device)
}

/// Apply a binary kernel to tensors already in one dtype, broadcasting them.
fn kernel2(name: &'static str, k: Bin, a: &Tensor, b: &Tensor) -> Result<candle_core::Tensor> {
    let shape = broadcast_shape(name, &a.dims(), &b.dims())?;
    let x = a.data().broadcast_as(shape.clone()).op(name)?;
    let y = b.data().broadcast_as(shape).op(name)?;
    backend::on(&x).binary(name, k, &x, &y)
}

/// Whether any element of an integer tensor is zero (integer division by zero is an error,
/// raised as on PyTorch's CPU; the flag is read back).
pub fn has_zero(t: &candle_core::Tensor) -> Result<bool> {
    if t.elem_count() == 0 {
        return Ok(false);
    }
    let name = "integer division";
    let zero = crate::device::zeros((), t.dtype(), t.device())
        .and_then(|z| z.broadcast_as(t.shape()))
        .op(name)?;
    let eq = backend::on(t).compare(name, CmpOp::Eq, t, &zero)?;
    let z = eq.flatten_all().and_then(|e| e.max(0)).op(name)?;
    Ok(crate::host::read_scalar::<u8>("integer division by zero check", &z)? > 0)
}

/// `op(a, b)` on tensors or numbers.
pub fn binary(op: BinaryOp, a: &Operand, b: &Operand) -> Result<Tensor> {
    let started = remat::start();
    // Shapes are checked before dtypes, as PyTorch does.
    let shape = broadcast_shape(op.name(), &a.dims(), &b.dims())?;
    let dtype = op_dtype(op, a, b)?;
    let operands = [a.clone(), b.clone()];
    let ts = promote_wrapping(&operands, dtype, &common_device(op.name(), &operands)?)?;
    let (ta, tb) = (&ts[0], &ts[1]);
    let (da, db) = (ta.dims(), tb.dims());
    let integral = !dtype.is_floating_point();
    if integral
        && !shape.contains(&0)
        && matches!(
            op,
            BinaryOp::FloorDivide | BinaryOp::TruncDivide | BinaryOp::Remainder | BinaryOp::Fmod
        )
        && has_zero(&tb.data())?
    {
        return Err(Error::dtype(format!("{}: ZeroDivisionError", op.name())));
    }
    let data = kernel2(op.name(), op.kernel(dtype), ta, tb)?;
    let out = Tensor::new(data, dtype);
    if op == BinaryOp::FloorDivide && dtype.is_floating_point() {
        // PyTorch records floor_divide on floats and refuses to differentiate it.
        record("FloorDivideBackward0", &out, &[ta, tb], Vec::new, |_, _| {
            Err(Error::Runtime(
                "derivative for floor_divide is not implemented".into(),
            ))
        });
        return Ok(out);
    }
    if !op.differentiable() {
        return Ok(out);
    }
    let sv = op.saves(ta.requires_grad(), tb.requires_grad());
    remat::note(op.name(), &out, &[ta, tb], started, move |ins| {
        let data = kernel2(op.name(), op.kernel(dtype), &ins[0], &ins[1])?;
        Ok(Tensor::new(data, dtype))
    });
    record(
        op.node_name(),
        &out,
        &[ta, tb],
        || {
            let mut v = Vec::new();
            if sv.a {
                v.push(SavedTensor::input(ta));
            }
            if sv.b {
                v.push(SavedTensor::input(tb));
            }
            if sv.out {
                v.push(SavedTensor::output(&out));
            }
            v
        },
        move |ctx, g| {
            let mut it = ctx.saved.iter();
            let a = if sv.a { it.next() } else { None };
            let b = if sv.b { it.next() } else { None };
            let o = if sv.out { it.next() } else { None };
            let (ga, gb) = op.backward(g, a, b, o, (ctx.needs(0), ctx.needs(1)))?;
            Ok(vec![
                ga.map(|x| sum_to(&x, &da)).transpose()?,
                gb.map(|x| sum_to(&x, &db)).transpose()?,
            ])
        },
    );
    Ok(out)
}

pub fn add(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Add, &a.into(), &b.into())
}

pub fn sub(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Sub, &a.into(), &b.into())
}

pub fn mul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Mul, &a.into(), &b.into())
}

pub fn div(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Div, &a.into(), &b.into())
}

pub fn pow(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Pow, &a.into(), &b.into())
}

pub fn mul_scalar(a: &Tensor, s: f64) -> Result<Tensor> {
    binary(BinaryOp::Mul, &a.into(), &s.into())
}

pub fn add_scalar(a: &Tensor, s: f64) -> Result<Tensor> {
    binary(BinaryOp::Add, &a.into(), &s.into())
}

/// `s - a`.
pub fn rsub_scalar(s: f64, a: &Tensor) -> Result<Tensor> {
    binary(BinaryOp::Sub, &s.into(), &a.into())
}

pub fn pow_scalar(a: &Tensor, e: f64) -> Result<Tensor> {
    binary(BinaryOp::Pow, &a.into(), &e.into())
}

// ---------------------------------------------------------------- comparisons

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CompareOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CompareOp {
    pub fn name(self) -> &'static str {
        match self {
            CompareOp::Eq => "eq",
            CompareOp::Ne => "ne",
            CompareOp::Lt => "lt",
            CompareOp::Le => "le",
            CompareOp::Gt => "gt",
            CompareOp::Ge => "ge",
        }
    }
}

/// Comparisons: compared in the promoted dtype, a bool result, never differentiable.
pub fn compare(op: CompareOp, a: &Operand, b: &Operand) -> Result<Tensor> {
    let dtype = result_dtype(&[a.clone(), b.clone()]);
    let operands = [a.clone(), b.clone()];
    let ts = promote_wrapping(&operands, dtype, &common_device(op.name(), &operands)?)?;
    let (x, y) = (ts[0].data(), ts[1].data());
    let shape = broadcast_shape(op.name(), x.dims(), y.dims())?;
    let x = x.broadcast_as(shape.clone()).op(op.name())?;
    let y = y.broadcast_as(shape).op(op.name())?;
    let cmp = match op {
        CompareOp::Eq => CmpOp::Eq,
        CompareOp::Ne => CmpOp::Ne,
        CompareOp::Lt => CmpOp::Lt,
        CompareOp::Le => CmpOp::Le,
        CompareOp::Gt => CmpOp::Gt,
        CompareOp::Ge => CmpOp::Ge,
    };
    let r = backend::on(&x).compare(op.name(), cmp, &x, &y)?;
    Ok(Tensor::new(r, DType::Bool))
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogicalOp {
    And,
    Or,
    Xor,
}

/// A tensor as bool data (`x != 0`).
pub fn truth(t: &Tensor) -> Result<Tensor> {
    Ok(Tensor::new(
        cast_data(&t.data(), t.dtype(), DType::Bool)?,
        DType::Bool,
    ))
}

/// `logical_and/or/xor`: any dtypes, a bool result.
pub fn logical(op: LogicalOp, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (name, k) = match op {
        // On 0/1 bytes, as in `BinaryOp::kernel`.
        LogicalOp::And => ("logical_and", Bin::Min),
        LogicalOp::Or => ("logical_or", Bin::Max),
        LogicalOp::Xor => ("logical_xor", Bin::Xor),
    };
    let data = kernel2(name, k, &truth(a)?, &truth(b)?)?;
    Ok(Tensor::new(data, DType::Bool))
}

// ---------------------------------------------------------------- where, clamp

/// `where(cond, a, b)`: `a` where `cond` is true, else `b`, all broadcast together.
pub fn where_(cond: &Tensor, a: &Operand, b: &Operand) -> Result<Tensor> {
    let started = remat::start();
    if cond.dtype() != DType::Bool {
        return Err(Error::dtype(format!(
            "where expected condition to be a boolean tensor, but got a tensor with dtype {}",
            cond.dtype().name()
        )));
    }
    let dtype = result_dtype(&[a.clone(), b.clone()]);
    let all = [Operand::Tensor(cond.clone()), a.clone(), b.clone()];
    let device = common_device("where", &all)?;
    let ts = promote_wrapping(&all[1..], dtype, &device)?;
    let cond = &convert::to_device(cond, &device)?;
    let (ta, tb) = (&ts[0], &ts[1]);
    let (da, db, dc) = (ta.dims(), tb.dims(), cond.dims());
    let shape = broadcast_shape("where", &dc, &broadcast_shape("where", &da, &db)?)?;
    let c = cond.data().broadcast_as(shape.clone()).op("where")?;
    let x = ta.data().broadcast_as(shape.clone()).op("where")?;
    let y = tb.data().broadcast_as(shape).op("where")?;
    let out = Tensor::new(backend::on(&x).select("where", &c, &x, &y)?, dtype);
    remat::note("where", &out, &[ta, tb, cond], started, |ins| {
        where_(&ins[2], &(&ins[0]).into(), &(&ins[1]).into())
    });
    record(
        "WhereBackward0",
        &out,
        &[ta, tb],
        || vec![SavedTensor::input(cond)],
        move |ctx, g| {
            let c = &ctx.saved[0];
            let zero = Operand::Scalar(Scalar::Int(0));
            Ok(vec![
                if ctx.needs(0) {
                    Some(sum_to(&where_(c, &g.into(), &zero)?, &da)?)
                } else {
                    None
                },
                if ctx.needs(1) {
                    Some(sum_to(&where_(c, &zero, &g.into())?, &db)?)
                } else {
                    None
                },
            ])
        },
    );
    Ok(out)
}

/// `clamp(x, min, max)`: either bound may be absent, a number or a tensor.
pub fn clamp(x: &Tensor, lo: Option<&Operand>, hi: Option<&Operand>) -> Result<Tensor> {
    let started = remat::start();
    if lo.is_none() && hi.is_none() {
        return Err(Error::dtype(
            "clamp: At least one of 'min' or 'max' must not be None",
        ));
    }
    let mut ops = vec![Operand::Tensor(x.clone())];
    ops.extend(lo.cloned());
    ops.extend(hi.cloned());
    let dtype = result_dtype(&ops);
    if dtype == DType::Bool {
        return Err(Error::NotImplemented(format!(
            "clamp: not implemented for 'Bool' (input shape {})",
            shape_str(&x.dims())
        )));
    }
    let ts = promote_wrapping(&ops, dtype, &common_device("clamp", &ops)?)?;
    let tx = &ts[0];
    let tlo = lo.map(|_| ts[1].clone());
    let thi = hi.map(|_| ts[ts.len() - 1].clone());
    let run = move |x: &Tensor, lo: Option<&Tensor>, hi: Option<&Tensor>| -> Result<Tensor> {
        let mut shape = x.dims();
        for t in lo.iter().chain(hi.iter()) {
            shape = broadcast_shape("clamp", &shape, &t.dims())?;
        }
        let mut cur = Tensor::new(x.data().broadcast_as(shape).op("clamp")?, dtype);
        if let Some(l) = lo {
            cur = Tensor::new(kernel2("clamp", Bin::Max, &cur, l)?, dtype);
        }
        if let Some(h) = hi {
            cur = Tensor::new(kernel2("clamp", Bin::Min, &cur, h)?, dtype);
        }
        Ok(cur)
    };
    let out = run(tx, tlo.as_ref(), thi.as_ref())?;
    let mut inputs = vec![tx];
    inputs.extend(tlo.iter());
    inputs.extend(thi.iter());
    let (has_lo, has_hi) = (tlo.is_some(), thi.is_some());
    remat::note("clamp", &out, &inputs, started, move |ins| {
        let lo = has_lo.then(|| &ins[1]);
        let hi = has_hi.then(|| &ins[ins.len() - 1]);
        run(&ins[0], lo, hi)
    });
    let dims: Vec<Vec<usize>> = inputs.iter().map(|t| t.dims()).collect();
    record(
        "ClampBackward1",
        &out,
        &inputs,
        || inputs.iter().map(|t| SavedTensor::input(t)).collect(),
        move |ctx, g| {
            let x = &ctx.saved[0];
            let lo = has_lo.then(|| &ctx.saved[1]);
            let hi = has_hi.then(|| &ctx.saved[ctx.saved.len() - 1]);
            let cmp = |op, a: &Tensor, b: &Tensor| compare(op, &a.into(), &b.into());
            // x passes where lo <= x <= hi (NaN and lo > hi give it nothing)
            let mut keep_x: Option<Tensor> = None;
            let mut and = |m: Tensor| -> Result<()> {
                keep_x = Some(match keep_x.take() {
                    None => m,
                    Some(k) => logical(LogicalOp::And, &k, &m)?,
                });
                Ok(())
            };
            if let Some(l) = lo {
                and(cmp(CompareOp::Ge, x, l)?)?;
            }
            if let Some(h) = hi {
                and(cmp(CompareOp::Le, x, h)?)?;
            }
            let keep_x = keep_x.expect("a bound");
            // hi wins where x > hi, or where lo > hi; lo wins where x < lo otherwise
            let to_hi = match (lo, hi) {
                (Some(l), Some(h)) => Some(logical(
                    LogicalOp::Or,
                    &cmp(CompareOp::Gt, x, h)?,
                    &cmp(CompareOp::Gt, l, h)?,
                )?),
                (None, Some(h)) => Some(cmp(CompareOp::Gt, x, h)?),
                _ => None,
            };
            let to_lo = match lo {
                Some(l) => {
                    let below = cmp(CompareOp::Lt, x, l)?;
                    Some(match &to_hi {
                        Some(th) => logical(LogicalOp::And, &below, &unary::logical_not(th)?)?,
                        None => below,
                    })
                }
                None => None,
            };
            let zero = Operand::Scalar(Scalar::Int(0));
            let pass = |m: &Tensor, i: usize| -> Result<Option<Tensor>> {
                if !ctx.needs(i) {
                    return Ok(None);
                }
                Some(sum_to(&where_(m, &g.into(), &zero)?, &dims[i])).transpose()
            };
            let mut grads = vec![pass(&keep_x, 0)?];
            if let Some(m) = &to_lo {
                grads.push(pass(m, 1)?);
            }
            if let Some(m) = &to_hi {
                grads.push(pass(m, grads.len())?);
            }
            Ok(grads)
        },
    );
    Ok(out)
}

// ---------------------------------------------------------------- in place

/// PyTorch's `canCast`: never to a lower category (float -> int, int -> bool).
fn check_cast(op: &str, from: DType, to: DType) -> Result<()> {
    if from.category() > to.category() {
        return Err(Error::dtype(format!(
            "{op}: result type {} can't be cast to the desired output type {}",
            from.name(),
            to.name()
        )));
    }
    Ok(())
}

/// Write `new` into `dst` in place (`dst` keeps its shape and dtype), rewriting its history.
pub fn write_inplace(op: &str, dst: &Tensor, new: &Tensor) -> Result<()> {
    check_cast(op, new.dtype(), dst.dtype())?;
    let (dd, nd) = (dst.dims(), new.dims());
    if dd != nd {
        return Err(Error::shape(format!(
            "{op}: output with shape {} doesn't match the broadcast shape {}",
            shape_str(&dd),
            shape_str(&nd)
        )));
    }
    crate::ops::index::assign(dst, None, new)
}

/// `dst = f(dst)` in place. `saves_input`: `f`'s graph keeps its input, so when
/// recording it is given a copy (the original is about to be overwritten).
pub fn inplace(
    op: &str,
    dst: &Tensor,
    others: &[&Tensor],
    saves_input: bool,
    f: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<()> {
    dst.check_inplace(op)?;
    let mut all = vec![dst];
    all.extend_from_slice(others);
    let src = if saves_input && should_record(&all) {
        crate::ops::convert::clone(dst)?
    } else {
        dst.clone()
    };
    let new = f(&src)?;
    write_inplace(op, dst, &new)
}

/// `dst op= other * alpha` for add/sub/mul/div: updates the buffer directly when nothing
/// is recorded and no promotion is involved, else computes the value and writes it back.
pub fn arith_inplace(
    op: BinaryOp,
    dst: &Tensor,
    other: &Operand,
    alpha: Option<f64>,
) -> Result<()> {
    let name = match op {
        BinaryOp::Add => "add_",
        BinaryOp::Sub => "sub_",
        BinaryOp::Mul => "mul_",
        BinaryOp::Div => "div_",
        other => other.name(),
    };
    dst.check_inplace(name)?;
    let other = match alpha {
        None => other.clone(),
        Some(a) => scale(other, a)?,
    };
    let dtype = op_dtype(op, &dst.into(), &other)?;
    check_cast(name, dtype, dst.dtype())?;
    let update = match op {
        BinaryOp::Add => Some(Update::Add),
        BinaryOp::Sub => Some(Update::Sub),
        BinaryOp::Mul => Some(Update::Mul),
        BinaryOp::Div => Some(Update::Div),
        _ => None,
    };
    let direct = match &other {
        Operand::Scalar(_) => dtype == dst.dtype(),
        Operand::Tensor(t) => t.dtype() == dst.dtype(),
    } && dst.dtype() != DType::Bool;
    if let (Some(u), true, false) = (update, direct, should_record(&other_and(dst, &other))) {
        let src = match &other {
            Operand::Tensor(t) => t.clone(),
            Operand::Scalar(_) => {
                promote_wrapping(std::slice::from_ref(&other), dst.dtype(), &dst.device())?
                    .remove(0)
            }
        };
        return update_data(name, dst, &src, u);
    }
    let saves = matches!(op, BinaryOp::Mul | BinaryOp::Div) || op == BinaryOp::Pow;
    let others: Vec<Tensor> = match &other {
        Operand::Tensor(t) => vec![t.clone()],
        _ => vec![],
    };
    let refs: Vec<&Tensor> = others.iter().collect();
    inplace(name, dst, &refs, saves, |x| binary(op, &x.into(), &other))
}

/// `other * alpha` (the `alpha=` of `add`/`sub`); an integral alpha keeps integers integral.
pub fn scale(other: &Operand, alpha: f64) -> Result<Operand> {
    let integral = alpha.fract() == 0.0 && alpha.abs() < 9.0e15;
    Ok(match other {
        Operand::Scalar(s) => Operand::Scalar(match s {
            Scalar::Int(i) if integral => Scalar::Int(i.wrapping_mul(alpha as i64)),
            Scalar::Bool(b) if integral => Scalar::Int(*b as i64 * alpha as i64),
            _ => Scalar::Float(s.as_f64() * alpha),
        }),
        Operand::Tensor(t) => {
            let a = if integral {
                Scalar::Int(alpha as i64)
            } else {
                Scalar::Float(alpha)
            };
            Operand::Tensor(binary(BinaryOp::Mul, &t.into(), &Operand::Scalar(a))?)
        }
    })
}

fn other_and<'a>(dst: &'a Tensor, other: &'a Operand) -> Vec<&'a Tensor> {
    match other {
        Operand::Tensor(t) => vec![dst, t],
        Operand::Scalar(_) => vec![dst],
    }
}

/// `addcmul`/`addcdiv`: `input + value * (t1 op t2)`, `op` being `Mul` or `Div`.
pub fn addc(op: BinaryOp, input: &Tensor, t1: &Tensor, t2: &Tensor, value: f64) -> Result<Tensor> {
    // The product is taken in the dtype of the whole expression, as PyTorch does (a float32
    // product added to a float64 input would round first).
    let dtype = result_dtype(&[input.into(), t1.into(), t2.into()]);
    let name = if op == BinaryOp::Div {
        "addcdiv"
    } else {
        "addcmul"
    };
    let shape = broadcast_shape(name, &input.dims(), &t1.dims())?;
    broadcast_shape(name, &shape, &t2.dims())?;
    if dtype == DType::Bool {
        return Err(Error::NotImplemented(format!(
            "{name}: not implemented for 'Bool' (shapes {}, {} and {})",
            shape_str(&input.dims()),
            shape_str(&t1.dims()),
            shape_str(&t2.dims())
        )));
    }
    if op == BinaryOp::Div && !t1.dtype().is_floating_point() && !t2.dtype().is_floating_point() {
        return Err(Error::Runtime(
            "Integer division with addcdiv is no longer supported; use \
             (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs"
                .into(),
        ));
    }
    // An integer result takes the value as an integer, as PyTorch's Scalar conversion does.
    let value = if dtype.is_floating_point() {
        value
    } else {
        value.trunc()
    };
    let ts = promote(op.name(), &[t1.into(), t2.into()], dtype)?;
    let prod = Operand::Tensor(binary(op, &(&ts[0]).into(), &(&ts[1]).into())?);
    binary(BinaryOp::Add, &input.into(), &scale(&prod, value)?)
}

/// `lerp`: `input + weight * (end - input)`.
pub fn lerp(input: &Tensor, end: &Tensor, weight: &Operand) -> Result<Tensor> {
    let weight_dtype = match weight {
        Operand::Tensor(w) => Some(("weight", w.dtype())),
        Operand::Scalar(_) => None,
    };
    for (what, dt) in std::iter::once(("end", end.dtype())).chain(weight_dtype) {
        if dt != input.dtype() {
            return Err(Error::dtype(format!(
                "lerp: expected dtype {} for `{what}` but got dtype {} (input shape {}, end \
                 shape {})",
                input.dtype().name(),
                dt.name(),
                shape_str(&input.dims()),
                shape_str(&end.dims())
            )));
        }
    }
    let diff = binary(BinaryOp::Sub, &end.into(), &input.into())?;
    let step = binary(BinaryOp::Mul, weight, &(&diff).into())?;
    binary(BinaryOp::Add, &input.into(), &(&step).into())
}
