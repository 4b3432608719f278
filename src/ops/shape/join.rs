//! Joining and splitting: `cat`, `stack`, `split`, `chunk`, `unbind`.

use candle_core::Device;

use crate::autograd::function::{record, record_outputs};
use crate::autograd::grad_mode::GradModeGuard;
use crate::autograd::remat;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::index::{narrow, select};
use crate::ops::inplace::{update_data, Update};
use crate::ops::{convert, creation, result_dtype, wrap_dim, Dim, Operand};
use crate::tensor::{shape_str, Tensor};

/// `cat(tensors, dim)`: tensors promoted to their common dtype, as in PyTorch. 1-d empty
/// tensors are skipped (PyTorch's legacy rule), whatever the others' shape.
pub fn cat(ts: &[Tensor], dim: i64) -> Result<Tensor> {
    let started = remat::start();
    if ts.is_empty() {
        return Err(Error::shape("cat(): expected a non-empty list of Tensors"));
    }
    if let Some(i) = ts.iter().position(|t| t.rank() == 0) {
        return Err(Error::shape(format!(
            "cat(): zero-dimensional tensor (at position {i}) cannot be concatenated"
        )));
    }
    let skipped: Vec<bool> = ts.iter().map(|t| t.dims() == [0]).collect();
    let all_skipped = skipped.iter().all(|&s| s);
    let kept: Vec<usize> = (0..ts.len())
        .filter(|&i| all_skipped || !skipped[i])
        .collect();
    let first = &ts[kept[0]];
    let ref_dims = first.dims();
    let d = wrap_dim("cat", dim, ref_dims.len())?;
    for &i in &kept {
        let di = ts[i].dims();
        if di.len() != ref_dims.len() {
            return Err(Error::shape(format!(
                "cat(): Tensors must have same number of dimensions: got {} and {} (shapes {} \
                 and {} at positions {} and {i})",
                ref_dims.len(),
                di.len(),
                shape_str(&ref_dims),
                shape_str(&di),
                kept[0]
            )));
        }
        for (k, (&a, &b)) in ref_dims.iter().zip(&di).enumerate() {
            if k != d && a != b {
                return Err(Error::shape(format!(
                    "cat(): Sizes of tensors must match except in dimension {d}. Expected size {a} \
                     but got size {b} for tensor number {i} in the list (shapes {} and {})",
                    shape_str(&ref_dims),
                    shape_str(&di)
                )));
            }
        }
    }
    let operands: Vec<Operand> = ts.iter().map(Operand::from).collect();
    let device = ts[0].device();
    if let Some(t) = ts
        .iter()
        .find(|t| !crate::device::same(&t.device(), &device))
    {
        return Err(crate::device::mismatch("cat", &device, &t.device()));
    }
    let dtype = result_dtype(&operands);
    let promoted = ts
        .iter()
        .map(|t| convert::to_dtype(t, dtype))
        .collect::<Result<Vec<_>>>()?;
    let datas: Vec<candle_core::Tensor> = kept.iter().map(|&i| promoted[i].data()).collect();
    let out = Tensor::new(join(&datas, d)?, dtype);
    // Where each input's part lies along `d` (None: a skipped empty tensor).
    let mut parts = Vec::with_capacity(ts.len());
    let mut off = 0;
    for (i, t) in promoted.iter().enumerate() {
        if kept.contains(&i) {
            let len = t.dims()[d];
            parts.push(Some((off, len)));
            off += len;
        } else {
            parts.push(None);
        }
    }
    let inputs: Vec<&Tensor> = promoted.iter().collect();
    remat::note("cat", &out, &inputs, started, move |ins| cat(ins, d as i64));
    record("CatBackward0", &out, &inputs, Vec::new, move |ctx, g| {
        parts
            .iter()
            .enumerate()
            .map(|(i, p)| {
                if !ctx.needs(i) {
                    return Ok(None);
                }
                Ok(Some(match p {
                    Some((o, l)) => narrow(g, d, *o as i64, *l as i64)?,
                    None => crate::ops::creation::zeros(&[0], g.dtype(), &g.device())?,
                }))
            })
            .collect()
    });
    Ok(out)
}

