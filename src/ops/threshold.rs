//! `relu` and `threshold`, saving one bit per element for their backward.
//!
//! Both are `y = x if x > threshold else value` (relu: threshold 0, value 0), and the
//! input gradient is `g where x > threshold else 0`: the backward needs only which
//! elements passed. So, when a node is recorded, the forward writes the output and a
//! packed bit mask (bit `i % 8` of byte `i / 8`, a uint8 tensor of `ceil(n / 8)` bytes) in
//! one pass, and saves the mask instead of a float tensor: 1/32 of a float32 activation.
//! The backward is one fused pass over the gradient and the mask. Under `create_graph`
//! it is `where(mask, g, 0)` with gradstream ops instead, so it is differentiable in `g`.
//!
//! `set_bitmask(false)` turns masks off (relu then saves its output, threshold its
//! input, as PyTorch does), for comparisons.
//!
//! NaN passes (`NaN <= threshold` is false), as in PyTorch: `relu(NaN) = NaN` with the
//! gradient let through.

use std::sync::atomic::{AtomicBool, Ordering};

use candle_core::{DType as CDType, WithDType};
use rayon::prelude::*;

use crate::autograd::function::{record, should_record};
use crate::autograd::saved::SavedTensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::binary::{compare, where_, CompareOp};
use crate::ops::dense::{from_vec, with_slice};
use crate::ops::inplace::PAR_MIN;
use crate::ops::{Operand, Scalar};
use crate::tensor::{shape_str, Tensor};

static BITMASK: AtomicBool = AtomicBool::new(true);

/// Save 1-bit masks for relu/threshold (the default); returns the previous setting.
pub fn set_bitmask(on: bool) -> bool {
    BITMASK.swap(on, Ordering::Relaxed)
}

pub fn bitmask_enabled() -> bool {
    BITMASK.load(Ordering::Relaxed)
}

/// `relu(x)` for floating point `x` (integers go through the unary table).
pub fn relu(x: &Tensor) -> Result<Tensor> {
    threshold_op("relu", "ReluBackward0", x, 0.0, 0.0)
}

/// `threshold(x, threshold, value)`: `x` where `x > threshold`, else `value`.
pub fn threshold(x: &Tensor, threshold: f64, value: f64) -> Result<Tensor> {
    threshold_op("threshold", "ThresholdBackward0", x, threshold, value)
}

fn threshold_op(
    name: &'static str,
    node: &'static str,
    x: &Tensor,
    th: f64,
    value: f64,
) -> Result<Tensor> {
    if x.dtype() == DType::Bool {
        return Err(Error::NotImplemented(format!(
            "{name}: not implemented for bool tensors"
        )));
    }
    let recording = should_record(&[x]);
    let masked = recording && bitmask_enabled();
    let (data, mask) = forward_data(name, &x.data(), th, value, masked)?;
    let out = Tensor::new(data, x.dtype());
    if !recording {
        return Ok(out);
    }
    let dims = x.dims();
    if let Some(mask) = mask {
        let mask = Tensor::new(mask, DType::UInt8);
        record(
            node,
            &out,
            &[x],
            || vec![SavedTensor::internal(&mask)],
            move |ctx, g| Ok(vec![Some(masked_grad(node, g, &ctx.saved[0], &dims)?)]),
        );
    } else {
        // relu's output passes exactly where its input does; threshold's may not (value > th).
        let saves_output = name == "relu";
        record(
            node,
            &out,
            &[x],
            || {
                vec![if saves_output {
                    SavedTensor::output(&out)
                } else {
                    SavedTensor::input(x)
                }]
            },
            move |ctx, g| {
                let stopped = compare(CompareOp::Le, &(&ctx.saved[0]).into(), &th.into())?;
                let zero = Operand::Scalar(Scalar::Int(0));
                Ok(vec![Some(where_(&stopped, &zero, &g.into())?)])
            },
        );
    }
    Ok(out)
}

/// The input gradient from the saved mask: one fused pass, or `where(mask, g, 0)` when
/// the backward itself is recorded.
fn masked_grad(node: &str, g: &Tensor, mask: &Tensor, dims: &[usize]) -> Result<Tensor> {
    let n: usize = dims.iter().product();
    if g.dims() != dims || mask.numel() != n.div_ceil(8) {
        return Err(Error::shape(format!(
            "{node}: gradient of shape {} and mask of {} bytes for an input of shape {}",
            shape_str(&g.dims()),
            mask.numel(),
            shape_str(dims)
        )));
    }
    if should_record(&[g]) {
        let bits = unpack_bits(&mask.data(), dims)?;
        let keep = Tensor::new(bits, DType::Bool);
        return where_(&keep, &g.into(), &Operand::Scalar(Scalar::Int(0)));
    }
    let gd = g.data();
    let m = mask.data();
    let out = with_slice::<u8, _>(&m, |m| -> Result<candle_core::Tensor> {
        macro_rules! go {
            ($t:ty) => {
                with_slice::<$t, _>(&gd, |gs| from_vec(select_kernel(gs, m), dims))?
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
    })??;
    Ok(Tensor::new(out, g.dtype()))
}

/// The output and, if asked, the bit mask of `x > th`.
fn forward_data(
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

/// The mask as bool data of the input's shape.
fn unpack_bits(mask: &candle_core::Tensor, dims: &[usize]) -> Result<candle_core::Tensor> {
    let n: usize = dims.iter().product();
    let v = with_slice::<u8, _>(mask, |m| {
        (0..n)
            .map(|i| (m[i / 8] >> (i % 8)) & 1)
            .collect::<Vec<u8>>()
    })?;
    from_vec(v, dims)
}
