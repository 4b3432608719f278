//! Sorting and searching: `sort`, `argsort`, `msort`, `topk`, `kthvalue`, `searchsorted`,
//! `bucketize`, `unique`, `unique_consecutive`. Argument parsing only; the ops are in
//! `ops::sort`.

use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt, PyTuple};

use crate::bindings::convert::{extract_operand, int_dim, type_name};
use crate::bindings::op::{functions, tensor_ops};
use crate::bindings::reduce::values_indices;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::ops::creation::scalar_tensor;
use crate::ops::sort::{self as sorting, Unique};
use crate::ops::{Operand, Scalar};
use crate::tensor::Tensor;

/// `dim`, -1 when absent, wrapped against `x`'s rank (IndexError out of range).
fn dim_or_last(op: &str, x: &Tensor, dim: Option<&Obj<'_>>) -> PyResult<usize> {
    match dim.filter(|d| !d.is_none()) {
        Some(d) => int_dim(op, x, d),
        None => Ok(x.rank().saturating_sub(1)),
    }
}

/// An int argument that must not be a bool or a float, with PyTorch's TypeError.
fn int_arg(op: &str, name: &str, pos: usize, v: &Obj<'_>) -> PyResult<i64> {
    if !v.is_instance_of::<PyInt>() || v.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument '{name}' (position {pos}) must be int, not {}",
            type_name(v)
        )));
    }
    v.extract()
}

/// A tensor, or a Python number as a 0-d tensor: float64, or int64 for an int or a bool
/// (PyTorch searches a Python bool as an integer, a bool tensor not at all).
fn operand_tensor(x: Operand) -> PyResult<Tensor> {
    match x {
        Operand::Tensor(t) => Ok(t),
        Operand::Scalar(s) => {
            let dt = match s {
                Scalar::Bool(_) | Scalar::Int(_) => DType::Int64,
                Scalar::Float(_) => DType::Float64,
            };
            Ok(scalar_tensor(s, dt, &crate::device::host())?)
        }
    }
}

/// A tensor argument that may also be a Python number.
fn tensor_or_scalar(op: &str, name: &str, v: &Obj<'_>) -> PyResult<Tensor> {
    match extract_operand(op, v) {
        Ok(x) => operand_tensor(x),
        Err(_) => Err(PyTypeError::new_err(format!(
            "{op}(): argument '{name}' must be Tensor or Number, not {}",
            type_name(v)
        ))),
    }
}

fn pair(name: &str, (v, i): (Tensor, Tensor)) -> PyResult<Py<PyAny>> {
    Python::attach(|py| values_indices(py, name, v, i))
}

/// The tensor, or the tuple `(values[, inverse][, counts])` PyTorch's `unique` returns.
fn unique_result(u: Unique, return_inverse: bool, return_counts: bool) -> PyResult<Py<PyAny>> {
    Python::attach(|py| {
        if !return_inverse && !return_counts {
            return Ok(PyTensor::wrap(py, u.values)?.into_any());
        }
        let mut items = vec![PyTensor::wrap(py, u.values)?];
        if return_inverse {
            items.push(PyTensor::wrap(py, u.inverse)?);
        }
        if return_counts {
            items.push(PyTensor::wrap(py, u.counts)?);
        }
        Ok(PyTuple::new(py, items)?.into_any().unbind())
    })
}

fn unique_of(op: &str, x: &Tensor, dim: Option<&Obj<'_>>, consecutive: bool) -> PyResult<Unique> {
    let dim = match dim.filter(|d| !d.is_none()) {
        None => None,
        Some(d) if x.rank() == 0 => {
            return Err(PyIndexError::new_err(format!(
                "{op}(): Dimension specified as {d} but tensor has no dimensions"
            )))
        }
        Some(d) => Some(int_dim(op, x, d)?),
    };
    Ok(sorting::unique(x, dim, consecutive)?)
}

