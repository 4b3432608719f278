//! `view` and the aliasing half of `reshape`: PyTorch's rule for when a new shape can
//! share the input's buffer, and the layout that realises it on a candle tensor.

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::error::{CandleContext, Error, Result};
use crate::tensor::Tensor;

use super::{derived, infer_shape, reshape};

const VIEW_ERROR: &str = "view size is not compatible with input tensor's size and stride (at \
                          least one dimension spans across two contiguous subspaces). Use \
                          .reshape(...) instead.";

/// `x.view(*sizes)`: the same elements under a new shape (one size may be `-1`), sharing
/// x's buffer. Fails, as in PyTorch, when no strides can express it.
pub fn view(x: &Tensor, req: &[i64]) -> Result<Tensor> {
    let dims = infer_shape("view", req, x.numel(), &x.dims())?;
    view_dims(x, &dims)
}

/// `view` to a fully known shape.
pub fn view_dims(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let data = alias(x, dims)?.ok_or_else(|| Error::shape(VIEW_ERROR))?;
    Ok(view_output(x, data))
}

/// Wrap `data`, a new shape of x's elements (a view of them, or for `reshape` maybe a
/// copy), with `view`'s history.
pub(super) fn view_output(x: &Tensor, data: candle_core::Tensor) -> Tensor {
    let in_dims = x.dims();
    let out = if data.elem_count() == 0 {
        x.view_of(data)
    } else {
        derived(x, data)
    };
    let to = out.dims();
    remat::note_view("view", &out, x, move |t| reshape(t, &to));
    record("ViewBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(reshape(g, &in_dims)?)])
    });
    out
}

/// x's data seen with shape `dims` (same element count), sharing x's buffer; `None`
/// when PyTorch's `computeStride` finds no strides for it.
pub(super) fn alias(x: &Tensor, dims: &[usize]) -> Result<Option<candle_core::Tensor>> {
    let data = x.data();
    if data.elem_count() == 0 {
        // No element to place, and x's offset may lie past its buffer's end (a slice
        // starting at the end): a fresh, empty tensor stands for the view.
        let empty = crate::device::zeros(dims, data.dtype(), data.device());
        return Ok(Some(empty.op("view")?));
    }
    let Some(strides) = compute_stride(data.dims(), data.stride(), dims) else {
        return Ok(None);
    };
    let contiguous = candle_core::Layout::contiguous(dims).stride().to_vec();
    if data.is_contiguous() && strides == contiguous {
        return Ok(Some(data.reshape(dims).op("view")?));
    }
    let span = x.span().ok_or_else(|| {
        Error::shape(
            "view: this tensor's buffer is not reachable as a view (it was not created by a \
             view op); use .reshape(...) instead",
        )
    })?;
    let offset = data.layout().start_offset();
    strided_view(&span, dims, &strides, offset).map(Some)
}

/// PyTorch's `computeStride`: strides giving `new` the elements of a tensor of shape
/// `old` and strides `old_strides` in the same row-major order, or `None`.
///
/// The input splits into chunks of dims that step through memory as one dim (each
/// dim's stride is the next one's stride times its size); every chunk must be covered
/// by a run of new dims with the same element count, laid out contiguously within it.
pub fn compute_stride(old: &[usize], old_strides: &[usize], new: &[usize]) -> Option<Vec<usize>> {
    if old.is_empty() {
        return Some(vec![1; new.len()]);
    }
    let numel: usize = old.iter().product();
    if numel == 0 {
        if old == new {
            return Some(old_strides.to_vec());
        }
        let mut strides = vec![1; new.len()];
        for d in (0..new.len().saturating_sub(1)).rev() {
            strides[d] = new[d + 1].max(1) * strides[d + 1];
        }
        return Some(strides);
    }
    let mut strides = vec![0; new.len()];
    let mut view_d = new.len();
    let mut base = old_strides[old.len() - 1];
    let (mut tensor_numel, mut view_numel) = (1, 1);
    for d in (0..old.len()).rev() {
        tensor_numel *= old[d];
        let chunk_ends = d == 0 || (old[d - 1] != 1 && old_strides[d - 1] != tensor_numel * base);
        if !chunk_ends {
            continue;
        }
        while view_d > 0 && (view_numel < tensor_numel || new[view_d - 1] == 1) {
            view_d -= 1;
            strides[view_d] = view_numel * base;
            view_numel *= new[view_d];
        }
        if view_numel != tensor_numel {
            return None;
        }
        if d > 0 {
            base = old_strides[d - 1];
            (tensor_numel, view_numel) = (1, 1);
        }
    }
    (view_d == 0).then_some(strides)
}

