//! Shape ops. Where the result shares the input's buffer it is a view: same version
//! counter, no new bytes.

mod join;
mod view;

pub(crate) use join::join;
pub use join::{cat, chunk, split, split_with_sizes, stack, unbind};
pub use view::{compute_stride, view, view_dims};

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::backend::cast::Convert;
use crate::backend::Compare;
use crate::error::{CandleContext, Error, Result};
use crate::ops::{broadcasts_to, sum_to, to_dims, wrap_dims, Dim};
use crate::tensor::{shape_str, Tensor};

/// Wrap `data` computed from `x`: a view when it shares x's buffer.
pub fn derived(x: &Tensor, data: candle_core::Tensor) -> Tensor {
    if crate::backend::same_buffer(&data, &x.data()) {
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

/// `reshape` to a fully known shape: a view when PyTorch's `view` would give one, else a
/// contiguous copy.
pub fn reshape(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    if x.dims() == dims {
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
    let data = match view::alias(x, dims) {
        Ok(Some(data)) => data,
        // No strides for it, or a buffer not reachable as a view: copy, through the backend
        // (candle's own copy has no int32 CUDA kernel and makes no empty tensor).
        _ => x
            .data()
            .dense()
            .and_then(|d| d.reshape(dims))
            .op("reshape")?,
    };
    Ok(view::view_output(x, data))
}

/// `reshape(sizes)` with the sizes as the user gives them (one may be -1).
pub fn reshape_sizes(x: &Tensor, req: &[i64]) -> Result<Tensor> {
    reshape(x, &infer_shape("reshape", req, x.numel(), &x.dims())?)
}

/// `transpose(d0, d1)`: always a view.
pub fn transpose(x: &Tensor, d0: impl Dim, d1: impl Dim) -> Result<Tensor> {
    let (d0, d1) = (
        d0.wrap("transpose", x.rank())?,
        d1.wrap("transpose", x.rank())?,
    );
    if d0 == d1 || x.rank() < 2 {
        return Ok(x.clone());
    }
    let out = derived(x, x.data().transpose(d0, d1).op("transpose")?);
    remat::note_view("transpose", &out, x, move |t| transpose(t, d0, d1));
    record("TransposeBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(transpose(g, d0, d1)?)])
    });
    Ok(out)
}

/// `permute(dims)`: a view.
pub fn permute<D: Dim>(x: &Tensor, perm: &[D]) -> Result<Tensor> {
    let rank = x.rank();
    let perm = &wrap_dims("permute", perm, rank)?;
    if perm.len() != rank {
        return Err(Error::shape(format!(
            "permute: number of dims don't match in permute (input shape {}, dims {:?})",
            shape_str(&x.dims()),
            perm
        )));
    }
    let out = derived(x, x.data().permute(perm.to_vec()).op("permute")?);
    let p = perm.to_vec();
    remat::note_view("permute", &out, x, move |t| permute(t, &p));
    let mut inverse = vec![0; rank];
    for (i, &p) in perm.iter().enumerate() {
        inverse[p] = i;
    }
    record("PermuteBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(permute(g, &inverse)?)])
    });
    Ok(out)
}

/// `unsqueeze(d)`, `d` counted in the output's `rank + 1` dims: a view whatever the layout.
pub fn unsqueeze(x: &Tensor, d: impl Dim) -> Result<Tensor> {
    let in_dims = x.dims();
    let d = d.wrap("unsqueeze", in_dims.len() + 1)?;
    let data = x.data();
    let data = match in_dims.get(d) {
        // PyTorch's stride for the new dim steps over dim d whole; candle's unsqueeze
        // repeats dim d's. A one-window unfold of dim d gives PyTorch's.
        Some(&n) if n > 0 => {
            let rank = in_dims.len();
            let mut perm: Vec<usize> = (0..rank).collect();
            perm.insert(d + 1, rank);
            data.unfold(d, n, n)
                .op("unsqueeze")?
                .permute(perm)
                .op("unsqueeze")?
        }
        _ => data.unsqueeze(d).op("unsqueeze")?,
    };
    let out = derived(x, data);
    remat::note_view("unsqueeze", &out, x, move |t| unsqueeze(t, d));
    record("UnsqueezeBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(reshape(g, &in_dims)?)])
    });
    Ok(out)
}

