//! relu/threshold on the CPU, writing the output and a packed 1-bit mask of the
//! elements that passed in one pass, and the backward's select by that mask. Why not
//! candle's: candle has no bit masks (a bool mask is 8x larger, a float one 32x), and
//! its compare and select run on one thread.

use candle_core::{DType as CDType, WithDType};
use rayon::prelude::*;

use super::dense::{from_vec, with_slice};
use super::{Cpu, PAR_MIN};
use crate::backend::MaskOps;
use crate::error::{Error, Result};

// ---------------------------------------------------------------- kernels

/// Elements per parallel task: a multiple of 8, so tasks own whole mask bytes.
const TASK: usize = PAR_MIN;

// The loops below take their scalars by value and select without branching: on signs that
// are random (activations) a branch mispredicts half the time, which cost 10x.

fn threshold_into<T: WithDType>(o: &mut [T], x: &[T], th: T, value: T) {
    for (o, &v) in o.iter_mut().zip(x) {
        *o = if v <= th { value } else { v };
    }
}

/// One mask byte per 8 elements: bit k is set where element k passes (NaN passes).
fn mask_into<T: WithDType>(m: &mut [u8], x: &[T], th: T) {
    for (m, c) in m.iter_mut().zip(x.chunks(8)) {
        let mut byte = 0u8;
        for (k, &v) in c.iter().enumerate() {
            let stopped = v <= th;
            byte |= u8::from(!stopped) << k;
        }
        *m = byte;
    }
}

fn select_into<T: WithDType>(o: &mut [T], m: &[u8], g: &[T], zero: T) {
    for ((o, &m), g) in o.chunks_mut(8).zip(m).zip(g.chunks(8)) {
        for (k, (o, &v)) in o.iter_mut().zip(g).enumerate() {
            *o = if (m >> k) & 1 == 1 { v } else { zero };
        }
    }
}

fn threshold_kernel<T: WithDType>(
    x: &[T],
    th: T,
    value: T,
    mask: bool,
) -> (Vec<T>, Option<Vec<u8>>) {
    let n = x.len();
    let zero = T::from_f64(0.0);
    let mut out = vec![zero; n];
    if n >= PAR_MIN {
        out.par_chunks_mut(TASK)
            .zip(x.par_chunks(TASK))
            .for_each(move |(o, xs)| threshold_into(o, xs, th, value));
    } else {
        threshold_into(&mut out, x, th, value);
    }
    if !mask {
        return (out, None);
    }
    let mut bits = vec![0u8; n.div_ceil(8)];
    if n >= PAR_MIN {
        bits.par_chunks_mut(TASK / 8)
            .zip(x.par_chunks(TASK))
            .for_each(move |(m, xs)| mask_into(m, xs, th));
    } else {
        mask_into(&mut bits, x, th);
    }
    (out, Some(bits))
}

/// `g where bit else 0`.
fn select_kernel<T: WithDType>(g: &[T], bits: &[u8]) -> Vec<T> {
    let n = g.len();
    let zero = T::from_f64(0.0);
    let mut out = vec![zero; n];
    if n >= PAR_MIN {
        out.par_chunks_mut(TASK)
            .zip(bits.par_chunks(TASK / 8))
            .zip(g.par_chunks(TASK))
            .for_each(move |((o, m), gs)| select_into(o, m, gs, zero));
    } else {
        select_into(&mut out, bits, g, zero);
    }
    out
}

impl MaskOps for Cpu {
    /// The output and, if asked, the bit mask of `x > th`.
    fn threshold(
        &self,
        name: &'static str,
        x: &candle_core::Tensor,
        th: f64,
        value: f64,
        mask: bool,
    ) -> Result<(candle_core::Tensor, Option<candle_core::Tensor>)> {
        let dims = x.dims().to_vec();
        macro_rules! go {
            ($t:ty) => {
                with_slice::<$t, _>(x, |xs| {
                    let (out, bits) =
                        threshold_kernel(xs, <$t>::from_f64(th), <$t>::from_f64(value), mask);
                    let bits = match bits {
                        Some(b) => {
                            let len = b.len();
                            Some(from_vec(b, &[len])?)
                        }
                        None => None,
                    };
                    Ok((from_vec(out, &dims)?, bits))
                })?
            };
        }
        match x.dtype() {
            CDType::F32 => go!(f32),
            CDType::F64 => go!(f64),
            CDType::F16 => go!(half::f16),
            CDType::BF16 => go!(half::bf16),
            CDType::U8 => go!(u8),
            CDType::U32 => go!(u32),
            CDType::I32 => go!(i32),
            CDType::I64 => go!(i64),
            other => Err(Error::NotImplemented(format!(
                "{name}: not implemented for {other:?} tensors"
            ))),
        }
    }

    /// `g where bit else 0` for a dense `g` and its mask.
    fn select_by_mask(
        &self,
        node: &'static str,
        gd: &candle_core::Tensor,
        m: &candle_core::Tensor,
    ) -> Result<candle_core::Tensor> {
        with_slice::<u8, _>(m, |m| -> Result<candle_core::Tensor> {
            macro_rules! go {
                ($t:ty) => {
                    with_slice::<$t, _>(gd, |gs| from_vec(select_kernel(gs, m), gd.dims()))?
                };
            }
            match gd.dtype() {
                CDType::F32 => go!(f32),
                CDType::F64 => go!(f64),
                CDType::F16 => go!(half::f16),
                CDType::BF16 => go!(half::bf16),
                other => Err(Error::dtype(format!(
                    "{node}: gradient dtype {other:?} is not a floating point dtype"
                ))),
            }
        })?
    }

    /// The mask as 0/1 bytes of the input's shape.
    fn unpack_mask(
        &self,
        _name: &'static str,
        mask: &candle_core::Tensor,
        dims: &[usize],
    ) -> Result<candle_core::Tensor> {
        let n: usize = dims.iter().product();
        let v = with_slice::<u8, _>(mask, |m| {
            (0..n)
                .map(|i| (m[i / 8] >> (i % 8)) & 1)
                .collect::<Vec<u8>>()
        })?;
        from_vec(v, dims)
    }
}
