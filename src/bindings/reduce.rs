//! Reductions: `sum`, `mean`, `prod`, `max`/`min`, `amax`/`amin`, `argmax`/`argmin`,
//! `norm`, `var`/`std`, `all`/`any`, `logsumexp`, `softmax`/`log_softmax`, `count_nonzero`.
//! Each is one `tensor_ops!` row: the function `gradstream.X` and the method `Tensor.X`.

use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict};

use crate::bindings::convert::{
    dims_arg, extract_operand, int_dim, opt_int_dim, type_name, with_dtype,
};
use crate::bindings::op::{functions, tensor_ops};
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::ops::binary::{binary, BinaryOp};
use crate::ops::reduce::{self, minmax};
use crate::ops::Operand;
use crate::tensor::Tensor;

/// `(values, indices)` as a named tuple `gradstream.return_types.NAME` (`max`, `sort`...),
/// one class per name, made on first use.
pub fn values_indices(py: Python<'_>, name: &str, v: Tensor, i: Tensor) -> PyResult<Py<PyAny>> {
    static CLASSES: PyOnceLock<Py<PyDict>> = PyOnceLock::new();
    let classes = CLASSES
        .get_or_init(py, || PyDict::new(py).unbind())
        .bind(py);
    let cls = match classes.get_item(name)? {
        Some(cls) => cls,
        None => {
            let namedtuple = py.import("collections")?.getattr("namedtuple")?;
            let kw = PyDict::new(py);
            kw.set_item("module", "gradstream.return_types")?;
            let cls = namedtuple.call((name, ("values", "indices")), Some(&kw))?;
            classes.set_item(name, &cls)?;
            cls
        }
    };
    Ok(cls.call1((v, i))?.unbind())
}

/// A norm order: a number, `inf`, or `'fro'` (the 2-norm).
fn norm_order(op: &str, p: Option<&Obj<'_>>) -> PyResult<f64> {
    let Some(p) = p.filter(|p| !p.is_none()) else {
        return Ok(2.0);
    };
    if let Ok(s) = p.extract::<String>() {
        return match s.as_str() {
            "fro" => Ok(2.0),
            "nuc" => Err(PyNotImplementedError::new_err(format!(
                "{op}: the nuclear norm ('nuc') is not supported"
            ))),
            _ => Err(PyRuntimeError::new_err(format!(
                "{op}: unknown norm order '{s}' (expected a number, 'fro' or inf)"
            ))),
        };
    }
    number(op, "p", "a number or 'fro'", p)
}

/// A float argument that must not be a bool, with PyTorch's TypeError otherwise.
fn number(op: &str, name: &str, what: &str, v: &Obj<'_>) -> PyResult<f64> {
    let err = || {
        PyTypeError::new_err(format!(
            "{op}(): argument '{name}' must be {what}, not {}",
            type_name(v)
        ))
    };
    if v.is_instance_of::<PyBool>() {
        return Err(err());
    }
    v.extract::<f64>().map_err(|_| err())
}

fn vector_norm_of(
    t: &Tensor,
    p: Option<&Obj<'_>>,
    dim: Option<&Obj<'_>>,
    keepdim: bool,
    dtype: Option<DType>,
) -> PyResult<Tensor> {
    let p = norm_order("norm", p)?;
    let t = with_dtype(t, dtype)?;
    let dims = dims_arg("norm", &t, dim)?;
    Ok(reduce::norm(&t, p, dims.as_deref(), keepdim)?)
}

/// Bessel's correction from `correction=` or `unbiased=` (default 1).
fn correction_arg(op: &str, unbiased: Option<bool>, correction: Option<&Obj<'_>>) -> PyResult<f64> {
    match (unbiased, correction.filter(|c| !c.is_none())) {
        (Some(_), Some(_)) => Err(PyRuntimeError::new_err(format!(
            "{op}: cannot specify both unbiased and correction"
        ))),
        (Some(u), None) => Ok(if u { 1.0 } else { 0.0 }),
        (None, Some(c)) => number(op, "correction", "a number", c),
        (None, None) => Ok(1.0),
    }
}

