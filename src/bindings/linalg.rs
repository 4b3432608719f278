//! Matrix products: `matmul` and `@`, `mm`, `bmm`, `addmm`, `dot`, `outer`.

use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::detached;
use crate::bindings::tensor::PyTensor;
use crate::ops::linalg;
use crate::tensor::Tensor;

fn arg(op: &str, name: &str, obj: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    extract_tensor(op, name, obj)
}

#[pymethods]
impl PyTensor {
    fn __matmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = arg("matmul", "other", other)?;
        detached(py, || linalg::matmul(&self.t, &o))
    }
    fn __rmatmul__(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = arg("matmul", "other", other)?;
        detached(py, || linalg::matmul(&o, &self.t))
    }
    /// `self @ other` with broadcasting of batch dims.
    fn matmul(&self, py: Python<'_>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = arg("matmul", "other", other)?;
        detached(py, || linalg::matmul(&self.t, &o))
    }
    /// Matrix product of two 2-D tensors.
    fn mm(&self, py: Python<'_>, mat2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = arg("mm", "mat2", mat2)?;
        detached(py, || linalg::mm(&self.t, &o))
    }
    /// Batched matrix product of two 3-D tensors with the same batch size.
    fn bmm(&self, py: Python<'_>, mat2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = arg("bmm", "mat2", mat2)?;
        detached(py, || linalg::bmm(&self.t, &o))
    }
    /// Inner product of two 1-D tensors.
    fn dot(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        Ok(linalg::dot(&self.t, &arg("dot", "tensor", other)?)?)
    }
    /// Outer product of two 1-D tensors.
    fn outer(&self, vec2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        Ok(linalg::outer(&self.t, &arg("outer", "vec2", vec2)?)?)
    }
    /// `beta * self + alpha * (mat1 @ mat2)`.
    #[pyo3(signature = (mat1, mat2, *, beta=1.0, alpha=1.0))]
    fn addmm(
        &self,
        mat1: &Bound<'_, PyAny>,
        mat2: &Bound<'_, PyAny>,
        beta: f64,
        alpha: f64,
    ) -> PyResult<Tensor> {
        Ok(linalg::addmm(
            &self.t,
            &arg("addmm", "mat1", mat1)?,
            &arg("addmm", "mat2", mat2)?,
            beta,
            alpha,
        )?)
    }
}

/// `matmul(input, other)`: PyTorch's rules for 1-D, 2-D, batched and broadcast operands.
#[pyfunction]
fn matmul(py: Python<'_>, input: &Bound<'_, PyAny>, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (x, y) = (
        arg("matmul", "input", input)?,
        arg("matmul", "other", other)?,
    );
    detached(py, || linalg::matmul(&x, &y))
}

/// `_linear(input, weight, bias=None)`: `input @ weight.T + bias`, the bias added into the
/// product's buffer (`nn.functional.linear` checks its arguments, then calls this).
#[pyfunction]
#[pyo3(signature = (input, weight, bias=None))]
fn _linear(
    py: Python<'_>,
    input: &Bound<'_, PyAny>,
    weight: &Bound<'_, PyAny>,
    bias: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let (x, w) = (
        arg("linear", "input", input)?,
        arg("linear", "weight", weight)?,
    );
    let b = bias.map(|b| arg("linear", "bias", b)).transpose()?;
    detached(py, || linalg::linear(&x, &w, b.as_ref()))
}

/// `mm(input, mat2)`: (n, k) @ (k, m).
#[pyfunction]
fn mm(py: Python<'_>, input: &Bound<'_, PyAny>, mat2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (x, y) = (arg("mm", "input", input)?, arg("mm", "mat2", mat2)?);
    detached(py, || linalg::mm(&x, &y))
}

/// `bmm(input, mat2)`: (B, n, k) @ (B, k, m).
#[pyfunction]
fn bmm(py: Python<'_>, input: &Bound<'_, PyAny>, mat2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let (x, y) = (arg("bmm", "input", input)?, arg("bmm", "mat2", mat2)?);
    detached(py, || linalg::bmm(&x, &y))
}

/// `dot(input, tensor)`: inner product of two 1-D tensors.
#[pyfunction]
fn dot(input: &Bound<'_, PyAny>, tensor: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(linalg::dot(
        &arg("dot", "input", input)?,
        &arg("dot", "tensor", tensor)?,
    )?)
}

/// `outer(input, vec2)`: outer product of two 1-D tensors.
#[pyfunction]
fn outer(input: &Bound<'_, PyAny>, vec2: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    Ok(linalg::outer(
        &arg("outer", "input", input)?,
        &arg("outer", "vec2", vec2)?,
    )?)
}

/// `addmm(input, mat1, mat2, *, beta=1, alpha=1)`: `beta * input + alpha * (mat1 @ mat2)`.
#[pyfunction]
#[pyo3(signature = (input, mat1, mat2, *, beta=1.0, alpha=1.0))]
fn addmm(
    input: &Bound<'_, PyAny>,
    mat1: &Bound<'_, PyAny>,
    mat2: &Bound<'_, PyAny>,
    beta: f64,
    alpha: f64,
) -> PyResult<Tensor> {
    Ok(linalg::addmm(
        &arg("addmm", "input", input)?,
        &arg("addmm", "mat1", mat1)?,
        &arg("addmm", "mat2", mat2)?,
        beta,
        alpha,
    )?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(matmul, m)?)?;
    m.add_function(wrap_pyfunction!(mm, m)?)?;
    m.add_function(wrap_pyfunction!(_linear, m)?)?;
    m.add_function(wrap_pyfunction!(bmm, m)?)?;
    m.add_function(wrap_pyfunction!(dot, m)?)?;
    m.add_function(wrap_pyfunction!(outer, m)?)?;
    m.add_function(wrap_pyfunction!(addmm, m)?)?;
    Ok(())
}
