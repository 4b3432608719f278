//! Memory formats, PyTorch's `memory_format=`: a 4-D (5-D) tensor laid out channels-last,
//! NHWC (NDHWC) in memory while its shape stays NCHW (NCDHW).

use crate::error::{Error, Result};
use crate::ops::convert;
use crate::ops::shape::permute;
use crate::tensor::Tensor;

#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum MemoryFormat {
    Contiguous,
    ChannelsLast,
    ChannelsLast3d,
    Preserve,
}

impl MemoryFormat {
    pub const ALL: [MemoryFormat; 4] = [
        MemoryFormat::Contiguous,
        MemoryFormat::ChannelsLast,
        MemoryFormat::ChannelsLast3d,
        MemoryFormat::Preserve,
    ];

    pub fn name(self) -> &'static str {
        match self {
            MemoryFormat::Contiguous => "contiguous_format",
            MemoryFormat::ChannelsLast => "channels_last",
            MemoryFormat::ChannelsLast3d => "channels_last_3d",
            MemoryFormat::Preserve => "preserve_format",
        }
    }

    /// The dims from the fastest-varying in memory outward, for the channels-last formats:
    /// C, then W, H (and D), then N.
    fn order(self) -> Option<&'static [usize]> {
        match self {
            MemoryFormat::ChannelsLast => Some(&[1, 3, 2, 0]),
            MemoryFormat::ChannelsLast3d => Some(&[1, 4, 3, 2, 0]),
            _ => None,
        }
    }
}

/// `is_contiguous(memory_format=f)`: whether `t`'s strides are dense in `f`'s order. As in
/// PyTorch, dims of size 1 may have any stride, an empty tensor is contiguous, and a tensor
/// of another rank is never channels-last.
pub fn is_contiguous_as(t: &Tensor, f: MemoryFormat) -> Result<bool> {
    let (dims, data) = (t.dims(), t.data());
    let strides = data.stride();
    let row_major: Vec<usize>;
    let order =
        match f {
            MemoryFormat::Preserve => return Err(Error::runtime(
                "is_contiguous: preserve memory format is unsupported by the contiguous operator",
            )),
            MemoryFormat::Contiguous if dims.contains(&0) => return Ok(true),
            MemoryFormat::Contiguous => {
                row_major = (0..dims.len()).rev().collect();
                &row_major[..]
            }
            _ => f.order().expect("a channels-last format"),
        };
    Ok(dims.len() == order.len() && dense_in(&dims, strides, order.iter().copied()))
}

/// Whether the dims, taken from the innermost in memory outward, are packed with no gap:
/// each stride the product of the sizes inside it (dims of size 1 may have any stride).
fn dense_in(
    dims: &[usize],
    strides: &[usize],
    innermost_first: impl Iterator<Item = usize>,
) -> bool {
    let mut expected = 1;
    for d in innermost_first {
        if dims[d] != 1 {
            if strides[d] != expected {
                return false;
            }
            expected *= dims[d];
        }
    }
    true
}

/// `contiguous(memory_format=f)`: `t` itself when already laid out so, else a copy that is.
pub fn contiguous_as(t: &Tensor, f: MemoryFormat) -> Result<Tensor> {
    if f == MemoryFormat::Preserve {
        return Err(Error::runtime(
            "contiguous: preserve memory format is unsupported by the contiguous operator",
        ));
    }
    if is_contiguous_as(t, f)? {
        return Ok(t.clone());
    }
    copy_as(t, f)
}

/// `clone(memory_format=f)`: a copy laid out as `f`. `preserve_format` keeps the order of
/// `t`'s dims in memory when `t` is dense (a transposed matrix stays transposed, a
/// channels-last tensor channels-last), as PyTorch's; anything else comes out contiguous.
pub fn clone_as(t: &Tensor, f: MemoryFormat) -> Result<Tensor> {
    match (f, dense_order(t)) {
        (MemoryFormat::Preserve, Some(order)) => copy_in_order(t, &order),
        (MemoryFormat::Preserve, None) => convert::clone(t),
        (f, _) => copy_as(t, f),
    }
}

/// A new tensor `made` (of `like`'s shape, as `*_like` makes one) laid out as `f` asks:
/// `preserve_format` as `like` is laid out, when that is dense.
pub fn laid_out_like(made: Tensor, like: &Tensor, f: MemoryFormat) -> Result<Tensor> {
    match (f, dense_order(like)) {
        (MemoryFormat::Preserve, Some(order)) if !is_identity(&order) => {
            copy_in_order(&made, &order)
        }
        (MemoryFormat::Preserve, _) => Ok(made),
        (f, _) => contiguous_as(&made, f),
    }
}

/// The dims of `t` from the outermost in memory to the innermost, when `t` is dense (no
/// overlap, no gaps; dims of size 1 may have any stride); `None` otherwise.
fn dense_order(t: &Tensor) -> Option<Vec<usize>> {
    let (dims, data) = (t.dims(), t.data());
    let strides = data.stride();
    let mut order: Vec<usize> = (0..dims.len()).collect();
    // stable: equal strides keep the dims' order
    order.sort_by(|&a, &b| strides[b].cmp(&strides[a]));
    dense_in(&dims, strides, order.iter().rev().copied()).then_some(order)
}

fn is_identity(order: &[usize]) -> bool {
    order.iter().enumerate().all(|(i, &d)| i == d)
}

/// A copy of `t` (differentiable), dense with its dims in memory in `order` (outermost
/// first): dense in the permuted order, then viewed back in `t`'s.
fn copy_in_order(t: &Tensor, order: &[usize]) -> Result<Tensor> {
    if is_identity(order) {
        return convert::clone(t);
    }
    let mut back = vec![0; order.len()];
    for (i, &d) in order.iter().enumerate() {
        back[d] = i;
    }
    permute(&convert::clone(&permute(t, order)?)?, &back)
}

/// A copy of `t` laid out as `f`, which is not `Preserve`.
fn copy_as(t: &Tensor, f: MemoryFormat) -> Result<Tensor> {
    let Some(order) = f.order() else {
        return convert::clone(t);
    };
    if t.rank() != order.len() {
        return Err(Error::runtime(format!(
            "required rank {} tensor to use {} format (got shape {})",
            order.len(),
            f.name(),
            crate::tensor::shape_str(&t.dims())
        )));
    }
    let outer_first: Vec<usize> = order.iter().rev().copied().collect();
    copy_in_order(t, &outer_first)
}