/// `squeeze(dims)`: drop those of `dims` that have size 1. A view.
pub fn squeeze<D: Dim>(x: &Tensor, dims: &[D]) -> Result<Tensor> {
    let in_dims = x.dims();
    let dims = wrap_dims("squeeze", dims, in_dims.len())?;
    let mut drop: Vec<usize> = dims
        .iter()
        .copied()
        .filter(|&d| in_dims.get(d) == Some(&1))
        .collect();
    if drop.is_empty() {
        return Ok(x.clone());
    }
    drop.sort_unstable();
    let mut data = x.data();
    for &d in drop.iter().rev() {
        data = data.squeeze(d).op("squeeze")?;
    }
    let out = derived(x, data);
    let squeezed = drop.clone();
    remat::note_view("squeeze", &out, x, move |t| squeeze(t, &squeezed));
    record("SqueezeBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(reshape(g, &in_dims)?)])
    });
    Ok(out)
}

/// `flatten(start, end)`; a 0-d tensor becomes 1-d.
pub fn flatten(x: &Tensor, start: impl Dim, end: impl Dim) -> Result<Tensor> {
    let dims = x.dims();
    let (start, end) = (
        start.wrap("flatten", dims.len())?,
        end.wrap("flatten", dims.len())?,
    );
    if dims.is_empty() {
        return reshape(x, &[1]);
    }
    if start > end {
        return Err(Error::shape(format!(
            "flatten() has invalid args: start_dim ({start}) cannot come after end_dim ({end})"
        )));
    }
    let mut out: Vec<usize> = dims[..start].to_vec();
    out.push(dims[start..=end].iter().product());
    out.extend_from_slice(&dims[end + 1..]);
    reshape(x, &out)
}

/// `unflatten(dim, sizes)`: split dim `dim` into `sizes` (one may be -1).
pub fn unflatten(x: &Tensor, dim: impl Dim, sizes: &[i64]) -> Result<Tensor> {
    let dims = x.dims();
    let dim = dim.wrap("unflatten", dims.len())?;
    if sizes.is_empty() {
        return Err(Error::shape("unflatten: sizes must be non-empty"));
    }
    if dims.is_empty() {
        return Err(Error::shape(format!(
            "unflatten got an unexpected error: {}",
            crate::ops::no_dims("unflatten", dim)
        )));
    }
    let inner = infer_shape("unflatten", sizes, dims[dim], &dims).map_err(|_| {
        Error::shape(format!(
            "unflatten: Provided sizes {sizes:?} don't multiply up to the size of dim {dim} ({}) \
             in the input tensor (shape {})",
            dims[dim],
            shape_str(&dims)
        ))
    })?;
    let mut out: Vec<usize> = dims[..dim].to_vec();
    out.extend(inner);
    out.extend_from_slice(&dims[dim + 1..]);
    view_dims(x, &out)
}

/// `movedim(source, destination)`: a permutation.
pub fn movedim<D: Dim>(x: &Tensor, src: &[D], dst: &[D]) -> Result<Tensor> {
    if src.len() != dst.len() {
        return Err(Error::shape(format!(
            "movedim: Invalid source or destination dims: source ({src:?} dims) should contain \
             the same number of dims as destination ({dst:?} dims)"
        )));
    }
    let rank = x.rank();
    // Every dim is range-checked before either list is checked for repeats, as in PyTorch.
    let wrap = |ds: &[D]| {
        ds.iter()
            .map(|d| d.wrap("movedim", rank))
            .collect::<Result<Vec<_>>>()
    };
    let (src, dst) = (wrap(src)?, wrap(dst)?);
    let (src, dst) = (
        &wrap_dims("movedim", &src, rank)?,
        &wrap_dims("movedim", &dst, rank)?,
    );
    if rank == 0 {
        return Ok(x.clone());
    }
    let mut perm = vec![usize::MAX; rank];
    for (&s, &d) in src.iter().zip(dst) {
        perm[d] = s;
    }
    let mut rest = (0..rank).filter(|d| !src.contains(d));
    for p in perm.iter_mut() {
        if *p == usize::MAX {
            *p = rest.next().unwrap_or(0);
        }
    }
    permute(x, &perm)
}