/// A tensor of shape `dims` and element strides `strides` starting at element `offset`
/// of the buffer that `span` (1-D, contiguous) is a run of.
///
/// candle 0.9 has no public `as_strided`, and its view ops (narrow, unfold, permute,
/// broadcast, contiguous reshape) never reach an element their input does not: two dims
/// of a non-contiguous tensor cannot be merged starting from the tensor itself. So the
/// layout is cut from the run, widest stride first: each dim of stride s > 0 splits the
/// trailing run into rows s apart, just long enough for the dims after it, and each
/// dim of stride 0 is a broadcast; a permute restores the order. Every step shares the
/// buffer.
pub(super) fn strided_view(
    span: &candle_core::Tensor,
    dims: &[usize],
    strides: &[usize],
    offset: usize,
) -> Result<candle_core::Tensor> {
    const OP: &str = "view";
    let mut order: Vec<usize> = (0..dims.len()).collect();
    order.sort_by_key(|&d| (strides[d] == 0, std::cmp::Reverse(strides[d])));
    let cut = order.iter().take_while(|&&d| strides[d] > 0).count();
    // Each dim's rows must hold 1 + the reach of the dims after it.
    let mut rows = Vec::with_capacity(cut);
    let mut window = 1;
    for &d in order[..cut].iter().rev() {
        let (n, step) = (dims[d], strides[d]);
        rows.push(Rows { n, step, window });
        window += n.saturating_sub(1) * step;
    }
    rows.reverse();
    let (start, len) = (span.layout().start_offset(), span.elem_count());
    let rel = offset.checked_sub(start).filter(|&r| r + window <= len);
    let Some(rel) = rel else {
        return Err(Error::shape(format!(
            "view: elements [{offset}, {}) lie outside the buffer run [{start}, {})",
            offset + window,
            start + len
        )));
    };
    let mut t = match rows.first() {
        None => span.narrow(0, rel, 1).op(OP)?,
        Some(r) => r.cut_from(span, rel)?,
    };
    for (d, r) in rows.iter().enumerate().skip(1) {
        t = r.unfold(&t, d)?;
    }
    t = t.squeeze(cut).op(OP)?;
    for &d in &order[cut..] {
        // A broadcast dim; broadcasting to at least 2 makes the stride 0 even for size 1.
        let mut shape = t.dims().to_vec();
        shape.push(dims[d].max(2));
        let last = shape.len() - 1;
        t = t.unsqueeze(last).op(OP)?.broadcast_as(shape).op(OP)?;
        t = t.narrow(last, 0, dims[d]).op(OP)?;
    }
    let mut perm = vec![0; dims.len()];
    for (i, &d) in order.iter().enumerate() {
        perm[d] = i;
    }
    t.permute(perm).op(OP)
}

/// One dim of a strided layout as candle builds it: `n` rows `step` elements apart, each
/// `window` elements long (room for the dims inside it).
struct Rows {
    n: usize,
    step: usize,
    window: usize,
}

impl Rows {
    /// The rows cut from the 1-D `span`, the first at its element `rel`. A contiguous
    /// reshape into rows of `step` is exact; when the last full row would pass the span's
    /// end, the rows start earlier where there is room, narrowed to their columns.
    /// Otherwise an unfold, which keeps the span's trailing slack.
    fn cut_from(&self, span: &candle_core::Tensor, rel: usize) -> Result<candle_core::Tensor> {
        let (n, step, window) = (self.n, self.step, self.window);
        let len = span.elem_count();
        let over = (rel + n * step).saturating_sub(len);
        if window <= step && over <= rel && over + window <= step {
            let r = span.narrow(0, rel - over, n * step).op("view")?;
            let r = r.reshape((n, step)).op("view")?;
            return r.narrow(1, over, window).op("view");
        }
        self.unfold(&span.narrow(0, rel, len - rel).op("view")?, 0)
    }

    /// The rows unfolded from `t`'s trailing run, its dim `d`.
    fn unfold(&self, t: &candle_core::Tensor, d: usize) -> Result<candle_core::Tensor> {
        let (n, step, window) = (self.n, self.step, self.window);
        // candle counts unfold windows in f32: `(run - window) / step + 1`. Past 2^24
        // elements that can come out short; check rather than cut a wrong view.
        let run = t.dims()[d];
        let count = ((run as f32 - window as f32) / step as f32 + 1.) as usize;
        if count < n {
            return Err(Error::shape(format!(
                "view: cannot form a dim of {n} with stride {step} over {run} elements \
                 (candle's unfold counts in f32)"
            )));
        }
        let t = t.unfold(d, window, step).op("view")?;
        t.narrow(d, 0, n).op("view")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Tensor as C};

    #[test]
    fn stride_rule_matches_pytorch() {
        // A (4, 6, 8) tensor stepped along dim 1: dims 0 and 1 merge, 1 and 2 do not.
        let (old, st) = ([4, 3, 8], [48, 16, 1]);
        assert_eq!(compute_stride(&old, &st, &[12, 8]), Some(vec![16, 1]));
        assert_eq!(compute_stride(&old, &st, &[4, 24]), None);
        assert_eq!(
            compute_stride(&old, &st, &[2, 2, 3, 2, 4]),
            Some(vec![96, 48, 16, 4, 1])
        );
        assert_eq!(compute_stride(&[], &[], &[1, 1]), Some(vec![1, 1]));
        assert_eq!(compute_stride(&[3, 0], &[1, 3], &[0, 3]), Some(vec![3, 1]));
        // Size-1 dims take the chunk's stride, as in PyTorch.
        assert_eq!(compute_stride(&[3, 1], &[1, 3], &[3, 1]), Some(vec![1, 3]));
    }

    #[test]
    fn strided_view_cuts_any_layout() {
        let base = C::arange(0u32, 24, &Device::Cpu).unwrap();
        let v = strided_view(&base, &[2, 3, 2], &[12, 4, 0], 1).unwrap();
        assert_eq!(v.stride(), &[12, 4, 0]);
        assert_eq!(
            v.flatten_all().unwrap().to_vec1::<u32>().unwrap(),
            [1, 1, 5, 5, 9, 9, 13, 13, 17, 17, 21, 21]
        );
        let s = strided_view(&base, &[], &[], 23).unwrap();
        assert_eq!(s.to_scalar::<u32>().unwrap(), 23);
        let one = strided_view(&base, &[1, 2], &[0, 7], 2).unwrap();
        assert_eq!(one.stride(), &[0, 7]);
        assert!(strided_view(&base, &[2], &[12], 13).is_err());
    }
}
