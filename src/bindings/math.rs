//! Element-wise math: `gradstream.add(...)`, `Tensor.add(...)`, and the operators.

use pyo3::prelude::*;

use crate::bindings::convert::{extract_operand, extract_tensor};
use crate::bindings::tensor::PyTensor;
use crate::ops::binary::{binary, compare, BinaryOp, CompareOp};
use crate::ops::unary::{unary, UnaryOp};
use crate::ops::Operand;
use crate::tensor::Tensor;

fn bin(op: BinaryOp, a: &Bound<'_, PyAny>, b: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let x = extract_operand(op.name(), a)?;
    let y = extract_operand(op.name(), b)?;
    Ok(binary(op, &x, &y)?)
}

fn bin_self(
    op: BinaryOp,
    t: &Tensor,
    other: &Bound<'_, PyAny>,
    reflected: bool,
) -> PyResult<Tensor> {
    let o = extract_operand(op.name(), other)?;
    let s = Operand::Tensor(t.clone());
    Ok(if reflected {
        binary(op, &o, &s)?
    } else {
        binary(op, &s, &o)?
    })
}

/// `a + alpha * b` / `a - alpha * b`.
fn with_alpha(
    op: BinaryOp,
    t: &Tensor,
    other: &Bound<'_, PyAny>,
    alpha: Option<f64>,
) -> PyResult<Tensor> {
    match alpha {
        None => bin_self(op, t, other, false),
        Some(a) => {
            let o = extract_operand(op.name(), other)?;
            let scaled = binary(BinaryOp::Mul, &o, &Operand::from(a))?;
            Ok(binary(
                op,
                &Operand::Tensor(t.clone()),
                &Operand::Tensor(scaled),
            )?)
        }
    }
}

fn cmp_self(op: CompareOp, t: &Tensor, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let o = extract_operand(op.name(), other)?;
    Ok(compare(op, &Operand::Tensor(t.clone()), &o)?)
}

#[pymethods]
impl PyTensor {
    fn __add__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Add, &self.t, o, false)
    }
    fn __radd__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Add, &self.t, o, true)
    }
    fn __sub__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Sub, &self.t, o, false)
    }
    fn __rsub__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Sub, &self.t, o, true)
    }
    fn __mul__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Mul, &self.t, o, false)
    }
    fn __rmul__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Mul, &self.t, o, true)
    }
    fn __truediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Div, &self.t, o, false)
    }
    fn __rtruediv__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Div, &self.t, o, true)
    }
    fn __neg__(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Neg, &self.t)?)
    }
    fn __pos__(&self) -> Tensor {
        self.t.clone()
    }
    fn __eq__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Eq, &self.t, o)
    }
    fn __ne__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Ne, &self.t, o)
    }
    fn __lt__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Lt, &self.t, o)
    }
    fn __le__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Le, &self.t, o)
    }
    fn __gt__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Gt, &self.t, o)
    }
    fn __ge__(&self, o: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        cmp_self(CompareOp::Ge, &self.t, o)
    }

    #[pyo3(signature = (other, *, alpha=None))]
    fn add(&self, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
        with_alpha(BinaryOp::Add, &self.t, other, alpha)
    }
    #[pyo3(signature = (other, *, alpha=None))]
    fn sub(&self, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
        with_alpha(BinaryOp::Sub, &self.t, other, alpha)
    }
    fn mul(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Mul, &self.t, other, false)
    }
    fn div(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Div, &self.t, other, false)
    }
    fn maximum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Maximum, &self.t, other, false)
    }
    fn minimum(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        bin_self(BinaryOp::Minimum, &self.t, other, false)
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

    fn neg(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Neg, &self.t)?)
    }
    fn exp(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Exp, &self.t)?)
    }
    fn log(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Log, &self.t)?)
    }
    fn sqrt(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sqrt, &self.t)?)
    }
    fn sin(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Sin, &self.t)?)
    }
    fn cos(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Cos, &self.t)?)
    }
    fn tanh(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Tanh, &self.t)?)
    }
    fn relu(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Relu, &self.t)?)
    }
    fn abs(&self) -> PyResult<Tensor> {
        Ok(unary(UnaryOp::Abs, &self.t)?)
    }
}

