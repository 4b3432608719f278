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
use crate::backend::nn::Targets;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add, add_scalar, mul, mul_scalar, sub};
use crate::ops::convert::to_dtype;
use crate::ops::reduce::{mean, sum};
use crate::ops::shape as shp;
use crate::tensor::{shape_str, Tensor};

/// The data of a floating point tensor in its compute dtype (f32 for half types).
pub(crate) fn compute_data(op: &str, x: &Tensor) -> Result<(candle_core::Tensor, DType)> {
    let dt = x.dtype();
    match dt {
        DType::Float32 | DType::Float64 => Ok((x.data(), dt)),
        DType::Float16 | DType::BFloat16 => Ok((
            x.data().to_dtype(candle_core::DType::F32).op("nn")?,
            DType::Float32,
        )),
        other => Err(Error::dtype(format!(
            "{op}: expected a floating point tensor, got {} (shape {})",
            other.name(),
            shape_str(&x.dims())
        ))),
    }
}

/// Wrap a computed result back in the input's dtype.
pub(crate) fn finish(data: candle_core::Tensor, dtype: DType) -> Result<Tensor> {
    let data = if data.dtype() != dtype.candle() {
        data.to_dtype(dtype.candle()).op("nn")?
    } else {
        data
    };
    Ok(Tensor::new(data, dtype))
}

/// `layer_norm` over the last `k` dims, with optional elementwise affine weight and bias.
pub fn layer_norm(
    x: &Tensor,
    k: usize,
    weight: Option<&Tensor>,
    bias: Option<&Tensor>,
    eps: f64,
) -> Result<Tensor> {
    let dims = x.dims();
    if k == 0 || k > dims.len() {
        return Err(Error::shape(format!(
            "layer_norm: normalized_shape of {k} dims does not fit input of shape {}",
            shape_str(&dims)
        )));
    }
    let norm_dims = dims[dims.len() - k..].to_vec();
    for (name, t) in [("weight", weight), ("bias", bias)] {
        if let Some(t) = t {
            if t.dims() != norm_dims {
                return Err(Error::shape(format!(
                    "layer_norm: {name} of shape {} does not match normalized_shape {}",
                    shape_str(&t.dims()),
                    shape_str(&norm_dims)
                )));
            }
        }
    }
    let n: usize = norm_dims.iter().product();
    let (xd, _) = compute_data("layer_norm", x)?;
    let lead: Vec<usize> = dims[..dims.len() - k].to_vec();
    let stat_dims: Vec<usize> = lead
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, k))
        .collect();
    let (xhat_data, mean_data, rstd_data) =
        backend::on(&xd).layer_norm("layer_norm", &xd.contiguous().op("layer_norm")?, n, eps)?;
    let mean_data = mean_data.reshape(stat_dims.as_slice()).op("layer_norm")?;
    let rstd_data = rstd_data.reshape(stat_dims.as_slice()).op("layer_norm")?;
    let xhat = finish(xhat_data, x.dtype())?;
    remat::note("layer_norm", &xhat, &[x], move |ins| {
        let (xd, _) = compute_data("layer_norm", &ins[0])?;
        let xd = xd.contiguous().op("layer_norm")?;
        let (xhat, _, _) = backend::on(&xd).layer_norm("layer_norm", &xd, n, eps)?;
        finish(xhat, ins[0].dtype())
    });
    let mean_t = finish(mean_data, x.dtype())?;
    let rstd_t = finish(rstd_data, x.dtype())?;
    // The affine part is recorded as ordinary ops on top of the normalised input.
    let normed = {
        let out = xhat.clone();
        let red: Vec<usize> = (dims.len() - k..dims.len()).collect();
        let ninv = 1.0 / n as f64;
        record(
            "NativeLayerNormBackward0",
            &out,
            &[x],
            || {
                vec![
                    SavedTensor::input(x),
                    SavedTensor::input(&mean_t),
                    SavedTensor::input(&rstd_t),
                ]
            },
            move |ctx, g| {
                let (x, mut mu, mut rstd) =
                    (&ctx.saved[0], ctx.saved[1].clone(), ctx.saved[2].clone());
                if grad_mode::is_enabled() {
                    // create_graph: recompute the statistics with recorded ops.
                    mu = mean(x, Some(&red), true)?;
                    let c = sub(x, &mu)?;
                    let var = mean(&mul(&c, &c)?, Some(&red), true)?;
                    rstd = crate::ops::binary::div(
                        &crate::ops::creation::ones_like(&var)?,
                        &crate::ops::unary::unary(
                            crate::ops::unary::UnaryOp::Sqrt,
                            &add_scalar(&var, eps)?,
                        )?,
                    )?;
                }
                let xh = mul(&sub(x, &mu)?, &rstd)?;
                let mg = mul_scalar(&sum(g, Some(&red), true)?, ninv)?;
                let mgx = mul_scalar(&sum(&mul(g, &xh)?, Some(&red), true)?, ninv)?;
                let gx = mul(&rstd, &sub(&sub(g, &mg)?, &mul(&xh, &mgx)?)?)?;
                Ok(vec![Some(gx)])
            },
        );
        out
    };
    let mut out = normed;
    if let Some(w) = weight {
        out = mul(&out, w)?;
    }
    if let Some(b) = bias {
        out = add(&out, b)?;
    }
    Ok(out)
}

