//! The gather/scatter family: `gather`, `take_along_dim`, `index_select`, `scatter`,
//! `scatter_add`, `masked_fill`, `masked_select`, `nonzero`. Each builds an `IndexPlan` and
//! goes through `take` or `index_put_`, which carry the gradients.

use std::sync::Arc;

use candle_core::Device;

use super::{index_put_, narrow, nonzero_coords, take, IndexArray, IndexPlan};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::shape::{expand, reshape};
use crate::ops::{broadcast_shape, convert, Dim};
use crate::tensor::{shape_str, Tensor};

fn require_long(op: &str, what: &str, t: &Tensor) -> Result<()> {
    if t.dtype() != DType::Int64 {
        return Err(Error::shape(format!(
            "{op}(): Expected dtype int64 for {what}, but got {}",
            t.dtype().name()
        )));
    }
    Ok(())
}

/// The checks gather and scatter share: same rank, index no larger than `x` off `dim`.
fn check_gather_shapes(op: &str, x: &[usize], index: &[usize], dim: usize) -> Result<()> {
    if x.len() != index.len() {
        return Err(Error::shape(format!(
            "{op}(): Index tensor must have the same number of dimensions as input tensor \
             (input shape {}, index shape {})",
            shape_str(x),
            shape_str(index)
        )));
    }
    for d in 0..x.len() {
        if d != dim && index[d] > x[d] {
            return Err(Error::shape(format!(
                "{op}(): Size does not match at dimension {d} expected index {} to be no larger \
                 than self {} apart from dimension {dim}",
                shape_str(index),
                shape_str(x)
            )));
        }
    }
    Ok(())
}

pub(crate) fn gather_plan(
    op: &'static str,
    x_dims: &[usize],
    device: &Device,
    dim: usize,
    index: &Tensor,
) -> Result<Arc<IndexPlan>> {
    let a = IndexArray::from_tensor(op, index, device)?;
    let size = x_dims[dim];
    let oob = move |v: i64| {
        Error::shape(format!(
            "{op}(): index {v} is out of bounds for dimension {dim} with size {size}"
        ))
    };
    Ok(Arc::new(IndexPlan::gather(x_dims, dim, &a, &oob)?))
}

/// Run `f` on `x` seen as 1-d when it is 0-d (PyTorch treats a 0-d input as one element).
fn as_1d<F: FnOnce(&Tensor) -> Result<Tensor>>(x: &Tensor, f: F) -> Result<Tensor> {
    if x.rank() == 0 {
        let out = f(&reshape(x, &[1])?)?;
        let dims = out.dims();
        if dims == [1] {
            return reshape(&out, &[]);
        }
        return Ok(out);
    }
    f(x)
}

fn to_1d(t: &Tensor) -> Result<Tensor> {
    if t.rank() == 0 {
        reshape(t, &[1])
    } else {
        Ok(t.clone())
    }
}

/// `gather(x, dim, index)`: `out[i][j] = x[index[i][j]][j]` for dim 0.
pub fn gather(x: &Tensor, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
    let dim = dim.wrap("gather", x.rank())?;
    require_long("gather", "index", index)?;
    if x.rank() == 0 || index.rank() == 0 {
        if x.rank() > 1 || index.rank() > 1 {
            check_gather_shapes("gather", &x.dims(), &index.dims(), dim)?;
        }
        let out = gather(&to_1d(x)?, 0, &to_1d(index)?)?;
        return if index.rank() == 0 {
            reshape(&out, &[])
        } else {
            Ok(out)
        };
    }
    check_gather_shapes("gather", &x.dims(), &index.dims(), dim)?;
    let plan = gather_plan("gather", &x.dims(), &x.device(), dim, index)?;
    take(x, plan, "GatherBackward0")
}

