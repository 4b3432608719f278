//! `matmul` and `@`.

use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::tensor::PyTensor;
use crate::ops::linalg;
use crate::tensor::Tensor;

#[pymethods]
impl PyTensor {
    fn __matmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        Ok(linalg::matmul(
            &self.t,
            &extract_tensor("matmul", "other", other)?,
        )?)
    }
    fn __rmatmul__(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        Ok(linalg::matmul(
            &extract_tensor("matmul", "other", other)?,
            &self.t,
        )?)
    }
    fn matmul(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        Ok(linalg::matmul(
            &self.t,
            &extract_tensor("matmul", "other", other)?,
        )?)
    }
}

#[pyfunction]
fn matmul(input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(linalg::matmul(
        &extract_tensor("matmul", "input", input)?,
        &extract_tensor("matmul", "other", other)?,
    )?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    Ok(())
}
