//! Shape methods: `reshape`, `view`, `transpose`, `permute`, `unsqueeze`, `expand`, `T`.

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::convert::{extract_size, extract_tensor};
use crate::bindings::tensor::PyTensor;
use crate::ops::{shape, wrap_dim};
use crate::tensor::Tensor;

fn reshape_impl(op: &str, t: &Tensor, size: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
    let req = extract_size(op, size)?;
    let dims = shape::infer_shape(op, &req, t.numel(), &t.dims())?;
    Ok(shape::reshape(t, &dims)?)
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        reshape_impl("reshape", &self.t, shape)
    }

    #[pyo3(signature = (*shape))]
    fn view(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        if !self.t.data().is_contiguous() {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(
                "view size is not compatible with input tensor's size and stride (at least one \
                 dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
            ));
        }
        reshape_impl("view", &self.t, shape)
    }

    fn transpose(&self, dim0: i64, dim1: i64) -> PyResult<Tensor> {
        let r = self.t.rank();
        let (a, b) = (
            wrap_dim("transpose", dim0, r)?,
            wrap_dim("transpose", dim1, r)?,
        );
        Ok(shape::transpose(&self.t, a, b)?)
    }

    #[pyo3(signature = (*dims))]
    fn permute(&self, dims: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let r = self.t.rank();
        let d = extract_size("permute", dims)?
            .into_iter()
            .map(|x| wrap_dim("permute", x, r))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(shape::permute(&self.t, &d)?)
    }

    fn unsqueeze(&self, dim: i64) -> PyResult<Tensor> {
        let d = wrap_dim("unsqueeze", dim, self.t.rank() + 1)?;
        Ok(shape::unsqueeze(&self.t, d)?)
    }

    #[pyo3(signature = (*sizes))]
    fn expand(&self, sizes: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let req = extract_size("expand", sizes)?;
        let in_dims = self.t.dims();
        let off = req.len().saturating_sub(in_dims.len());
        let dims: Vec<usize> = req
            .iter()
            .enumerate()
            .map(|(i, &d)| {
                if d == -1 && i >= off {
                    in_dims[i - off]
                } else {
                    d.max(0) as usize
                }
            })
            .collect();
        Ok(shape::expand(&self.t, &dims)?)
    }

    fn expand_as(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = extract_tensor("expand_as", "other", other)?;
        Ok(shape::expand(&self.t, &o.dims())?)
    }

    fn t(&self) -> PyResult<Tensor> {
        if self.t.rank() > 2 {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "t() expects a tensor with <= 2 dimensions, but self is {}D",
                self.t.rank()
            )));
        }
        Ok(shape::transpose(&self.t, 0, 1)?)
    }

    #[getter(T)]
    fn big_t(&self) -> PyResult<Tensor> {
        let r = self.t.rank();
        let perm: Vec<usize> = (0..r).rev().collect();
        Ok(shape::permute(&self.t, &perm)?)
    }

    #[getter(mT)]
    fn m_t(&self) -> PyResult<Tensor> {
        let r = self.t.rank();
        if r < 2 {
            return Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
                "tensor.mT is only supported on matrices or batches of matrices. Got {r}-D tensor."
            )));
        }
        Ok(shape::transpose(&self.t, r - 2, r - 1)?)
    }
}

#[pyfunction]
fn reshape(input: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("reshape", "input", input)?;
    reshape_impl("reshape", &t, &PyTuple::new(input.py(), [shape])?)
}

#[pyfunction]
fn transpose(input: &Bound<'_, PyAny>, dim0: i64, dim1: i64) -> PyResult<Tensor> {
    let t = extract_tensor("transpose", "input", input)?;
    let r = t.rank();
    Ok(shape::transpose(
        &t,
        wrap_dim("transpose", dim0, r)?,
        wrap_dim("transpose", dim1, r)?,
    )?)
}

#[pyfunction]
fn unsqueeze(input: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    let t = extract_tensor("unsqueeze", "input", input)?;
    Ok(shape::unsqueeze(
        &t,
        wrap_dim("unsqueeze", dim, t.rank() + 1)?,
    )?)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(transpose, m)?)?;
    m.add_function(wrap_pyfunction!(unsqueeze, m)?)?;
    Ok(())
}
