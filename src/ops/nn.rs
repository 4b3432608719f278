//! Fused neural-network functionals: one kernel forward, a minimal set of saved tensors,
//! and a backward written with gradstream ops (so `create_graph=True` works through them).
//!
//! sigmoid, silu, gelu; softmax / log_softmax; layer_norm; the row gather/scatter pair
//! under nll_loss; embedding and its backward; dropout. Each computes in f32 or f64
//! (half types go through f32).

use candle_core::WithDType;
use rayon::prelude::*;

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::saved::SavedTensor;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add, add_scalar, mul, mul_scalar, sub};
use crate::ops::convert::to_dtype;
use crate::ops::dense::{by_float, from_vec, with_slice};
use crate::ops::inplace::PAR_MIN;
use crate::ops::reduce::{mean, sum};
use crate::ops::shape as shp;
use crate::ops::unary::neg;
use crate::optim::kernels::Real;
use crate::tensor::{shape_str, Tensor};

/// The float math the kernels here need.
pub trait Float: Real + WithDType {
    fn exp(self) -> Self;
    fn ln(self) -> Self;
    fn tanh(self) -> Self;
    fn erf(self) -> Self;
    fn ln_1p(self) -> Self;
}

impl Float for f32 {
    fn exp(self) -> Self {
        f32::exp(self)
    }
    fn ln(self) -> Self {
        f32::ln(self)
    }
    fn tanh(self) -> Self {
        f32::tanh(self)
    }
    fn erf(self) -> Self {
        candle_core::cpu::erf::erf_f32(self)
    }
    fn ln_1p(self) -> Self {
        f32::ln_1p(self)
    }
}

impl Float for f64 {
    fn exp(self) -> Self {
        f64::exp(self)
    }
    fn ln(self) -> Self {
        f64::ln(self)
    }
    fn tanh(self) -> Self {
        f64::tanh(self)
    }
    fn erf(self) -> Self {
        candle_core::cpu::erf::erf_f64(self)
    }
    fn ln_1p(self) -> Self {
        f64::ln_1p(self)
    }
}

