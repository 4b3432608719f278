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
use crate::backend::attention::{AttnArgs, AttnDropout, AttnNeeds, AttnRows};
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

/// Where the rows of each tensor of one kernel call are (the output and its gradient only
/// in the backward), and the mask.
struct Operands<'a> {
    q: &'a Rows,
    k: &'a Rows,
    v: &'a Rows,
    out_dout: Option<(&'a Rows, &'a Rows)>,
    mask: Option<&'a candle_core::Tensor>,
}

const NO_ROWS: AttnRows<'static> = AttnRows { base: &[], row: 0 };

impl Call {
    fn args<'a>(&'a self, o: &Operands<'a>) -> AttnArgs<'a> {
        let p = &self.plan;
        AttnArgs {
            shape: p.shape,
            q: o.q.view(),
            k: o.k.view(),
            v: o.v.view(),
            out: o.out_dout.map_or(NO_ROWS, |(r, _)| r.view()),
            dout: o.out_dout.map_or(NO_ROWS, |(_, r)| r.view()),
            mask: o.mask.map(|m| p.mask(m)),
            causal: self.causal,
            scale: self.scale,
            dropout: self.dropout,
        }
    }

    /// The output and log-sum-exp of q, k, v (in their own dtype) and an optional mask.
    fn forward(
        &self,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        mask: Option<&Tensor>,
    ) -> Result<(Tensor, Tensor)> {
        let cdt = q.dtype().compute();
        let p = &self.plan;
        let (qd, kd, vd) = (
            Operand::of(q, cdt, &p.q_of)?,
            Operand::of(k, cdt, &p.k_of)?,
            Operand::of(v, cdt, &p.v_of)?,
        );
        let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
        let ops = Operands {
            q: &qd.rows,
            k: &kd.rows,
            v: &vd.rows,
            out_dout: None,
            mask: md.as_ref(),
        };
        let args = self.args(&ops);
        let (out_d, lse_d) =
            backend::on(&qd.data).flash_forward(OP, &qd.data, &kd.data, &vd.data, &args)?;
        let mut dims = p.batch.clone();
        dims.extend([p.shape.l, p.shape.ev]);
        let out_d = out_d.reshape(dims.as_slice()).op(OP)?;
        let out = to_dtype(&Tensor::new(out_d, cdt), q.dtype())?;
        Ok((out, Tensor::new(lse_d, cdt)))
    }
}

/// Where each batch item's rows start in a storage, and the row stride.
struct Rows {
    base: Vec<usize>,
    row: usize,
}

impl Rows {
    fn view(&self) -> AttnRows<'_> {
        AttnRows {
            base: &self.base,
            row: self.row,
        }
    }
}

/// A kernel operand: its data in the compute dtype, and where its rows are.
struct Operand {
    data: candle_core::Tensor,
    rows: Rows,
}

impl Operand {
    /// `t` in dtype `dt`, read in place where its rows' elements are adjacent (copied
    /// first where not); `items[n]` is the batch item of `t` that output item `n` reads.
    fn of(t: &Tensor, dt: DType, items: &[usize]) -> Result<Operand> {
        let mut d = to_dtype(t, dt)?.data();
        let r = d.rank();
        if d.dims()[r - 1] > 1 && d.stride()[r - 1] != 1 {
            d = d.contiguous().op(OP)?;
        }
        let (dims, stride) = (d.dims(), d.stride());
        let start = d.layout().start_offset();
        let base = items
            .iter()
            .map(|&i| {
                let mut rest = i;
                let mut at = start;
                for ax in (0..r - 2).rev() {
                    at += (rest % dims[ax]) * stride[ax];
                    rest /= dims[ax];
                }
                at
            })
            .collect();
        let row = stride[r - 2];
        Ok(Operand {
            data: d,
            rows: Rows { base, row },
        })
    }
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
    let (out, lse) = call.forward(q, k, v, mask)?;
    let float_mask = mask.filter(|m| m.dtype() != DType::Bool);
    let mut inputs = vec![q, k, v];
    inputs.extend(float_mask);
    {
        // The recompute runs the same plan, scale and dropout seed: the same output.
        let call = call.clone();
        let mut remat_inputs = vec![q, k, v];
        remat_inputs.extend(mask);
        remat::note(OP, &out, &remat_inputs, move |ins| {
            Ok(call.forward(&ins[0], &ins[1], &ins[2], ins.get(3))?.0)
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
            let p = &call.plan;
            let all: Vec<usize> = (0..p.shape.n).collect();
            let (qd, kd, vd) = (
                Operand::of(q, cdt, &p.q_of)?,
                Operand::of(k, cdt, &p.k_of)?,
                Operand::of(v, cdt, &p.v_of)?,
            );
            let (od, gd) = (Operand::of(out, cdt, &all)?, Operand::of(g, cdt, &all)?);
            let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
            let ops = Operands {
                q: &qd.rows,
                k: &kd.rows,
                v: &vd.rows,
                out_dout: Some((&od.rows, &gd.rows)),
                mask: md.as_ref(),
            };
            let lsed = lse.data();
            let (dq, dk, dv) = backend::on(&qd.data).flash_backward(
                OP,
                &qd.data,
                &kd.data,
                &vd.data,
                &od.data,
                &lsed,
                &gd.data,
                &call.args(&ops),
                needs,
            )?;
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
