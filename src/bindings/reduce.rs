//! Reductions: `sum`, `mean`, `prod`, `max`/`min`, `amax`/`amin`, `argmax`/`argmin`,
//! `norm`, `var`/`std`, `all`/`any`, `logsumexp`, `softmax`/`log_softmax`, `count_nonzero`.
//! Each is a `gradstream.X` function and a `Tensor.X` method sharing one `*_impl`.

use pyo3::exceptions::{PyNotImplementedError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyString};

use crate::bindings::convert::{extract_dims, extract_operand, extract_tensor, opt_dtype};
use crate::bindings::tensor::PyTensor;
use crate::ops::binary::{binary, BinaryOp};
use crate::ops::reduce::{self, minmax, softmax};
use crate::ops::{self, wrap_dim, wrap_dims, Operand};
use crate::tensor::Tensor;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

/// A `dim` that may be an int, a tuple/list of ints, or None (every dim).
fn dims_arg(op: &str, t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<usize>>> {
    match dim {
        None => Ok(None),
        Some(d) if d.is_none() => Ok(None),
        Some(d) => {
            if d.is_instance_of::<PyFloat>() || d.is_instance_of::<PyString>() {
                return Err(PyTypeError::new_err(format!(
                    "{op}(): argument 'dim' must be int or tuple of ints, not {}",
                    type_name(d)
                )));
            }
            // `dim=()` reduces every dim, as in PyTorch.
            let dims = wrap_dims(op, Some(&extract_dims(d)?), t.rank())?;
            Ok((!dims.is_empty()).then_some(dims))
        }
    }
}

/// A `dim` that must be a single int.
fn int_dim(op: &str, t: &Tensor, dim: &Bound<'_, PyAny>) -> PyResult<usize> {
    if !dim.is_instance_of::<PyInt>() || dim.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'dim' must be int, not {}",
            type_name(dim)
        )));
    }
    Ok(wrap_dim(op, dim.extract::<i64>()?, t.rank())?)
}

fn opt_int_dim(op: &str, t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Option<usize>> {
    match dim {
        Some(d) if !d.is_none() => Ok(Some(int_dim(op, t, d)?)),
        _ => Ok(None),
    }
}

/// The input cast to `dtype=` when given.
fn with_dtype(t: &Tensor, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    Ok(match opt_dtype(dtype)? {
        Some(dt) => ops::convert::to_dtype(t, dt)?,
        None => t.clone(),
    })
}

/// `(values, indices)` as a named tuple `gradstream.return_types.max` / `.min`.
fn values_indices(py: Python<'_>, name: &str, v: Tensor, i: Tensor) -> PyResult<Py<PyAny>> {
    static MAX: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    static MIN: PyOnceLock<Py<PyAny>> = PyOnceLock::new();
    let cell = if name == "max" { &MAX } else { &MIN };
    let cls = cell.get_or_try_init(py, || -> PyResult<Py<PyAny>> {
        let namedtuple = py.import("collections")?.getattr("namedtuple")?;
        let kw = PyDict::new(py);
        kw.set_item("module", "gradstream.return_types")?;
        Ok(namedtuple
            .call((name, ("values", "indices")), Some(&kw))?
            .unbind())
    })?;
    Ok(cls.bind(py).call1((v, i))?.unbind())
}

fn sum_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = with_dtype(t, dtype)?;
    let dims = dims_arg("sum", &t, dim)?;
    Ok(reduce::sum(&t, dims.as_deref(), keepdim)?)
}

fn mean_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = with_dtype(t, dtype)?;
    let dims = dims_arg("mean", &t, dim)?;
    Ok(reduce::mean(&t, dims.as_deref(), keepdim)?)
}

fn prod_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = with_dtype(t, dtype)?;
    let d = opt_int_dim("prod", &t, dim)?;
    Ok(reduce::prod(&t, d, keepdim)?)
}

/// `max()`, `max(dim, keepdim)` (values and indices) or `max(other)` (= maximum).
fn max_impl(
    py: Python<'_>,
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    max: bool,
) -> PyResult<Py<PyAny>> {
    let name = if max { "max" } else { "min" };
    let Some(d) = dim.filter(|d| !d.is_none()) else {
        return Ok(PyTensor::wrap(py, minmax::max_all(t, max)?)?.into_any());
    };
    if d.cast::<PyTensor>().is_ok() {
        let other = extract_operand(name, d)?;
        let op = if max {
            BinaryOp::Maximum
        } else {
            BinaryOp::Minimum
        };
        let r = binary(op, &Operand::Tensor(t.clone()), &other)?;
        return Ok(PyTensor::wrap(py, r)?.into_any());
    }
    let dim = int_dim(name, t, d)?;
    let (v, i) = minmax::max_dim(t, dim, keepdim, max)?;
    values_indices(py, name, v, i)
}

