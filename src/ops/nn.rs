//! Fused neural-network functionals: one kernel forward (through the device's backend),
//! a minimal set of saved tensors, and a backward written with gradstream ops (so
//! `create_graph=True` works through them).
//!
//! layer_norm; the row gather/scatter pair under nll_loss; embedding and its backward;
//! dropout. Each computes in f32 or f64 (half types go through f32). The pointwise
//! activations (sigmoid, silu, gelu, softplus) are unary ops (`ops::unary`); softmax is
//! in `ops::reduce::softmax`.

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::cast::Convert;
use crate::backend::nn::{Affine, Targets};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add_scalar, mul, mul_scalar, sub};
use crate::ops::convert::to_dtype;
use crate::ops::reduce::{mean, sum};
use crate::ops::shape as shp;
use crate::tensor::{shape_str, Tensor};

/// The dtype a floating point tensor computes in (f32 for half types).
pub(crate) fn compute_dtype(op: &str, x: &Tensor) -> Result<DType> {
    match x.dtype() {
        dt @ (DType::Float32 | DType::Float64) => Ok(dt),
        DType::Float16 | DType::BFloat16 => Ok(DType::Float32),
        other => Err(Error::dtype(format!(
            "{op}: expected a floating point tensor, got {} (shape {})",
            other.name(),
            shape_str(&x.dims())
        ))),
    }
}

/// The data of a floating point tensor in its compute dtype (f32 for half types).
pub(crate) fn compute_data(op: &str, x: &Tensor) -> Result<(candle_core::Tensor, DType)> {
    let dt = compute_dtype(op, x)?;
    let data = match dt == x.dtype() {
        true => x.data(),
        false => x.data().cast(dt.candle()).op("nn")?,
    };
    Ok((data, dt))
}

/// layer_norm's weight or bias as dense data in the input's compute dtype `cdt`.
fn param_data(p: &Tensor, cdt: DType) -> Result<candle_core::Tensor> {
    let d = p.data().cast(cdt.candle()).op("layer_norm")?;
    d.dense().op("layer_norm")
}

/// Wrap a computed result back in the input's dtype.
pub(crate) fn finish(data: candle_core::Tensor, dtype: DType) -> Result<Tensor> {
    let data = if data.dtype() != dtype.candle() {
        data.cast(dtype.candle()).op("nn")?
    } else {
        data
    };
    Ok(Tensor::new(data, dtype))
}

