//! `scaled_dot_product_attention`, as PyTorch's: the forward runs the device's
//! FlashAttention-2 kernel and saves q, k, v, the output and one log-sum-exp per query row
//! (never the L×S probabilities); the backward recomputes the probabilities block by block.
//! Under `create_graph=True`, or when a float mask wants its gradient, the backward is
//! written with recorded ops instead (`math`), so double backward works.
//!
//! Dropout draws one seed from the generator; the kernel derives each element's keep bit
//! from it (`backend::attention::dropout_keep`), so the backward regenerates the same mask.

mod math;
mod plan;

use std::sync::Arc;

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::attention::{AttnArgs, AttnDropout, AttnNeeds};
use crate::dtype::DType;
use crate::error::{CandleContext, Result};
use crate::ops::convert::to_dtype;
use crate::ops::reduce::sum;
use crate::ops::shape::reshape;
use crate::ops::sum_to;
use crate::random::Generator;
use crate::tensor::Tensor;

use plan::Plan;
pub use plan::OP;

/// The options of `scaled_dot_product_attention` besides its tensors.
#[derive(Clone, Copy, Debug)]
pub struct SdpaOptions {
    pub dropout_p: f64,
    pub is_causal: bool,
    pub scale: Option<f64>,
    pub enable_gqa: bool,
}

/// What the backward needs besides the saved tensors.
struct Call {
    plan: Plan,
    causal: bool,
    scale: f64,
    dropout: Option<AttnDropout>,
}

impl Call {
    fn args<'a>(&'a self, mask: Option<&'a candle_core::Tensor>) -> AttnArgs<'a> {
        let p = &self.plan;
        AttnArgs {
            shape: p.shape,
            q_of: &p.q_of,
            k_of: &p.k_of,
            v_of: &p.v_of,
            mask: mask.map(|m| p.mask(m)),
            causal: self.causal,
            scale: self.scale,
            dropout: self.dropout,
        }
    }
}

/// Dense data of `t` in dtype `dt`, shaped (items, rows, cols).
fn dense(t: &Tensor, dt: DType) -> Result<candle_core::Tensor> {
    let d = t.dims();
    let (r, c) = (d[d.len() - 2], d[d.len() - 1]);
    let items: usize = d[..d.len() - 2].iter().product();
    to_dtype(t, dt)?
        .data()
        .contiguous()
        .and_then(|x| x.reshape((items, r, c)))
        .op(OP)
}

/// The mask as an additive float tensor in `dt`: a bool mask becomes 0 (attend) / -inf.
fn additive_mask(m: &Tensor, dt: DType) -> Result<candle_core::Tensor> {
    let data = m.data();
    let out = if m.dtype() == DType::Bool {
        let zeros = data.zeros_like().op(OP)?.to_dtype(dt.candle()).op(OP)?;
        let ninf = zeros.affine(1.0, f64::NEG_INFINITY).op(OP)?;
        data.where_cond(&zeros, &ninf).op(OP)?
    } else {
        data.to_dtype(dt.candle()).op(OP)?
    };
    out.contiguous().op(OP)
}

/// A gradient shaped `batch + [x, y]` summed down to an input of shape `dims`, whose heads
/// each served `rep` query heads.
fn reduce_to(
    g: Tensor,
    batch: &[usize],
    dims: &[usize],
    rep: usize,
    dtype: DType,
) -> Result<Tensor> {
    let g = if rep > 1 {
        let r = batch.len();
        let mut split = batch[..r - 1].to_vec();
        split.extend([batch[r - 1] / rep, rep]);
        split.extend_from_slice(&g.dims()[r..]);
        sum(&reshape(&g, &split)?, Some(&[r]), false)?
    } else {
        g
    };
    to_dtype(&sum_to(&g, dims)?, dtype)
}