fn amax_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    max: bool,
) -> PyResult<Tensor> {
    let dims = dims_arg(if max { "amax" } else { "amin" }, t, dim)?;
    Ok(minmax::amax(t, dims.as_deref(), keepdim, max)?)
}

fn argmax_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    max: bool,
) -> PyResult<Tensor> {
    let d = opt_int_dim(if max { "argmax" } else { "argmin" }, t, dim)?;
    Ok(minmax::argmax(t, d, keepdim, max)?)
}

/// A norm order: a number, `inf`, or `'fro'` (the 2-norm).
fn norm_order(op: &str, p: Option<&Bound<'_, PyAny>>) -> PyResult<f64> {
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
    if p.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'p' must be a number or 'fro', not bool"
        )));
    }
    p.extract::<f64>().map_err(|_| {
        PyTypeError::new_err(format!(
            "{op}(): argument 'p' must be a number or 'fro', not {}",
            type_name(p)
        ))
    })
}

fn norm_impl(
    t: &Tensor,
    p: Option<&Bound<'_, PyAny>>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let p = norm_order("norm", p)?;
    let t = with_dtype(t, dtype)?;
    let dims = dims_arg("norm", &t, dim)?;
    Ok(reduce::norm(&t, p, dims.as_deref(), keepdim)?)
}

/// Bessel's correction from `correction=` or `unbiased=` (default 1).
fn correction_arg(
    op: &str,
    unbiased: Option<bool>,
    correction: Option<&Bound<'_, PyAny>>,
) -> PyResult<f64> {
    match (unbiased, correction.filter(|c| !c.is_none())) {
        (Some(_), Some(_)) => Err(PyRuntimeError::new_err(format!(
            "{op}: cannot specify both unbiased and correction"
        ))),
        (Some(u), None) => Ok(if u { 1.0 } else { 0.0 }),
        (None, Some(c)) => {
            if c.is_instance_of::<PyBool>() {
                return Err(PyTypeError::new_err(format!(
                    "{op}(): argument 'correction' must be a number, not bool"
                )));
            }
            c.extract::<f64>().map_err(|_| {
                PyTypeError::new_err(format!(
                    "{op}(): argument 'correction' must be a number, not {}",
                    type_name(c)
                ))
            })
        }
        (None, None) => Ok(1.0),
    }
}

fn var_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    unbiased: Option<bool>,
    keepdim: bool,
    correction: Option<&Bound<'_, PyAny>>,
    std: bool,
) -> PyResult<Tensor> {
    let op = if std { "std" } else { "var" };
    // `x.var(True)`: the first positional is `unbiased` in that overload.
    let (dim, unbiased) = match dim {
        Some(d) if d.is_instance_of::<PyBool>() => {
            if unbiased.is_some() {
                return Err(PyTypeError::new_err(format!(
                    "{op}(): argument 'dim' must be int or tuple of ints, not bool"
                )));
            }
            (None, Some(d.extract::<bool>()?))
        }
        d => (d, unbiased),
    };
    let c = correction_arg(op, unbiased, correction)?;
    let dims = dims_arg(op, t, dim)?;
    Ok(if std {
        reduce::std(t, dims.as_deref(), c, keepdim)?
    } else {
        reduce::var(t, dims.as_deref(), c, keepdim)?
    })
}

fn any_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    all: bool,
) -> PyResult<Tensor> {
    let dims = dims_arg(if all { "all" } else { "any" }, t, dim)?;
    Ok(reduce::any_all(t, dims.as_deref(), keepdim, all)?)
}

fn logsumexp_impl(t: &Tensor, dim: &Bound<'_, PyAny>, keepdim: bool) -> PyResult<Tensor> {
    let dims = dims_arg("logsumexp", t, Some(dim))?;
    Ok(reduce::logsumexp(t, dims.as_deref(), keepdim)?)
}