fn index_data(op: &'static str, idx: &Tensor) -> Result<Vec<i64>> {
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
    idx.to_vec::<i64>(op)
}

fn targets(classes: &[i64], ignore: i64) -> Targets<'_> {
    Targets { classes, ignore }
}

/// `out[i] = x[i, target[i]]` for a 2-d `x` (0 where `target[i] == ignore_index`).
pub fn gather_rows(x: &Tensor, target: &Tensor, ignore_index: i64) -> Result<Tensor> {
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
    let t = index_data("nll_loss", target)?;
    for &ti in &t {
        if ti != ignore_index && (ti < 0 || ti as usize >= c) {
            return Err(Error::index(format!(
                "nll_loss: target {ti} is out of bounds for {c} classes"
            )));
        }
    }
    let (xd, _) = compute_data("nll_loss", x)?;
    let data = backend::on(&xd).gather_rows("nll_loss", &xd, targets(&t, ignore_index))?;
    let out = finish(data, x.dtype())?;
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
    let t = index_data("nll_loss", target)?;
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
    let wd = weight.dims();
    if wd.len() != 2 {
        return Err(Error::shape(format!(
            "embedding: weight must be 2-D [num_embeddings, embedding_dim], got shape {}",
            shape_str(&wd)
        )));
    }
    let (v, dim) = (wd[0], wd[1]);
    let ids = index_data("embedding", idx)?;
    for &i in &ids {
        if i < 0 || i as usize >= v {
            return Err(Error::index(format!(
                "embedding: index {i} out of range for a table of {v} rows (weight shape {})",
                shape_str(&wd)
            )));
        }
    }
    let mut out_dims = idx.dims();
    out_dims.push(dim);
    let (w, _) = compute_data("embedding", weight)?;
    let data = backend::on(&w)
        .embedding("embedding", &w, &ids, zero_index)?
        .reshape(out_dims)
        .op("embedding")?;
    let out = finish(data, weight.dtype())?;
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
    let ids = index_data("embedding_backward", idx)?;
    let gdims = g.dims();
    let dim = gdims.last().copied().unwrap_or(1);
    let (gd, _) = compute_data("embedding_backward", g)?;
    let rows = gd.reshape((ids.len(), dim)).op("embedding_backward")?;
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
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::value(format!(
            "dropout probability has to be between 0 and 1, but got {p}"
        )));
    }
    let dims = x.dims();
    let keep = draw(x.numel());
    let keep = candle_core::Tensor::from_vec(keep, dims, x.data().device()).op("dropout")?;
    let mask = Tensor::new(keep, DType::Bool);
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let m = to_dtype(&mask, x.dtype())?;
    let out = {
        let _g = grad_mode::GradModeGuard::new(false);
        mul_scalar(&mul(x, &m)?, scale)?
    };
    let kept = mask.clone();
    remat::note("dropout", &out, &[x], move |ins| {
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
