//! Indexing: basic views (`narrow`, `select`, stepped slices), `__getitem__`,
//! `__setitem__`, and the gather/scatter family.
//!
//! Basic indices (ints, slices, `None`, `...`) give views sharing the input's buffer, slices
//! with a step included. Advanced indices (integer or bool tensors) go through an
//! `IndexPlan`: `take` reads the elements it names into a new tensor, `index_put_` writes
//! into them in place; each is the other's backward.

mod family;
pub mod plan;

use crate::backend::Compare;
use candle_core::op::CmpOp;
use std::sync::Arc;

use candle_core::Device;

use crate::autograd::function::{record, should_record};
use crate::autograd::grad_mode::{self, GradModeGuard};
use crate::autograd::remat;
use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::inplace::{fill_data, update_data, Update};
use crate::ops::shape::{derived, expand, reshape};
use crate::ops::{broadcast_shape, convert, creation, Dim, Operand, Scalar};
use crate::tensor::{shape_str, Tensor};

pub(crate) use family::gather_plan;
pub use family::{
    gather, index_select, masked_fill, masked_fill_, masked_select, nonzero, out_of_place,
    scatter_, scatter_add_, take_along_dim,
};
pub use plan::{IndexArray, IndexPlan};

/// Maps a tensor of the destination's shape to the region being written
/// (a chain of basic-indexing views), so backward can find the same region in a gradient.
pub type ViewFn = Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

// ---------------------------------------------------------------------------------------
// Basic views

/// `x.narrow(dim, start, len)`: a view; a negative `start` counts from the end.
pub fn narrow(x: &Tensor, dim: impl Dim, start: i64, len: i64) -> Result<Tensor> {
    let dims = x.dims();
    if dims.is_empty() {
        return Err(Error::shape(
            "narrow() cannot be applied to a 0-dim tensor.",
        ));
    }
    if len < 0 {
        return Err(Error::shape(format!(
            "narrow(): length must be non-negative (got {len})"
        )));
    }
    let dim = dim.wrap("narrow", dims.len())?;
    let size = dims[dim] as i64;
    if start < -size || start > size {
        return Err(Error::index(format!(
            "start out of range (expected to be in range of [{}, {size}], but got {start})",
            -size
        )));
    }
    let (start, len) = (
        (if start < 0 { start + size } else { start }) as usize,
        len as usize,
    );
    if len > dims[dim] - start {
        return Err(Error::shape(format!(
            "narrow: start ({start}) + length ({len}) exceeds dimension size ({}) of dim {dim} \
             (input shape {})",
            dims[dim],
            shape_str(&dims)
        )));
    }
    slice(x, dim, start, len, 1)
}

/// Elements `start, start + step, ...` (`len` of them) along `dim`: a view, also for steps
/// above 1 (a strided layout over the same buffer). The caller checks the bounds.
pub fn slice(x: &Tensor, dim: usize, start: usize, len: usize, step: usize) -> Result<Tensor> {
    let in_dims = x.dims();
    if start == 0 && len == in_dims[dim] && (step == 1 || len == 0) {
        return Ok(alias(x));
    }
    let data = x.data();
    let data = if len == 0 {
        // At 0, not `start`: an empty slice's offset could otherwise pass the buffer's end,
        // where reading it back (candle's to_vec) panics.
        data.narrow(dim, 0, 0).op("slice")?
    } else {
        let span = (len - 1) * step + 1;
        let n = data.narrow(dim, start, span).op("slice")?;
        if step == 1 {
            n.narrow(dim, 0, len).op("slice")?
        } else {
            let rank = n.rank();
            let s = n
                .unfold(dim, 1, step)
                .op("slice")?
                .squeeze(rank)
                .op("slice")?;
            if s.dims()[dim] != len {
                return Err(Error::shape(format!(
                    "slice: a stepped view of {len} elements could not be formed (dim size {})",
                    in_dims[dim]
                )));
            }
            s
        }
    };
    let out = derived(x, data);
    remat::note_view("slice", &out, x, move |t| slice(t, dim, start, len, step));
    record("SliceBackward0", &out, &[x], Vec::new, move |_, g| {
        let view: ViewFn = Arc::new(move |t| slice(t, dim, start, len, step));
        Ok(vec![Some(view_scatter(g, &in_dims, view)?)])
    });
    Ok(out)
}

