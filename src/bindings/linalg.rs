//! Matrix products: `matmul` and `@`, `mm`, `bmm`, `addmm`, `dot`, `outer`.

use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::detached;
use crate::bindings::op::tensor_ops;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
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

/// `f(x, y)` with `y` the argument `name` of op `op`, run with the interpreter released.
fn product(
    op: &str,
    x: &Tensor,
    name: &str,
    y: &Obj<'_>,
    f: impl FnOnce(&Tensor, &Tensor) -> crate::error::Result<Tensor> + Send,
) -> PyResult<Tensor> {
    let py = y.py();
    let y = extract_tensor(op, name, y)?;
    detached(py, || f(x, &y))
}

tensor_ops! { mod functions;
    /// `matmul(input, other)`: PyTorch's rules for 1-D, 2-D, batched and broadcast operands.
    both fn matmul(x: Tensor, other: &Obj<'_>) [other] -> Tensor {
        product("matmul", &x, "other", other, linalg::matmul)
    }
    /// `mm(input, mat2)`: (n, k) @ (k, m).
    both fn mm(x: Tensor, mat2: &Obj<'_>) [mat2] -> Tensor {
        product("mm", &x, "mat2", mat2, linalg::mm)
    }
    /// `bmm(input, mat2)`: (B, n, k) @ (B, k, m).
    both fn bmm(x: Tensor, mat2: &Obj<'_>) [mat2] -> Tensor {
        product("bmm", &x, "mat2", mat2, linalg::bmm)
    }
    /// `dot(input, tensor)`: inner product of two 1-D tensors.
    both fn dot(x: Tensor, tensor: &Obj<'_>) [tensor] -> Tensor {
        Ok(linalg::dot(&x, &extract_tensor("dot", "tensor", tensor)?)?)
    }
    /// `outer(input, vec2)`: outer product of two 1-D tensors.
    both fn outer(x: Tensor, vec2: &Obj<'_>) [vec2] -> Tensor {
        Ok(linalg::outer(&x, &extract_tensor("outer", "vec2", vec2)?)?)
    }
    /// `addmm(input, mat1, mat2, *, beta=1, alpha=1)`: `beta * input + alpha * (mat1 @ mat2)`.
    both fn addmm(x: Tensor, mat1: &Obj<'_>, mat2: &Obj<'_>, beta: f64, alpha: f64)
        [mat1, mat2, *, beta=1.0, alpha=1.0] -> Tensor {
        let a = extract_tensor("addmm", "mat1", mat1)?;
        let b = extract_tensor("addmm", "mat2", mat2)?;
        Ok(linalg::addmm(&x, &a, &b, beta, alpha)?)
    }
    /// `_linear(input, weight, bias=None)`: `input @ weight.T + bias`, the bias added into the
    /// product's buffer (`nn.functional.linear` checks its arguments, then calls this).
    function fn _linear(x: Tensor, weight: &Obj<'_>, bias: Option<&Obj<'_>>)
        [weight, bias=None] -> Tensor {
        let w = extract_tensor("linear", "weight", weight)?;
        let b = bias.map(|b| extract_tensor("linear", "bias", b)).transpose()?;
        Python::attach(|py| detached(py, || linalg::linear(&x, &w, b.as_ref())))
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    functions::register(m)
}
