//! Reductions.

use crate::autograd::function::record;
use crate::dtype::DType;
use crate::error::{CandleContext, Result};
use crate::ops::binary::mul_scalar;
use crate::ops::convert::to_dtype;
use crate::ops::shape::{expand, reshape};
use crate::tensor::Tensor;

/// Shape of a reduction's result with `keepdim`: reduced dims set to 1.
pub fn keepdim_shape(dims: &[usize], reduced: &[usize]) -> Vec<usize> {
    dims.iter()
        .enumerate()
        .map(|(i, &d)| if reduced.contains(&i) { 1 } else { d })
        .collect()
}

/// Bring a reduced gradient back to the input shape.
pub fn expand_reduced(g: &Tensor, in_dims: &[usize], reduced: &[usize]) -> Result<Tensor> {
    let kd = keepdim_shape(in_dims, reduced);
    let g = reshape(g, &kd)?;
    expand(&g, in_dims)
}

/// `sum` over `dims` (normalised; `None` = all). Integers and bools sum to int64.
pub fn sum(x: &Tensor, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    let in_dims = x.dims();
    let reduced: Vec<usize> = dims.map_or_else(|| (0..in_dims.len()).collect(), |d| d.to_vec());
    let x = if x.dtype().is_floating_point() || x.dtype() == DType::Int64 {
        x.clone()
    } else {
        to_dtype(x, DType::Int64)?
    };
    let mut data = x.data();
    if !reduced.is_empty() {
        data = data.sum_keepdim(reduced.clone()).op("sum")?;
    }
    let out_dims = if keepdim {
        keepdim_shape(&in_dims, &reduced)
    } else {
        in_dims
            .iter()
            .enumerate()
            .filter(|(i, _)| !reduced.contains(i))
            .map(|(_, &d)| d)
            .collect()
    };
    let data = data.reshape(out_dims).op("sum")?;
    let out = Tensor::new(data, x.dtype());
    record("SumBackward0", &out, &[&x], Vec::new, move |_, g| {
        Ok(vec![Some(expand_reduced(g, &in_dims, &reduced)?)])
    });
    Ok(out)
}

/// `mean` over `dims`; floating point only, as in PyTorch.
pub fn mean(x: &Tensor, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    crate::ops::require_float("mean", x)?;
    let in_dims = x.dims();
    let n: usize = match dims {
        None => in_dims.iter().product(),
        Some(d) => d.iter().map(|&i| in_dims[i]).product(),
    };
    let s = sum(x, dims, keepdim)?;
    mul_scalar(&s, 1.0 / n as f64)
}