/// The data of a floating point tensor in its compute dtype (f32 for half types).
fn compute_data(op: &str, x: &Tensor) -> Result<(candle_core::Tensor, DType)> {
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
fn finish(data: candle_core::Tensor, dtype: DType) -> Result<Tensor> {
    let data = if data.dtype() != dtype.candle() {
        data.to_dtype(dtype.candle()).op("nn")?
    } else {
        data
    };
    Ok(Tensor::new(data, dtype))
}

/// One row of a row-wise kernel: (output, input), (mean, rstd).
type RowChunk<'a, T> = ((&'a mut [T], &'a [T]), (&'a mut T, &'a mut T));

fn map_elems<T: Float>(x: &[T], f: impl Fn(T) -> T + Sync + Send) -> Vec<T> {
    if x.len() >= PAR_MIN {
        x.par_iter().map(|&v| f(v)).collect()
    } else {
        x.iter().map(|&v| f(v)).collect()
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pointwise {
    Sigmoid,
    /// `log(1 + exp(beta x)) / beta`, linear where `beta x > threshold`.
    Softplus {
        beta: f64,
        threshold: f64,
    },
    Silu,
    Gelu,
    GeluTanh,
    /// d gelu / dx (used by gelu's backward; not differentiable itself).
    GeluGrad,
    GeluTanhGrad,
}

impl Pointwise {
    fn name(self) -> &'static str {
        match self {
            Pointwise::Sigmoid => "sigmoid",
            Pointwise::Softplus { .. } => "softplus",
            Pointwise::Silu => "silu",
            Pointwise::Gelu | Pointwise::GeluTanh => "gelu",
            Pointwise::GeluGrad | Pointwise::GeluTanhGrad => "gelu_backward",
        }
    }

    fn f<T: Float>(self, x: T) -> T {
        let one = T::of(1.0);
        let half = T::of(0.5);
        let sig = |v: T| one / (one + (-v).exp());
        let k = T::of(0.797_884_560_802_865_4); // sqrt(2/pi)
        let c = T::of(0.044715);
        match self {
            Pointwise::Sigmoid => sig(x),
            Pointwise::Softplus { beta, threshold } => {
                let z = x * T::of(beta);
                if Real::to_f64(z) > threshold {
                    x
                } else {
                    z.exp().ln_1p() / T::of(beta)
                }
            }
            Pointwise::Silu => x * sig(x),
            Pointwise::Gelu => {
                half * x * (one + (x * T::of(std::f64::consts::FRAC_1_SQRT_2)).erf())
            }
            Pointwise::GeluTanh => half * x * (one + (k * (x + c * x * x * x)).tanh()),
            Pointwise::GeluGrad => {
                let cdf = half * (one + (x * T::of(std::f64::consts::FRAC_1_SQRT_2)).erf());
                let pdf = T::of(0.398_942_280_401_432_7) * (-half * x * x).exp();
                cdf + x * pdf
            }
            Pointwise::GeluTanhGrad => {
                let inner = k * (x + c * x * x * x);
                let t = inner.tanh();
                let dinner = k * (one + T::of(3.0) * c * x * x);
                half * (one + t) + half * x * (one - t * t) * dinner
            }
        }
    }
}

/// An element-wise fused op: `sigmoid`, `silu`, `gelu` (exact or tanh).
pub fn pointwise(op: Pointwise, x: &Tensor) -> Result<Tensor> {
    let (xd, cdt) = compute_data(op.name(), x)?;
    let dims = x.dims();
    let data = by_float!(cdt, |T| {
        let v = with_slice::<T, _>(&xd, |s| map_elems(s, |e| op.f(e)))?;
        from_vec(v, &dims)?
    });
    let out = finish(data, x.dtype())?;
    match op {
        Pointwise::Sigmoid => record(
            "SigmoidBackward0",
            &out,
            &[x],
            || vec![SavedTensor::output(&out)],
            |ctx, g| {
                // g * y * (1 - y)
                let y = &ctx.saved[0];
                let one_minus = add_scalar(&neg(y)?, 1.0)?;
                Ok(vec![Some(mul(&mul(g, y)?, &one_minus)?)])
            },
        ),
        Pointwise::Softplus { beta, .. } => record(
            "SoftplusBackward0",
            &out,
            &[x],
            || vec![SavedTensor::input(x)],
            move |ctx, g| {
                // sigmoid(beta x); it rounds to 1 in the linear region.
                let s = pointwise(Pointwise::Sigmoid, &mul_scalar(&ctx.saved[0], beta)?)?;
                Ok(vec![Some(mul(g, &s)?)])
            },
        ),
        Pointwise::Silu => record(
            "SiluBackward0",
            &out,
            &[x],
            || vec![SavedTensor::input(x)],
            |ctx, g| {
                // s * (1 + x * (1 - s))
                let x = &ctx.saved[0];
                let s = pointwise(Pointwise::Sigmoid, x)?;
                let d = mul(
                    &s,
                    &add_scalar(&mul(x, &add_scalar(&neg(&s)?, 1.0)?)?, 1.0)?,
                )?;
                Ok(vec![Some(mul(g, &d)?)])
            },
        ),
        Pointwise::Gelu | Pointwise::GeluTanh => {
            let grad_op = if op == Pointwise::Gelu {
                Pointwise::GeluGrad
            } else {
                Pointwise::GeluTanhGrad
            };
            record(
                "GeluBackward0",
                &out,
                &[x],
                || vec![SavedTensor::input(x)],
                move |ctx, g| {
                    let d = pointwise(grad_op, &ctx.saved[0].detach())?;
                    Ok(vec![Some(mul(g, &d)?)])
                },
            )
        }
        Pointwise::GeluGrad | Pointwise::GeluTanhGrad => {}
    }
    Ok(out)
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
    let (xd, cdt) = compute_data("layer_norm", x)?;
    let lead: Vec<usize> = dims[..dims.len() - k].to_vec();
    let stat_dims: Vec<usize> = lead
        .iter()
        .copied()
        .chain(std::iter::repeat_n(1, k))
        .collect();
    let (xhat_data, mean_data, rstd_data) = by_float!(cdt, |T| {
        let (xh, mu, rs) = with_slice::<T, _>(&xd, |s| {
            let rows = s.len().checked_div(n).unwrap_or(0);
            let mut xh = vec![T::of(0.0); s.len()];
            let mut mu = vec![T::of(0.0); rows];
            let mut rs = vec![T::of(0.0); rows];
            let row = |((o, r), (m, q)): RowChunk<'_, T>| {
                let mut acc = 0.0f64;
                for &e in r {
                    acc += Real::to_f64(e);
                }
                let mean = acc / n as f64;
                let mut var = 0.0f64;
                for &e in r {
                    let c = Real::to_f64(e) - mean;
                    var += c * c;
                }
                let rstd = 1.0 / (var / n as f64 + eps).sqrt();
                let (mt, rt) = (T::of(mean), T::of(rstd));
                for (oi, &e) in o.iter_mut().zip(r) {
                    *oi = (e - mt) * rt;
                }
                *m = mt;
                *q = rt;
            };
            if n > 0 {
                if s.len() >= PAR_MIN {
                    xh.par_chunks_mut(n)
                        .zip(s.par_chunks(n))
                        .zip(mu.par_iter_mut().zip(rs.par_iter_mut()))
                        .for_each(row);
                } else {
                    xh.chunks_mut(n)
                        .zip(s.chunks(n))
                        .zip(mu.iter_mut().zip(rs.iter_mut()))
                        .for_each(row);
                }
            }
            (xh, mu, rs)
        })?;
        (
            from_vec(xh, &dims)?,
            from_vec(mu, &stat_dims)?,
            from_vec(rs, &stat_dims)?,
        )
    });
    let xhat = finish(xhat_data, x.dtype())?;
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
    let d = idx.data().to_dtype(candle_core::DType::I64).op(op)?;
    with_slice::<i64, _>(&d, |s| s.to_vec())
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
    let (nr, c) = (dims[0], dims[1]);
    let t = index_data("nll_loss", target)?;
    for &ti in &t {
        if ti != ignore_index && (ti < 0 || ti as usize >= c) {
            return Err(Error::index(format!(
                "nll_loss: target {ti} is out of bounds for {c} classes"
            )));
        }
    }
    let (xd, cdt) = compute_data("nll_loss", x)?;
    let data = by_float!(cdt, |T| {
        let v = with_slice::<T, _>(&xd, |s| {
            (0..nr)
                .map(|i| {
                    if t[i] == ignore_index {
                        T::of(0.0)
                    } else {
                        s[i * c + t[i] as usize]
                    }
                })
                .collect::<Vec<T>>()
        })?;
        from_vec(v, &[nr])?
    });
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
    let nr = g.numel();
    let t = index_data("nll_loss", target)?;
    let (gd, cdt) = compute_data("nll_loss", g)?;
    let data = by_float!(cdt, |T| {
        let v = with_slice::<T, _>(&gd, |s| {
            let mut out = vec![T::of(0.0); nr * c];
            for i in 0..nr {
                if t[i] != ignore_index {
                    out[i * c + t[i] as usize] = s[i];
                }
            }
            out
        })?;
        from_vec(v, &[nr, c])?
    });
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
    let (w, cdt) = compute_data("embedding", weight)?;
    let data = by_float!(cdt, |T| {
        let o = with_slice::<T, _>(&w, |s| {
            let mut out = Vec::with_capacity(ids.len() * dim);
            for &i in &ids {
                if Some(i) == zero_index {
                    out.extend(std::iter::repeat_n(T::of(0.0), dim));
                } else {
                    let r = i as usize * dim;
                    out.extend_from_slice(&s[r..r + dim]);
                }
            }
            out
        })?;
        from_vec(o, &out_dims)?
    });
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
    let (gd, cdt) = compute_data("embedding_backward", g)?;
    let data = by_float!(cdt, |T| {
        let o = with_slice::<T, _>(&gd, |s| {
            let mut out = vec![T::of(0.0); v * dim];
            for (k, &i) in ids.iter().enumerate() {
                if Some(i) == padding_idx {
                    continue;
                }
                let r = i as usize * dim;
                for (o, &e) in out[r..r + dim].iter_mut().zip(&s[k * dim..(k + 1) * dim]) {
                    *o += e;
                }
            }
            out
        })?;
        from_vec(o, &[v, dim])?
    });
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
    let mask = Tensor::new(from_vec(keep, &dims)?, DType::Bool);
    let scale = if p >= 1.0 { 0.0 } else { 1.0 / (1.0 - p) };
    let m = to_dtype(&mask, x.dtype())?;
    let out = {
        let _g = grad_mode::GradModeGuard::new(false);
        mul_scalar(&mul(x, &m)?, scale)?
    };
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