/// A new view of the whole of `x` (`x[:]`, `x[...]`): gradient passes through.
pub fn alias(x: &Tensor) -> Tensor {
    let out = derived(x, x.data());
    remat::note_view("alias", &out, x, |t| Ok(alias(t)));
    record("AliasBackward0", &out, &[x], Vec::new, |_, g| {
        Ok(vec![Some(g.clone())])
    });
    out
}

/// `x.select(dim, i)`: the i-th slice along `dim`, that dim removed. A view.
pub fn select(x: &Tensor, dim: impl Dim, index: i64) -> Result<Tensor> {
    let in_dims = x.dims();
    if in_dims.is_empty() {
        return Err(Error::index(
            "select() cannot be applied to a 0-dim tensor.",
        ));
    }
    let dim = dim.wrap("select", in_dims.len())?;
    let size = in_dims[dim] as i64;
    if index < -size || index >= size {
        return Err(Error::index(format!(
            "index {index} is out of bounds for dimension {dim} with size {size}"
        )));
    }
    let i = if index < 0 { index + size } else { index } as usize;
    let data = x
        .data()
        .narrow(dim, i, 1)
        .op("select")?
        .squeeze(dim)
        .op("select")?;
    let out = derived(x, data);
    remat::note_view("select", &out, x, move |t| select(t, dim, i as i64));
    record("SelectBackward0", &out, &[x], Vec::new, move |_, g| {
        let view: ViewFn = Arc::new(move |t| select(t, dim, i as i64));
        Ok(vec![Some(view_scatter(g, &in_dims, view)?)])
    });
    Ok(out)
}

/// `fill_(value)`: every element of `x` set to `value`, a number (in x's dtype) or a 0-d
/// tensor (differentiable, as `copy_` is).
pub fn fill_(x: &Tensor, value: Operand) -> Result<()> {
    let v = match value {
        Operand::Tensor(v) if v.rank() != 0 => {
            return Err(Error::runtime(format!(
                "fill_ only supports 0-dimension value tensor but got tensor with {} dimensions.",
                v.rank()
            )))
        }
        Operand::Tensor(v) => v,
        Operand::Scalar(s) => {
            creation::scalar_tensor(s.checked(x.dtype())?, x.dtype(), &x.device())?
        }
    };
    assign(x, None, &v)
}

/// Zeros of `dims` with `g` written into the region `view` selects: the backward of a
/// view op. Its own backward is the view again, so double backward works.
pub fn view_scatter(g: &Tensor, dims: &[usize], view: ViewFn) -> Result<Tensor> {
    let z = creation::zeros(dims, g.dtype(), &g.device())?;
    {
        let _ng = GradModeGuard::new(false);
        update_data("slice_backward", &view(&z)?, &g.detach(), Update::Assign)?;
    }
    record("SliceScatterBackward0", &z, &[g], Vec::new, move |_, gg| {
        Ok(vec![Some(view(gg)?)])
    });
    Ok(z)
}

// ---------------------------------------------------------------------------------------
// __getitem__ / __setitem__

/// One element of an index expression, as Python gives it.
#[derive(Clone)]
pub enum IndexItem {
    Int(i64),
    Slice(Option<i64>, Option<i64>, Option<i64>),
    NewAxis,
    Ellipsis,
    /// An integer or bool tensor (lists are made tensors by the caller).
    Tensor(Tensor),
}

/// A basic-indexing step on the running view.
#[derive(Clone, Debug)]
enum Step {
    Select(usize, usize),
    Slice(usize, usize, usize, usize),
    NewAxis(usize),
}

fn apply_steps(t: &Tensor, steps: &[Step]) -> Result<Tensor> {
    let mut v = t.clone();
    for s in steps {
        v = match *s {
            Step::Select(d, i) => select(&v, d, i as i64)?,
            Step::Slice(d, start, len, step) => slice(&v, d, start, len, step)?,
            Step::NewAxis(d) => crate::ops::shape::unsqueeze(&v, d)?,
        };
    }
    Ok(v)
}

/// An index expression resolved against a shape: basic steps, then an optional plan.
struct Resolved {
    steps: Vec<Step>,
    /// The shape after the basic steps.
    view_dims: Vec<usize>,
    plan: Option<Arc<IndexPlan>>,
}

fn is_mask(t: &Tensor) -> bool {
    matches!(t.dtype(), DType::Bool | DType::UInt8)
}

