//! CPU kernels of advanced indexing: read the elements an `IndexPlan` names out of any
//! strided layout (`Take`), or write/accumulate values into them in place (`Put`).
//! Why not candle's: `index_select`/`index_add` take one index tensor on one dim of a
//! contiguous tensor; these take several index arrays on any view, in place.

use std::sync::Arc;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, CustomOp1, InplaceOp2, Layout, Shape, Tensor, WithDType};
use rayon::prelude::*;

use super::dense::with_slice;
use super::{Cpu, PAR_MIN};
use crate::backend::strided::StridedOffsets;
use crate::backend::IndexOps;
use crate::error::{CandleContext, Result};
use crate::ops::index::IndexPlan;

/// The offsets an indexing result reads from a source layout, factored as
/// `outer[o] + adv[b] + inner[i]` for output element `(o, b, i)` in row-major order.
struct Offsets {
    outer: Vec<usize>,
    adv: Vec<usize>,
    inner: Vec<usize>,
    /// `inner` is `0..inner.len()`: a run of consecutive elements.
    inner_dense: bool,
}

fn offsets(plan: &IndexPlan, l: &Layout) -> Result<Offsets> {
    let (dims, strides) = (l.dims(), l.stride());
    let rest: Vec<usize> = (0..dims.len())
        .filter(|d| !plan.adv_dims.contains(d))
        .collect();
    let sub = |ds: &[usize], start: usize| -> Vec<usize> {
        let shape: Vec<usize> = ds.iter().map(|&d| dims[d]).collect();
        let stride: Vec<usize> = ds.iter().map(|&d| strides[d]).collect();
        StridedOffsets::new(&Layout::new(Shape::from(shape), stride, start)).collect()
    };
    let (outer_dims, inner_dims) = rest.split_at(plan.bpos.min(rest.len()));
    let n = plan.count();
    let adv = with_slice::<i64, _>(&plan.coords, |coords| {
        (0..n)
            .map(|b| {
                plan.adv_dims
                    .iter()
                    .enumerate()
                    .map(|(j, &d)| coords[j * n + b] as usize * strides[d])
                    .sum()
            })
            .collect()
    })?;
    let inner = sub(inner_dims, 0);
    let inner_dense = inner.iter().enumerate().all(|(i, &o)| i == o);
    Ok(Offsets {
        outer: sub(outer_dims, l.start_offset()),
        adv,
        inner,
        inner_dense,
    })
}

fn take_slice<T: WithDType>(src: &[T], off: &Offsets) -> Vec<T> {
    let inner_n = off.inner.len();
    let n = off.adv.len();
    let total = off.outer.len() * n * inner_n;
    let mut out = vec![T::zero(); total];
    if total == 0 {
        return out;
    }
    let fill = |(c, chunk): (usize, &mut [T])| {
        let base = off.outer[c / n] + off.adv[c % n];
        if off.inner_dense {
            chunk.copy_from_slice(&src[base..base + inner_n]);
        } else {
            for (o, &i) in chunk.iter_mut().zip(&off.inner) {
                *o = src[base + i];
            }
        }
    };
    if total >= PAR_MIN {
        out.par_chunks_mut(inner_n)
            .enumerate()
            .with_min_len((PAR_MIN / inner_n).max(1))
            .for_each(fill);
    } else {
        out.chunks_mut(inner_n).enumerate().for_each(fill);
    }
    out
}

/// Reads an indexing result (of `dims`) into a new dense tensor.
struct Take {
    off: Offsets,
    dims: Vec<usize>,
}

impl CustomOp1 for Take {
    fn name(&self) -> &'static str {
        "index"
    }
    fn cpu_fwd(&self, s: &CpuStorage, _: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let off = &self.off;
        let out = match s {
            CpuStorage::U8(v) => CpuStorage::U8(take_slice(v, off)),
            CpuStorage::U32(v) => CpuStorage::U32(take_slice(v, off)),
            CpuStorage::I16(v) => CpuStorage::I16(take_slice(v, off)),
            CpuStorage::I32(v) => CpuStorage::I32(take_slice(v, off)),
            CpuStorage::I64(v) => CpuStorage::I64(take_slice(v, off)),
            CpuStorage::BF16(v) => CpuStorage::BF16(take_slice(v, off)),
            CpuStorage::F16(v) => CpuStorage::F16(take_slice(v, off)),
            CpuStorage::F32(v) => CpuStorage::F32(take_slice(v, off)),
            CpuStorage::F64(v) => CpuStorage::F64(take_slice(v, off)),
            d => candle_core::bail!("index: unsupported dtype {:?}", d.dtype()),
        };
        Ok((out, Shape::from(self.dims.clone())))
    }
}

fn put_slice<T: WithDType>(dst: &mut [T], off: &Offsets, src: &[T], sl: &Layout, add: bool) {
    let mut values: Box<dyn Iterator<Item = usize>> = match sl.contiguous_offsets() {
        Some((a, b)) => Box::new(a..b),
        None => Box::new(StridedOffsets::new(sl)),
    };
    for &o in &off.outer {
        for &a in &off.adv {
            for &i in &off.inner {
                let Some(v) = values.next() else { return };
                let d = &mut dst[o + a + i];
                if add {
                    *d += src[v];
                } else {
                    *d = src[v];
                }
            }
        }
    }
}

/// Writes (or, with `accumulate`, adds) values shaped like the indexing result into the
/// indexed elements, in place. Repeated positions accumulate one by one.
struct Put {
    off: Offsets,
    accumulate: bool,
}

impl InplaceOp2 for Put {
    fn name(&self) -> &'static str {
        "index_put_"
    }
    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        _: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        let (off, add) = (&self.off, self.accumulate);
        match (s1, s2) {
            (CpuStorage::U8(d), CpuStorage::U8(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::U32(d), CpuStorage::U32(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::I16(d), CpuStorage::I16(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::I32(d), CpuStorage::I32(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::I64(d), CpuStorage::I64(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::BF16(d), CpuStorage::BF16(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::F16(d), CpuStorage::F16(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::F32(d), CpuStorage::F32(s)) => put_slice(d, off, s, l2, add),
            (CpuStorage::F64(d), CpuStorage::F64(s)) => put_slice(d, off, s, l2, add),
            (d, s) => candle_core::bail!(
                "index_put_: dtypes differ or are unsupported ({:?} vs {:?})",
                d.dtype(),
                s.dtype()
            ),
        }
        Ok(())
    }
}

impl IndexOps for Cpu {
    fn find_out_of_bounds(
        &self,
        _: &'static str,
        v: &Tensor,
        lo: i64,
        hi: i64,
        except: Option<i64>,
    ) -> Result<Option<i64>> {
        with_slice::<i64, _>(v, |s| {
            s.iter()
                .copied()
                .find(|&x| (x < lo || x >= hi) && Some(x) != except)
        })
    }
    fn take(&self, name: &'static str, x: &Tensor, plan: &Arc<IndexPlan>) -> Result<Tensor> {
        let take = Take {
            off: offsets(plan, x.layout())?,
            dims: plan.out_dims(),
        };
        x.apply_op1_no_bwd(&take).op(name)
    }
    fn put(
        &self,
        name: &'static str,
        dst: &Tensor,
        src: &Tensor,
        plan: &Arc<IndexPlan>,
        accumulate: bool,
    ) -> Result<()> {
        let off = offsets(plan, dst.layout())?;
        dst.inplace_op2(src, &Put { off, accumulate }).op(name)
    }
}
