//! The `lora` workload: a GPT-2-shaped decoder with frozen base weights and LoRA adapters.
//!
//! As a candle user would write it: the base weights are plain `Tensor`s (no gradient is
//! tracked for them), the adapters' A and B are `Var`s, attention is a matmul, a causal mask
//! filled with -inf and a softmax. LayerNorm is `candle_nn::ops::layer_norm_slow` and the
//! softmax `candle_nn::ops::softmax`: candle-nn's fused `layer_norm` and `softmax_last_dim`
//! kernels have no backward.

use std::collections::HashMap;

use candle_core::{Result, Tensor, Var, D};

use crate::{Loss, Params};

struct Block {
    ln1: (Tensor, Tensor),
    qkv: (Tensor, Tensor),
    proj: (Tensor, Tensor),
    ln2: (Tensor, Tensor),
    fc: (Tensor, Tensor),
    out: (Tensor, Tensor),
    /// (A, B) of the q, k, v and output projections' adapters.
    lora: [(Tensor, Tensor); 4],
}

fn pair(p: &Params, name: &str) -> Result<(Tensor, Tensor)> {
    Ok((
        p.tensor(&format!("{name}.weight"))?,
        p.tensor(&format!("{name}.bias"))?,
    ))
}

fn linear(x: &Tensor, (w, b): &(Tensor, Tensor)) -> Result<Tensor> {
    x.broadcast_matmul(&w.t()?)?.broadcast_add(b)
}

fn layer_norm(x: &Tensor, (w, b): &(Tensor, Tensor)) -> Result<Tensor> {
    candle_nn::ops::layer_norm_slow(x, w, b, 1e-5)
}

fn lora(x: &Tensor, (a, b): &(Tensor, Tensor), scale: f64) -> Result<Tensor> {
    x.broadcast_matmul(&a.t()?)?.broadcast_matmul(&b.t()?)? * scale
}

struct Gpt {
    wte: Tensor,
    wpe: Tensor,
    blocks: Vec<Block>,
    ln_f: (Tensor, Tensor),
    heads: usize,
    scale: f64,
}

impl Gpt {
    fn attention(&self, blk: &Block, a: &Tensor, mask: &Tensor) -> Result<Tensor> {
        let (b, t, d) = a.dims3()?;
        let hd = d / self.heads;
        let qkv = linear(a, &blk.qkv)?;
        let mut qkv_heads = Vec::with_capacity(3);
        for (i, adapter) in blk.lora[..3].iter().enumerate() {
            let z = (qkv.narrow(D::Minus1, i * d, d)? + lora(a, adapter, self.scale)?)?;
            qkv_heads.push(
                z.reshape((b, t, self.heads, hd))?
                    .transpose(1, 2)?
                    .contiguous()?,
            );
        }
        let (q, k, v) = (&qkv_heads[0], &qkv_heads[1], &qkv_heads[2]);
        let att = (q.matmul(&k.t()?)? / (hd as f64).sqrt())?;
        let neg_inf = Tensor::new(f32::NEG_INFINITY, att.device())?.broadcast_as(att.shape())?;
        let att = mask.broadcast_as(att.shape())?.where_cond(&neg_inf, &att)?;
        let att = candle_nn::ops::softmax(&att, D::Minus1)?;
        let y = att.matmul(v)?.transpose(1, 2)?.reshape((b, t, d))?;
        linear(&y, &blk.proj)? + lora(&y, &blk.lora[3], self.scale)?
    }

    fn loss(&self, idx: &Tensor, targets: &Tensor) -> Result<Tensor> {
        let (b, t) = idx.dims2()?;
        let d = self.wte.dim(1)?;
        let tok = self
            .wte
            .index_select(&idx.flatten_all()?, 0)?
            .reshape((b, t, d))?;
        let mut x = tok.broadcast_add(&self.wpe.narrow(0, 0, t)?)?;
        // 1 above the diagonal: a position attends to itself and the ones before it.
        let above: Vec<u8> = (0..t)
            .flat_map(|i| (0..t).map(move |j| u8::from(j > i)))
            .collect();
        let mask = Tensor::from_vec(above, (t, t), x.device())?;
        for blk in &self.blocks {
            x = (&x + self.attention(blk, &layer_norm(&x, &blk.ln1)?, &mask)?)?;
            let h = linear(&layer_norm(&x, &blk.ln2)?, &blk.fc)?.gelu_erf()?;
            x = (&x + linear(&h, &blk.out)?)?;
        }
        let x = layer_norm(&x, &self.ln_f)?;
        let logits = x.broadcast_matmul(&self.wte.t()?)?;
        let vocab = self.wte.dim(0)?;
        candle_nn::loss::cross_entropy(&logits.reshape((b * t, vocab))?, targets)
    }
}

/// The adapters' `Var`s and the loss on the file's `tokens` (B, T + 1): predict each next one.
pub fn build(
    tensors: &HashMap<String, Tensor>,
    layers: usize,
    heads: usize,
    alpha: f64,
) -> Result<(Vec<Var>, Loss)> {
    let mut p = Params::new(tensors);
    let mut blocks = Vec::with_capacity(layers);
    let mut rank = 0;
    for i in 0..layers {
        let n = |s: &str| format!("h.{i}.{s}");
        let mut adapter = |s: &str| -> Result<(Tensor, Tensor)> {
            Ok((
                p.var(&n(&format!("lora_{s}.A")))?,
                p.var(&n(&format!("lora_{s}.B")))?,
            ))
        };
        let lora = [
            adapter("q")?,
            adapter("k")?,
            adapter("v")?,
            adapter("proj")?,
        ];
        rank = lora[0].0.dim(0)?;
        blocks.push(Block {
            ln1: pair(&p, &n("ln1"))?,
            qkv: pair(&p, &n("qkv"))?,
            proj: pair(&p, &n("proj"))?,
            ln2: pair(&p, &n("ln2"))?,
            fc: pair(&p, &n("fc"))?,
            out: pair(&p, &n("out"))?,
            lora,
        });
    }
    if rank == 0 {
        candle_core::bail!("lora: no adapters (layers = {layers})");
    }
    let gpt = Gpt {
        wte: p.tensor("wte")?,
        wpe: p.tensor("wpe")?,
        blocks,
        ln_f: pair(&p, "ln_f")?,
        heads,
        scale: alpha / rank as f64,
    };
    let tokens = p.tensor("tokens")?;
    let t = tokens.dim(1)?.saturating_sub(1);
    if t == 0 {
        candle_core::bail!(
            "lora: tokens {:?} leave no next token to predict",
            tokens.shape()
        );
    }
    let idx = tokens.narrow(1, 0, t)?.contiguous()?;
    let targets = tokens.narrow(1, 1, t)?.flatten_all()?;
    let loss = move || gpt.loss(&idx, &targets);
    Ok((p.into_vars(), Box::new(loss)))
}