/// Python's slice semantics for a positive step: (start, len).
fn slice_bounds(size: usize, start: Option<i64>, stop: Option<i64>, step: i64) -> (usize, usize) {
    let n = size as i64;
    let clamp = |v: i64| if v < 0 { (v + n).max(0) } else { v.min(n) };
    let s = start.map_or(0, clamp);
    let e = stop.map_or(n, clamp);
    let len = if e > s { (e - s + step - 1) / step } else { 0 };
    (s as usize, len as usize)
}

/// The steps and plan of `x[items]` for an `x` of `x_dims` on `device`.
fn resolve(x_dims: &[usize], device: &Device, items: &[IndexItem]) -> Result<Resolved> {
    let rank = x_dims.len();
    let mut consumed = 0;
    let mut ellipses = 0;
    for it in items {
        match it {
            IndexItem::Int(_) | IndexItem::Slice(..) => consumed += 1,
            IndexItem::Tensor(t) if is_mask(t) => consumed += t.rank(),
            IndexItem::Tensor(_) => consumed += 1,
            IndexItem::Ellipsis => ellipses += 1,
            IndexItem::NewAxis => {}
        }
    }
    if ellipses > 1 {
        return Err(Error::index(
            "an index can only have a single ellipsis ('...')",
        ));
    }
    if consumed > rank {
        if rank == 0 {
            return Err(Error::index(
                "invalid index of a 0-dim tensor. Use `tensor.item()` in Python or \
                 `tensor.item<T>()` in C++ to convert a 0-dim tensor to a number",
            ));
        }
        return Err(Error::index(format!(
            "too many indices for tensor of dimension {rank} (got {consumed}, shape {})",
            shape_str(x_dims)
        )));
    }
    let mut steps = Vec::new();
    let mut view_dims = x_dims.to_vec();
    let mut adv: Vec<(usize, IndexArray)> = Vec::new();
    let (mut xd, mut vd) = (0usize, 0usize);
    for it in items {
        match it {
            IndexItem::Int(i) => {
                let size = x_dims[xd] as i64;
                if *i < -size || *i >= size {
                    return Err(Error::index(format!(
                        "index {i} is out of bounds for dimension {xd} with size {size}"
                    )));
                }
                let w = if *i < 0 { i + size } else { *i } as usize;
                steps.push(Step::Select(vd, w));
                view_dims.remove(vd);
                xd += 1;
            }
            IndexItem::Slice(start, stop, step) => {
                let step = step.unwrap_or(1);
                if step <= 0 {
                    return Err(Error::value(format!(
                        "step must be greater than zero (got {step})"
                    )));
                }
                let (s, len) = slice_bounds(x_dims[xd], *start, *stop, step);
                steps.push(Step::Slice(vd, s, len, step as usize));
                view_dims[vd] = len;
                xd += 1;
                vd += 1;
            }
            IndexItem::NewAxis => {
                steps.push(Step::NewAxis(vd));
                view_dims.insert(vd, 1);
                vd += 1;
            }
            IndexItem::Ellipsis => {
                xd += rank - consumed;
                vd += rank - consumed;
            }
            IndexItem::Tensor(t) if is_mask(t) => {
                let k = t.rank();
                if k == 0 {
                    // x[True] adds a dim of size 1, x[False] one of size 0.
                    steps.push(Step::NewAxis(vd));
                    view_dims.insert(vd, 1);
                    let (count, _) = nonzero_coords(&t.data())?;
                    adv.push((vd, IndexArray::from_coords(vec![0; count], device)?));
                    vd += 1;
                    continue;
                }
                let md = t.dims();
                for (j, (&m, &s)) in md.iter().zip(&x_dims[xd..xd + k]).enumerate() {
                    if m != s {
                        return Err(Error::index(format!(
                            "The shape of the mask {} at index {j} does not match the shape of \
                             the indexed tensor {} at index {}",
                            shape_str(&md),
                            shape_str(x_dims),
                            xd + j
                        )));
                    }
                }
                let (_, coords) = nonzero_coords(&t.data())?;
                for (j, c) in coords.into_iter().enumerate() {
                    adv.push((vd + j, IndexArray::from_coords(c, device)?));
                }
                xd += k;
                vd += k;
            }
            IndexItem::Tensor(t) => {
                let a = IndexArray::from_tensor("index", t, device)?;
                if t.rank() == 0 {
                    // A 0-d integer tensor indexes like an int (a view), as in PyTorch,
                    // which reads its value.
                    let size = x_dims[xd] as i64;
                    let i = crate::host::read_scalar::<i64>("a 0-d tensor index", &a.values)?;
                    if i < -size || i >= size {
                        return Err(Error::index(format!(
                            "index {i} is out of bounds for dimension {xd} with size {size}"
                        )));
                    }
                    steps.push(Step::Select(vd, if i < 0 { i + size } else { i } as usize));
                    view_dims.remove(vd);
                    xd += 1;
                    continue;
                }
                adv.push((vd, a));
                xd += 1;
                vd += 1;
            }
        }
    }
    let plan = if adv.is_empty() {
        None
    } else {
        Some(Arc::new(IndexPlan::advanced(&view_dims, &adv, device)?))
    };
    Ok(Resolved {
        steps,
        view_dims,
        plan,
    })
}

