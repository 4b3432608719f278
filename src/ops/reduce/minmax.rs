//! `amax`/`amin`, `max`/`min` (of everything, or along a dim with indices), `argmax`/`argmin`.

use crate::autograd::function::{record, record_with_input_and_output};
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{compare, div, mul, CompareOp};
use crate::ops::convert::to_dtype;
use crate::ops::reduce::lines::{line_op, LineKernel};
use crate::ops::reduce::{all_dims, extreme_data, keepdim_shape, reduced_shape, sum};
use crate::ops::shape::reshape;
use crate::tensor::{shape_str, Tensor};

fn op_name(max: bool) -> &'static str {
    if max {
        "max"
    } else {
        "min"
    }
}

/// `amax`/`amin` over `dims`. The gradient is shared evenly among tied extremes.
pub fn amax(x: &Tensor, dims: Option<&[usize]>, keepdim: bool, max: bool) -> Result<Tensor> {
    extreme(
        x,
        dims,
        keepdim,
        max,
        if max {
            "AmaxBackward0"
        } else {
            "AminBackward0"
        },
    )
}

/// `max()`/`min()` of every element: a 0-d tensor; ties share the gradient, as in PyTorch.
pub fn max_all(x: &Tensor, max: bool) -> Result<Tensor> {
    if x.numel() == 0 {
        let op = op_name(max);
        return Err(Error::dtype(format!(
            "{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the \
             reduction dim with the 'dim' argument. (input shape {})",
            shape_str(&x.dims())
        )));
    }
    extreme(
        x,
        None,
        false,
        max,
        if max { "MaxBackward1" } else { "MinBackward1" },
    )
}

fn extreme(
    x: &Tensor,
    dims: Option<&[usize]>,
    keepdim: bool,
    max: bool,
    node: &'static str,
) -> Result<Tensor> {
    let started = remat::start();
    if dims.is_none() && x.numel() == 0 {
        let op = if max { "amax" } else { "amin" };
        return Err(Error::Runtime(format!(
            "{op}(): Expected reduction dim to be specified for input.numel() == 0. Specify the \
             reduction dim with the 'dim' argument. (input shape {})",
            shape_str(&x.dims())
        )));
    }
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let kd = keepdim_shape(&in_dims, &reduced);
    let data = extreme_data(&x.data(), &reduced, max)?
        .reshape(reduced_shape(&in_dims, &reduced, keepdim))
        .op(op_name(max))?;
    let out = Tensor::new(data, x.dtype());
    let kept = dims.map(<[usize]>::to_vec);
    remat::note(op_name(max), &out, &[x], started, move |ins| {
        extreme(&ins[0], kept.as_deref(), keepdim, max, node)
    });
    record_with_input_and_output(node, &out, x, move |x, y, g| {
        let y = reshape(y, &kd)?;
        let hit = to_dtype(&compare(CompareOp::Eq, &x.into(), &(&y).into())?, x.dtype())?;
        let count = sum(&hit, Some(&reduced), true)?;
        mul(&div(&reshape(g, &kd)?, &count)?, &hit)
    });
    Ok(out)
}

fn empty_dim_error(op: &str, dim: usize, dims: &[usize]) -> Error {
    Error::index(format!(
        "{op}(): Expected reduction dim {dim} to have non-zero size (input shape {})",
        shape_str(dims)
    ))
}

/// `x.max(dim)`: the values and the int64 indices of the first extreme (or first NaN) of
/// each line. The gradient goes to that index only.
pub fn max_dim(x: &Tensor, dim: usize, keepdim: bool, max: bool) -> Result<(Tensor, Tensor)> {
    let started = remat::start();
    let op = op_name(max);
    if x.rank() == 0 {
        let (v, i) = max_dim(&reshape(x, &[1])?, 0, false, max)?;
        return Ok((v, i));
    }
    let in_dims = x.dims();
    if in_dims[dim] == 0 {
        return Err(empty_dim_error(op, dim, &in_dims));
    }
    let kd = keepdim_shape(&in_dims, &[dim]);
    let out_dims = reduced_shape(&in_dims, &[dim], keepdim);
    let d = x.data();
    let vals = line_op(&d, dim, LineKernel::Extreme { max })?
        .reshape(out_dims.clone())
        .op(op)?;
    let idx = line_op(&d, dim, LineKernel::ArgExtreme { max })?
        .reshape(out_dims)
        .op(op)?;
    let values = Tensor::new(vals, x.dtype());
    let indices = Tensor::new(idx, DType::Int64);
    let n = in_dims[dim];
    let rank = in_dims.len();
    remat::note_outputs(op, &[&values, &indices], &[x], started, move |ins| {
        let (v, i) = max_dim(&ins[0], dim, keepdim, max)?;
        Ok(vec![v, i])
    });
    record(
        if max { "MaxBackward0" } else { "MinBackward0" },
        &values,
        &[x],
        || vec![SavedTensor::input(&indices)],
        move |ctx, g| {
            let idx = reshape(&ctx.saved[0], &kd)?;
            let hot = one_hot_along(&idx, n, dim, rank, g.dtype())?;
            Ok(vec![Some(mul(&reshape(g, &kd)?, &hot)?)])
        },
    );
    Ok((values, indices))
}

/// `positions == idx` along `dim`, broadcast against `idx` (size 1 at `dim`), as `dtype`.
fn one_hot_along(idx: &Tensor, n: usize, dim: usize, rank: usize, dtype: DType) -> Result<Tensor> {
    let mut shape = vec![1; rank];
    shape[dim] = n;
    let pos = candle_core::Tensor::arange(0i64, n as i64, idx.data().device())
        .op("max")?
        .reshape(shape)
        .op("max")?;
    let pos = Tensor::new(pos, DType::Int64);
    to_dtype(&compare(CompareOp::Eq, &(&pos).into(), &idx.into())?, dtype)
}

/// `argmax`/`argmin`: along `dim`, or of the flattened tensor when `dim` is `None`.
/// `argmax`'s and `argmin`'s dtype rule, checked before their dim.
pub fn check_arg(x: &Tensor, max: bool) -> Result<()> {
    let op = if max { "argmax" } else { "argmin" };
    if x.dtype() == DType::Bool {
        return Err(Error::dtype(format!("{op}(): does not support bool input")));
    }
    Ok(())
}

pub fn argmax(x: &Tensor, dim: Option<usize>, keepdim: bool, max: bool) -> Result<Tensor> {
    let op = if max { "argmax" } else { "argmin" };
    check_arg(x, max)?;
    let in_dims = x.dims();
    let d = x.data();
    let r = match dim {
        None => {
            if x.numel() == 0 {
                return Err(Error::index(format!(
                    "{op}(): Expected reduction dim to be specified for input.numel() == 0. \
                     (input shape {})",
                    shape_str(&in_dims)
                )));
            }
            let flat = d.flatten_all().op(op)?;
            let i = line_op(&flat, 0, LineKernel::ArgExtreme { max })?;
            let out: Vec<usize> = if keepdim {
                vec![1; in_dims.len()]
            } else {
                vec![]
            };
            i.reshape(out).op(op)?
        }
        Some(_) if in_dims.is_empty() => {
            crate::device::zeros((), candle_core::DType::I64, d.device()).op(op)?
        }
        Some(dim) => {
            if in_dims[dim] == 0 {
                return Err(empty_dim_error(op, dim, &in_dims));
            }
            line_op(&d, dim, LineKernel::ArgExtreme { max })?
                .reshape(reduced_shape(&in_dims, &[dim], keepdim))
                .op(op)?
        }
    };
    Ok(Tensor::new(r, DType::Int64))
}
