//! `batch_norm` over the channels (dim 1) of `(N, C, *)` input: batch statistics in
//! training (and an in-place update of the running buffers), running statistics in eval.
//! The backward keeps the input and two floats per channel (mean and 1/std), never a
//! normalised copy, and runs one fused kernel; under `create_graph` it recomputes with
//! recorded ops so double backward works.

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::cast::Convert;
use crate::backend::norm::ChannelCoef;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add_scalar, div, mul, mul_scalar, sub};
use crate::ops::creation::ones_like;
use crate::ops::inplace::{update_data, Update};
use crate::ops::nn::{compute_data, finish};
use crate::ops::reduce::{mean, sum};
use crate::ops::shape::reshape;
use crate::ops::unary::{unary, UnaryOp};
use crate::tensor::{shape_str, Tensor};

const OP: &str = "batch_norm";

/// A per-channel tensor as an f64 `(C,)` vector on its device, checked to hold `c`
/// elements.
fn channel_data(what: &str, t: &Tensor, c: usize) -> Result<candle_core::Tensor> {
    if t.numel() != c {
        return Err(Error::runtime(format!(
            "{OP}: {what} should contain {c} elements not {} (shape {})",
            t.numel(),
            shape_str(&t.dims())
        )));
    }
    t.data()
        .cast(candle_core::DType::F64)
        .and_then(|d| d.reshape(c))
        .op(OP)
}

/// An f64 `(C,)` vector as a tensor of `dtype`.
fn channel_tensor(v: candle_core::Tensor, dtype: DType) -> Result<Tensor> {
    finish(v, dtype)
}

/// The running buffers and how they move.
pub struct Running<'a> {
    pub mean: Option<&'a Tensor>,
    pub var: Option<&'a Tensor>,
    pub momentum: f64,
}

