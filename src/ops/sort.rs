//! Sorting and searching: `sort`, `argsort`, `msort`, `topk`, `kthvalue`, `searchsorted`,
//! `bucketize`, `unique`, `unique_consecutive`.
//!
//! Every order comes from one stable argsort kernel (`backend::SortOps`), so equal
//! elements keep their order and NaN sorts as the largest value, as PyTorch's stable sort.
//! The values of `sort`/`topk`/`kthvalue`/`msort` are read through the indices with the
//! indexing `take`, whose backward accumulates the gradient back at the source positions.

use crate::autograd::remat;
use crate::backend::cast::Convert;
use candle_core::DType as CDType;

use crate::autograd::function::record;
use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::index::{gather, gather_plan, put_new, take, IndexArray, IndexPlan};
use crate::ops::shape::{reshape, squeeze, unsqueeze};
use crate::tensor::{shape_str, Tensor};

/// The storage type the kernels compare in for data stored as `dt` (exact for each).
fn compute_dtype(dt: CDType) -> CDType {
    match dt {
        CDType::F16 | CDType::BF16 | CDType::F32 => CDType::F32,
        CDType::F64 => CDType::F64,
        _ => CDType::I64,
    }
}

/// The int64 indices that sort `x` (rank >= 1) along `dim`, stable, in `x`'s shape.
fn argsort_data(x: &Tensor, dim: usize, descending: bool) -> Result<candle_core::Tensor> {
    let op = "sort";
    let d = x.data();
    let dims = x.dims();
    if x.numel() == 0 {
        return crate::device::zeros(dims, CDType::I64, d.device()).op(op);
    }
    let last = dims.len() - 1;
    let moved = d
        .cast(compute_dtype(d.dtype()))
        .op(op)?
        .transpose(dim, last)
        .op(op)?
        .dense()
        .op(op)?;
    let moved_dims = moved.dims().to_vec();
    let n = dims[dim];
    let lines = moved.reshape((x.numel() / n, n)).op(op)?;
    backend::on(&lines)
        .argsort(&lines, descending)?
        .reshape(moved_dims)
        .op(op)?
        .transpose(dim, last)
        .op(op)?
        .dense()
        .op(op)
}

/// `len` indices from `start` along `dim` of `all` (from `argsort_data`), int64.
/// candle's `narrow` panics on an empty tensor with `start > 0`: zeros stand in for it.
fn narrow_idx(all: &candle_core::Tensor, dim: usize, start: usize, len: usize) -> Result<Tensor> {
    let op = "sort";
    let idx = if all.elem_count() == 0 {
        let mut dims = all.dims().to_vec();
        dims[dim] = len;
        crate::device::zeros(dims, CDType::I64, all.device()).op(op)?
    } else {
        all.narrow(dim, start, len).op(op)?.dense().op(op)?
    };
    Ok(Tensor::new(idx, DType::Int64))
}

/// `x`'s elements at `idx` (int64, `x`'s rank) along `dim`, that dim squeezed unless
/// `keep`. Backward: the gradient accumulated into zeros at the source positions, as the
/// indexing `take` does, under the op's own node name.
fn read(x: &Tensor, dim: usize, idx: &Tensor, node: &'static str, keep: bool) -> Result<Tensor> {
    let started = remat::start();
    let plan = gather_plan("sort", &x.dims(), &x.device(), dim, idx)?;
    if keep {
        return take(x, plan, node);
    }
    let xd = x.data();
    let data = backend::on(&xd)
        .take("index", &xd, &plan)?
        .squeeze(dim)
        .op("kthvalue")?;
    let out = Tensor::new(data, x.dtype());
    let in_dims = x.dims();
    let kept = idx.clone();
    remat::note(node, &out, &[x], started, move |ins| {
        read(&ins[0], dim, &kept, node, keep)
    });
    record(node, &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(put_new(
            &unsqueeze(g, dim)?,
            &in_dims,
            plan.clone(),
        )?)])
    });
    Ok(out)
}

/// Run `f` on a 0-d `x` seen as 1-d, both outputs back to 0-d.
fn as_1d(
    x: &Tensor,
    f: impl FnOnce(&Tensor) -> Result<(Tensor, Tensor)>,
) -> Result<(Tensor, Tensor)> {
    let (v, i) = f(&reshape(x, &[1])?)?;
    Ok((reshape(&v, &[])?, reshape(&i, &[])?))
}

/// `sort(x, dim, descending)`: the values and their int64 source indices. Always stable.
pub fn sort(x: &Tensor, dim: usize, descending: bool) -> Result<(Tensor, Tensor)> {
    if x.rank() == 0 {
        return as_1d(x, |x| sort(x, 0, descending));
    }
    let idx = Tensor::new(argsort_data(x, dim, descending)?, DType::Int64);
    let values = read(x, dim, &idx, "SortBackward0", true)?;
    Ok((values, idx))
}

