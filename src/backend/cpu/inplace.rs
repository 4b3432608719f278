//! The strided in-place kernel behind `copy_`, `add_`..., `__setitem__` and gradient
//! accumulation, `fill_`, and a dense copy. Why not candle's: candle has no in-place
//! arithmetic and no strided destination, and its copy runs on one thread.

use candle_core::backend::BackendStorage;
use candle_core::{
    CpuStorage, CustomOp1, InplaceOp1, InplaceOp2, Layout, Shape, Tensor, WithDType,
};
use rayon::prelude::*;

use super::{Cpu, PAR_MIN};
use crate::backend::strided::StridedOffsets;
use crate::backend::{InplaceOps, Update};
use crate::error::{CandleContext, Result};
use crate::scalar::Scalar;

impl Update {
    #[inline(always)]
    fn apply<T: WithDType>(self, d: &mut T, s: T) {
        match self {
            Update::Assign => *d = s,
            Update::Add => *d += s,
            Update::Sub => *d -= s,
            Update::Mul => *d *= s,
            Update::Div => *d /= s,
        }
    }
}

fn update_slices<T: WithDType>(
    u: Update,
    dst: &mut [T],
    dl: &Layout,
    src: &[T],
    sl: &Layout,
) -> Result<()> {
    if let (Some((d0, d1)), Some((s0, s1))) = (dl.contiguous_offsets(), sl.contiguous_offsets()) {
        let row = s1 - s0;
        let (dd, sd) = (dl.dims(), sl.dims());
        let trailing = sd
            .iter()
            .skip_while(|&&d| d == 1)
            .copied()
            .collect::<Vec<_>>();
        if row > 0 && row < d1 - d0 && dd.ends_with(&trailing) {
            // A source repeated over dst's leading dims (a bias over rows): row by row.
            let (d, s) = (&mut dst[d0..d1], &src[s0..s1]);
            let rows_per_chunk = (PAR_MIN / row).max(1);
            d.par_chunks_mut(rows_per_chunk * row).for_each(|chunk| {
                chunk
                    .chunks_mut(row)
                    .for_each(|r| r.iter_mut().zip(s).for_each(|(x, &y)| u.apply(x, y)))
            });
            return Ok(());
        }
    }
    let sl = sl.broadcast_as(dl.shape().clone()).op("copy_")?;
    match (dl.contiguous_offsets(), sl.contiguous_offsets()) {
        (Some((d0, d1)), Some((s0, s1))) => {
            let (d, s) = (&mut dst[d0..d1], &src[s0..s1]);
            if d.len() >= PAR_MIN {
                d.par_chunks_mut(PAR_MIN)
                    .zip(s.par_chunks(PAR_MIN))
                    .for_each(|(dc, sc)| dc.iter_mut().zip(sc).for_each(|(x, &y)| u.apply(x, y)));
            } else {
                d.iter_mut().zip(s).for_each(|(x, &y)| u.apply(x, y));
            }
        }
        _ => {
            for (di, si) in StridedOffsets::new(dl).zip(StridedOffsets::new(&sl)) {
                u.apply(&mut dst[di], src[si]);
            }
        }
    }
    Ok(())
}

macro_rules! each_storage_pair {
    ($d:expr, $s:expr, |$dv:ident, $sv:ident| $body:expr) => {
        match ($d, $s) {
            (CpuStorage::U8($dv), CpuStorage::U8($sv)) => $body,
            (CpuStorage::I32($dv), CpuStorage::I32($sv)) => $body,
            (CpuStorage::I64($dv), CpuStorage::I64($sv)) => $body,
            (CpuStorage::F16($dv), CpuStorage::F16($sv)) => $body,
            (CpuStorage::BF16($dv), CpuStorage::BF16($sv)) => $body,
            (CpuStorage::F32($dv), CpuStorage::F32($sv)) => $body,
            (CpuStorage::F64($dv), CpuStorage::F64($sv)) => $body,
            (d, s) => candle_core::bail!(
                "in-place update: dtypes differ ({:?} vs {:?})",
                d.dtype(),
                s.dtype()
            ),
        }
    };
}

