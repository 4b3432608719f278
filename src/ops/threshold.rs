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

use crate::autograd::function::{record, should_record};
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::binary::{compare, where_, CompareOp};
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
/// Whether `threshold` on `x` saves its input for the backward (no mask: masks are off, or
/// `x`'s device packs none), so an in-place threshold must keep a copy of it.
pub fn saves_input(x: &Tensor) -> bool {
    !(bitmask_enabled() && backend::on(&x.data()).packs_masks())
}

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
    let started = remat::start();
    if x.dtype() == DType::Bool {
        // PyTorch's classes: relu checks its input, threshold finds no bool kernel.
        return Err(if name == "relu" {
            Error::dtype("relu: Boolean inputs not supported for relu")
        } else {
            Error::NotImplemented(format!("{name}: not implemented for bool tensors"))
        });
    }
    let recording = should_record(&[x]);
    let masked = recording && bitmask_enabled();
    let xd = x.data();
    let (data, mask) = backend::on(&xd).threshold(name, &xd, th, value, masked)?;
    let out = Tensor::new(data, x.dtype());
    if !recording {
        return Ok(out);
    }
    remat::note(name, &out, &[x], started, move |ins| {
        let x = &ins[0];
        if remat::is_transient(x) {
            // The linear before a relu, recomputed for it: relu it where it lies.
            let xd = x.data();
            backend::on(&xd).threshold_in_place(name, &xd, th, value)?;
            return Ok(x.clone());
        }
        threshold_op(name, node, x, th, value)
    });
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
fn masked_grad(node: &'static str, g: &Tensor, mask: &Tensor, dims: &[usize]) -> Result<Tensor> {
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
        let md = mask.data();
        let bits = backend::on(&md).unpack_mask(node, &md, dims)?;
        let keep = Tensor::new(bits, DType::Bool);
        return where_(&keep, &g.into(), &Operand::Scalar(Scalar::Int(0)));
    }
    let gd = g.data();
    if g.is_uniquely_owned() && gd.is_contiguous() {
        // The engine's incoming gradient, which nothing else holds: mask it where it lies.
        backend::on(&gd).select_by_mask_in_place(node, &gd, &mask.data())?;
        return Ok(g.clone());
    }
    let out = backend::on(&gd).select_by_mask(node, &gd, &mask.data())?;
    Ok(Tensor::new(out, g.dtype()))
}