/// `argsort(x, dim, descending)`: the indices of `sort` (not differentiable).
pub fn argsort(x: &Tensor, dim: usize, descending: bool) -> Result<Tensor> {
    if x.rank() == 0 {
        return reshape(&argsort(&reshape(x, &[1])?, 0, descending)?, &[]);
    }
    Ok(Tensor::new(argsort_data(x, dim, descending)?, DType::Int64))
}

/// `msort(x)`: the values of `sort` along dim 0.
pub fn msort(x: &Tensor) -> Result<Tensor> {
    Ok(sort(x, 0, false)?.0)
}

/// `topk(x, k, dim, largest)`: the `k` largest (smallest) elements along `dim` and their
/// indices, always in sorted order (PyTorch leaves the order open when `sorted=False`).
pub fn topk(x: &Tensor, k: i64, dim: usize, largest: bool) -> Result<(Tensor, Tensor)> {
    if x.dtype() == DType::Bool {
        return Err(Error::dtype("topk(): does not support bool dtypes"));
    }
    if x.rank() == 0 {
        // PyTorch takes k = 0 or 1 of a 0-d tensor, and returns its element for both.
        return match k {
            0 | 1 => as_1d(x, |x| topk(x, 1, 0, largest)),
            _ => Err(Error::shape(format!(
                "topk(): selected index k out of range (k = {k}, 0-d input)"
            ))),
        };
    }
    let dims = x.dims();
    let n = dims[dim];
    if k < 0 || k as usize > n {
        return Err(Error::shape(format!(
            "topk(): selected index k out of range (k = {k}, dimension {dim} of input shape {} \
             has size {n})",
            shape_str(&dims)
        )));
    }
    let all = argsort_data(x, dim, largest)?;
    let idx = all
        .narrow(dim, 0, k as usize)
        .op("topk")?
        .dense()
        .op("topk")?;
    let idx = Tensor::new(idx, DType::Int64);
    Ok((read(x, dim, &idx, "TopkBackward0", true)?, idx))
}

/// `kthvalue(x, k, dim, keepdim)`: the `k`-th smallest element (1-based) along `dim` and
/// its index.
pub fn kthvalue(x: &Tensor, k: i64, dim: usize, keepdim: bool) -> Result<(Tensor, Tensor)> {
    if x.dtype() == DType::Bool {
        return Err(Error::NotImplemented(
            "kthvalue(): not implemented for 'Bool'".into(),
        ));
    }
    if x.rank() == 0 {
        return as_1d(x, |x| kthvalue(x, k, 0, true));
    }
    let dims = x.dims();
    let n = dims[dim];
    if n == 0 {
        return Err(Error::index(format!(
            "kthvalue(): Expected reduction dim {dim} to have non-zero size (input shape {})",
            shape_str(&dims)
        )));
    }
    if k < 1 || k as usize > n {
        return Err(Error::shape(format!(
            "kthvalue(): selected number k out of range for dimension {dim} (k = {k}, input \
             shape {})",
            shape_str(&dims)
        )));
    }
    let idx = narrow_idx(&argsort_data(x, dim, false)?, dim, k as usize - 1, 1)?;
    let values = read(x, dim, &idx, "KthvalueBackward0", keepdim)?;
    if keepdim {
        Ok((values, idx))
    } else {
        Ok((values, squeeze(&idx, &[dim])?))
    }
}

fn searchsorted_error(msg: String) -> Error {
    Error::shape(format!("torch.searchsorted(): {msg}"))
}

