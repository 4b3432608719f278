//! The `cnn` workload: an FCN-like encoder/decoder from candle-nn layers.
//!
//! The layers follow the harness's `CNN.layers()` order: per encoder stage 2 × (conv3×3 +
//! BatchNorm + ReLU) and a 2×2 max pool; per decoder stage a stride-2 ConvTranspose2d, then
//! conv3×3 + BatchNorm + ReLU; a 1×1 conv head; cross-entropy per pixel. BatchNorm runs
//! candle-nn's `forward_train` (batch statistics, running statistics updated).

use std::collections::HashMap;

use candle_core::{DType, Module, Result, Tensor, Var};
use candle_nn::{BatchNorm, Conv2d, Conv2dConfig, ConvTranspose2d, ConvTranspose2dConfig};

use crate::{Loss, Params};

enum Layer {
    Conv(Conv2d),
    Norm(BatchNorm),
    Relu,
    Pool,
    Up(ConvTranspose2d),
}

impl Layer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Layer::Conv(c) => conv_forward(c, x),
            Layer::Norm(b) => b.forward_train(x),
            Layer::Relu => x.relu(),
            Layer::Pool => x.max_pool2d(2),
            Layer::Up(u) => u.forward(x),
        }
    }
}

/// `c.forward(x)`, except where candle 0.9.2's conv2d computes a wrong result: its tiled CPU
/// kernel takes an NCHW-contiguous input whose C == H == W for an NHWC one (the strides
/// coincide: huggingface/candle#3404, fixed after 0.9.2); there the padding is applied by hand
/// so that H and W differ from C.
fn conv_forward(c: &Conv2d, x: &Tensor) -> Result<Tensor> {
    let (_, ch, h, w) = x.dims4()?;
    let pad = c.config().padding;
    if !(ch == h && h == w && pad > 0) {
        return c.forward(x);
    }
    let padded = x.pad_with_zeros(2, pad, pad)?.pad_with_zeros(3, pad, pad)?;
    let cfg = Conv2dConfig {
        padding: 0,
        ..*c.config()
    };
    Conv2d::new(c.weight().clone(), c.bias().cloned(), cfg).forward(&padded)
}

fn conv(p: &mut Params, name: &str, padding: usize, bias: bool) -> Result<Layer> {
    let w = p.var(&format!("{name}.weight"))?;
    let b = if bias {
        Some(p.var(&format!("{name}.bias"))?)
    } else {
        None
    };
    let cfg = Conv2dConfig {
        padding,
        ..Default::default()
    };
    Ok(Layer::Conv(Conv2d::new(w, b, cfg)))
}

fn norm(p: &mut Params, name: &str) -> Result<Layer> {
    let w = p.var(&format!("{name}.weight"))?;
    let b = p.var(&format!("{name}.bias"))?;
    let c = w.dim(0)?;
    let mean = Tensor::zeros(c, DType::F32, w.device())?;
    let var = Tensor::ones(c, DType::F32, w.device())?;
    Ok(Layer::Norm(BatchNorm::new(c, mean, var, w, b, 1e-5)?))
}

fn up(p: &mut Params, name: &str) -> Result<Layer> {
    let w = p.var(&format!("{name}.weight"))?;
    let b = p.var(&format!("{name}.bias"))?;
    let cfg = ConvTranspose2dConfig {
        stride: 2,
        ..Default::default()
    };
    Ok(Layer::Up(ConvTranspose2d::new(w, Some(b), cfg)))
}

/// The model's `Var`s and its loss on the file's `x` (N, C, H, W) and `target` (N, H, W).
pub fn build(tensors: &HashMap<String, Tensor>, stages: usize) -> Result<(Vec<Var>, Loss)> {
    let mut p = Params::new(tensors);
    let mut layers = Vec::new();
    for i in 0..stages {
        for j in 0..2 {
            layers.push(conv(&mut p, &format!("enc{i}.conv{j}"), 1, false)?);
            layers.push(norm(&mut p, &format!("enc{i}.bn{j}"))?);
            layers.push(Layer::Relu);
        }
        layers.push(Layer::Pool);
    }
    for i in (0..stages).rev() {
        layers.push(up(&mut p, &format!("dec{i}.up"))?);
        layers.push(conv(&mut p, &format!("dec{i}.conv"), 1, false)?);
        layers.push(norm(&mut p, &format!("dec{i}.bn"))?);
        layers.push(Layer::Relu);
    }
    layers.push(conv(&mut p, "head", 0, true)?);
    let x = p.tensor("x")?;
    let target = p.tensor("target")?.flatten_all()?;
    let loss = move || -> Result<Tensor> {
        let mut h = x.clone();
        for layer in &layers {
            h = layer.forward(&h)?;
        }
        // Per-pixel cross-entropy: (N, K, H, W) -> (N·H·W, K) rows of logits.
        let k = h.dim(1)?;
        let logits = h.permute((0, 2, 3, 1))?.reshape(((), k))?;
        candle_nn::loss::cross_entropy(&logits, &target)
    };
    Ok((p.into_vars(), Box::new(loss)))
}