fn softmax_impl(
    op: &str,
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
    log: bool,
) -> PyResult<Tensor> {
    let t = with_dtype(t, dtype)?;
    let Some(d) = dim.filter(|d| !d.is_none()) else {
        return Err(PyTypeError::new_err(format!(
            "{op}(): missing required argument 'dim' (int)"
        )));
    };
    let d = int_dim(op, &t, d)?;
    Ok(softmax::softmax(&t, d, log)?)
}

fn count_nonzero_impl(t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    let dims = dims_arg("count_nonzero", t, dim)?;
    Ok(reduce::count_nonzero(t, dims.as_deref())?)
}

#[pymethods]
impl PyTensor {
    /// Sum over `dim` (all dims when None). Integers and bools sum to int64.
    #[pyo3(signature = (dim=None, keepdim=false, *, dtype=None))]
    fn sum(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        sum_impl(&self.t, dim, keepdim, dtype)
    }

    /// Mean over `dim`; floating point inputs (or `dtype=`) only.
    #[pyo3(signature = (dim=None, keepdim=false, *, dtype=None))]
    fn mean(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        mean_impl(&self.t, dim, keepdim, dtype)
    }

    /// Product of all elements, or along one `dim`.
    #[pyo3(signature = (dim=None, keepdim=false, *, dtype=None))]
    fn prod(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        prod_impl(&self.t, dim, keepdim, dtype)
    }

    /// `max()`: 0-d; `max(dim)`: `(values, indices)`; `max(other)`: element-wise maximum.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn max(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<Py<PyAny>> {
        max_impl(py, &self.t, dim, keepdim, true)
    }

    /// `min()`: 0-d; `min(dim)`: `(values, indices)`; `min(other)`: element-wise minimum.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn min(
        &self,
        py: Python<'_>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
    ) -> PyResult<Py<PyAny>> {
        max_impl(py, &self.t, dim, keepdim, false)
    }

    /// Largest value over `dim` (all dims when None); ties share the gradient.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn amax(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        amax_impl(&self.t, dim, keepdim, true)
    }

    /// Smallest value over `dim` (all dims when None); ties share the gradient.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn amin(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        amax_impl(&self.t, dim, keepdim, false)
    }

    /// Index (int64) of the first largest value along `dim`, or in the flattened tensor.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmax(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        argmax_impl(&self.t, dim, keepdim, true)
    }

    /// Index (int64) of the first smallest value along `dim`, or in the flattened tensor.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn argmin(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        argmax_impl(&self.t, dim, keepdim, false)
    }

    /// Vector norm of order `p` (2, 1, inf, -inf, 0, any number, or 'fro') over `dim`.
    #[pyo3(signature = (p=None, dim=None, keepdim=false, dtype=None))]
    fn norm(
        &self,
        p: Option<&Bound<'_, PyAny>>,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        norm_impl(&self.t, p, dim, keepdim, dtype)
    }

    /// Variance over `dim` with `correction=` (or `unbiased=`; default 1).
    #[pyo3(signature = (dim=None, unbiased=None, keepdim=false, *, correction=None))]
    fn var(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        var_impl(&self.t, dim, unbiased, keepdim, correction, false)
    }

    /// Standard deviation over `dim` with `correction=` (or `unbiased=`; default 1).
    #[pyo3(signature = (dim=None, unbiased=None, keepdim=false, *, correction=None))]
    fn std(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        unbiased: Option<bool>,
        keepdim: bool,
        correction: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        var_impl(&self.t, dim, unbiased, keepdim, correction, true)
    }

    /// Whether every element over `dim` is non-zero.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn all(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        any_impl(&self.t, dim, keepdim, true)
    }

    /// Whether some element over `dim` is non-zero.
    #[pyo3(signature = (dim=None, keepdim=false))]
    fn any(&self, dim: Option<&Bound<'_, PyAny>>, keepdim: bool) -> PyResult<Tensor> {
        any_impl(&self.t, dim, keepdim, false)
    }

    /// `log(sum(exp(x)))` over `dim`, computed stably.
    #[pyo3(signature = (dim, keepdim=false))]
    fn logsumexp(&self, dim: &Bound<'_, PyAny>, keepdim: bool) -> PyResult<Tensor> {
        logsumexp_impl(&self.t, dim, keepdim)
    }

    /// Softmax along `dim`, max-subtracted; `dtype=` casts the input first.
    #[pyo3(signature = (dim=None, dtype=None))]
    fn softmax(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        softmax_impl("softmax", &self.t, dim, dtype, false)
    }

    /// Log-softmax along `dim`, max-subtracted; `dtype=` casts the input first.
    #[pyo3(signature = (dim=None, dtype=None))]
    fn log_softmax(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        softmax_impl("log_softmax", &self.t, dim, dtype, true)
    }

    /// Number of non-zero elements over `dim` (int64).
    #[pyo3(signature = (dim=None))]
    fn count_nonzero(&self, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
        count_nonzero_impl(&self.t, dim)
    }
}