/// `searchsorted(seq, values, right, sorter)`: for each value, the index at which inserting
/// it keeps its line of `seq` sorted (the first such index, the last with `right`). `seq`
/// is 1-d, or has the leading dims of `values`; `sorter` (int64, `seq`'s shape) sorts an
/// unsorted `seq`. int64, or int32 with `out_int32`; not differentiable.
pub fn searchsorted(
    seq: &Tensor,
    values: &Tensor,
    out_int32: bool,
    right: bool,
    sorter: Option<&Tensor>,
) -> Result<Tensor> {
    let op = "searchsorted";
    let (sd, vd) = (seq.dims(), values.dims());
    let Some(&m) = sd.last() else {
        return Err(searchsorted_error(
            "boundaries tensor should have positive dimension, but got 0 dimension".into(),
        ));
    };
    let last = sd.len() - 1;
    if sd.len() > 1 {
        if vd.is_empty() {
            return Err(searchsorted_error(format!(
                "input value can be a scalar only when boundaries tensor dimension is 1, but \
                 we got boundaries tensor dim({}) and input value's dim(0) numel(1)",
                sd.len()
            )));
        }
        if vd.len() != sd.len() || vd[..last] != sd[..last] {
            return Err(searchsorted_error(format!(
                "boundaries tensor should be 1 dimension or the first N-1 dimensions of \
                 boundaries tensor and input value tensor must match, but we got boundaries \
                 tensor {} and input value tensor {}",
                shape_str(&sd),
                shape_str(&vd)
            )));
        }
    }
    let seq = match sorter {
        None => seq.clone(),
        Some(s) => {
            if s.dtype() != DType::Int64 {
                return Err(searchsorted_error(format!(
                    "sorter must be a tensor of long dtype but got dtype {}",
                    s.dtype().name()
                )));
            }
            if s.dims() != sd {
                return Err(searchsorted_error(format!(
                    "boundary and sorter must have the same size, but got boundary tensor {} \
                     and got sorter tensor {}",
                    shape_str(&sd),
                    shape_str(&s.dims())
                )));
            }
            let sv = s.data().cast(CDType::I64).op(op)?;
            if let Some(bad) = backend::on(&sv).find_out_of_bounds(op, &sv, 0, m as i64, None)? {
                return Err(searchsorted_error(format!(
                    "sorter index out of range (index {bad}, boundaries of size {m} along the \
                     last dim)"
                )));
            }
            gather(&seq.detach(), last, s)?
        }
    };
    let out_dt = if out_int32 { CDType::I32 } else { CDType::I64 };
    let device = seq.data().device().clone();
    if values.numel() == 0 {
        return Ok(Tensor::new(
            crate::device::zeros(vd, out_dt, &device).op(op)?,
            if out_int32 {
                DType::Int32
            } else {
                DType::Int64
            },
        ));
    }
    // A bool side compares as 0 and 1 against a numeric one (PyTorch promotes them); two
    // bool sides PyTorch refuses.
    if seq.dtype() == DType::Bool && values.dtype() == DType::Bool {
        return Err(Error::NotImplemented(format!(
            "torch.searchsorted(): not implemented for 'Bool' (boundaries shape {}, input shape {})",
            shape_str(&sd),
            shape_str(&vd)
        )));
    }
    let cdt = if seq.dtype().is_floating_point() || values.dtype().is_floating_point() {
        CDType::F64
    } else {
        CDType::I64
    };
    let flat = |t: &Tensor, rows: usize, n: usize| -> Result<candle_core::Tensor> {
        t.data()
            .cast(cdt)
            .op(op)?
            .dense()
            .op(op)?
            .reshape((rows, n))
            .op(op)
    };
    let srows: usize = sd[..last].iter().product();
    let (vrows, n) = if sd.len() == 1 {
        (1, values.numel())
    } else {
        (srows, vd[last])
    };
    let s2 = flat(&seq, srows, m)?;
    let v2 = flat(values, vrows, n)?;
    let out = backend::on(&s2)
        .search(&s2, &v2, right)?
        .reshape(vd)
        .op(op)?
        .cast(out_dt)
        .op(op)?;
    Ok(Tensor::new(
        out,
        if out_int32 {
            DType::Int32
        } else {
            DType::Int64
        },
    ))
}

/// `bucketize(x, boundaries, right)`: `searchsorted(boundaries, x)` for 1-d boundaries.
pub fn bucketize(x: &Tensor, boundaries: &Tensor, out_int32: bool, right: bool) -> Result<Tensor> {
    if boundaries.rank() != 1 {
        return Err(Error::shape(format!(
            "bucketize(): boundaries tensor must be 1 dimension, but got dim({}) (boundaries \
             shape {})",
            boundaries.rank(),
            shape_str(&boundaries.dims())
        )));
    }
    searchsorted(boundaries, x, out_int32, right, None)
}

/// The rows of `x` (dim 0) at `at` (int64, in range), through the backend's take.
fn rows_at(
    x: &candle_core::Tensor,
    at: &candle_core::Tensor,
    op: &'static str,
) -> Result<candle_core::Tensor> {
    let index = IndexArray {
        dims: at.dims().to_vec(),
        values: at.clone(),
    };
    let oob = |v: i64| Error::index(format!("{op}: row {v} out of range"));
    let plan = std::sync::Arc::new(IndexPlan::along(x.dims(), 0, &index, &oob)?);
    backend::on(x).take(op, x, &plan)
}

/// What `unique`/`unique_consecutive` return: the unique values (or slices), for each
/// input element (or slice) the index of its unique value, and each unique value's count.
pub struct Unique {
    pub values: Tensor,
    pub inverse: Tensor,
    pub counts: Tensor,
}

