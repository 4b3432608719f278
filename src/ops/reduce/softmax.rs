//! `softmax` and `log_softmax` along a dim: one fused, max-subtracted kernel pass per
//! line (rayon over lines); the backward reads only the saved output.

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{mul, sub};
use crate::ops::reduce::lines::{line_op, LineKernel};
use crate::ops::reduce::sum;
use crate::ops::unary::exp;
use crate::tensor::{shape_str, Tensor};

/// `softmax(x, dim)` (`log` = `log_softmax`) on a floating point tensor; `dim` normalised.
pub fn softmax(x: &Tensor, dim: usize, log: bool) -> Result<Tensor> {
    let started = remat::start();
    let op = if log { "log_softmax" } else { "softmax" };
    if !x.dtype().is_floating_point() {
        return Err(Error::NotImplemented(format!(
            "{op}: \"softmax_kernel_impl\" not implemented for '{}' (input shape {})",
            x.dtype().name(),
            shape_str(&x.dims())
        )));
    }
    let k = LineKernel::Softmax { log };
    let d = x.data();
    let rank0 = d.rank() == 0;
    let data = if rank0 {
        line_op(&d.reshape(1).op(op)?, 0, k)?.reshape(()).op(op)?
    } else {
        line_op(&d, dim, k)?
    };
    let out = Tensor::new(data, x.dtype());
    remat::note(op, &out, &[x], started, move |ins| {
        softmax(&ins[0], dim, log)
    });
    record(
        if log {
            "LogSoftmaxBackward0"
        } else {
            "SoftmaxBackward0"
        },
        &out,
        &[x],
        || vec![SavedTensor::output(&out)],
        move |ctx, g| {
            let y = &ctx.saved[0];
            let dims = [dim];
            let dims = (!rank0).then_some(&dims[..]);
            let gx = if log {
                // g - softmax * sum(g)
                sub(g, &mul(&exp(y)?, &sum(g, dims, true)?)?)?
            } else {
                // y * (g - sum(g * y))
                let gy = mul(g, y)?;
                sub(&gy, &mul(y, &sum(&gy, dims, true)?)?)?
            };
            Ok(vec![Some(gx)])
        },
    );
    Ok(out)
}