fn input(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    extract_tensor(op, "input", obj)
}

/// Sum over `dim` (all dims when None). Integers and bools sum to int64.
#[pyfunction]
#[pyo3(name = "sum", signature = (input, dim=None, keepdim=false, *, dtype=None))]
fn sum_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    sum_impl(&self::input("sum", input)?, dim, keepdim, dtype)
}

/// Mean over `dim`; floating point inputs (or `dtype=`) only.
#[pyfunction]
#[pyo3(name = "mean", signature = (input, dim=None, keepdim=false, *, dtype=None))]
fn mean_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    mean_impl(&self::input("mean", input)?, dim, keepdim, dtype)
}

/// Product of all elements, or along one `dim`; exact gradients with zeros.
#[pyfunction]
#[pyo3(name = "prod", signature = (input, dim=None, keepdim=false, *, dtype=None))]
fn prod_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    prod_impl(&self::input("prod", input)?, dim, keepdim, dtype)
}

/// `max(input)`: 0-d; `max(input, dim)`: `(values, indices)`; `max(input, other)`: maximum.
#[pyfunction]
#[pyo3(name = "max", signature = (input, dim=None, keepdim=false))]
fn max_fn(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Py<PyAny>> {
    max_impl(py, &self::input("max", input)?, dim, keepdim, true)
}

/// `min(input)`: 0-d; `min(input, dim)`: `(values, indices)`; `min(input, other)`: minimum.
#[pyfunction]
#[pyo3(name = "min", signature = (input, dim=None, keepdim=false))]
fn min_fn(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Py<PyAny>> {
    max_impl(py, &self::input("min", input)?, dim, keepdim, false)
}

/// Largest value over `dim` (all dims when None); ties share the gradient.
#[pyfunction]
#[pyo3(name = "amax", signature = (input, dim=None, keepdim=false))]
fn amax_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    amax_impl(&self::input("amax", input)?, dim, keepdim, true)
}

/// Smallest value over `dim` (all dims when None); ties share the gradient.
#[pyfunction]
#[pyo3(name = "amin", signature = (input, dim=None, keepdim=false))]
fn amin_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    amax_impl(&self::input("amin", input)?, dim, keepdim, false)
}

/// Index (int64) of the first largest value along `dim`, or in the flattened input.
#[pyfunction]
#[pyo3(name = "argmax", signature = (input, dim=None, keepdim=false))]
fn argmax_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    argmax_impl(&self::input("argmax", input)?, dim, keepdim, true)
}

/// Index (int64) of the first smallest value along `dim`, or in the flattened input.
#[pyfunction]
#[pyo3(name = "argmin", signature = (input, dim=None, keepdim=false))]
fn argmin_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    argmax_impl(&self::input("argmin", input)?, dim, keepdim, false)
}

/// Vector norm of order `p` (2, 1, inf, -inf, 0, any number, or 'fro') over `dim`.
#[pyfunction]
#[pyo3(name = "norm", signature = (input, p=None, dim=None, keepdim=false, dtype=None))]
fn norm_fn(
    input: &Bound<'_, PyAny>,
    p: Option<&Bound<'_, PyAny>>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    norm_impl(&self::input("norm", input)?, p, dim, keepdim, dtype)
}

/// `linalg.vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None)`.
#[pyfunction]
#[pyo3(name = "_vector_norm", signature = (x, ord=None, dim=None, keepdim=false, *, dtype=None))]
fn vector_norm_fn(
    x: &Bound<'_, PyAny>,
    ord: Option<&Bound<'_, PyAny>>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = extract_tensor("linalg.vector_norm", "x", x)?;
    if ord.is_some_and(|o| o.extract::<String>().is_ok()) {
        return Err(PyTypeError::new_err(
            "linalg.vector_norm(): argument 'ord' must be a number, not str",
        ));
    }
    norm_impl(&t, ord, dim, keepdim, dtype)
}