/// `take_along_dim(x, indices, dim)`: gather after broadcasting all dims but `dim`;
/// `dim=None` works on the flattened tensors.
pub fn take_along_dim(x: &Tensor, index: &Tensor, dim: Option<i64>) -> Result<Tensor> {
    require_long("take_along_dim", "indices", index)?;
    let Some(dim) = dim else {
        let xf = reshape(x, &[x.numel()])?;
        let i = reshape(index, &[index.numel()])?;
        return gather(&xf, 0, &i);
    };
    if x.rank() != index.rank() {
        return Err(Error::shape(format!(
            "take_along_dim(): input and indices should have the same number of dimensions, but \
             got {} dimensions for input, and {} dimensions for indices",
            x.rank(),
            index.rank()
        )));
    }
    let d = crate::ops::wrap_dim("take_along_dim", dim, x.rank())?;
    if x.rank() == 0 {
        return gather(x, 0, index);
    }
    let (mut xd, mut id) = (x.dims(), index.dims());
    let (xs, is) = (xd[d], id[d]);
    xd[d] = 1;
    id[d] = 1;
    let b = broadcast_shape("take_along_dim", &xd, &id)?;
    let (mut xb, mut ib) = (b.clone(), b);
    xb[d] = xs;
    ib[d] = is;
    let xe = expand(x, &xb)?;
    let ie = Tensor::new(
        index.data().broadcast_as(ib).op("take_along_dim")?,
        DType::Int64,
    );
    gather(&xe, d, &ie)
}

/// `index_select(x, dim, index)`: whole slices along `dim`, the dim kept.
pub fn index_select(x: &Tensor, dim: impl Dim, index: &Tensor) -> Result<Tensor> {
    let dim = dim.wrap("index_select", x.rank())?;
    if !matches!(index.dtype(), DType::Int64 | DType::Int32) {
        return Err(Error::shape(format!(
            "index_select(): Expected dtype int32 or int64 for index, but got {}",
            index.dtype().name()
        )));
    }
    if index.rank() > 1 {
        return Err(Error::index(format!(
            "index_select(): Index is supposed to be a vector (got index of shape {})",
            shape_str(&index.dims())
        )));
    }
    as_1d(x, |x| {
        let a = IndexArray::from_tensor("index_select", index, &x.device())?;
        let dims = x.dims();
        let size = dims[dim];
        let oob = move |v: i64| {
            Error::index(format!(
                "index out of range in self (index {v}, dimension {dim} with size {size})"
            ))
        };
        let plan = Arc::new(IndexPlan::along(&dims, dim, &a, &oob)?);
        take(x, plan, "IndexSelectBackward0")
    })
}

/// The shared part of scatter/scatter_add: checks, the plan, and `src` cut to the
/// index's shape (PyTorch reads only that part of a larger `src`).
fn scatter_parts(
    op: &'static str,
    x: &Tensor,
    dim: impl Dim,
    index: &Tensor,
    src: &Tensor,
) -> Result<(Arc<IndexPlan>, Tensor)> {
    let dim = dim.wrap(op, x.rank())?;
    require_long(op, "index", index)?;
    let (xd, id, sd) = (x.dims(), index.dims(), src.dims());
    check_gather_shapes(op, &xd, &id, dim)?;
    if xd.is_empty() {
        return Err(Error::shape(format!(
            "{op}(): a 0-d input is not supported (index shape {}, src shape {})",
            shape_str(&id),
            shape_str(&sd)
        )));
    }
    if sd.len() != id.len() || id.iter().zip(&sd).any(|(i, s)| i > s) {
        return Err(Error::shape(format!(
            "{op}(): Expected index {} to be no larger than src {} in every dimension",
            shape_str(&id),
            shape_str(&sd)
        )));
    }
    let mut v = src.clone();
    for (d, (&i, &s)) in id.iter().zip(&sd).enumerate() {
        if i < s {
            v = narrow(&v, d, 0, i as i64)?;
        }
    }
    Ok((gather_plan(op, &xd, &x.device(), dim, index)?, v))
}

