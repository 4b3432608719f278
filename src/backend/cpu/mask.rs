//! relu/threshold on the CPU, writing the output and a packed 1-bit mask of the
//! elements that passed in one pass, or over the input in place (a budget's recompute),
//! and the backward's select by that mask, into a new buffer or over the incoming
//! gradient. Why not candle's: candle has no bit masks (a bool mask is 8x larger, a float
//! one 32x) and no in-place ops, and its compare and select run on one thread.

use std::mem::MaybeUninit;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, DType as CDType, InplaceOp1, Layout, WithDType};
use multiversion::multiversion;
use rayon::prelude::*;

use super::dense::{from_vec, with_slice};
use super::elementwise::build;
use super::inplace::each_storage;
use super::{Cpu, PAR_MIN};
use crate::backend::MaskOps;
use crate::error::{CandleContext, Error, Result};

// ---------------------------------------------------------------- kernels

/// Elements per parallel task: a multiple of 8, so tasks own whole mask bytes.
const TASK: usize = PAR_MIN;

// The loops below select without branching (on random signs a branch mispredicts half the
// time, which cost 10x), walk fixed groups of 8 so a mask byte packs and unpacks in vector
// registers, and are compiled for each vector width (`multiversion`: AVX-512 or AVX2 where
// the CPU has it; the wheel's baseline is SSE2).

/// `x` with every element `<= th` replaced by `value` (NaN passes), and, when `m` is given,
/// one mask byte per 8 elements whose bit k is set where element k passed.
#[multiversion(targets = "simd")]
fn threshold_into<T: WithDType>(
    o: &mut [MaybeUninit<T>],
    mut m: Option<&mut [MaybeUninit<u8>]>,
    x: &[T],
    th: T,
    value: T,
) {
    let whole = x.len() / 8 * 8;
    for (i, (o8, x8)) in o[..whole]
        .chunks_exact_mut(8)
        .zip(x[..whole].chunks_exact(8))
        .enumerate()
    {
        let mut byte = 0u8;
        for k in 0..8 {
            let v = x8[k];
            let stopped = v <= th;
            o8[k].write(if stopped { value } else { v });
            byte |= u8::from(!stopped) << k;
        }
        if let Some(m) = m.as_deref_mut() {
            m[i].write(byte);
        }
    }
    let mut byte = 0u8;
    for (k, (o, &v)) in o[whole..].iter_mut().zip(&x[whole..]).enumerate() {
        let stopped = v <= th;
        o.write(if stopped { value } else { v });
        byte |= u8::from(!stopped) << k;
    }
    if let Some(m) = m.filter(|_| whole < x.len()) {
        m[whole / 8].write(byte);
    }
}

/// `threshold_into` over `x` itself, without a mask.
#[multiversion(targets = "simd")]
fn threshold_over<T: WithDType>(x: &mut [T], th: T, value: T) {
    for v in x {
        *v = if *v <= th { value } else { *v };
    }
}

fn threshold_over_kernel<T: WithDType>(x: &mut [T], th: f64, value: f64) {
    let (th, value) = (T::from_f64(th), T::from_f64(value));
    x.par_chunks_mut(TASK)
        .for_each(|c| threshold_over(c, th, value));
}

/// `g` where the mask bit is set, else zero.
#[multiversion(targets = "simd")]
fn select_into<T: WithDType>(o: &mut [MaybeUninit<T>], m: &[u8], g: &[T], zero: T) {
    let whole = g.len() / 8 * 8;
    for ((o8, &m), g8) in o[..whole]
        .chunks_exact_mut(8)
        .zip(m)
        .zip(g[..whole].chunks_exact(8))
    {
        for k in 0..8 {
            o8[k].write(if (m >> k) & 1 == 1 { g8[k] } else { zero });
        }
    }
    if whole < g.len() {
        let m = m[whole / 8];
        for (k, (o, &v)) in o[whole..].iter_mut().zip(&g[whole..]).enumerate() {
            o.write(if (m >> k) & 1 == 1 { v } else { zero });
        }
    }
}