/// Variance over `dim` with `correction=` (or `unbiased=`; default 1).
#[pyfunction]
#[pyo3(name = "var", signature = (input, dim=None, unbiased=None, keepdim=false, *, correction=None))]
fn var_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    unbiased: Option<bool>,
    keepdim: bool,
    correction: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = self::input("var", input)?;
    var_impl(&t, dim, unbiased, keepdim, correction, false)
}

/// Standard deviation over `dim` with `correction=` (or `unbiased=`; default 1).
#[pyfunction]
#[pyo3(name = "std", signature = (input, dim=None, unbiased=None, keepdim=false, *, correction=None))]
fn std_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    unbiased: Option<bool>,
    keepdim: bool,
    correction: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = self::input("std", input)?;
    var_impl(&t, dim, unbiased, keepdim, correction, true)
}

/// Whether every element over `dim` is non-zero (bool; uint8 for uint8 input).
#[pyfunction]
#[pyo3(name = "all", signature = (input, dim=None, keepdim=false))]
fn all_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    any_impl(&self::input("all", input)?, dim, keepdim, true)
}

/// Whether some element over `dim` is non-zero (bool; uint8 for uint8 input).
#[pyfunction]
#[pyo3(name = "any", signature = (input, dim=None, keepdim=false))]
fn any_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
) -> PyResult<Tensor> {
    any_impl(&self::input("any", input)?, dim, keepdim, false)
}

/// `log(sum(exp(x)))` over `dim`, computed stably.
#[pyfunction]
#[pyo3(name = "logsumexp", signature = (input, dim, keepdim=false))]
fn logsumexp_fn(
    input: &Bound<'_, PyAny>,
    dim: &Bound<'_, PyAny>,
    keepdim: bool,
) -> PyResult<Tensor> {
    logsumexp_impl(&self::input("logsumexp", input)?, dim, keepdim)
}

/// Softmax along `dim`, max-subtracted; `dtype=` casts the input first.
#[pyfunction]
#[pyo3(name = "softmax", signature = (input, dim=None, dtype=None))]
fn softmax_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    softmax_impl(
        "softmax",
        &self::input("softmax", input)?,
        dim,
        dtype,
        false,
    )
}

/// Log-softmax along `dim`, max-subtracted; `dtype=` casts the input first.
#[pyfunction]
#[pyo3(name = "log_softmax", signature = (input, dim=None, dtype=None))]
fn log_softmax_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = self::input("log_softmax", input)?;
    softmax_impl("log_softmax", &t, dim, dtype, true)
}

/// Number of non-zero elements over `dim` (int64).
#[pyfunction]
#[pyo3(name = "count_nonzero", signature = (input, dim=None))]
fn count_nonzero_fn(input: &Bound<'_, PyAny>, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    count_nonzero_impl(&self::input("count_nonzero", input)?, dim)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sum_fn, m)?)?;
    m.add_function(wrap_pyfunction!(mean_fn, m)?)?;
    m.add_function(wrap_pyfunction!(prod_fn, m)?)?;
    m.add_function(wrap_pyfunction!(max_fn, m)?)?;
    m.add_function(wrap_pyfunction!(min_fn, m)?)?;
    m.add_function(wrap_pyfunction!(amax_fn, m)?)?;
    m.add_function(wrap_pyfunction!(amin_fn, m)?)?;
    m.add_function(wrap_pyfunction!(argmax_fn, m)?)?;
    m.add_function(wrap_pyfunction!(argmin_fn, m)?)?;
    m.add_function(wrap_pyfunction!(norm_fn, m)?)?;
    m.add_function(wrap_pyfunction!(vector_norm_fn, m)?)?;
    m.add_function(wrap_pyfunction!(var_fn, m)?)?;
    m.add_function(wrap_pyfunction!(std_fn, m)?)?;
    m.add_function(wrap_pyfunction!(all_fn, m)?)?;
    m.add_function(wrap_pyfunction!(any_fn, m)?)?;
    m.add_function(wrap_pyfunction!(logsumexp_fn, m)?)?;
    m.add_function(wrap_pyfunction!(softmax_fn, m)?)?;
    m.add_function(wrap_pyfunction!(log_softmax_fn, m)?)?;
    m.add_function(wrap_pyfunction!(count_nonzero_fn, m)?)?;
    Ok(())
}
