//! Indexing: `__getitem__`, `__setitem__`, `index_select`, `gather`, `scatter_add`, `masked_fill`.

use crate::autograd::function::record;
use crate::error::{CandleContext, Error, Result};
use crate::ops::shape::derived;
use crate::tensor::Tensor;

/// `x.narrow(dim, start, len)`: a view. Its backward pads the gradient with zeros.
pub fn narrow(x: &Tensor, dim: usize, start: usize, len: usize) -> Result<Tensor> {
    let dims = x.dims();
    if dim >= dims.len() || start + len > dims[dim] {
        return Err(Error::index(format!(
            "narrow: start ({start}) + length ({len}) exceeds dimension size ({}) of dim {dim}",
            dims.get(dim).copied().unwrap_or(0)
        )));
    }
    if start == 0 && len == dims[dim] {
        return Ok(x.clone());
    }
    let out = derived(x, x.data().narrow(dim, start, len).op("narrow")?);
    let total = dims[dim];
    record("SliceBackward0", &out, &[x], Vec::new, move |_, g| {
        let padded = g
            .data()
            .pad_with_zeros(dim, start, total - start - len)
            .op("narrow backward")?;
        Ok(vec![Some(Tensor::new(padded, g.dtype()))])
    });
    Ok(out)
}

/// `x.select(dim, i)`: the i-th slice along `dim`, that dim removed. A view.
pub fn select(x: &Tensor, dim: usize, index: i64) -> Result<Tensor> {
    let dims = x.dims();
    let size = dims[dim] as i64;
    if index < -size || index >= size {
        return Err(Error::index(format!(
            "index {index} is out of bounds for dimension {dim} with size {size}"
        )));
    }
    let i = if index < 0 { index + size } else { index } as usize;
    let n = narrow(x, dim, i, 1)?;
    let mut out_dims = dims.clone();
    out_dims.remove(dim);
    crate::ops::shape::reshape(&n, &out_dims)
}

/// Maps a tensor of the destination's shape to the region being written
/// (a chain of basic-indexing views), so backward can find the same region in a gradient.
pub type ViewFn = std::sync::Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

/// `dst[region] = src` in place (`copy_`, `fill_`, `__setitem__` with basic indices).
///
/// The history of `dst` is rewritten as PyTorch's CopySlices does: the old value's
/// gradient is the incoming one with the region zeroed, `src` gets the region's gradient.
pub fn assign(dst: &Tensor, region: Option<ViewFn>, src: &Tensor) -> Result<()> {
    use crate::autograd::function::should_record;
    use crate::ops::inplace::{update_data, Update};

    let recording = should_record(&[dst, src]);
    if recording {
        dst.check_inplace("copy_")?;
    }
    let target = match &region {
        Some(f) => {
            let _g = crate::autograd::grad_mode::GradModeGuard::new(false);
            f(&dst.detach())?
        }
        None => dst.clone(),
    };
    update_data("copy_", &target, src, Update::Assign)?;
    if !target.same(dst) {
        dst.bump_version();
    }
    if !recording {
        return Ok(());
    }
    let old = dst.detach();
    old.set_grad_fn(dst.grad_fn());
    let src_dims = src.dims();
    let src_dtype = src.dtype();
    let old_in_graph = old.grad_fn().is_some();
    let inputs: Vec<&Tensor> = if old_in_graph {
        vec![&old, src]
    } else {
        vec![src]
    };
    record(
        if region.is_some() {
            "CopySlices"
        } else {
            "CopyBackwards"
        },
        dst,
        &inputs,
        Vec::new,
        move |ctx, g| {
            let _g = crate::autograd::grad_mode::GradModeGuard::new(false);
            let mut out = Vec::new();
            if old_in_graph {
                out.push(if ctx.needs(0) {
                    let kept = crate::ops::convert::clone(g)?;
                    match &region {
                        Some(f) => {
                            crate::ops::inplace::fill_data(&f(&kept)?, crate::ops::Scalar::Int(0))?
                        }
                        None => crate::ops::inplace::fill_data(&kept, crate::ops::Scalar::Int(0))?,
                    }
                    Some(kept)
                } else {
                    None
                });
            }
            let si = out.len();
            out.push(if ctx.needs(si) {
                let part = match &region {
                    Some(f) => f(g)?,
                    None => g.clone(),
                };
                let part = crate::ops::sum_to(&part, &src_dims)?;
                Some(crate::ops::convert::to_dtype(&part, src_dtype)?)
            } else {
                None
            });
            Ok(out)
        },
    );
    Ok(())
}