tensor_ops! { mod functions;
    /// The values along `dim` in ascending (descending) order and their int64 indices,
    /// as `(values, indices)`. The sort is always stable; NaN sorts as the largest value.
    both fn sort(x: Tensor, dim: Option<Object> = None, descending: bool = false;
        stable: Option<bool> = None) -> Py<PyAny> {
        let _ = stable;
        pair("sort", sorting::sort(&x, dim_or_last("sort", &x, dim)?, descending)?)
    }
    /// The int64 indices that sort `input` along `dim` (stable).
    both fn argsort(x: Tensor, dim: Option<Object> = None, descending: bool = false;
        stable: Option<bool> = None) -> Tensor {
        let _ = stable;
        Ok(sorting::argsort(&x, dim_or_last("argsort", &x, dim)?, descending)?)
    }
    /// The values sorted along dim 0.
    both fn msort(x: Tensor) -> Tensor {
        Ok(sorting::msort(&x)?)
    }
    /// The `k` largest (smallest) values along `dim` and their indices, as
    /// `(values, indices)`, in sorted order whatever `sorted` says.
    both fn topk(x: Tensor, k: Object, dim: Option<Object> = None, largest: bool = true,
        sorted: bool = true) -> Py<PyAny> {
        let _ = sorted;
        let k = int_arg("topk", "k", 2, k)?;
        pair("topk", sorting::topk(&x, k, dim_or_last("topk", &x, dim)?, largest)?)
    }
    /// The `k`-th smallest value (1-based) along `dim` and its index, as
    /// `(values, indices)`.
    both fn kthvalue(x: Tensor, k: Object, dim: Option<Object> = None,
        keepdim: bool = false) -> Py<PyAny> {
        let k = int_arg("kthvalue", "k", 2, k)?;
        pair("kthvalue", sorting::kthvalue(&x, k, dim_or_last("kthvalue", &x, dim)?, keepdim)?)
    }
    /// The index of the bucket of each element among the 1-d sorted `boundaries`:
    /// `searchsorted(boundaries, input)`.
    function fn bucketize(x: Operand, boundaries: Tensor; out_int32: bool = false,
        right: bool = false) -> Tensor {
        Ok(sorting::bucketize(&operand_tensor(x)?, &boundaries, out_int32, right)?)
    }
    /// The unique elements (or slices along `dim`), sorted; with `return_inverse` each
    /// element's index among them, with `return_counts` how often each occurs.
    both fn unique(x: Tensor, sorted: bool = true, return_inverse: bool = false,
        return_counts: bool = false, dim: Option<Object> = None) -> Py<PyAny> {
        let _ = sorted;
        unique_result(unique_of("unique", &x, dim, false)?, return_inverse, return_counts)
    }
    /// `unique` of runs: each group of equal consecutive elements (or slices) kept once.
    both fn unique_consecutive(x: Tensor, return_inverse: bool = false, return_counts: bool = false,
        dim: Option<Object> = None) -> Py<PyAny> {
        let u = unique_of("unique_consecutive", &x, dim, true)?;
        unique_result(u, return_inverse, return_counts)
    }
}

functions! { mod search_fns;
    /// `searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
    /// sorter=None)`: for each value of `input` (a tensor or a number), the index where it
    /// would be inserted into its line of `sorted_sequence` to keep it sorted: the first
    /// such index, or the last with `right=True` / `side="right"`.
    fn searchsorted["searchsorted"](sorted_sequence: Tensor, input: Object; out_int32: bool = false,
        right: bool = false, side: Option<Str> = None, sorter: Option<Tensor> = None) -> Tensor {
        let op = "searchsorted";
        let values = tensor_or_scalar(op, "input", input)?;
        let right = match side {
            None => right,
            Some("right") => true,
            Some("left") if right => {
                return Err(PyRuntimeError::new_err(
                    "torch.searchsorted(): side and right can't be set to opposites, got side \
                     of left while right was True",
                ))
            }
            Some("left") => false,
            Some(s) => {
                return Err(PyRuntimeError::new_err(format!(
                    "torch.searchsorted(): side can only be 'left' or 'right' but got {s}"
                )))
            }
        };
        Ok(sorting::searchsorted(&sorted_sequence, &values, out_int32, right, sorter.as_ref())?)
    }
}