/// `parts` (one dtype and device, equal but for `d`) joined along `d` into a dense tensor.
/// candle's `cat`, except on the CUDA backend: zeros and a strided copy of each part into
/// its slice there, since candle's CUDA `cat` has no int32 kernel nor makes empty tensors.
pub(crate) fn join(parts: &[candle_core::Tensor], d: usize) -> Result<candle_core::Tensor> {
    let first = &parts[0];
    let mut dims = first.dims().to_vec();
    dims[d] = parts.iter().map(|p| p.dims()[d]).sum();
    crate::headroom::ensure("cat", &dims, first.dtype().size_in_bytes())?;
    if !crate::backend::name_of(first.device()).starts_with("cuda") {
        #[allow(clippy::disallowed_methods)] // candle's CPU cat has every dtype
        let data = candle_core::Tensor::cat(parts, d).op("cat")?;
        return match parts.len() == 1 || !data.is_contiguous() {
            true => convert::dense_copy(&data),
            false => Ok(data),
        };
    }
    let out = crate::device::zeros(dims, first.dtype(), first.device()).op("cat")?;
    let mut off = 0;
    for p in parts {
        let len = p.dims()[d];
        if p.elem_count() > 0 {
            let slice = out.narrow(d, off, len).op("cat")?;
            crate::backend::on(&out).update("cat", &slice, p, crate::backend::Update::Assign)?;
        }
        off += len;
    }
    Ok(out)
}

/// `stack(tensors, dim)`: equal shapes, joined along a new dim.
pub fn stack(ts: &[Tensor], dim: i64) -> Result<Tensor> {
    if ts.is_empty() {
        return Err(Error::shape("stack(): expects a non-empty TensorList"));
    }
    let d0 = ts[0].dims();
    let d = wrap_dim("stack", dim, d0.len() + 1)?;
    for (i, t) in ts.iter().enumerate().skip(1) {
        if t.dims() != d0 {
            return Err(Error::shape(format!(
                "stack expects each tensor to be equal size, but got {} at entry 0 and {} at \
                 entry {i}",
                shape_str(&d0),
                shape_str(&t.dims())
            )));
        }
    }
    let parts = ts
        .iter()
        .map(|t| super::unsqueeze(t, d))
        .collect::<Result<Vec<_>>>()?;
    cat(&parts, d as i64)
}

/// `split(x, sizes, dim)` with explicit sizes summing to the dim's size: views.
pub fn split_with_sizes(x: &Tensor, sizes: &[i64], dim: impl Dim) -> Result<Vec<Tensor>> {
    if x.rank() == 0 {
        return Err(crate::ops::needs_1d("split"));
    }
    let dim = dim.wrap("split_with_sizes", x.rank())?;
    if sizes.iter().any(|&s| s < 0) {
        return Err(Error::shape(format!(
            "split_with_sizes expects split_sizes have only non-negative entries, but got \
             split_sizes={sizes:?}"
        )));
    }
    let n = x.dims()[dim];
    if sizes.iter().sum::<i64>() != n as i64 {
        return Err(Error::shape(format!(
            "split_with_sizes expects split_sizes to sum exactly to {n} (input tensor's size at \
             dimension {dim}), but got split_sizes={sizes:?}"
        )));
    }
    let sizes: Vec<usize> = sizes.iter().map(|&s| s as usize).collect();
    split_into("SplitWithSizesBackward0", x, Pieces::along(dim, &sizes))
}

/// `split(x, size, dim)`: pieces of `size` along `dim`, the last one shorter.
pub fn split(x: &Tensor, size: i64, dim: impl Dim) -> Result<Vec<Tensor>> {
    if x.rank() == 0 {
        return Err(crate::ops::needs_1d("split"));
    }
    if size < 0 {
        return Err(Error::shape(format!(
            "split expects split_size be non-negative, but got split_size={size}"
        )));
    }
    let dim = dim.wrap("split", x.rank())?;
    let (n, size) = (x.dims()[dim], size as usize);
    if size == 0 && n != 0 {
        return Err(Error::shape(format!(
            "split_size can only be 0 if dimension size is 0, but got dimension size of {n}"
        )));
    }
    let sizes: Vec<usize> = if n == 0 {
        vec![0]
    } else {
        (0..n.div_ceil(size))
            .map(|k| size.min(n - k * size))
            .collect()
    };
    split_into("SplitBackward0", x, Pieces::along(dim, &sizes))
}