macro_rules! each_storage {
    ($d:expr, |$dv:ident| $body:expr) => {
        match $d {
            CpuStorage::U8($dv) => $body,
            CpuStorage::I32($dv) => $body,
            CpuStorage::I64($dv) => $body,
            CpuStorage::F16($dv) => $body,
            CpuStorage::BF16($dv) => $body,
            CpuStorage::F32($dv) => $body,
            CpuStorage::F64($dv) => $body,
            d => candle_core::bail!("in-place update: unsupported dtype {:?}", d.dtype()),
        }
    };
}
pub(super) use each_storage;

pub struct StridedUpdate(pub Update);

impl InplaceOp2 for StridedUpdate {
    fn name(&self) -> &'static str {
        "strided-update"
    }
    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> candle_core::Result<()> {
        each_storage_pair!(s1, s2, |d, s| update_slices(self.0, d, l1, s, l2)
            .map_err(|e| candle_core::Error::Msg(e.to_string())))
    }
}

pub struct Fill(pub Scalar);

impl InplaceOp1 for Fill {
    fn name(&self) -> &'static str {
        "fill"
    }
    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        fn fill<T: WithDType>(v: &mut [T], l: &Layout, x: T) {
            match l.contiguous_offsets() {
                Some((a, b)) => v[a..b].fill(x),
                None => StridedOffsets::new(l).for_each(|i| v[i] = x),
            }
        }
        match (s, self.0) {
            // int64 from the integer itself: a float64 rounds past 2**53
            (CpuStorage::I64(v), x) => fill(v, l, x.as_i64()),
            // integers wrap into narrower ones, as PyTorch's casts do (-1 is 255 in uint8)
            (CpuStorage::I32(v), Scalar::Int(i)) => fill(v, l, i as i32),
            (CpuStorage::U8(v), Scalar::Int(i)) => fill(v, l, i as u8),
            (s, x) => each_storage!(s, |v| fill(v, l, WithDType::from_f64(x.as_f64()))),
        }
        Ok(())
    }
}

/// A copy of a contiguous view's elements: candle's `copy` clones the whole storage under
/// the view.
pub struct DenseCopy;

impl CustomOp1 for DenseCopy {
    fn name(&self) -> &'static str {
        "dense-copy"
    }
    fn cpu_fwd(&self, s: &CpuStorage, l: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        fn copy<T: WithDType>(v: &[T], l: &Layout) -> candle_core::Result<Vec<T>> {
            match l.contiguous_offsets() {
                Some((a, b)) => Ok(v[a..b].to_vec()),
                None => candle_core::bail!("dense copy: expected a contiguous view"),
            }
        }
        let out = match s {
            CpuStorage::U8(v) => CpuStorage::U8(copy(v, l)?),
            CpuStorage::I32(v) => CpuStorage::I32(copy(v, l)?),
            CpuStorage::I64(v) => CpuStorage::I64(copy(v, l)?),
            CpuStorage::F16(v) => CpuStorage::F16(copy(v, l)?),
            CpuStorage::BF16(v) => CpuStorage::BF16(copy(v, l)?),
            CpuStorage::F32(v) => CpuStorage::F32(copy(v, l)?),
            CpuStorage::F64(v) => CpuStorage::F64(copy(v, l)?),
            d => candle_core::bail!("dense copy: unsupported dtype {:?}", d.dtype()),
        };
        Ok((out, l.shape().clone()))
    }
}

impl InplaceOps for Cpu {
    fn update(&self, name: &'static str, dst: &Tensor, src: &Tensor, u: Update) -> Result<()> {
        dst.inplace_op2(src, &StridedUpdate(u)).op(name)
    }
    fn fill(&self, name: &'static str, dst: &Tensor, v: Scalar) -> Result<()> {
        dst.inplace_op1(&Fill(v)).op(name)
    }
    fn dense_copy(&self, name: &'static str, x: &Tensor) -> Result<Tensor> {
        if x.is_contiguous() {
            x.apply_op1_no_bwd(&DenseCopy).op(name)
        } else {
            // Candle's strided copy moves runs of adjacent elements whole, into a buffer of
            // exactly the elements' size.
            x.contiguous().op(name)
        }
    }
}