/// `batch_norm(x, running_mean, running_var, weight, bias, training, momentum, eps)`.
pub fn batch_norm(
    x: &Tensor,
    running: Running<'_>,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    training: bool,
    eps: f64,
) -> Result<Tensor> {
    let started = remat::start();
    let dims = x.dims();
    if dims.len() < 2 {
        return Err(Error::index(format!(
            "{OP}: expected input with at least 2 dims (N, C, *), got shape {}",
            shape_str(&dims)
        )));
    }
    let (n, c) = (dims[0], dims[1]);
    let s: usize = dims[2..].iter().product();
    let m = n * s;
    let (xd, _) = compute_data(OP, x)?;
    let w = weight.map(|t| channel_data("weight", t, c)).transpose()?;
    let b = bias.map(|t| channel_data("bias", t, c)).transpose()?;
    let rm = running
        .mean
        .map(|t| channel_data("running_mean", t, c))
        .transpose()?;
    let rv = running
        .var
        .map(|t| channel_data("running_var", t, c))
        .transpose()?;
    let xd = xd.dense().and_then(|d| d.reshape((n, c, s))).op(OP)?;
    let (mu, var) = if training {
        if m == 0 {
            return mul_scalar(x, 1.0);
        }
        let (mu, var) = backend::on(&xd).channel_stats(OP, &xd)?;
        let k = running.momentum;
        let unbias = m as f64 / (m as f64 - 1.0).max(1.0);
        // running = (1 - k) running + k batch, on the buffers' device.
        let moved = |old: &candle_core::Tensor, new: &candle_core::Tensor, f: f64| {
            (|| old.affine(1.0 - k, 0.0)? + new.affine(k * f, 0.0)?)().op(OP)
        };
        if let (Some(t), Some(old)) = (running.mean, &rm) {
            update_data(
                OP,
                t,
                &channel_tensor(moved(old, &mu, 1.0)?, t.dtype())?,
                Update::Assign,
            )?;
        }
        if let (Some(t), Some(old)) = (running.var, &rv) {
            let new = moved(old, &var, unbias)?;
            update_data(OP, t, &channel_tensor(new, t.dtype())?, Update::Assign)?;
        }
        (mu, var)
    } else {
        match (rm, rv) {
            (Some(a), Some(b)) => (a, b),
            _ => {
                return Err(Error::runtime(format!(
                    "{OP}: running_mean and running_var must be defined in evaluation mode \
                     (input shape {})",
                    shape_str(&dims)
                )))
            }
        }
    };
    let invstd = var
        .affine(1.0, eps)
        .and_then(|v| v.sqrt()?.recip())
        .op(OP)?;
    let scale = match &w {
        Some(w) => (w * &invstd).op(OP)?,
        None => invstd.clone(),
    };
    let shift = match b {
        Some(b) => b,
        None => crate::device::zeros(invstd.shape(), invstd.dtype(), invstd.device()).op(OP)?,
    };
    let y = backend::on(&xd).channel_affine(OP, &xd, &mu, &scale, &shift)?;
    let out = finish(y.reshape(dims.as_slice()).op(OP)?, x.dtype())?;

    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    // The recompute applies the batch's statistics again (the running ones move once).
    let (mu_r, scale_r, shift_r, dims_r) = (mu.clone(), scale.clone(), shift.clone(), dims.clone());
    remat::note(OP, &out, &inputs, started, move |ins| {
        let xd = compute_data(OP, &ins[0])?.0;
        let xd = xd.dense().and_then(|d| d.reshape((n, c, s))).op(OP)?;
        let y = backend::on(&xd).channel_affine(OP, &xd, &mu_r, &scale_r, &shift_r)?;
        finish(y.reshape(dims_r.as_slice()).op(OP)?, ins[0].dtype())
    });
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let mean_t = channel_tensor(mu, x.dtype())?;
    let invstd_t = channel_tensor(invstd, x.dtype())?;
    record(
        "NativeBatchNormBackward0",
        &out,
        &inputs,
        || {
            let mut v = vec![
                SavedTensor::input(x),
                SavedTensor::internal(&mean_t),
                SavedTensor::internal(&invstd_t),
            ];
            v.extend(weight.map(SavedTensor::input));
            v
        },
        move |ctx, g| {
            let saved = Saved {
                x: &ctx.saved[0],
                mu: &ctx.saved[1],
                invstd: &ctx.saved[2],
                w: ctx.saved.get(3),
                training,
            };
            let needs = Needs {
                x: ctx.needs(0),
                w: has_w && ctx.needs(1),
                b: has_b && ctx.needs(1 + usize::from(has_w)),
            };
            let (gx, gw, gb) = if grad_mode::is_enabled() {
                backward_recorded(g, saved, eps)?
            } else {
                backward_fused(g, saved, needs)?
            };
            let mut grads = vec![gx.filter(|_| needs.x)];
            if has_w {
                grads.push(gw.filter(|_| needs.w));
            }
            if has_b {
                grads.push(gb.filter(|_| needs.b));
            }
            Ok(grads)
        },
    );
    Ok(out)
}

#[derive(Clone, Copy)]
struct Needs {
    x: bool,
    w: bool,
    b: bool,
}

type Grads = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

/// What the backward reads: the input, the batch statistics used, the weight, the mode.
#[derive(Clone, Copy)]
struct Saved<'a> {
    x: &'a Tensor,
    mu: &'a Tensor,
    invstd: &'a Tensor,
    w: Option<&'a Tensor>,
    training: bool,
}

