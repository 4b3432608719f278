//! Reductions: `sum`, `mean`, ...

use pyo3::prelude::*;

use crate::bindings::convert::{extract_dims, extract_tensor, opt_dtype};
use crate::bindings::tensor::PyTensor;
use crate::ops::{self, wrap_dims};
use crate::tensor::Tensor;

fn dims_arg(op: &str, t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Option<Vec<usize>>> {
    match dim {
        None => Ok(None),
        Some(d) if d.is_none() => Ok(None),
        Some(d) => Ok(Some(wrap_dims(op, Some(&extract_dims(d)?), t.rank())?)),
    }
}

fn sum_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = match opt_dtype(dtype)? {
        Some(dt) => ops::convert::to_dtype(t, dt)?,
        None => t.clone(),
    };
    let dims = dims_arg("sum", &t, dim)?;
    Ok(ops::reduce::sum(&t, dims.as_deref(), keepdim)?)
}

fn mean_impl(
    t: &Tensor,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = match opt_dtype(dtype)? {
        Some(dt) => ops::convert::to_dtype(t, dt)?,
        None => t.clone(),
    };
    let dims = dims_arg("mean", &t, dim)?;
    Ok(ops::reduce::mean(&t, dims.as_deref(), keepdim)?)
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (dim=None, keepdim=false, *, dtype=None))]
    fn sum(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        sum_impl(&self.t, dim, keepdim, dtype)
    }

    #[pyo3(signature = (dim=None, keepdim=false, *, dtype=None))]
    fn mean(
        &self,
        dim: Option<&Bound<'_, PyAny>>,
        keepdim: bool,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        mean_impl(&self.t, dim, keepdim, dtype)
    }
}

#[pyfunction]
#[pyo3(name = "sum", signature = (input, dim=None, keepdim=false, *, dtype=None))]
fn sum_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    sum_impl(&extract_tensor("sum", "input", input)?, dim, keepdim, dtype)
}

#[pyfunction]
#[pyo3(name = "mean", signature = (input, dim=None, keepdim=false, *, dtype=None))]
fn mean_fn(
    input: &Bound<'_, PyAny>,
    dim: Option<&Bound<'_, PyAny>>,
    keepdim: bool,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    mean_impl(
        &extract_tensor("mean", "input", input)?,
        dim,
        keepdim,
        dtype,
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(sum_fn, m)?)?;
    m.add_function(wrap_pyfunction!(mean_fn, m)?)?;
    Ok(())
}