/// `layer_norm` over the last `k` dims, with optional elementwise affine weight and bias:
/// one kernel forward and one backward (`NativeLayerNormBackward0`), saving the input and
/// the rows' mean and rstd, as PyTorch's does.
pub fn layer_norm(
    x: &Tensor,
    k: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let started = remat::start();
    let dims = x.dims();
    if k == 0 || k > dims.len() {
        return Err(Error::shape(format!(
            "layer_norm: normalized_shape of {k} dims does not fit input of shape {}",
            shape_str(&dims)
        )));
    }
    let norm_dims = dims[dims.len() - k..].to_vec();
    let cdt = compute_dtype("layer_norm", x)?;
    for (name, t) in [("weight", weight), ("bias", bias)] {
        if let Some(t) = t {
            if t.dims() != norm_dims {
                return Err(Error::shape(format!(
                    "layer_norm: {name} of shape {} does not match normalized_shape {}",
                    shape_str(&t.dims()),
                    shape_str(&norm_dims)
                )));
            }
            // PyTorch's rule: a parameter has the input's dtype, or float32 under a half input.
            if t.dtype() != x.dtype() && t.dtype() != cdt {
                return Err(Error::dtype(format!(
                    "layer_norm: expected {name} to have dtype {} (the input's), got {}",
                    x.dtype().name(),
                    t.dtype().name()
                )));
            }
        }
    }
    let n: usize = norm_dims.iter().product();
    let lead: Vec<usize> = dims[..dims.len() - k].to_vec();
    let stat_dims: Vec<usize> = lead
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, k))
        .collect();
    let (has_w, has_b) = (weight.is_some(), bias.is_some());
    let (w_dt, b_dt) = (weight.map(|w| w.dtype()), bias.map(|b| b.dtype()));
    let run = move |x: &Tensor, w: Option<&Tensor>, b: Option<&Tensor>| {
        let (xd, cdt) = compute_data("layer_norm", x)?;
        let param = |p: Option<&Tensor>| p.map(|p| param_data(p, cdt)).transpose();
        let (wd, bd) = (param(w)?, param(b)?);
        let affine = Affine {
            weight: wd.as_ref(),
            bias: bd.as_ref(),
        };
        let xd = xd.dense().op("layer_norm")?;
        backend::on(&xd).layer_norm("layer_norm", &xd, affine, n, eps)
    };
    let (y, mean_data, rstd_data) = run(x, weight, bias)?;
    let out = finish(y, x.dtype())?;
    let mut inputs = vec![x];
    inputs.extend(weight);
    inputs.extend(bias);
    remat::note("layer_norm", &out, &inputs, started, move |ins| {
        let w = has_w.then(|| &ins[1]);
        let b = has_b.then(|| &ins[1 + usize::from(has_w)]);
        finish(run(&ins[0], w, b)?.0, ins[0].dtype())
    });
    // The statistics stay in the compute dtype (float32 under a half input), as PyTorch's.
    let stat = |d: candle_core::Tensor| -> Result<Tensor> {
        Ok(Tensor::new(
            d.reshape(stat_dims.as_slice()).op("layer_norm")?,
            cdt,
        ))
    };
    let (mean_t, rstd_t) = (stat(mean_data)?, stat(rstd_data)?);
    let red: Vec<usize> = (dims.len() - k..dims.len()).collect();
    let lead_dims: Vec<usize> = (0..dims.len() - k).collect();
    record(
        "NativeLayerNormBackward0",
        &out,
        &inputs,
        || {
            let mut saved = vec![
                SavedTensor::input(x),
                SavedTensor::internal(&mean_t),
                SavedTensor::internal(&rstd_t),
            ];
            saved.extend(weight.map(SavedTensor::input));
            saved
        },
        move |ctx, g| {
            let (x, mu, rstd) = (&ctx.saved[0], &ctx.saved[1], &ctx.saved[2]);
            let w = has_w.then(|| &ctx.saved[3]);
            let params = (1..ctx.needs.len()).any(|i| ctx.needs(i));
            let (gx, sums) = if grad_mode::is_enabled() {
                layer_norm_grad_recorded(g, x, w, (&red, &lead_dims), eps, params)?
            } else {
                let (gd, _) = compute_data("layer_norm", g)?;
                let (xd, cdt) = compute_data("layer_norm", x)?;
                let wd = w.map(|w| param_data(w, cdt)).transpose()?;
                let (gx, sums) = backend::on(&xd).layer_norm_backward(
                    "layer_norm",
                    &gd.dense().op("layer_norm")?,
                    &xd.dense().op("layer_norm")?,
                    (&mu.data(), &rstd.data()),
                    wd.as_ref(),
                    n,
                    params,
                )?;
                let sums = sums.map(|(dw, db)| (Tensor::new(dw, cdt), Tensor::new(db, cdt)));
                (finish(gx, x.dtype())?, sums)
            };
            let mut grads = vec![Some(gx)];
            let (dw, db) = sums.unzip();
            let mut i = 1;
            for (dt, grad) in [(w_dt, dw), (b_dt, db)] {
                if let Some(dt) = dt {
                    grads.push(match (ctx.needs(i), grad) {
                        (true, Some(t)) => Some(to_dtype(&shp::reshape(&t, &norm_dims)?, dt)?),
                        _ => None,
                    });
                    i += 1;
                }
            }
            Ok(grads)
        },
    );
    Ok(out)
}

/// layer_norm's backward with recorded ops (`create_graph=True`): the input's gradient and,
/// with `params`, the weight's and bias' gradients, summed over the leading dims.
fn layer_norm_grad_recorded(
    g: &Tensor,
    x: &Tensor,
    w: Option<&Tensor>,
    (red, lead): (&[usize], &[usize]),
    eps: f64,
    params: bool,
) -> Result<(Tensor, Option<(Tensor, Tensor)>)> {
    let ninv = 1.0 / red.iter().map(|&d| x.dims()[d]).product::<usize>() as f64;
    let mu = mean(x, Some(red), true)?;
    let c = sub(x, &mu)?;
    let var = mean(&mul(&c, &c)?, Some(red), true)?;
    let rstd = crate::ops::binary::div(
        &crate::ops::creation::ones_like(&var)?,
        &crate::ops::unary::unary(crate::ops::unary::UnaryOp::Sqrt, &add_scalar(&var, eps)?)?,
    )?;
    let xh = mul(&c, &rstd)?;
    let gh = match w {
        Some(w) => mul(g, w)?,
        None => g.clone(),
    };
    let mg = mul_scalar(&sum(&gh, Some(red), true)?, ninv)?;
    let mgx = mul_scalar(&sum(&mul(&gh, &xh)?, Some(red), true)?, ninv)?;
    let gx = mul(&rstd, &sub(&sub(&gh, &mg)?, &mul(&xh, &mgx)?)?)?;
    let over_lead = |t: &Tensor| match lead.is_empty() {
        true => Ok(t.clone()),
        false => sum(t, Some(lead), false),
    };
    let sums = match params {
        true => Some((over_lead(&mul(g, &xh)?)?, over_lead(g)?)),
        false => None,
    };
    Ok((gx, sums))
}

