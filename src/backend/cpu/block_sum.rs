//! Sum over a contiguous block of dims of a dense float tensor, in parallel.
//!
//! The common reductions are of this shape: a bias gradient sums the leading dims, a mean
//! over features the trailing ones. Why not candle's: its sum walks these on one thread
//! and accumulates float32 in float32; here the
//! tensor is seen as (outer, mid, inner) and `mid` is summed, float32 accumulating in f64.

use candle_core::{CpuStorage, Device, Storage};
use rayon::prelude::*;

use super::scalar::Real;
use super::PAR_MIN;
use crate::error::{CandleContext, Result};

fn sum_mid<T: Real>(s: &[T], outer: usize, mid: usize, inner: usize) -> Vec<T> {
    if inner == 1 {
        // Allocated exactly: `collect` reserves with amortised growth (at least 4 elements).
        let mut out = vec![T::of(0.0); outer];
        out.par_iter_mut()
            .zip(s.par_chunks(mid))
            .for_each(|(o, row)| *o = T::of(row.iter().map(|v| v.widen()).sum()));
        return out;
    }
    let mut out = Vec::with_capacity(outer * inner);
    for block in s.chunks(mid * inner) {
        let rows_per_task = (PAR_MIN / inner).max(1);
        let acc = block
            .par_chunks(rows_per_task * inner)
            .map(|rows| {
                let mut acc = vec![0f64; inner];
                for row in rows.chunks(inner) {
                    for (a, v) in acc.iter_mut().zip(row) {
                        *a += v.widen();
                    }
                }
                acc
            })
            .reduce(
                || vec![0f64; inner],
                |mut a, b| {
                    a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                    a
                },
            );
        out.extend(acc.into_iter().map(T::of));
    }
    out
}

/// The sum of dense `x` over `reduced` (sorted, one contiguous block of dims), keepdim shape;
/// `None` when the fast path does not apply.
pub fn block_sum(
    x: &candle_core::Tensor,
    reduced: &[usize],
) -> Result<Option<candle_core::Tensor>> {
    let dims = x.dims();
    let (Some(&a), Some(&b)) = (reduced.first(), reduced.last()) else {
        return Ok(None);
    };
    let contiguous_block = reduced.windows(2).all(|w| w[1] == w[0] + 1);
    if !contiguous_block || x.elem_count() < PAR_MIN {
        return Ok(None);
    }
    let outer: usize = dims[..a].iter().product();
    let mid: usize = dims[a..=b].iter().product();
    let inner: usize = dims[b + 1..].iter().product();
    let kd: Vec<usize> = dims
        .iter()
        .enumerate()
        .map(|(i, &d)| if (a..=b).contains(&i) { 1 } else { d })
        .collect();
    let (storage, layout) = x.storage_and_layout();
    let Some((start, end)) = layout.contiguous_offsets() else {
        return Ok(None);
    };
    let out = match &*storage {
        Storage::Cpu(CpuStorage::F32(v)) => candle_core::Tensor::from_vec(
            sum_mid(&v[start..end], outer, mid, inner),
            kd,
            &Device::Cpu,
        ),
        Storage::Cpu(CpuStorage::F64(v)) => candle_core::Tensor::from_vec(
            sum_mid(&v[start..end], outer, mid, inner),
            kd,
            &Device::Cpu,
        ),
        _ => return Ok(None),
    };
    out.op("sum").map(Some)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leading_and_trailing_blocks() {
        let n = 300 * 200;
        let v: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
        let x = candle_core::Tensor::from_vec(v.clone(), (300, 200), &Device::Cpu).unwrap();
        let s0 = block_sum(&x, &[0]).unwrap().unwrap();
        let r0 = x.sum_keepdim(0).unwrap();
        assert_eq!(s0.to_vec2::<f32>().unwrap(), r0.to_vec2::<f32>().unwrap());
        let s1 = block_sum(&x, &[1]).unwrap().unwrap();
        let r1 = x.sum_keepdim(1).unwrap();
        assert_eq!(s1.to_vec2::<f32>().unwrap(), r1.to_vec2::<f32>().unwrap());
        assert!(block_sum(&x.t().unwrap(), &[0]).unwrap().is_none());
    }
}
