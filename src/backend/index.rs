//! Advanced indexing: read the elements an `IndexPlan` names out of any strided layout,
//! or write/accumulate into them in place; and the bounds check of index values.
//!
//! The defaults are candle's ops: the element offsets are computed on the device from the
//! plan's coordinates, then `index_select` reads and `scatter_set`/`scatter_add_set` write
//! a dense destination (a strided one has no default: candle writes only dense tensors).

use crate::backend::cast::Convert;
use std::sync::Arc;

use candle_core::{DType, Layout, Shape, Tensor};

use super::not_implemented;
use super::strided::StridedOffsets;
use crate::error::{CandleContext, Result};
use crate::ops::index::IndexPlan;

/// The offset of every element of an indexing result in the buffer of a source laid out as
/// `l`: `outer[o] + adv[b] + inner[i]` for result element `(o, b, i)`, flat, int64, on
/// `coords`' device.
fn element_offsets(plan: &IndexPlan, l: &Layout) -> candle_core::Result<Tensor> {
    let (dims, strides) = (l.dims(), l.stride());
    let device = plan.coords.device();
    let rest: Vec<usize> = (0..dims.len())
        .filter(|d| !plan.adv_dims.contains(d))
        .collect();
    // The offsets of a block of dims, row-major: a small host table of the layout.
    let run = |ds: &[usize], start: usize| -> candle_core::Result<Tensor> {
        let shape: Vec<usize> = ds.iter().map(|&d| dims[d]).collect();
        let stride: Vec<usize> = ds.iter().map(|&d| strides[d]).collect();
        let v: Vec<i64> = StridedOffsets::new(&Layout::new(Shape::from(shape), stride, start))
            .map(|o| o as i64)
            .collect();
        let n = v.len();
        crate::device::from_vec(v, n, device)
    };
    let (outer_dims, inner_dims) = rest.split_at(plan.bpos.min(rest.len()));
    let n = plan.count();
    let mut adv = crate::device::zeros(n, DType::I64, device)?;
    for (j, &d) in plan.adv_dims.iter().enumerate() {
        adv = (adv + plan.coords.get(j)?.affine(strides[d] as f64, 0.0)?)?;
    }
    let outer = run(outer_dims, l.start_offset())?;
    let inner = run(inner_dims, 0)?;
    outer
        .reshape(((), 1, 1))?
        .broadcast_add(&adv.reshape((1, (), 1))?)?
        .broadcast_add(&inner.reshape((1, 1, ()))?)?
        .flatten_all()
}

pub trait IndexOps {
    /// The first value of `v` (int64, any layout) outside `lo..hi` that is not `except`,
    /// if there is one. The default finds whether there is one on the device, and reads
    /// back one flag (the values only when there is one, to name it).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn find_out_of_bounds(
        &self,
        name: &'static str,
        v: &Tensor,
        lo: i64,
        hi: i64,
        except: Option<i64>,
    ) -> Result<Option<i64>> {
        if v.elem_count() == 0 {
            return Ok(None);
        }
        let bad = (|| {
            let out = (v.lt(lo)?.cast(DType::U8)? + v.ge(hi)?.cast(DType::U8)?)?;
            let out = match except {
                Some(e) => (out * v.ne(e)?.cast(DType::U8)?)?,
                None => out,
            };
            out.flatten_all()?.max(0)
        })()
        .op(name)?;
        if crate::host::read_scalar::<u8>("index bounds check", &bad)? == 0 {
            return Ok(None);
        }
        let values = crate::host::read::<i64>("index bounds check", v)?;
        Ok(values
            .into_iter()
            .find(|&x| (x < lo || x >= hi) && Some(x) != except))
    }

    /// A new dense tensor of `plan.out_dims()` read from `x` (any layout).
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn take(&self, name: &'static str, x: &Tensor, plan: &Arc<IndexPlan>) -> Result<Tensor> {
        (|| {
            // Offsets into the dense elements, whatever x's own layout.
            let dense = Layout::contiguous(x.shape());
            let flat = x.dense()?.flatten_all()?;
            flat.index_select(&element_offsets(plan, &dense)?, 0)?
                .reshape(plan.out_dims())
        })()
        .op(name)
    }

    /// Write (or add, with `accumulate`) `src`, shaped like the indexing result, into
    /// the elements of `dst` that `plan` names; repeated positions accumulate one by one.
    fn put(
        &self,
        name: &'static str,
        dst: &Tensor,
        src: &Tensor,
        plan: &Arc<IndexPlan>,
        accumulate: bool,
    ) -> Result<()> {
        if !dst.is_contiguous() {
            return Err(not_implemented(name, dst.device()));
        }
        (|| {
            let dense = Layout::contiguous(dst.shape());
            let at = element_offsets(plan, &dense)?;
            let flat = dst.flatten_all()?;
            let values = src.flatten_all()?.dense()?;
            match accumulate {
                true => flat.scatter_add_set(&at, &values, 0),
                false => flat.scatter_set(&at, &values, 0),
            }
        })()
        .op(name)
    }
}