/// `expand` to `dims` (already resolved, same or higher rank): a view with stride 0.
pub fn expand(x: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let in_dims = x.dims();
    if in_dims == dims {
        return Ok(x.clone());
    }
    if !broadcasts_to(&in_dims, dims) {
        return Err(Error::shape(format!(
            "expand: the expanded size of the tensor must match the existing size at \
             non-singleton dimensions (target sizes {}, tensor sizes {})",
            shape_str(dims),
            shape_str(&in_dims)
        )));
    }
    let out = derived(x, x.data().broadcast_as(dims).op("expand")?);
    let to = dims.to_vec();
    remat::note_view("expand", &out, x, move |t| expand(t, &to));
    record("ExpandBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(sum_to(g, &in_dims)?)])
    });
    Ok(out)
}

/// `expand(*sizes)`: `-1` keeps a dim; new leading dims come first and may not be `-1`.
pub fn expand_sizes(x: &Tensor, req: &[i64]) -> Result<Tensor> {
    let in_dims = x.dims();
    if req.len() < in_dims.len() {
        return Err(Error::shape(format!(
            "expand: the number of sizes provided ({}) must be greater or equal to the number of \
             dimensions in the tensor ({}) (tensor shape {})",
            req.len(),
            in_dims.len(),
            shape_str(&in_dims)
        )));
    }
    let off = req.len() - in_dims.len();
    let mut dims = Vec::with_capacity(req.len());
    for (i, &d) in req.iter().enumerate() {
        dims.push(match d {
            -1 if i >= off => in_dims[i - off],
            d if d < 0 => {
                return Err(Error::shape(format!(
                    "expand: the expanded size of the tensor ({d}) isn't allowed in a leading, \
                     non-existing dimension {i} (tensor shape {}, sizes {req:?})",
                    shape_str(&in_dims)
                )))
            }
            d => d as usize,
        });
    }
    expand(x, &dims)
}

/// `flip(dims)`: a copy with those dims reversed.
pub fn flip<D: Dim>(x: &Tensor, dims: &[D]) -> Result<Tensor> {
    let started = remat::start();
    let dims = &wrap_dims("flip", dims, x.rank())?;
    let src = x.contiguous_data()?;
    let data = if dims
        .iter()
        .any(|&d| x.dims().get(d).is_some_and(|&n| n > 1))
    {
        src.flip(dims).op("flip")?
    } else {
        crate::ops::convert::dense_copy(&src)?
    };
    let out = Tensor::new(data, x.dtype());
    let dims = dims.to_vec();
    let kept = dims.clone();
    remat::note("flip", &out, &[x], started, move |ins| flip(&ins[0], &kept));
    record("FlipBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(flip(g, &dims)?)])
    });
    Ok(out)
}

/// `roll(shifts, dims)` on normalised dims; with no dims, rolls the flattened tensor.
pub fn roll(x: &Tensor, shifts: &[i64], dims: Option<&[usize]>) -> Result<Tensor> {
    let started = remat::start();
    let Some(dims) = dims else {
        if shifts.len() != 1 {
            return Err(Error::shape(format!(
                "roll: shifts must have one element when dims is not given (got {shifts:?})"
            )));
        }
        let flat = reshape(x, &[x.numel()])?;
        return reshape(&roll(&flat, shifts, Some(&[0]))?, &x.dims());
    };
    if shifts.len() != dims.len() {
        return Err(Error::shape(format!(
            "roll: shifts and dimensions must align. shifts: {}, dims: {}",
            shifts.len(),
            dims.len()
        )));
    }
    if let (0, Some(&d)) = (x.rank(), dims.first()) {
        return Err(crate::ops::no_dims("roll", d));
    }
    let mut data = x.data();
    let mut rolled = false;
    for (&s, &d) in shifts.iter().zip(dims) {
        let n = data.dims()[d];
        if n == 0 {
            continue;
        }
        let s = s.rem_euclid(n as i64) as usize;
        if s != 0 {
            let head = data.narrow(d, n - s, s).op("roll")?;
            let tail = data.narrow(d, 0, n - s).op("roll")?;
            data = join(&[head, tail], d)?;
            rolled = true;
        }
    }
    // a new buffer either way: `join`'s, or a copy when nothing moved
    let data = match rolled {
        true => data,
        false => crate::ops::convert::dense_copy(&data)?,
    };
    let out = Tensor::new(data, x.dtype());
    let back: Vec<i64> = shifts.iter().map(|s| -s).collect();
    let dims = dims.to_vec();
    let (kept_shifts, kept_dims) = (shifts.to_vec(), dims.clone());
    remat::note("roll", &out, &[x], started, move |ins| {
        roll(&ins[0], &kept_shifts, Some(&kept_dims))
    });
    record("RollBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(roll(g, &back, Some(&dims))?)])
    });
    Ok(out)
}