/// An integer index tensor as flat, dense int64 data on `device`, each value checked to
/// lie in `0..size` or be `except`; `oob(value)` is the error for the first that does not.
fn index_data(
    op: &'static str,
    idx: &Tensor,
    device: &candle_core::Device,
    size: usize,
    except: Option<i64>,
    oob: impl FnOnce(i64) -> Error,
) -> Result<candle_core::Tensor> {
    match idx.dtype() {
        DType::Int64 | DType::Int32 | DType::UInt8 => {}
        other => {
            return Err(Error::dtype(format!(
                "{op}: expected an integer index tensor (Long), got {} (shape {})",
                other.name(),
                shape_str(&idx.dims())
            )))
        }
    }
    let ids = crate::ops::convert::cast_data(&idx.data(), idx.dtype(), DType::Int64)?;
    let ids = crate::device::to_device(&ids, device)
        .and_then(|d| d.flatten_all())
        .and_then(|d| d.dense())
        .op(op)?;
    match backend::on(&ids).find_out_of_bounds(op, &ids, 0, size as i64, except)? {
        Some(bad) => Err(oob(bad)),
        None => Ok(ids),
    }
}

fn targets(classes: &candle_core::Tensor, ignore: i64) -> Targets<'_> {
    Targets { classes, ignore }
}

/// `out[i] = x[i, target[i]]` for a 2-d `x` (0 where `target[i] == ignore_index`).
pub fn gather_rows(x: &Tensor, target: &Tensor, ignore_index: i64) -> Result<Tensor> {
    let started = remat::start();
    let dims = x.dims();
    if dims.len() != 2 || target.dims() != [dims[0]] {
        return Err(Error::shape(format!(
            "nll_loss: expected input of shape [N, C] and target of shape [N], got input {} and \
             target {}",
            shape_str(&dims),
            shape_str(&target.dims())
        )));
    }
    let c = dims[1];
    let oob = |ti| {
        Error::index(format!(
            "nll_loss: target {ti} is out of bounds for {c} classes"
        ))
    };
    let t = index_data("nll_loss", target, &x.device(), c, Some(ignore_index), oob)?;
    let (xd, _) = compute_data("nll_loss", x)?;
    let data = backend::on(&xd).gather_rows("nll_loss", &xd, targets(&t, ignore_index))?;
    let out = finish(data, x.dtype())?;
    remat::note("nll_loss", &out, &[x, target], started, move |ins| {
        gather_rows(&ins[0], &ins[1], ignore_index)
    });
    record(
        "NllGatherBackward0",
        &out,
        &[x],
        || vec![SavedTensor::input(target)],
        move |ctx, g| Ok(vec![Some(scatter_rows(g, &ctx.saved[0], c, ignore_index)?)]),
    );
    Ok(out)
}

/// The adjoint of `gather_rows`: `out[i, target[i]] = g[i]`, zeros elsewhere.
pub fn scatter_rows(g: &Tensor, target: &Tensor, c: usize, ignore_index: i64) -> Result<Tensor> {
    let oob = |ti| {
        Error::index(format!(
            "nll_loss: target {ti} is out of bounds for {c} classes"
        ))
    };
    let t = index_data("nll_loss", target, &g.device(), c, Some(ignore_index), oob)?;
    let (gd, _) = compute_data("nll_loss", g)?;
    let data = backend::on(&gd).scatter_rows("nll_loss", &gd, targets(&t, ignore_index), c)?;
    let out = finish(data, g.dtype())?;
    record(
        "NllScatterBackward0",
        &out,
        &[g],
        || vec![SavedTensor::input(target)],
        move |ctx, gg| Ok(vec![Some(gather_rows(gg, &ctx.saved[0], ignore_index)?)]),
    );
    Ok(out)
}

