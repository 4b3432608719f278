//! Element-wise binary ops with broadcasting and PyTorch's type promotion.
//! One table: each op's forward, what it saves, and its backward.

use crate::autograd::function::record;
use crate::autograd::saved::SavedTensor;
use crate::dtype::{DType, DEFAULT_FLOAT};
use crate::error::{CandleContext, Error, Result};
use crate::ops::{broadcast_shape, promote, result_dtype, sum_to, unary, Operand};
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BinaryOp {
    Add,
    Sub,
    Mul,
    Div,
    Maximum,
    Minimum,
}

impl BinaryOp {
    pub fn name(self) -> &'static str {
        match self {
            BinaryOp::Add => "add",
            BinaryOp::Sub => "sub",
            BinaryOp::Mul => "mul",
            BinaryOp::Div => "div",
            BinaryOp::Maximum => "maximum",
            BinaryOp::Minimum => "minimum",
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
        }
    }

    fn forward(
        self,
        a: &candle_core::Tensor,
        b: &candle_core::Tensor,
    ) -> Result<candle_core::Tensor> {
        let r = match self {
            BinaryOp::Add => a.broadcast_add(b),
            BinaryOp::Sub => a.broadcast_sub(b),
            BinaryOp::Mul => a.broadcast_mul(b),
            BinaryOp::Div => a.broadcast_div(b),
            BinaryOp::Maximum => a.broadcast_maximum(b),
            BinaryOp::Minimum => a.broadcast_minimum(b),
        };
        r.op(self.name())
    }

    /// Which inputs the backward needs, given which gradients are wanted.
    fn saves(self, need_a: bool, need_b: bool) -> (bool, bool) {
        match self {
            BinaryOp::Add | BinaryOp::Sub => (false, false),
            BinaryOp::Mul => (need_b, need_a),
            BinaryOp::Div => (need_b, need_a || need_b),
            BinaryOp::Maximum | BinaryOp::Minimum => (true, true),
        }
    }

    /// Gradients of (a, b) before reduction to their shapes.
    fn backward(
        self,
        g: &Tensor,
        a: Option<&Tensor>,
        b: Option<&Tensor>,
        need: (bool, bool),
    ) -> Result<(Option<Tensor>, Option<Tensor>)> {
        let (na, nb) = need;
        Ok(match self {
            BinaryOp::Add => (na.then(|| g.clone()), nb.then(|| g.clone())),
            BinaryOp::Sub => (
                na.then(|| g.clone()),
                if nb { Some(unary::neg(g)?) } else { None },
            ),
            BinaryOp::Mul => (
                if na { Some(mul(g, b.unwrap())?) } else { None },
                if nb { Some(mul(g, a.unwrap())?) } else { None },
            ),
            BinaryOp::Div => {
                let b = b.unwrap();
                let ga = if na { Some(div(g, b)?) } else { None };
                let gb = if nb {
                    // -g * a / b^2
                    let q = div(&div(g, b)?, b)?;
                    Some(unary::neg(&mul(&q, a.unwrap())?)?)
                } else {
                    None
                };
                (ga, gb)
            }
            BinaryOp::Maximum | BinaryOp::Minimum => {
                // Ties split the gradient evenly, as PyTorch does.
                let (a, b) = (a.unwrap(), b.unwrap());
                let pick_a = if self == BinaryOp::Maximum {
                    compare(CompareOp::Gt, &a.into(), &b.into())?
                } else {
                    compare(CompareOp::Lt, &a.into(), &b.into())?
                };
                let tie = compare(CompareOp::Eq, &a.into(), &b.into())?;
                let dt = g.dtype();
                let wa = add(
                    &crate::ops::convert::to_dtype(&pick_a, dt)?,
                    &mul_scalar(&crate::ops::convert::to_dtype(&tie, dt)?, 0.5)?,
                )?;
                let ga = if na { Some(mul(g, &wa)?) } else { None };
                let gb = if nb {
                    Some(sub(g, &mul(g, &wa)?)?)
                } else {
                    None
                };
                (ga, gb)
            }
        })
    }
}

/// `op(a, b)` on tensors or numbers.
pub fn binary(op: BinaryOp, a: &Operand, b: &Operand) -> Result<Tensor> {
    let mut dtype = result_dtype(&[a.clone(), b.clone()]);
    if op == BinaryOp::Div && !dtype.is_floating_point() {
        dtype = DEFAULT_FLOAT;
    }
    if dtype == DType::Bool && matches!(op, BinaryOp::Sub) {
        return Err(Error::type_(
            "sub: Subtraction, the `-` operator, with two bool tensors is not supported. Use the \
             `^` or `logical_xor()` operator instead.",
        ));
    }
    let ts = promote(&[a.clone(), b.clone()], dtype)?;
    let (ta, tb) = (&ts[0], &ts[1]);
    let (da, db) = (ta.dims(), tb.dims());
    broadcast_shape(op.name(), &da, &db)?;
    let mut data = op.forward(&ta.data(), &tb.data())?;
    if dtype == DType::Bool && matches!(op, BinaryOp::Add | BinaryOp::Mul) {
        data = data.ne(0f64).op(op.name())?;
    }
    let out = Tensor::new(data, dtype);
    let need = (ta.requires_grad(), tb.requires_grad());
    let (sa, sb) = op.saves(need.0, need.1);
    record(
        op.node_name(),
        &out,
        &[ta, tb],
        || {
            let mut v = Vec::new();
            if sa {
                v.push(SavedTensor::input(ta));
            }
            if sb {
                v.push(SavedTensor::input(tb));
            }
            v
        },
        move |ctx, g| {
            let mut it = ctx.saved.iter();
            let a = if sa { it.next() } else { None };
            let b = if sb { it.next() } else { None };
            let (ga, gb) = op.backward(g, a, b, (ctx.needs(0), ctx.needs(1)))?;
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

pub fn mul_scalar(a: &Tensor, s: f64) -> Result<Tensor> {
    binary(BinaryOp::Mul, &a.into(), &s.into())
}

pub fn add_scalar(a: &Tensor, s: f64) -> Result<Tensor> {
    binary(BinaryOp::Add, &a.into(), &s.into())
}

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
    let ts = promote(&[a.clone(), b.clone()], dtype)?;
    let (x, y) = (ts[0].data(), ts[1].data());
    broadcast_shape(op.name(), x.dims(), y.dims())?;
    let r = match op {
        CompareOp::Eq => x.broadcast_eq(&y),
        CompareOp::Ne => x.broadcast_ne(&y),
        CompareOp::Lt => x.broadcast_lt(&y),
        CompareOp::Le => x.broadcast_le(&y),
        CompareOp::Gt => x.broadcast_gt(&y),
        CompareOp::Ge => x.broadcast_ge(&y),
    }
    .op(op.name())?;
    Ok(Tensor::new(r, DType::Bool))
}
