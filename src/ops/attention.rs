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

use crate::backend::cast::Convert;
use crate::backend::Compare;
use std::sync::Arc;

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::attention::{AttnArgs, AttnDropout, AttnNeeds, AttnRows};
use crate::backend::strided::row_offset;
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

const NO_ROWS: AttnRows<'static> = AttnRows { base: &[], row: 0 };

impl Call {
    /// The kernel's arguments for q, k, v and the mask; the backward adds the output and its
    /// incoming gradient.
    fn args<'a>(
        &'a self,
        [q, k, v]: &'a [Operand; 3],
        out_dout: Option<(&'a Operand, &'a Operand)>,
        mask: Option<&'a candle_core::Tensor>,
    ) -> AttnArgs<'a> {
        let p = &self.plan;
        AttnArgs {
            shape: p.shape,
            q: q.rows(),
            k: k.rows(),
            v: v.rows(),
            out: out_dout.map_or(NO_ROWS, |(o, _)| o.rows()),
            dout: out_dout.map_or(NO_ROWS, |(_, g)| g.rows()),
            mask: mask.map(|m| p.mask(m)),
            causal: self.causal,
            scale: self.scale,
            dropout: self.dropout,
        }
    }

    /// q, k and v as kernel operands in the compute dtype `cdt`.
    fn inputs(&self, q: &Tensor, k: &Tensor, v: &Tensor, cdt: DType) -> Result<[Operand; 3]> {
        let p = &self.plan;
        Ok([
            Operand::of(q, cdt, &p.q_of)?,
            Operand::of(k, cdt, &p.k_of)?,
            Operand::of(v, cdt, &p.v_of)?,
        ])
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
        let ins = self.inputs(q, k, v, cdt)?;
        let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
        let args = self.args(&ins, None, md.as_ref());
        let [qd, kd, vd] = &ins;
        let (out_d, lse_d) =
            backend::on(&qd.data).flash_forward(OP, &qd.data, &kd.data, &vd.data, &args)?;
        let p = &self.plan;
        let mut dims = p.batch.clone();
        dims.extend([p.shape.l, p.shape.ev]);
        let out_d = out_d.reshape(dims.as_slice()).op(OP)?;
        let out = to_dtype(&Tensor::new(out_d, cdt), q.dtype())?;
        Ok((out, Tensor::new(lse_d, cdt)))
    }
}

/// A kernel operand: its data in the compute dtype, where each batch item's rows start in
/// the storage, and the row stride.
struct Operand {
    data: candle_core::Tensor,
    base: Vec<usize>,
    row: usize,
}

impl Operand {
    /// `t` in dtype `dt`, read in place where its rows' elements are adjacent (copied
    /// first where not); `items[n]` is the batch item of `t` that output item `n` reads.
    fn of(t: &Tensor, dt: DType, items: &[usize]) -> Result<Operand> {
        let mut d = to_dtype(t, dt)?.data();
        let r = d.rank();
        if d.dims()[r - 1] > 1 && d.stride()[r - 1] != 1 {
            d = d.dense().op(OP)?;
        }
        // A batch item is a "row" of the dims before the last: its first row's offset.
        let (dims, stride) = (&d.dims()[..r - 1], &d.stride()[..r - 1]);
        let start = d.layout().start_offset();
        let base = items
            .iter()
            .map(|&i| row_offset(dims, stride, start, i))
            .collect();
        let row = stride[r - 2];
        Ok(Operand { data: d, base, row })
    }

    fn rows(&self) -> AttnRows<'_> {
        AttnRows {
            base: &self.base,
            row: self.row,
        }
    }
}

/// The mask as an additive float tensor in `dt`: a bool mask becomes 0 (attend) / -inf.
fn additive_mask(m: &Tensor, dt: DType) -> Result<candle_core::Tensor> {
    let data = m.data();
    let out = if m.dtype() == DType::Bool {
        let (shape, dev) = (data.shape(), data.device());
        let zeros = crate::device::zeros(shape, dt.candle(), dev).op(OP)?;
        let ninf = crate::device::full(shape, f64::NEG_INFINITY, dt.candle(), dev)?;
        data.select(&zeros, &ninf).op(OP)?
    } else {
        data.cast(dt.candle()).op(OP)?
    };
    out.dense().op(OP)
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
    let started = remat::start();
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
        remat::note(OP, &out, &remat_inputs, started, move |ins| {
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
            let ins = call.inputs(q, k, v, cdt)?;
            let (od, gd) = (Operand::of(out, cdt, &all)?, Operand::of(g, cdt, &all)?);
            let md = mask.map(|m| additive_mask(m, cdt)).transpose()?;
            let args = call.args(&ins, Some((&od, &gd)), md.as_ref());
            let [qd, kd, vd] = &ins;
            let lsed = lse.data();
            let (dq, dk, dv) = backend::on(&qd.data).flash_backward(
                OP, &qd.data, &kd.data, &vd.data, &od.data, &lsed, &gd.data, &args, needs,
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