/// `select_into` over `g` itself: zero where the mask bit is clear.
#[multiversion(targets = "simd")]
fn select_over<T: WithDType>(g: &mut [T], m: &[u8], zero: T) {
    let whole = g.len() / 8 * 8;
    let (body, tail) = g.split_at_mut(whole);
    for (g8, &m) in body.chunks_exact_mut(8).zip(m) {
        for (k, v) in g8.iter_mut().enumerate() {
            *v = if (m >> k) & 1 == 1 { *v } else { zero };
        }
    }
    if let Some(&m) = m.get(whole / 8).filter(|_| !tail.is_empty()) {
        for (k, v) in tail.iter_mut().enumerate() {
            *v = if (m >> k) & 1 == 1 { *v } else { zero };
        }
    }
}

/// The in-place mask ops, on a contiguous layout (the caller checks).
enum Overwrite {
    /// `threshold_`: `value` where `x <= th`.
    Threshold { th: f64, value: f64 },
    /// `select_by_mask_`: zero where the mask (held here) is clear.
    Select(candle_core::Tensor),
}

impl InplaceOp1 for Overwrite {
    fn name(&self) -> &'static str {
        match self {
            Overwrite::Threshold { .. } => "threshold_",
            Overwrite::Select(_) => "select_by_mask_",
        }
    }
    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        let Some((a, b)) = l.contiguous_offsets() else {
            candle_core::bail!("{}: the layout is not contiguous", self.name());
        };
        match self {
            &Overwrite::Threshold { th, value } => each_storage!(s, |v| {
                threshold_over_kernel(&mut v[a..b], th, value);
                Ok(())
            }),
            Overwrite::Select(mask) => with_slice::<u8, _>(mask, |m| {
                each_storage!(s, |v| {
                    let zero = WithDType::from_f64(0.0);
                    v[a..b]
                        .par_chunks_mut(TASK)
                        .zip(m.par_chunks(TASK / 8))
                        .for_each(|(g, m)| select_over(g, m, zero));
                    Ok(())
                })
            })
            .map_err(|e| candle_core::Error::Msg(e.to_string()))?,
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
    let mut bits = mask.then(|| Vec::<u8>::with_capacity(n.div_ceil(8)));
    let out = build(n, |out| {
        let m = bits
            .as_mut()
            .map(|b| &mut b.spare_capacity_mut()[..n.div_ceil(8)]);
        if n < PAR_MIN {
            return threshold_into(out, m, x, th, value);
        }
        match m {
            Some(m) => out
                .par_chunks_mut(TASK)
                .zip(m.par_chunks_mut(TASK / 8))
                .zip(x.par_chunks(TASK))
                .for_each(|((o, m), xs)| threshold_into(o, Some(m), xs, th, value)),
            None => out
                .par_chunks_mut(TASK)
                .zip(x.par_chunks(TASK))
                .for_each(|(o, xs)| threshold_into(o, None, xs, th, value)),
        }
    });
    if let Some(b) = bits.as_mut() {
        // SAFETY: `threshold_into` wrote one byte per 8 elements and one for the remainder.
        unsafe { b.set_len(n.div_ceil(8)) };
    }
    (out, bits)
}

/// `g where bit else 0`.
fn select_kernel<T: WithDType>(g: &[T], bits: &[u8]) -> Vec<T> {
    let n = g.len();
    let zero = T::from_f64(0.0);
    build(n, |out| {
        if n >= PAR_MIN {
            out.par_chunks_mut(TASK)
                .zip(bits.par_chunks(TASK / 8))
                .zip(g.par_chunks(TASK))
                .for_each(move |((o, m), gs)| select_into(o, m, gs, zero));
        } else {
            select_into(out, bits, g, zero);
        }
    })
}

impl MaskOps for Cpu {
    fn packs_masks(&self) -> bool {
        true
    }

    fn threshold_in_place(
        &self,
        name: &'static str,
        x: &candle_core::Tensor,
        th: f64,
        value: f64,
    ) -> Result<()> {
        x.inplace_op1(&Overwrite::Threshold { th, value }).op(name)
    }

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

    fn select_by_mask_in_place(
        &self,
        name: &'static str,
        g: &candle_core::Tensor,
        mask: &candle_core::Tensor,
    ) -> Result<()> {
        g.inplace_op1(&Overwrite::Select(mask.clone())).op(name)
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