macro_rules! binary_fn {
    ($name:ident, $op:expr) => {
        #[pyfunction]
        fn $name(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
            bin($op, input, other)
        }
    };
}

binary_fn!(mul, BinaryOp::Mul);
binary_fn!(div, BinaryOp::Div);
binary_fn!(maximum, BinaryOp::Maximum);
binary_fn!(minimum, BinaryOp::Minimum);

#[pyfunction]
#[pyo3(signature = (input, other, *, alpha=None))]
fn add(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
    match input.cast::<PyTensor>() {
        Ok(t) => with_alpha(BinaryOp::Add, &t.get().t, other, alpha),
        Err(_) => bin(BinaryOp::Add, input, other),
    }
}

#[pyfunction]
#[pyo3(signature = (input, other, *, alpha=None))]
fn sub(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>, alpha: Option<f64>) -> PyResult<Tensor> {
    match input.cast::<PyTensor>() {
        Ok(t) => with_alpha(BinaryOp::Sub, &t.get().t, other, alpha),
        Err(_) => bin(BinaryOp::Sub, input, other),
    }
}

macro_rules! compare_fn {
    ($name:ident, $op:expr) => {
        #[pyfunction]
        fn $name(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
            let a = extract_operand($op.name(), input)?;
            let b = extract_operand($op.name(), other)?;
            Ok(compare($op, &a, &b)?)
        }
    };
}

compare_fn!(eq, CompareOp::Eq);
compare_fn!(ne, CompareOp::Ne);
compare_fn!(lt, CompareOp::Lt);
compare_fn!(le, CompareOp::Le);
compare_fn!(gt, CompareOp::Gt);
compare_fn!(ge, CompareOp::Ge);

macro_rules! unary_fn {
    ($name:ident, $op:expr) => {
        #[pyfunction]
        fn $name(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
            let t = extract_tensor(stringify!($name), "input", input)?;
            Ok(unary($op, &t)?)
        }
    };
}

unary_fn!(neg, UnaryOp::Neg);
unary_fn!(exp, UnaryOp::Exp);
unary_fn!(log, UnaryOp::Log);
unary_fn!(sqrt, UnaryOp::Sqrt);
unary_fn!(sin, UnaryOp::Sin);
unary_fn!(cos, UnaryOp::Cos);
unary_fn!(tanh, UnaryOp::Tanh);
unary_fn!(relu, UnaryOp::Relu);
unary_fn!(abs, UnaryOp::Abs);

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(add, m)?)?;
    m.add_function(wrap_pyfunction!(sub, m)?)?;
    m.add_function(wrap_pyfunction!(mul, m)?)?;
    m.add_function(wrap_pyfunction!(div, m)?)?;
    m.add_function(wrap_pyfunction!(maximum, m)?)?;
    m.add_function(wrap_pyfunction!(minimum, m)?)?;
    m.add_function(wrap_pyfunction!(eq, m)?)?;
    m.add_function(wrap_pyfunction!(ne, m)?)?;
    m.add_function(wrap_pyfunction!(lt, m)?)?;
    m.add_function(wrap_pyfunction!(le, m)?)?;
    m.add_function(wrap_pyfunction!(gt, m)?)?;
    m.add_function(wrap_pyfunction!(ge, m)?)?;
    m.add_function(wrap_pyfunction!(neg, m)?)?;
    m.add_function(wrap_pyfunction!(exp, m)?)?;
    m.add_function(wrap_pyfunction!(log, m)?)?;
    m.add_function(wrap_pyfunction!(sqrt, m)?)?;
    m.add_function(wrap_pyfunction!(sin, m)?)?;
    m.add_function(wrap_pyfunction!(cos, m)?)?;
    m.add_function(wrap_pyfunction!(tanh, m)?)?;
    m.add_function(wrap_pyfunction!(relu, m)?)?;
    m.add_function(wrap_pyfunction!(abs, m)?)?;
    Ok(())
}