/// `scatter_add_` (in place) / `scatter_add` (on a copy): `x[index[i][j]][j] += src[i][j]`.
pub fn scatter_add_(x: &Tensor, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<()> {
    let (plan, v) = scatter_parts("scatter_add", x, dim, index, src)?;
    index_put_(x, None, plan, &v, true, "ScatterAddBackward0")
}

/// `scatter_` (in place): `x[index[i][j]][j] = src[i][j]`; repeated targets keep one value.
pub fn scatter_(x: &Tensor, dim: impl Dim, index: &Tensor, src: &Tensor) -> Result<()> {
    let (plan, v) = scatter_parts("scatter", x, dim, index, src)?;
    index_put_(x, None, plan, &v, false, "ScatterBackward0")
}

/// An op on a copy of `x` made by an in-place op (`scatter_add` from `scatter_add_`).
pub fn out_of_place(x: &Tensor, f: impl FnOnce(&Tensor) -> Result<()>) -> Result<Tensor> {
    let out = convert::clone(x)?;
    f(&out)?;
    Ok(out)
}

fn require_bool_mask(op: &str, mask: &Tensor) -> Result<()> {
    if mask.dtype() != DType::Bool {
        return Err(Error::shape(format!(
            "{op} only supports boolean masks, but got mask with dtype {}",
            mask.dtype().name()
        )));
    }
    Ok(())
}

/// `masked_fill_(mask, value)`: `value` (a 0-d tensor) where `mask` (broadcast to x) holds.
pub fn masked_fill_(x: &Tensor, mask: &Tensor, value: &Tensor) -> Result<()> {
    require_bool_mask("masked_fill_", mask)?;
    if value.rank() != 0 {
        return Err(Error::shape(format!(
            "masked_fill_ only supports a 0-dimensional value tensor, but got tensor with {} \
             dimension(s).",
            value.rank()
        )));
    }
    let xd = x.dims();
    let b = broadcast_shape("masked_fill_", &xd, &mask.dims())?;
    if b != xd {
        return Err(Error::shape(format!(
            "masked_fill_: mask of shape {} cannot be broadcast to the tensor's shape {}",
            shape_str(&mask.dims()),
            shape_str(&xd)
        )));
    }
    let m = mask.data().broadcast_as(xd.clone()).op("masked_fill_")?;
    let plan = Arc::new(IndexPlan::mask(&xd, &m)?);
    index_put_(x, None, plan, value, false, "MaskedFillBackward0")
}

/// `masked_fill(mask, value)`: on a copy, x and mask broadcast together.
pub fn masked_fill(x: &Tensor, mask: &Tensor, value: &Tensor) -> Result<Tensor> {
    require_bool_mask("masked_fill", mask)?;
    let b = broadcast_shape("masked_fill", &x.dims(), &mask.dims())?;
    let out = convert::clone(&expand(x, &b)?)?;
    masked_fill_(&out, mask, value)?;
    Ok(out)
}

/// `masked_select(x, mask)`: the elements where `mask` holds, as a 1-d tensor.
pub fn masked_select(x: &Tensor, mask: &Tensor) -> Result<Tensor> {
    require_bool_mask("masked_select", mask)?;
    let b = broadcast_shape("masked_select", &x.dims(), &mask.dims())?;
    let m = mask.data().broadcast_as(b.clone()).op("masked_select")?;
    let plan = Arc::new(IndexPlan::mask(&b, &m)?);
    take(&expand(x, &b)?, plan, "MaskedSelectBackward0")
}

/// `nonzero(x)`: the coordinates of the non-zero elements, `[count, rank]` int64; with
/// `as_tuple`, one 1-d tensor per dim (a 0-d input counts as 1-d).
pub fn nonzero(x: &Tensor, as_tuple: bool) -> Result<Vec<Tensor>> {
    let (count, coords) = nonzero_coords(&x.data())?;
    let long = |v: Vec<i64>, dims: &[usize]| -> Result<Tensor> {
        let t = crate::device::from_vec(v, dims, x.data().device()).op("nonzero")?;
        Ok(Tensor::new(t, DType::Int64))
    };
    if as_tuple {
        if x.rank() == 0 {
            return Ok(vec![long(vec![0; count], &[count])?]);
        }
        return coords
            .into_iter()
            .map(|c| long(c.into_iter().map(|v| v as i64).collect(), &[count]))
            .collect();
    }
    let rank = x.rank();
    let mut flat = Vec::with_capacity(count * rank);
    for k in 0..count {
        flat.extend(coords.iter().map(|c| c[k] as i64));
    }
    Ok(vec![long(flat, &[count, rank])?])
}
