//! Matrix products: `matmul` and `@`, `mm`, `bmm`, `addmm`, `dot`, `outer`.

use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::op::tensor_ops;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::bindings::{detached, released};
use crate::ops::linalg;
use crate::tensor::Tensor;

#[pymethods]
impl PyTensor {
    fn __matmul__(&self, py: Python<'_>, other: &Obj<'_>) -> PyResult<Tensor> {
        let o = extract_tensor("matmul", "other", other)?;
        detached(py, || linalg::matmul(&self.t, &o))
    }
    fn __rmatmul__(&self, py: Python<'_>, other: &Obj<'_>) -> PyResult<Tensor> {
        let o = extract_tensor("matmul", "other", other)?;
        detached(py, || linalg::matmul(&o, &self.t))
    }
}

tensor_ops! { mod functions;
    /// `matmul(input, other)`: PyTorch's rules for 1-D, 2-D, batched and broadcast operands.
    both fn matmul(x: Tensor, other: Tensor) -> Tensor {
        released(|| linalg::matmul(&x, &other))
    }
    /// `mm(input, mat2)`: (n, k) @ (k, m).
    both fn mm(x: Tensor, mat2: Tensor) -> Tensor {
        released(|| linalg::mm(&x, &mat2))
    }
    /// `bmm(input, mat2)`: (B, n, k) @ (B, k, m).
    both fn bmm(x: Tensor, mat2: Tensor) -> Tensor {
        released(|| linalg::bmm(&x, &mat2))
    }
    /// `dot(input, tensor)`: inner product of two 1-D tensors.
    both fn dot(x: Tensor, tensor: Tensor) -> Tensor {
        Ok(linalg::dot(&x, &tensor)?)
    }
    /// `outer(input, vec2)`: outer product of two 1-D tensors.
    both fn outer(x: Tensor, vec2: Tensor) -> Tensor {
        Ok(linalg::outer(&x, &vec2)?)
    }
    /// `addmm(input, mat1, mat2, *, beta=1, alpha=1)`: `beta * input + alpha * (mat1 @ mat2)`.
    both fn addmm(x: Tensor, mat1: Tensor, mat2: Tensor; beta: f64 = 1.0,
        alpha: f64 = 1.0) -> Tensor {
        Ok(linalg::addmm(&x, &mat1, &mat2, beta, alpha)?)
    }
    /// `_linear(input, weight, bias=None)`: `input @ weight.T + bias`, the bias added into the
    /// product's buffer (`nn.functional.linear` checks its arguments, then calls this).
    function fn _linear(x: Tensor, weight: Object, bias: Option<Object> = None) -> Tensor {
        let w = extract_tensor("linear", "weight", weight)?;
        let b = bias.map(|b| extract_tensor("linear", "bias", b)).transpose()?;
        released(|| linalg::linear(&x, &w, b.as_ref()))
    }
}
