//! Python surface of the fused nn functionals (`gradstream.nn.functional` wraps these),
//! scaled-dot-product attention, NeRF volume rendering, and the in-place random fills of
//! `gradstream.nn.init`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::detached;
use crate::bindings::op::functions;
use crate::bindings::random::pick_generator;
use crate::ops::attention::{self, SdpaOptions, OP};
use crate::ops::nn;
use crate::ops::volume_render::volume_render;
use crate::random;
use crate::tensor::Tensor;

functions! { mod functions;
    /// `layer_norm` over the last `k` dims.
    fn _nn_layer_norm["layer_norm"](input: Tensor, k: usize, weight: Option<Tensor> = None,
        bias: Option<Tensor> = None, eps: f64 = 1e-5) -> Tensor {
        Ok(nn::layer_norm(&input, k, weight.as_ref(), bias.as_ref(), eps)?)
    }
    /// `x[i, target[i]]` for `x` of shape [N, C] (0 at `ignore_index`).
    fn _nn_gather_rows["nll_loss"](input: Tensor, target: Tensor, ignore_index: i64) -> Tensor {
        Ok(nn::gather_rows(&input, &target, ignore_index)?)
    }
    /// Move the class dim (1) of `[N, C, d...]` last and flatten to `[N*d..., C]`.
    fn _nn_class_last["cross_entropy"](input: Tensor) -> Tensor {
        if input.rank() < 2 {
            return Err(PyValueError::new_err(format!(
                "cross_entropy: expected input with at least 2 dims, got shape {:?}",
                input.dims()
            )));
        }
        Ok(nn::move_class_dim_last(&input)?)
    }
    /// Rows of `weight` at `idx` (shape `idx.shape + [D]`).
    fn _nn_embedding["embedding"](weight: Tensor, input: Tensor,
        padding_idx: Option<i64> = None) -> Tensor {
        Ok(nn::embedding(&weight, &input, padding_idx, None)?)
    }
    /// Inverted dropout with the global generator (`manual_seed` makes masks repeatable).
    fn _nn_dropout["dropout"](input: Tensor, p: f64) -> Tensor {
        let g = random::default_generator();
        Ok(nn::dropout(&input, p, |n| random::keep_mask(n, p, g))?)
    }
    /// Fill `t` in place with draws from `generator` (the global one if None): U(a, b) for
    /// `"uniform"`, N(a, b^2) for `"normal"` (`nn.init.uniform_` / `normal_`).
    fn _nn_random_["_nn_random_"](t: Object, distribution: Str, a: f64, b: f64,
        generator: Option<Object> = None) -> () {
        let op = if distribution == "normal" { "normal_" } else { "uniform_" };
        let g = pick_generator(op, generator)?;
        let t = extract_tensor(op, "tensor", t)?;
        match distribution {
            "uniform" => Ok(random::uniform_(&t, a, b, &g)?),
            "normal" => Ok(random::normal_(&t, a, b, &g)?),
            other => Err(PyValueError::new_err(format!(
                "_nn_random_: unknown distribution '{other}'"
            ))),
        }
    }

    /// Scaled dot-product attention, FlashAttention-2 on the CPU.
    ///
    /// Args:
    ///     query, key, value: (..., L, E), (..., S, E), (..., S, Ev).
    ///     attn_mask: bool (True = attend) or float (added to the scores), broadcast to
    ///         (..., L, S).
    ///     dropout_p: probability of dropping an attention weight; the mask comes from
    ///         `generator` (the global one if None).
    ///     is_causal: query i attends to keys j <= i.
    ///     scale: the scores' factor, 1/sqrt(E) if None.
    ///     enable_gqa: key and value may have fewer heads (dim -3) than query.
    ///
    /// Returns:
    ///     The attention output, (..., L, Ev).
    fn _scaled_dot_product_attention[OP](py: Python<'_>, query: Tensor, key: Tensor, value: Tensor,
        attn_mask: Option<Tensor> = None, dropout_p: f64 = 0.0, is_causal: bool = false,
        scale: Option<f64> = None, enable_gqa: bool = false,
        generator: Option<Object> = None) -> Tensor {
        let g = pick_generator(OP, generator)?;
        let o = SdpaOptions { dropout_p, is_causal, scale, enable_gqa };
        detached(py, || {
            attention::scaled_dot_product_attention(&query, &key, &value, attn_mask.as_ref(), o, &g)
        })
    }

    /// NeRF volume rendering of `raw` (..., S, 4) along `z_vals` (..., S): one fused kernel
    /// with its own O(S)-per-ray backward that saves only the inputs.
    ///
    /// Args:
    ///     raw: rgb logits (3) and density (1) per sample.
    ///     z_vals: sample depths along each ray.
    ///     rays_d: optional ray directions (..., 3); distances are scaled by their norm.
    ///     noise: optional (..., S) added to the density before its relu.
    ///     white_background: composite onto white (`rgb + 1 - acc`).
    ///
    /// Returns:
    ///     One tensor (..., 5 + S): rgb (3), depth, acc, then the S weights.
    fn _volume_render["volume_render"](py: Python<'_>, raw: Tensor, z_vals: Tensor,
        rays_d: Option<Tensor> = None, noise: Option<Tensor> = None,
        white_background: bool = false) -> Tensor {
        detached(py, || {
            volume_render(&raw, &z_vals, rays_d.as_ref(), noise.as_ref(), white_background)
        })
    }
}