/// The backward in one kernel pass for the sums and one for the input's gradient.
fn backward_fused(g: &Tensor, saved: Saved<'_>, needs: Needs) -> Result<Grads> {
    let (x, mu, invstd, w, training) = (saved.x, saved.mu, saved.invstd, saved.w, saved.training);
    let dims = x.dims();
    let (n, c) = (dims[0], dims[1]);
    let s: usize = dims[2..].iter().product();
    let m = (n * s) as f64;
    let shape = |t: candle_core::Tensor| t.dense().and_then(|d| d.reshape((n, c, s)));
    let (gd, _) = compute_data(OP, g)?;
    let (xd, _) = compute_data(OP, x)?;
    let (gd, xd) = (shape(gd).op(OP)?, shape(xd).op(OP)?);
    let mu = channel_data("mean", mu, c)?;
    let invstd = channel_data("invstd", invstd, c)?;
    let a = match w {
        Some(w) => (channel_data("weight", w, c)? * &invstd).op(OP)?,
        None => invstd.clone(),
    };
    let (sg, sgx) = if training || needs.w || needs.b {
        backend::on(&gd).channel_grad_sums(OP, &gd, &xd, &mu)?
    } else {
        let z = crate::device::zeros(mu.shape(), mu.dtype(), mu.device()).op(OP)?;
        (z.clone(), z)
    };
    let gx = if needs.x {
        let (b, d) = if training {
            // b = -a invstd² sgx / m, d = -a sg / m
            let b = (&a * invstd.sqr().and_then(|v| v * &sgx).op(OP)?)
                .and_then(|v| v.affine(-1.0 / m, 0.0))
                .op(OP)?;
            let d = (&a * &sg).and_then(|v| v.affine(-1.0 / m, 0.0)).op(OP)?;
            (b, d)
        } else {
            let z = crate::device::zeros(mu.shape(), mu.dtype(), mu.device()).op(OP)?;
            (z.clone(), z)
        };
        let coef = ChannelCoef {
            a: &a,
            centre: &mu,
            b: &b,
            d: &d,
        };
        let data = backend::on(&gd).channel_combine(OP, &gd, &xd, coef)?;
        Some(finish(data.reshape(dims.as_slice()).op(OP)?, x.dtype())?)
    } else {
        None
    };
    let gw = needs
        .w
        .then(|| channel_tensor((&sgx * &invstd).op(OP)?, g.dtype()))
        .transpose()?;
    let gb = needs.b.then(|| channel_tensor(sg, g.dtype())).transpose()?;
    Ok((gx, gw, gb))
}

/// The backward with recorded ops (`create_graph=True`), the statistics recomputed from
/// `x` in training so that they carry their own gradient.
fn backward_recorded(g: &Tensor, saved: Saved<'_>, eps: f64) -> Result<Grads> {
    let (x, mu, invstd, w, training) = (saved.x, saved.mu, saved.invstd, saved.w, saved.training);
    let dims = x.dims();
    let c = dims[1];
    let red: Vec<usize> = std::iter::once(0).chain(2..dims.len()).collect();
    let mut bshape = vec![1; dims.len()];
    bshape[1] = c;
    let (mu, invstd) = if training {
        let mu = mean(x, Some(&red), true)?;
        let cen = sub(x, &mu)?;
        let var = mean(&mul(&cen, &cen)?, Some(&red), true)?;
        let sd = unary(UnaryOp::Sqrt, &add_scalar(&var, eps)?)?;
        (mu, div(&ones_like(&sd)?, &sd)?)
    } else {
        (reshape(mu, &bshape)?, reshape(invstd, &bshape)?)
    };
    let xh = mul(&sub(x, &mu)?, &invstd)?;
    let gxh = match w {
        Some(w) => mul(g, &reshape(w, &bshape)?)?,
        None => g.clone(),
    };
    let gx = if training {
        let mg = mean(&gxh, Some(&red), true)?;
        let mgx = mean(&mul(&gxh, &xh)?, Some(&red), true)?;
        mul(&invstd, &sub(&sub(&gxh, &mg)?, &mul(&xh, &mgx)?)?)?
    } else {
        mul(&gxh, &invstd)?
    };
    let gw = sum(&mul(g, &xh)?, Some(&red), false)?;
    let gb = sum(g, Some(&red), false)?;
    Ok((Some(gx), Some(gw), Some(gb)))
}