/// `x[index]`: a view for basic indices, a new tensor when there are index tensors.
pub fn getitem(x: &Tensor, items: &[IndexItem]) -> Result<Tensor> {
    let r = resolve(&x.dims(), &x.device(), items)?;
    let v = apply_steps(x, &r.steps)?;
    match r.plan {
        Some(p) => take(&v, p, "IndexBackward0"),
        None if v.same(x) => Ok(alias(x)),
        None => Ok(v),
    }
}

/// `x[index] = value` in place: basic indices copy into the view (CopySlices), index
/// tensors go through `index_put_`. `value` broadcasts to the indexed shape.
pub fn setitem(x: &Tensor, items: &[IndexItem], value: &Tensor) -> Result<()> {
    let r = resolve(&x.dims(), &x.device(), items)?;
    let region: Option<ViewFn> = if r.steps.is_empty() {
        None
    } else {
        let steps = r.steps;
        Some(Arc::new(move |t: &Tensor| apply_steps(t, &steps)))
    };
    match r.plan {
        Some(p) => index_put_(x, region, p, value, false, "IndexPutBackward0"),
        None => {
            let v = fit_value(value, &r.view_dims)?;
            assign(x, region, &v)
        }
    }
}

/// Drop a value's leading size-1 dims beyond the target's rank and check that it
/// broadcasts to the target shape (PyTorch's setitem rules).
fn fit_value(value: &Tensor, target: &[usize]) -> Result<Tensor> {
    let vd = value.dims();
    let extra = vd.len().saturating_sub(target.len());
    let fits = vd[..extra].iter().all(|&d| d == 1)
        && broadcast_shape("setitem", target, &vd[extra..]).is_ok_and(|b| b == target);
    if !fits {
        return Err(Error::shape(format!(
            "shape mismatch: value tensor of shape {} cannot be broadcast to indexing result \
             of shape {}",
            shape_str(&vd),
            shape_str(target)
        )));
    }
    if extra > 0 {
        reshape(value, &vd[extra..])
    } else {
        Ok(value.clone())
    }
}

/// The region of `dst` a view chain selects, without recording.
fn region_of(dst: &Tensor, region: Option<&ViewFn>) -> Result<Tensor> {
    let _ng = GradModeGuard::new(false);
    match region {
        Some(f) => f(&dst.detach()),
        None => Ok(dst.detach()),
    }
}

/// `g` with the elements `region` (then `plan`) selects set to zero: the gradient of a
/// tensor's old value after they were overwritten. Differentiable under `create_graph`.
fn zero_region(
    g: &Tensor,
    region: Option<&ViewFn>,
    plan: Option<&Arc<IndexPlan>>,
) -> Result<Tensor> {
    let zero_into = |t: &Tensor| -> Result<()> {
        let target = region_of(t, region)?;
        match plan {
            Some(p) => {
                let z = creation::scalar_tensor(Scalar::Int(0), t.dtype(), &t.device())?;
                let z = z.detach();
                let zd = z.data().broadcast_as(p.out_dims()).op("index_put_")?;
                put_raw(&target, p, &Tensor::new(zd, t.dtype()), false)
            }
            None => fill_data(&target, Scalar::Int(0)),
        }
    };
    if grad_mode::is_enabled() {
        let mask = creation::ones_like(g)?;
        zero_into(&mask)?;
        crate::ops::binary::mul(g, &mask)
    } else {
        let kept = convert::clone(g)?;
        zero_into(&kept)?;
        Ok(kept)
    }
}

