//! Scans: `cumsum`, `cumprod` as `gradstream.X` functions and `Tensor.X` methods.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyInt};

use crate::bindings::convert::{extract_tensor, opt_dtype};
use crate::bindings::tensor::PyTensor;
use crate::ops::{self, scan, wrap_dim};
use crate::tensor::Tensor;

fn scan_impl(
    op: &str,
    t: &Tensor,
    dim: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
    prod: bool,
) -> PyResult<Tensor> {
    if !dim.is_instance_of::<PyInt>() || dim.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'dim' must be int, not {}",
            dim.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_default()
        )));
    }
    let d = wrap_dim(op, dim.extract::<i64>()?, t.rank())?;
    let t = match opt_dtype(dtype)? {
        Some(dt) => ops::convert::to_dtype(t, dt)?,
        None => t.clone(),
    };
    Ok(if prod {
        scan::cumprod(&t, d)?
    } else {
        scan::cumsum(&t, d)?
    })
}

#[pymethods]
impl PyTensor {
    /// Running sum along `dim`; integers and bools accumulate in int64.
    #[pyo3(signature = (dim, *, dtype=None))]
    fn cumsum(&self, dim: &Bound<'_, PyAny>, dtype: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
        scan_impl("cumsum", &self.t, dim, dtype, false)
    }

    /// Running product along `dim`; integers and bools multiply in int64.
    #[pyo3(signature = (dim, *, dtype=None))]
    fn cumprod(
        &self,
        dim: &Bound<'_, PyAny>,
        dtype: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Tensor> {
        scan_impl("cumprod", &self.t, dim, dtype, true)
    }
}

/// Running sum along `dim`: an O(n) scan, parallel over the independent lines.
#[pyfunction]
#[pyo3(name = "cumsum", signature = (input, dim, *, dtype=None))]
fn cumsum_fn(
    input: &Bound<'_, PyAny>,
    dim: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = extract_tensor("cumsum", "input", input)?;
    scan_impl("cumsum", &t, dim, dtype, false)
}

/// Running product along `dim`: an O(n) scan; its gradient is exact with zeros.
#[pyfunction]
#[pyo3(name = "cumprod", signature = (input, dim, *, dtype=None))]
fn cumprod_fn(
    input: &Bound<'_, PyAny>,
    dim: &Bound<'_, PyAny>,
    dtype: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let t = extract_tensor("cumprod", "input", input)?;
    scan_impl("cumprod", &t, dim, dtype, true)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(cumsum_fn, m)?)?;
    m.add_function(wrap_pyfunction!(cumprod_fn, m)?)?;
    Ok(())
}