/// `embedding(idx, weight)`: rows of a `[V, D]` weight, shaped `idx.shape + [D]`.
/// `zero_index`: rows looked up at that index come out as zeros (the adjoint of the
/// backward, which gives padding rows no gradient).
pub fn embedding(
    weight: &Tensor,
    idx: &Tensor,
    padding_idx: Option<i64>,
    zero_index: Option<i64>,
) -> Result<Tensor> {
    let started = remat::start();
    let wd = weight.dims();
    if wd.len() != 2 {
        return Err(Error::shape(format!(
            "embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape {}",
            shape_str(&wd)
        )));
    }
    let (v, dim) = (wd[0], wd[1]);
    let oob = |i| {
        Error::index(format!(
            "embedding: index {i} out of range for a table of {v} rows (weight shape {})",
            shape_str(&wd)
        ))
    };
    let ids = index_data("embedding", idx, &weight.device(), v, None, oob)?;
    let mut out_dims = idx.dims();
    out_dims.push(dim);
    let (w, _) = compute_data("embedding", weight)?;
    let data = backend::on(&w)
        .embedding("embedding", &w, &ids, zero_index)?
        .reshape(out_dims)
        .op("embedding")?;
    let out = finish(data, weight.dtype())?;
    remat::note("embedding", &out, &[weight, idx], started, move |ins| {
        embedding(&ins[0], &ins[1], padding_idx, zero_index)
    });
    record(
        "EmbeddingBackward0",
        &out,
        &[weight],
        || vec![SavedTensor::input(idx)],
        move |ctx, g| {
            Ok(vec![Some(embedding_backward(
                g,
                &ctx.saved[0],
                v,
                padding_idx,
            )?)])
        },
    );
    Ok(out)
}

/// Sum the rows of `g` into a `[V, D]` gradient at `idx` (padding rows get none).
pub fn embedding_backward(
    g: &Tensor,
    idx: &Tensor,
    v: usize,
    padding_idx: Option<i64>,
) -> Result<Tensor> {
    let oob = |i| {
        Error::index(format!(
            "embedding_backward: index {i} out of range for a table of {v} rows"
        ))
    };
    let ids = index_data("embedding_backward", idx, &g.device(), v, None, oob)?;
    let gdims = g.dims();
    let dim = gdims.last().copied().unwrap_or(1);
    let (gd, _) = compute_data("embedding_backward", g)?;
    let rows = gd
        .reshape((ids.elem_count(), dim))
        .op("embedding_backward")?;
    let data =
        backend::on(&gd).embedding_backward("embedding_backward", &rows, &ids, v, padding_idx)?;
    let out = finish(data, g.dtype())?;
    record(
        "EmbeddingBackwardBackward0",
        &out,
        &[g],
        || vec![SavedTensor::input(idx)],
        move |ctx, gg| {
            let e = embedding(gg, &ctx.saved[0], None, padding_idx)?;
            Ok(vec![Some(e)])
        },
    );
    Ok(out)
}

/// Inverted dropout: zero each element with probability `p`, scale the rest by
/// `1 / (1 - p)`. Saves a one-byte-per-element mask.
pub fn dropout(x: &Tensor, p: f64, draw: impl FnOnce(usize) -> Vec<u8>) -> Result<Tensor> {
    let started = remat::start();
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::value(format!(
            "dropout probability has to be between 0 and 1, but got {p}"
        )));
    }
    let dims = x.dims();
    let keep = draw(x.numel());
    let keep = crate::device::from_vec(keep, dims, x.data().device()).op("dropout")?;
    let mask = Tensor::new(keep, DType::Bool);
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let m = to_dtype(&mask, x.dtype())?;
    let out = {
        let _g = grad_mode::GradModeGuard::new(false);
        mul_scalar(&mul(x, &m)?, scale)?
    };
    let kept = mask.clone();
    remat::note("dropout", &out, &[x], started, move |ins| {
        let m = to_dtype(&kept, ins[0].dtype())?;
        mul_scalar(&mul(&ins[0], &m)?, scale)
    });
    record(
        "NativeDropoutBackward0",
        &out,
        &[x],
        || vec![SavedTensor::input(&mask)],
        move |ctx, g| {
            let m = to_dtype(&ctx.saved[0], g.dtype())?;
            Ok(vec![Some(mul_scalar(&mul(g, &m)?, scale)?)])
        },
    );
    Ok(out)
}

/// Reshape helper used by the bindings (cross-entropy over `[N, C, d...]`).
pub fn move_class_dim_last(x: &Tensor) -> Result<Tensor> {
    let r = x.rank();
    let mut perm: Vec<usize> = vec![0];
    perm.extend(2..r);
    perm.push(1);
    let p = shp::permute(x, &perm)?;
    let c = x.dims()[1];
    let n = x.numel() / c.max(1);
    shp::reshape(&crate::ops::convert::contiguous(&p)?, &[n, c])
}