/// `scaled_dot_product_attention(q, k, v, attn_mask, dropout_p, is_causal, scale,
/// enable_gqa)`; dropout (when `dropout_p > 0`) draws its seed from `gen`.
pub fn scaled_dot_product_attention(
    q: &Tensor,
    k: &Tensor,
    v: &Tensor,
    mask: Option<&Tensor>,
    o: SdpaOptions,
    gen: &Generator,
) -> Result<Tensor> {
    let (q, k, v) = (
        &crate::autocast::lower(q)?,
        &crate::autocast::lower(k)?,
        &crate::autocast::lower(v)?,
    );
    let mask = mask.map(crate::autocast::lower).transpose()?;
    let mask = mask.as_ref();
    plan::check(q, k, v, mask, o.is_causal)?;
    if o.dropout_p > 1.0 {
        return Err(crate::error::Error::runtime(format!(
            "dropout probability has to be between 0 and 1, but got {}",
            o.dropout_p
        )));
    }
    let dims = mask.map(|m| m.dims());
    let plan = plan::plan(
        &q.dims(),
        &k.dims(),
        &v.dims(),
        dims.as_deref(),
        o.enable_gqa,
    )?;
    let s = plan.shape;
    let call = Arc::new(Call {
        causal: o.is_causal,
        scale: o.scale.unwrap_or(1.0 / (s.e as f64).sqrt()),
        dropout: (o.dropout_p > 0.0).then(|| AttnDropout {
            p: o.dropout_p,
            seed: gen.next_u64(),
        }),
        plan,
    });
    let cdt = q.dtype().compute();
    let (qd, kd, vd) = (dense(q, cdt)?, dense(k, cdt)?, dense(v, cdt)?);
    let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
    let (out_d, lse_d) =
        backend::on(&qd).flash_forward(OP, &qd, &kd, &vd, &call.args(md.as_ref()))?;
    drop((qd, kd, vd, md));
    let mut out_dims = call.plan.batch.clone();
    out_dims.extend([s.l, s.ev]);
    let out = to_dtype(
        &Tensor::new(out_d.reshape(out_dims.as_slice()).op(OP)?, cdt),
        q.dtype(),
    )?;
    let lse = Tensor::new(lse_d, cdt);
    let float_mask = mask.filter(|m| m.dtype() != DType::Bool);
    let mut inputs = vec![q, k, v];
    inputs.extend(float_mask);
    {
        // The recompute runs the same plan, scale and dropout seed: the same output.
        let (call, out_dims, dtype) = (call.clone(), out_dims.clone(), q.dtype());
        let mut remat_inputs = vec![q, k, v];
        remat_inputs.extend(mask);
        remat::note(OP, &out, &remat_inputs, move |ins| {
            let (qd, kd, vd) = (
                dense(&ins[0], cdt)?,
                dense(&ins[1], cdt)?,
                dense(&ins[2], cdt)?,
            );
            let md = ins.get(3).map(|m| additive_mask(m, cdt)).transpose()?;
            let (out_d, _) =
                backend::on(&qd).flash_forward(OP, &qd, &kd, &vd, &call.args(md.as_ref()))?;
            to_dtype(
                &Tensor::new(out_d.reshape(out_dims.as_slice()).op(OP)?, cdt),
                dtype,
            )
        });
    }
    record(
        "ScaledDotProductFlashAttentionForCpuBackward0",
        &out,
        &inputs,
        || {
            let mut saved = vec![
                SavedTensor::input(q),
                SavedTensor::input(k),
                SavedTensor::input(v),
                SavedTensor::output(&out),
                SavedTensor::internal(&lse),
            ];
            saved.extend(mask.map(SavedTensor::input));
            saved
        },
        move |ctx, g| {
            let [q, k, v, out, lse] = &ctx.saved[..5] else {
                return Err(crate::error::Error::autograd(format!(
                    "{OP}: saved tensors missing"
                )));
            };
            let mask = ctx.saved.get(5);
            let needs = AttnNeeds {
                q: ctx.needs(0),
                k: ctx.needs(1),
                v: ctx.needs(2),
            };
            let mask_needs = ctx.needs.len() > 3 && ctx.needs(3);
            if grad_mode::is_enabled() || mask_needs {
                let mut grads = math::backward(q, k, v, mask, g, &call, needs, mask_needs)?;
                grads.truncate(ctx.needs.len());
                return Ok(grads);
            }
            let cdt = q.dtype().compute();
            let (qd, kd, vd) = (dense(q, cdt)?, dense(k, cdt)?, dense(v, cdt)?);
            let (od, gd) = (dense(out, cdt)?, dense(g, cdt)?);
            let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
            let lsed = lse.data();
            let (dq, dk, dv) = backend::on(&qd).flash_backward(
                OP,
                &qd,
                &kd,
                &vd,
                &od,
                &lsed,
                &gd,
                &call.args(md.as_ref()),
                needs,
            )?;
            let p = &call.plan;
            let grad = |d: Option<candle_core::Tensor>, t: &Tensor, rep: usize| {
                d.map(|d| {
                    let mut dims = p.batch.clone();
                    dims.extend_from_slice(&d.dims()[1..]);
                    let d = Tensor::new(d.reshape(dims.as_slice()).op(OP)?, cdt);
                    reduce_to(d, &p.batch, &t.dims(), rep, t.dtype())
                })
                .transpose()
            };
            let mut grads = vec![
                grad(dq, q, 1)?,
                grad(dk, k, p.rep_k)?,
                grad(dv, v, p.rep_v)?,
            ];
            grads.resize(ctx.needs.len(), None);
            Ok(grads)
        },
    );
    Ok(out)
}