tensor_ops! { mod functions;
    /// Sum over `dim` (all dims when None). Integers and bools sum to int64.
    both fn sum(x: Tensor, dim: Option<Object> = None, keepdim: bool = false;
        dtype: Option<DType> = None) -> Tensor {
        let t = with_dtype(&x, dtype)?;
        let dims = dims_arg("sum", &t, dim)?;
        Ok(reduce::sum(&t, dims.as_deref(), keepdim)?)
    }
    /// Mean over `dim`; floating point inputs (or `dtype=`) only.
    both fn mean(x: Tensor, dim: Option<Object> = None, keepdim: bool = false;
        dtype: Option<DType> = None) -> Tensor {
        let t = with_dtype(&x, dtype)?;
        reduce::check_mean(&t)?;
        let dims = dims_arg("mean", &t, dim)?;
        Ok(reduce::mean(&t, dims.as_deref(), keepdim)?)
    }
    /// Product of all elements, or along one `dim`; exact gradients with zeros.
    both fn prod(x: Tensor, dim: Option<Object> = None, keepdim: bool = false;
        dtype: Option<DType> = None) -> Tensor {
        let t = with_dtype(&x, dtype)?;
        let d = opt_int_dim("prod", &t, dim)?;
        Ok(reduce::prod(&t, d, keepdim)?)
    }
    /// `max(input)` (`min`): 0-d; `max(input, dim)`: `(values, indices)`; `max(input, other)`:
    /// `maximum` (`minimum`).
    both fn max[true] | min[false](x: Tensor, dim: Option<Object> = None,
        keepdim: bool = false) -> Py<PyAny> {
        Python::attach(|py| {
            let Some(d) = dim.filter(|d| !d.is_none()) else {
                return Ok(PyTensor::wrap(py, minmax::max_all(&x, FLAG)?)?.into_any());
            };
            if d.cast::<PyTensor>().is_ok() {
                let op = if FLAG { BinaryOp::Maximum } else { BinaryOp::Minimum };
                let r = binary(op, &Operand::Tensor(x.clone()), &extract_operand(OP, d)?)?;
                return Ok(PyTensor::wrap(py, r)?.into_any());
            }
            let (v, i) = minmax::max_dim(&x, int_dim(OP, &x, d)?, keepdim, FLAG)?;
            values_indices(py, OP, v, i)
        })
    }
    /// Index (int64) of the first largest (`argmin`: smallest) value along `dim`, or in the
    /// flattened input.
    both fn argmax[true] | argmin[false](x: Tensor, dim: Option<Object> = None,
        keepdim: bool = false) -> Tensor {
        minmax::check_arg(&x, FLAG)?;
        Ok(minmax::argmax(&x, opt_int_dim(OP, &x, dim)?, keepdim, FLAG)?)
    }
    /// Vector norm of order `p` (2, 1, inf, -inf, 0, any number, or 'fro') over `dim`.
    both fn norm(x: Tensor, p: Option<Object> = None, dim: Option<Object> = None,
        keepdim: bool = false, dtype: Option<DType> = None) -> Tensor {
        vector_norm_of(&x, p, dim, keepdim, dtype)
    }
    /// Variance (`std`: standard deviation) over `dim` with `correction=` (or `unbiased=`;
    /// default 1).
    both fn var[false] | std[true](x: Tensor, dim: Option<Object> = None,
        unbiased: Option<bool> = None, keepdim: bool = false;
        correction: Option<Object> = None) -> Tensor {
        // `x.var(True)`: the first positional is `unbiased` in that overload.
        let (dim, unbiased) = match dim {
            Some(d) if d.is_instance_of::<PyBool>() => {
                if unbiased.is_some() {
                    return Err(PyTypeError::new_err(format!(
                        "{OP}(): argument 'dim' must be int or tuple of ints, not bool"
                    )));
                }
                (None, Some(d.extract::<bool>()?))
            }
            d => (d, unbiased),
        };
        let c = correction_arg(OP, unbiased, correction)?;
        reduce::check_var(&x)?;
        let dims = dims_arg(OP, &x, dim)?;
        Ok(match FLAG {
            true => reduce::std(&x, dims.as_deref(), c, keepdim)?,
            false => reduce::var(&x, dims.as_deref(), c, keepdim)?,
        })
    }
    /// `log(sum(exp(x)))` over `dim`, computed stably.
    both fn logsumexp(x: Tensor, dim: Object, keepdim: bool = false) -> Tensor {
        Ok(reduce::logsumexp(&x, dims_arg("logsumexp", &x, Some(dim))?.as_deref(), keepdim)?)
    }
    /// Softmax (`log_softmax`: its log) along `dim`, max-subtracted; `dtype=` casts the
    /// input first.
    both fn softmax[false] | log_softmax[true](x: Tensor, dim: Option<Object> = None,
        dtype: Option<DType> = None) -> Tensor {
        let t = with_dtype(&x, dtype)?;
        let Some(d) = dim.filter(|d| !d.is_none()) else {
            return Err(PyTypeError::new_err(format!(
                "{OP}(): missing required argument 'dim' (int)"
            )));
        };
        Ok(reduce::softmax::softmax(&t, int_dim(OP, &t, d)?, FLAG)?)
    }
    /// Largest (`amin`: smallest) value over `dim` (all dims when None); ties share the
    /// gradient.
    both fn amax[true] | amin[false](x: Tensor, dim: Option<Object> = None,
        keepdim: bool = false) -> Tensor {
        Ok(minmax::amax(&x, dims_arg(OP, &x, dim)?.as_deref(), keepdim, FLAG)?)
    }
    /// Whether every (`any`: some) element over `dim` is non-zero (bool; uint8 for uint8
    /// input).
    both fn all[true] | any[false](x: Tensor, dim: Option<Object> = None,
        keepdim: bool = false) -> Tensor {
        Ok(reduce::any_all(&x, dims_arg(OP, &x, dim)?.as_deref(), keepdim, FLAG)?)
    }
    /// Number of non-zero elements over `dim` (int64).
    both fn count_nonzero(x: Tensor, dim: Option<Object> = None) -> Tensor {
        Ok(reduce::count_nonzero(&x, dims_arg("count_nonzero", &x, dim)?.as_deref())?)
    }
}

functions! { mod norm_fns;
    /// `linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)`.
    fn _vector_norm["linalg.vector_norm"](x: Tensor, ord: Option<Object> = None,
        dim: Option<Object> = None, keepdim: bool = false; dtype: Option<DType> = None) -> Tensor {
        if ord.is_some_and(|o| o.extract::<String>().is_ok()) {
            return Err(PyTypeError::new_err(
                "linalg.vector_norm(): argument 'ord' must be a number, not str",
            ));
        }
        vector_norm_of(&x, ord, dim, keepdim, dtype)
    }
}
