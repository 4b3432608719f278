//! Shape ops. Where the result shares the input's buffer it is a view: same version
//! counter, no new bytes.

use crate::autograd::function::record;
use crate::error::{CandleContext, Error, Result};
use crate::ops::sum_to;
use crate::tensor::{shape_str, Tensor};

/// Wrap `data` computed from `x`: a view when it shares x's buffer.
pub fn derived(x: &Tensor, data: candle_core::Tensor) -> Tensor {
    if crate::memory::buffer_key(&data) == x.storage_key() {
        x.view_of(data)
    } else {
        Tensor::new(data, x.dtype())
    }
}

/// Resolve one `-1` in a requested shape, with PyTorch's messages.
pub fn infer_shape(op: &str, req: &[i64], numel: usize, from: &[usize]) -> Result<Vec<usize>> {
    let mut hole = None;
    let mut known: usize = 1;
    for (i, &d) in req.iter().enumerate() {
        if d == -1 {
            if hole.is_some() {
                return Err(Error::shape(format!(
                    "{op}: only one dimension can be inferred"
                )));
            }
            hole = Some(i);
        } else if d < 0 {
            return Err(Error::shape(format!("{op}: invalid shape dimension {d}")));
        } else {
            known *= d as usize;
        }
    }
    let bad = || {
        Error::shape(format!(
            "{op}: shape '{}' is invalid for input of size {numel} (input shape {})",
            shape_str(&req.iter().map(|&d| d as usize).collect::<Vec<_>>())
                .replace("18446744073709551615", "-1"),
            shape_str(from)
        ))
    };
    let mut out: Vec<usize> = req.iter().map(|&d| d.max(0) as usize).collect();
    match hole {
        Some(i) => {
            if known == 0 || numel % known != 0 {
                return Err(bad());
            }
            out[i] = numel / known;
        }
        None if known != numel => return Err(bad()),
        None => {}
    }
    Ok(out)
}

/// `reshape` to a fully known shape: a view when the input is contiguous.
pub fn reshape(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let in_dims = x.dims();
    if in_dims == dims {
        return Ok(x.clone());
    }
    let n: usize = dims.iter().product();
    if n != x.numel() {
        return Err(Error::shape(format!(
            "reshape: shape '{}' is invalid for input of size {}",
            shape_str(dims),
            x.numel()
        )));
    }
    let out = derived(x, x.data().reshape(dims).op("reshape")?);
    record("ViewBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(reshape(g, &in_dims)?)])
    });
    Ok(out)
}

/// `transpose(d0, d1)` on normalised dims: always a view.
pub fn transpose(x: &Tensor, d0: usize, d1: usize) -> Result<Tensor> {
    if d0 == d1 || x.rank() < 2 {
        return Ok(x.clone());
    }
    let out = derived(x, x.data().transpose(d0, d1).op("transpose")?);
    record("TransposeBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(transpose(g, d0, d1)?)])
    });
    Ok(out)
}

/// `permute(dims)` on a normalised permutation: a view.
pub fn permute(x: &Tensor, perm: &[usize]) -> Result<Tensor> {
    let rank = x.rank();
    let mut seen = vec![false; rank];
    if perm.len() != rank
        || perm
            .iter()
            .any(|&p| p >= rank || std::mem::replace(&mut seen[p], true))
    {
        return Err(Error::shape(format!(
            "permute: number of dims don't match or repeated dim in permute (input shape {}, dims {:?})",
            shape_str(&x.dims()),
            perm
        )));
    }
    let out = derived(x, x.data().permute(perm.to_vec()).op("permute")?);
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    record("PermuteBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(permute(g, &inverse)?)])
    });
    Ok(out)
}

/// `unsqueeze(d)` with `d` in `0..=rank`.
pub fn unsqueeze(x: &Tensor, d: usize) -> Result<Tensor> {
    let mut dims = x.dims();
    dims.insert(d, 1);
    reshape(x, &dims)
}

/// `expand` to `dims` (already resolved, same or higher rank): a view with stride 0.
pub fn expand(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let in_dims = x.dims();
    if in_dims == dims {
        return Ok(x.clone());
    }
    let ok = dims.len() >= in_dims.len()
        && in_dims
            .iter()
            .rev()
            .zip(dims.iter().rev())
            .all(|(&a, &b)| a == b || a == 1);
    if !ok {
        return Err(Error::shape(format!(
            "expand: the expanded size of the tensor must match the existing size at \
             non-singleton dimensions (target sizes {}, tensor sizes {})",
            shape_str(dims),
            shape_str(&in_dims)
        )));
    }
    let out = derived(x, x.data().broadcast_as(dims).op("expand")?);
    record("ExpandBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(sum_to(g, &in_dims)?)])
    });
    Ok(out)
}