/// `chunk(x, chunks, dim)`: `split` into pieces of `ceil(size / chunks)`.
pub fn chunk(x: &Tensor, chunks: i64, dim: impl Dim) -> Result<Vec<Tensor>> {
    if x.rank() == 0 {
        return Err(crate::ops::needs_1d("chunk"));
    }
    if chunks <= 0 {
        return Err(Error::shape(format!(
            "chunk expects `chunks` to be greater than 0, got: {chunks}"
        )));
    }
    let dim = dim.wrap("chunk", x.rank())?;
    let n = x.dims()[dim];
    if n == 0 {
        let sizes = vec![0; chunks as usize];
        return split_into("SplitBackward0", x, Pieces::along(dim, &sizes));
    }
    split(x, n.div_ceil(chunks as usize) as i64, dim)
}

/// `unbind(x, dim)`: every slice along `dim`, that dim removed. Views.
pub fn unbind(x: &Tensor, dim: impl Dim) -> Result<Vec<Tensor>> {
    let dim = dim.wrap("unbind", x.rank())?;
    if x.rank() == 0 {
        return Err(crate::ops::no_dims("unbind", dim));
    }
    let pieces = Pieces {
        dim,
        spans: (0..x.dims()[dim]).map(|i| (i, 1)).collect(),
        squeeze: true,
    };
    split_into("UnbindBackward0", x, pieces)
}

/// Where the pieces of a split lie along `dim`: (start, length) each; `squeeze`: a piece
/// drops the dim (`unbind`).
#[derive(Clone)]
struct Pieces {
    dim: usize,
    spans: Vec<(usize, usize)>,
    squeeze: bool,
}

impl Pieces {
    fn along(dim: usize, sizes: &[usize]) -> Pieces {
        let starts = sizes.iter().scan(0, |off, &s| {
            *off += s;
            Some(*off - s)
        });
        Pieces {
            dim,
            spans: starts.zip(sizes.iter().copied()).collect(),
            squeeze: false,
        }
    }

    /// Piece `i` of `t`: a view.
    fn piece(&self, t: &Tensor, i: usize) -> Result<Tensor> {
        let (start, len) = self.spans[i];
        if self.squeeze {
            select(t, self.dim, start as i64)
        } else {
            narrow(t, self.dim, start as i64, len as i64)
        }
    }

    /// The split tensor's gradient: one buffer, each piece's gradient written into its
    /// place, zeros only where no gradient came. Under `create_graph` it is differentiable
    /// (its backward splits again).
    fn join(&self, grads: &[Option<Tensor>], like: &(Vec<usize>, DType, Device)) -> Result<Tensor> {
        let (dims, dtype, device) = like;
        let received: Vec<(usize, &Tensor)> = grads
            .iter()
            .enumerate()
            .filter_map(|(i, g)| g.as_ref().map(|g| (i, g)))
            .collect();
        let joined = creation::zeros(dims, *dtype, device)?;
        {
            let _raw = GradModeGuard::new(false);
            for &(i, g) in &received {
                let place = self.piece(&joined, i)?;
                update_data("split_backward", &place, &g.detach(), Update::Assign)?;
            }
        }
        let inputs: Vec<&Tensor> = received.iter().map(|&(_, g)| g).collect();
        let which: Vec<usize> = received.iter().map(|&(i, _)| i).collect();
        let pieces = self.clone();
        let name = if self.squeeze {
            "StackBackward0"
        } else {
            "CatBackward0"
        };
        record(name, &joined, &inputs, Vec::new, move |ctx, g| {
            (which.iter().enumerate())
                .map(|(j, &i)| ctx.needs(j).then(|| pieces.piece(g, i)).transpose())
                .collect()
        });
        Ok(joined)
    }
}

/// The pieces of `x` as views, with one node for all of them: its backward writes the
/// gradients of the pieces into one buffer of `x`'s shape.
fn split_into(name: &'static str, x: &Tensor, pieces: Pieces) -> Result<Vec<Tensor>> {
    let outs = {
        let _views_only = GradModeGuard::new(false);
        (0..pieces.spans.len())
            .map(|i| pieces.piece(x, i))
            .collect::<Result<Vec<_>>>()?
    };
    let pieces = std::sync::Arc::new(pieces);
    for (i, out) in outs.iter().enumerate() {
        let p = pieces.clone();
        remat::note_view(name, out, x, move |t| {
            let _views_only = GradModeGuard::new(false);
            p.piece(t, i)
        });
    }
    let like = (x.dims(), x.dtype(), x.device());
    record_outputs(name, &outs, &[x], move |_, grads| {
        Ok(vec![Some(pieces.join(grads, &like)?)])
    });
    Ok(outs)
}
