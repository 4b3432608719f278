//! Element-wise unary ops. One table: forward, what is saved, backward.

use crate::autograd::function::record;
use crate::autograd::saved::SavedTensor;
use crate::dtype::DEFAULT_FLOAT;
use crate::error::{CandleContext, Result};
use crate::ops::binary::{add_scalar, compare, div, mul, mul_scalar, sub, CompareOp};
use crate::ops::convert::to_dtype;
use crate::tensor::Tensor;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnaryOp {
    Neg,
    Exp,
    Log,
    Sqrt,
    Sin,
    Cos,
    Tanh,
    Relu,
    Abs,
}

/// What a backward rule needs kept alive.
enum Saves {
    Nothing,
    Input,
    Output,
}

impl UnaryOp {
    pub fn name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "neg",
            UnaryOp::Exp => "exp",
            UnaryOp::Log => "log",
            UnaryOp::Sqrt => "sqrt",
            UnaryOp::Sin => "sin",
            UnaryOp::Cos => "cos",
            UnaryOp::Tanh => "tanh",
            UnaryOp::Relu => "relu",
            UnaryOp::Abs => "abs",
        }
    }

    fn node_name(self) -> &'static str {
        match self {
            UnaryOp::Neg => "NegBackward0",
            UnaryOp::Exp => "ExpBackward0",
            UnaryOp::Log => "LogBackward0",
            UnaryOp::Sqrt => "SqrtBackward0",
            UnaryOp::Sin => "SinBackward0",
            UnaryOp::Cos => "CosBackward0",
            UnaryOp::Tanh => "TanhBackward0",
            UnaryOp::Relu => "ReluBackward0",
            UnaryOp::Abs => "AbsBackward0",
        }
    }

    /// Integer inputs are promoted to the default float for these.
    fn promotes_to_float(self) -> bool {
        !matches!(self, UnaryOp::Neg | UnaryOp::Relu | UnaryOp::Abs)
    }

    fn saves(self) -> Saves {
        match self {
            UnaryOp::Neg => Saves::Nothing,
            UnaryOp::Exp | UnaryOp::Sqrt | UnaryOp::Tanh | UnaryOp::Relu => Saves::Output,
            UnaryOp::Log | UnaryOp::Sin | UnaryOp::Cos | UnaryOp::Abs => Saves::Input,
        }
    }

    fn forward(self, x: &candle_core::Tensor) -> Result<candle_core::Tensor> {
        let r = match self {
            UnaryOp::Neg => x.neg(),
            UnaryOp::Exp => x.exp(),
            UnaryOp::Log => x.log(),
            UnaryOp::Sqrt => x.sqrt(),
            UnaryOp::Sin => x.sin(),
            UnaryOp::Cos => x.cos(),
            UnaryOp::Tanh => x.tanh(),
            UnaryOp::Relu => x.relu(),
            UnaryOp::Abs => x.abs(),
        };
        r.op(self.name())
    }

    /// `saved` is the input or the output, as `saves()` says.
    fn backward(self, g: &Tensor, saved: Option<&Tensor>) -> Result<Tensor> {
        let s = || saved.expect("saved tensor");
        match self {
            UnaryOp::Neg => neg(g),
            UnaryOp::Exp => mul(g, s()),
            UnaryOp::Log => div(g, s()),
            UnaryOp::Sqrt => div(g, &mul_scalar(s(), 2.0)?),
            UnaryOp::Sin => mul(g, &cos(s())?),
            UnaryOp::Cos => mul(g, &neg(&sin(s())?)?),
            UnaryOp::Tanh => {
                // 1 - y^2
                let y2 = mul(s(), s())?;
                mul(g, &add_scalar(&neg(&y2)?, 1.0)?)
            }
            UnaryOp::Relu => {
                let mask = compare(CompareOp::Gt, &s().into(), &0.0.into())?;
                mul(g, &to_dtype(&mask, g.dtype())?)
            }
            UnaryOp::Abs => {
                let x = s();
                let pos = to_dtype(&compare(CompareOp::Gt, &x.into(), &0.0.into())?, g.dtype())?;
                let negv = to_dtype(&compare(CompareOp::Lt, &x.into(), &0.0.into())?, g.dtype())?;
                mul(g, &sub(&pos, &negv)?)
            }
        }
    }
}

pub fn unary(op: UnaryOp, x: &Tensor) -> Result<Tensor> {
    let x = if op.promotes_to_float() && !x.dtype().is_floating_point() {
        to_dtype(x, DEFAULT_FLOAT)?
    } else {
        x.clone()
    };
    let out = Tensor::new(op.forward(&x.data())?, x.dtype());
    let saves = op.saves();
    let has_saved = !matches!(saves, Saves::Nothing);
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
            let s = if has_saved { ctx.saved.first() } else { None };
            Ok(vec![Some(op.backward(g, s)?)])
        },
    );
    Ok(out)
}

pub fn neg(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Neg, x)
}
pub fn exp(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Exp, x)
}
pub fn log(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Log, x)
}
pub fn sin(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Sin, x)
}
pub fn cos(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Cos, x)
}
pub fn relu(x: &Tensor) -> Result<Tensor> {
    unary(UnaryOp::Relu, x)
}
