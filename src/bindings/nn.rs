//! Python surface of the fused nn functionals (`gradstream.nn.functional` wraps these),
//! scaled-dot-product attention, NeRF volume rendering, and the in-place random fills of
//! `gradstream.nn.init`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::convert::extract_tensor;
use crate::bindings::op::functions;
use crate::bindings::random::pick_generator;
use crate::bindings::{detached, Obj};
use crate::ops::attention::{self, SdpaOptions, OP};
use crate::ops::nn;
use crate::ops::volume_render::volume_render;
use crate::random;
use crate::tensor::Tensor;

functions! { mod functions;
    /// `layer_norm` over the last `k` dims.
    fn _nn_layer_norm["layer_norm"](x as "input": &Obj<'_>, k: usize,
        weight as "weight": Option<&Obj<'_>>, bias as "bias": Option<&Obj<'_>>, eps: f64)
        [x, k, weight=None, bias=None, eps=1e-5] -> Tensor {
        Ok(nn::layer_norm(&x, k, weight.as_ref(), bias.as_ref(), eps)?)
    }
    /// `x[i, target[i]]` for `x` of shape [N, C] (0 at `ignore_index`).
    fn _nn_gather_rows["nll_loss"](x as "input": &Obj<'_>, target as "target": &Obj<'_>,
        ignore_index: i64) [x, target, ignore_index] -> Tensor {
        Ok(nn::gather_rows(&x, &target, ignore_index)?)
    }
    /// Move the class dim (1) of `[N, C, d...]` last and flatten to `[N*d..., C]`.
    fn _nn_class_last["cross_entropy"](x as "input": &Obj<'_>) [x] -> Tensor {
        if x.rank() < 2 {
            return Err(PyValueError::new_err(format!(
                "cross_entropy: expected input with at least 2 dims, got shape {:?}",
                x.dims()
            )));
        }
        Ok(nn::move_class_dim_last(&x)?)
    }
    /// Rows of `weight` at `idx` (shape `idx.shape + [D]`).
    fn _nn_embedding["embedding"](weight as "weight": &Obj<'_>, idx as "input": &Obj<'_>,
        padding_idx: Option<i64>) [weight, idx, padding_idx=None] -> Tensor {
        Ok(nn::embedding(&weight, &idx, padding_idx, None)?)
    }
    /// Inverted dropout with the global generator (`manual_seed` makes masks repeatable).
    fn _nn_dropout["dropout"](x as "input": &Obj<'_>, p: f64) [x, p] -> Tensor {
        let g = random::default_generator();
        Ok(nn::dropout(&x, p, |n| random::keep_mask(n, p, g))?)
    }
    /// Fill `t` in place with draws from `generator` (the global one if None): U(a, b) for
    /// `"uniform"`, N(a, b^2) for `"normal"` (`nn.init.uniform_` / `normal_`).
    fn _nn_random_["_nn_random_"](t: &Obj<'_>, distribution: &str, a: f64, b: f64,
        generator: Option<&Obj<'_>>) [t, distribution, a, b, generator=None] -> () {
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
    fn _scaled_dot_product_attention[OP](py: Python<'_>, query as "query": &Obj<'_>,
        key as "key": &Obj<'_>, value as "value": &Obj<'_>,
        attn_mask as "attn_mask": Option<&Obj<'_>>, dropout_p: f64, is_causal: bool,
        scale: Option<f64>, enable_gqa: bool, generator: Option<&Obj<'_>>)
        [query, key, value, attn_mask=None, dropout_p=0.0, is_causal=false, scale=None,
         enable_gqa=false, generator=None] -> Tensor {
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
    fn _volume_render["volume_render"](py: Python<'_>, raw as "raw": &Obj<'_>,
        z_vals as "z_vals": &Obj<'_>, rays_d as "rays_d": Option<&Obj<'_>>,
        noise as "noise": Option<&Obj<'_>>, white_background: bool)
        [raw, z_vals, rays_d=None, noise=None, white_background=false] -> Tensor {
        detached(py, || {
            volume_render(&raw, &z_vals, rays_d.as_ref(), noise.as_ref(), white_background)
        })
    }
}