/// `tril(diagonal)` (`upper = false`) / `triu(diagonal)`: zero the elements above (below)
/// the given diagonal of the last two dims.
pub fn tri(x: &Tensor, diagonal: i64, upper: bool) -> Result<Tensor> {
    let started = remat::start();
    let op = if upper { "triu" } else { "tril" };
    let dims = x.dims();
    if dims.len() < 2 {
        return Err(Error::shape(format!(
            "{op}: input tensor must have at least 2 dimensions (got shape {})",
            shape_str(&dims)
        )));
    }
    let (r, c) = (dims[dims.len() - 2], dims[dims.len() - 1]);
    let keep: Vec<u8> = (0..r * c)
        .map(|p| {
            let d = (p % c) as i64 - (p / c) as i64;
            u8::from(if upper { d >= diagonal } else { d <= diagonal })
        })
        .collect();
    let data = x.data();
    let mask = crate::device::from_vec(keep, (r, c), data.device())
        .op(op)?
        .broadcast_as(dims.clone())
        .op(op)?;
    let out = Tensor::new(
        mask.select(
            &data,
            &crate::device::zeros(data.shape(), data.dtype(), data.device()).op(op)?,
        )
        .op(op)?,
        x.dtype(),
    );
    remat::note(op, &out, &[x], started, move |ins| {
        tri(&ins[0], diagonal, upper)
    });
    record(
        if upper {
            "TriuBackward0"
        } else {
            "TrilBackward0"
        },
        &out,
        &[x],
        Vec::new,
        move |_, g| Ok(vec![Some(tri(g, diagonal, upper)?)]),
    );
    Ok(out)
}

/// `repeat(*repeats)`: tile the tensor; `repeats` may add leading dims.
pub fn repeat(x: &Tensor, repeats: &[i64]) -> Result<Tensor> {
    let dims = x.dims();
    if repeats.len() < dims.len() {
        return Err(Error::shape(format!(
            "Number of dimensions of repeat dims can not be smaller than number of dimensions of \
             tensor (repeat dims {repeats:?}, tensor shape {})",
            shape_str(&dims)
        )));
    }
    let lead = repeats.len() - dims.len();
    let padded: Vec<usize> = std::iter::repeat_n(1, lead).chain(dims).collect();
    let target = repeats
        .iter()
        .zip(&padded)
        .map(|(&r, &s)| r.checked_mul(s as i64))
        .collect::<Option<Vec<i64>>>()
        .ok_or_else(|| Error::shape(format!("repeat: the sizes overflow ({repeats:?})")))?;
    // As in PyTorch, the product is what must not be negative: an empty dim repeated -1
    // times stays empty.
    let out = to_dims("repeat", &target)?;
    crate::headroom::ensure("repeat", &out, x.dtype().size_in_bytes())?;
    let (mut spread, mut tiled) = (Vec::new(), Vec::new());
    for (&r, &s) in repeats.iter().zip(&padded) {
        spread.extend([1, s]);
        tiled.extend([r.max(0) as usize, s]);
    }
    let t = reshape(&expand(&reshape(x, &spread)?, &tiled)?, &out)?;
    if crate::backend::same_buffer(&t.data(), &x.data()) {
        return crate::ops::convert::clone(&t);
    }
    Ok(t)
}

/// `tile(dims)`: `repeat` with `dims` padded by leading 1s to the tensor's rank.
pub fn tile(x: &Tensor, dims: &[i64]) -> Result<Tensor> {
    let mut padded = vec![1; x.rank().saturating_sub(dims.len())];
    padded.extend_from_slice(dims);
    repeat(x, &padded)
}