/// `dst[region] = src` in place (`copy_`, `fill_`, `__setitem__` with basic indices).
///
/// The history of `dst` is rewritten as PyTorch's CopySlices does: the old value's
/// gradient is the incoming one with the region zeroed, `src` gets the region's gradient.
pub fn assign(dst: &Tensor, region: Option<ViewFn>, src: &Tensor) -> Result<()> {
    let started = remat::start();
    let recording = should_record(&[dst, src]);
    if recording {
        dst.check_inplace("copy_")?;
    }
    let old_cell = dst.remat_cell();
    let target = region_of(dst, region.as_ref())?;
    update_data("copy_", &target, src, Update::Assign)?;
    if !recording {
        return Ok(());
    }
    let old = dst.detach();
    old.set_grad_fn(dst.grad_fn());
    old.set_remat_cell(old_cell);
    note_assign(dst, &old, region.clone(), src, started);
    let src_dims = src.dims();
    let src_dtype = src.dtype();
    let old_in_graph = old.grad_fn().is_some();
    let inputs: Vec<&Tensor> = if old_in_graph {
        vec![&old, src]
    } else {
        vec![src]
    };
    let name = if region.is_some() {
        "CopySlices"
    } else {
        "CopyBackwards"
    };
    record(name, dst, &inputs, Vec::new, move |ctx, g| {
        let mut out = Vec::new();
        if old_in_graph {
            out.push(if ctx.needs(0) {
                Some(zero_region(g, region.as_ref(), None)?)
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
            Some(convert::to_dtype(&part, src_dtype)?)
        } else {
            None
        });
        Ok(out)
    });
    Ok(())
}

/// Under a budget, `dst` as `assign` wrote it gets a recipe: a copy of `src` (broadcast and
/// cast to `dst`), written over a copy of `old` (its value before) when only `region` was.
fn note_assign(
    dst: &Tensor,
    old: &Tensor,
    region: Option<ViewFn>,
    src: &Tensor,
    started: Option<std::time::Instant>,
) {
    let (dims, dtype) = (dst.dims(), dst.dtype());
    // A whole write does not read the value before it: its recompute does not remake it.
    let (name, inputs) = match region {
        Some(_) => ("copy_slices", vec![old, src]),
        None => ("copy_", vec![src]),
    };
    remat::note_write(name, dst, &inputs, started, move |ins| {
        let (out, src) = match region {
            Some(_) => (convert::clone(&ins[0])?, &ins[1]),
            None => (creation::zeros(&dims, dtype, &ins[0].device())?, &ins[0]),
        };
        let target = region_of(&out, region.as_ref())?;
        update_data("copy_", &target, src, Update::Assign)?;
        Ok(out)
    });
}

// ---------------------------------------------------------------------------------------
// take / index_put_: the two ops every advanced index goes through

/// The elements `plan` names, as a new dense tensor. Backward: accumulate into zeros.
pub fn take(x: &Tensor, plan: Arc<IndexPlan>, name: &'static str) -> Result<Tensor> {
    let started = remat::start();
    let xd = x.data();
    let data = backend::on(&xd).take("index", &xd, &plan)?;
    let out = Tensor::new(data, x.dtype());
    let in_dims = x.dims();
    let kept = plan.clone();
    remat::note(name, &out, &[x], started, move |ins| {
        take(&ins[0], kept.clone(), name)
    });
    record(name, &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(put_new(g, &in_dims, plan.clone())?)])
    });
    Ok(out)
}

/// Zeros of `dims` with `values` accumulated at the positions `plan` names.
pub fn put_new(values: &Tensor, dims: &[usize], plan: Arc<IndexPlan>) -> Result<Tensor> {
    let z = creation::zeros(dims, values.dtype(), &values.device())?;
    index_put_(&z, None, plan, values, true, "IndexPutBackward0")?;
    Ok(z)
}