fn long_vec(v: Vec<i64>, dims: &[usize], device: &candle_core::Device) -> Result<Tensor> {
    Ok(Tensor::new(
        crate::device::from_vec(v, dims, device).op("unique")?,
        DType::Int64,
    ))
}

/// `unique(x, dim)` (sorted) or, with `consecutive`, `unique_consecutive(x, dim)`: over the
/// elements (`dim=None`) or over the slices along `dim`. Not differentiable.
pub fn unique(x: &Tensor, dim: Option<usize>, consecutive: bool) -> Result<Unique> {
    let op = if consecutive {
        "unique_consecutive"
    } else {
        "unique"
    };
    let dims = x.dims();
    let d = x.data();
    let device = d.device().clone();
    // The elements (or slices) as the rows of a 2-d tensor; the dims of one slice.
    let (rows, perm_back): (candle_core::Tensor, Option<Vec<usize>>) = match dim {
        None => (d.flatten_all().op(op)?.reshape(((), 1)).op(op)?, None),
        Some(k) => {
            let others_empty = dims.iter().enumerate().any(|(i, &s)| i != k && s == 0);
            if x.numel() == 0 && !others_empty {
                let counts = long_vec(vec![], &[0], &device)?;
                return Ok(Unique {
                    values: Tensor::new(d.clone(), x.dtype()),
                    inverse: long_vec(vec![], &[0], &device)?,
                    counts,
                });
            }
            if others_empty {
                return Err(Error::shape(format!(
                    "{op}(): There are 0 sized dimensions, and they aren't selected, so unique \
                     cannot be applied (input shape {}, dim {k})",
                    shape_str(&dims)
                )));
            }
            let mut perm: Vec<usize> = vec![k];
            perm.extend((0..dims.len()).filter(|&i| i != k));
            let moved = d.permute(perm.clone()).op(op)?.dense().op(op)?;
            let n = dims[k];
            (moved.reshape((n, x.numel() / n)).op(op)?, Some(perm))
        }
    };
    let n = rows.dim(0).op(op)?;
    let inverse_dims = if dim.is_none() { dims.clone() } else { vec![n] };
    if n == 0 {
        return Ok(Unique {
            values: Tensor::new(d.flatten_all().op(op)?, x.dtype()),
            inverse: long_vec(vec![], &inverse_dims, &device)?,
            counts: long_vec(vec![], &[0], &device)?,
        });
    }
    let keys = rows
        .cast(compute_dtype(rows.dtype()))
        .op(op)?
        .dense()
        .op(op)?;
    let be = backend::on(&keys);
    let (keys, rows, perm) = if consecutive {
        (keys, rows, None)
    } else {
        let p = be.argsort_rows(&keys)?;
        (
            rows_at(&keys, &p, op)?,
            rows_at(&rows, &p, op)?,
            Some(crate::host::read::<i64>(
                "unique: the groups size the result",
                &p,
            )?),
        )
    };
    let ids = crate::host::read::<i64>("unique: the groups size the result", &be.run_ids(&keys)?)?;
    let groups = ids.last().map_or(0, |&g| g as usize + 1);
    let mut counts = vec![0i64; groups];
    let mut first = vec![0i64; groups];
    for (j, &g) in ids.iter().enumerate().rev() {
        if let (Some(c), Some(f)) = (counts.get_mut(g as usize), first.get_mut(g as usize)) {
            *c += 1;
            *f = j as i64;
        }
    }
    let inverse = match perm {
        None => ids,
        Some(p) => {
            let mut inv = vec![0i64; n];
            for (&src, &g) in p.iter().zip(&ids) {
                if let Some(slot) = inv.get_mut(src as usize) {
                    *slot = g;
                }
            }
            inv
        }
    };
    let first = crate::device::from_vec(first, groups, &device).op(op)?;
    let picked = rows_at(&rows, &first, op)?;
    let values = match perm_back {
        None => picked.reshape(groups).op(op)?,
        Some(perm) => {
            let mut moved: Vec<usize> = perm.iter().map(|&i| dims[i]).collect();
            moved[0] = groups;
            let mut inv_perm = vec![0; perm.len()];
            for (i, &p) in perm.iter().enumerate() {
                inv_perm[p] = i;
            }
            picked
                .reshape(moved)
                .op(op)?
                .permute(inv_perm)
                .op(op)?
                .dense()
                .op(op)?
        }
    };
    Ok(Unique {
        values: Tensor::new(values, x.dtype()),
        inverse: long_vec(inverse, &inverse_dims, &device)?,
        counts: long_vec(counts, &[groups], &device)?,
    })
}