/// `t()`: a matrix transposed; 0-d and 1-D tensors as they are.
pub fn t(x: &Tensor) -> Result<Tensor> {
    match x.rank() {
        0 | 1 => Ok(x.clone()),
        2 => transpose(x, 0, 1),
        r => Err(Error::shape(format!(
            "t() expects a tensor with <= 2 dimensions, but self is {r}D"
        ))),
    }
}

/// `.mT`: the last two dims swapped, for matrices or batches of them (a 0-d tensor as it is).
pub fn mt(x: &Tensor) -> Result<Tensor> {
    match x.rank() {
        0 => Ok(x.clone()),
        r if r < 2 => Err(Error::shape(format!(
            "tensor.mT is only supported on matrices or batches of matrices. Got {r}-D tensor."
        ))),
        r => transpose(x, r - 2, r - 1),
    }
}

/// `meshgrid(*tensors, indexing)`: each 0-d or 1-D input viewed along its own axis and
/// expanded to the grid; `xy` indexing swaps the first two axes.
pub fn meshgrid(ts: &[Tensor], indexing: &str) -> Result<Vec<Tensor>> {
    let xy = match indexing {
        "ij" => false,
        "xy" => true,
        other => {
            return Err(Error::runtime(format!(
                "meshgrid: indexing must be one of \"xy\" or \"ij\", but received: {other}"
            )))
        }
    };
    if let Some(t) = ts.iter().find(|t| t.rank() > 1) {
        return Err(Error::runtime(format!(
            "meshgrid: Expected 0D or 1D tensor in the tensor list but got: {}D",
            t.rank()
        )));
    }
    let n = ts.len();
    let axis = |i: usize| if xy && n >= 2 && i < 2 { 1 - i } else { i };
    let mut sizes = vec![0; n];
    for (i, t) in ts.iter().enumerate() {
        sizes[axis(i)] = t.numel();
    }
    ts.iter()
        .enumerate()
        .map(|(i, t)| {
            let mut shape = vec![1; n];
            shape[axis(i)] = t.numel();
            expand(&reshape(t, &shape)?, &sizes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::ops::{creation, index};

    fn out_of_range<T>(r: Result<T>) -> bool {
        matches!(r, Err(Error::Index(_)))
    }

    /// A Rust caller's bad dim gets the IndexError a Python caller gets, not a panic.
    #[test]
    fn ops_range_check_the_dims_rust_callers_pass() {
        let x = creation::zeros(&[2, 3], DType::Float32, &candle_core::Device::Cpu).unwrap();
        assert!(out_of_range(transpose(&x, 0, 2_usize)));
        assert!(out_of_range(index::select(&x, 5_usize, 0)));
        assert!(out_of_range(index::narrow(&x, 2_usize, 0, 1)));
        assert!(out_of_range(unsqueeze(&x, 4_usize)));
        assert!(out_of_range(flatten(&x, 0, 9_usize)));
        assert!(out_of_range(movedim(&x, &[0_usize], &[7])));
        assert!(out_of_range(permute(&x, &[0_usize, 2])));
        assert!(out_of_range(chunk(&x, 2, 3_usize)));
        assert!(out_of_range(unbind(&x, 2_usize)));
        assert!(out_of_range(index::gather(&x, 2_usize, &x)));
    }

    /// A negative `i64` dim counts from the end, as in PyTorch.
    #[test]
    fn negative_dims_count_from_the_end() {
        let x = creation::zeros(&[2, 3, 4], DType::Float32, &candle_core::Device::Cpu).unwrap();
        assert_eq!(transpose(&x, -1_i64, 0).unwrap().dims(), [4, 3, 2]);
        assert_eq!(index::select(&x, -2_i64, -1).unwrap().dims(), [2, 4]);
        assert_eq!(unsqueeze(&x, -1_i64).unwrap().dims(), [2, 3, 4, 1]);
        assert_eq!(flatten(&x, -2_i64, -1).unwrap().dims(), [2, 12]);
        assert_eq!(index::narrow(&x, -1_i64, -3, 2).unwrap().dims(), [2, 3, 2]);
    }
}