/// Write (or add) `values`, shaped like the plan's result and of `target`'s dtype, into
/// `target`'s buffer. No autograd; bumps the version counter.
fn put_raw(
    target: &Tensor,
    plan: &Arc<IndexPlan>,
    values: &Tensor,
    accumulate: bool,
) -> Result<()> {
    let td = target.data();
    crate::ops::inplace::check_writable("index_put_", &td)?;
    let mut vd = values.data();
    if crate::backend::same_buffer(&vd, &td) {
        vd = convert::dense_copy(&vd)?;
    }
    backend::on(&td).put("index_put_", &td, &vd, plan, accumulate)?;
    target.bump_version();
    Ok(())
}

/// `dst[region][plan] = values` (or `+=` with `accumulate`), in place, recorded like
/// PyTorch's `index_put_`: the old value's gradient is the incoming one with the written
/// elements zeroed (unchanged when accumulating), `values` gets their gradient.
pub fn index_put_(
    dst: &Tensor,
    region: Option<ViewFn>,
    plan: Arc<IndexPlan>,
    values: &Tensor,
    accumulate: bool,
    name: &'static str,
) -> Result<()> {
    let recording = should_record(&[dst, values]);
    if recording {
        dst.check_inplace(name)?;
    }
    let out_dims = plan.out_dims();
    let v = convert::to_dtype(values, dst.dtype())?;
    let v = expand(&fit_value(&v, &out_dims)?, &out_dims)?;
    let target = region_of(dst, region.as_ref())?;
    put_raw(&target, &plan, &v, accumulate)?;
    if !recording {
        return Ok(());
    }
    let old = dst.detach();
    old.set_grad_fn(dst.grad_fn());
    let old_in_graph = old.grad_fn().is_some();
    let inputs: Vec<&Tensor> = if old_in_graph {
        vec![&old, &v]
    } else {
        vec![&v]
    };
    record(name, dst, &inputs, Vec::new, move |ctx, g| {
        let mut out = Vec::new();
        if old_in_graph {
            out.push(match (ctx.needs(0), accumulate) {
                (false, _) => None,
                (true, true) => Some(g.clone()),
                (true, false) => Some(zero_region(g, region.as_ref(), Some(&plan))?),
            });
        }
        let vi = out.len();
        out.push(if ctx.needs(vi) {
            let part = match &region {
                Some(f) => f(g)?,
                None => g.clone(),
            };
            Some(take(&part, plan.clone(), "IndexBackward0")?)
        } else {
            None
        });
        Ok(out)
    });
    Ok(())
}

/// `index_put_(indices, values, accumulate)`: advanced indexing by a tuple of tensors.
pub fn index_put_indices(
    x: &Tensor,
    indices: &[Tensor],
    values: &Tensor,
    accumulate: bool,
) -> Result<()> {
    // 0-d integer indices are advanced here (no select), so give them one element.
    let items = indices
        .iter()
        .map(|t| {
            Ok(IndexItem::Tensor(if t.rank() == 0 && !is_mask(t) {
                reshape(t, &[1])?
            } else {
                t.clone()
            }))
        })
        .collect::<Result<Vec<_>>>()?;
    let r = resolve(&x.dims(), &x.device(), &items)?;
    if !r.steps.is_empty() {
        return Err(Error::index(
            "index_put_: 0-d bool indices are not supported",
        ));
    }
    let plan = r
        .plan
        .ok_or_else(|| Error::index("index_put_: expected at least one index tensor"))?;
    index_put_(x, None, plan, values, accumulate, "IndexPutBackward0")
}

/// The coordinates of every true element of a mask (any layout), row-major:
/// `coords[d][k]` is the d-th coordinate of the k-th true element. Also returns the count
/// (a 0-d mask has no coordinates but may hold one true element).
pub(crate) fn nonzero_coords(mask: &candle_core::Tensor) -> Result<(usize, Vec<Vec<usize>>)> {
    let dims = mask.dims().to_vec();
    let truth = mask.cmp_scalar(CmpOp::Ne, 0.0).op("nonzero")?;
    let flat: Vec<u8> = crate::host::read("nonzero: the count sizes the result", &truth)?;
    let mut coords = vec![Vec::new(); dims.len()];
    let mut idx = vec![0usize; dims.len()];
    let mut count = 0;
    for &v in &flat {
        if v != 0 {
            count += 1;
            for (c, &i) in coords.iter_mut().zip(&idx) {
                c.push(i);
            }
        }
        for d in (0..dims.len()).rev() {
            idx[d] += 1;
            if idx[d] < dims[d] {
                break;
            }
            idx[d] = 0;
        }
    }
    Ok((count, coords))
}
