//! Python surface of `scaled_dot_product_attention` (`gradstream.nn.functional` wraps it).

use pyo3::prelude::*;

use crate::bindings::add_functions;
use crate::bindings::convert::{extract_tensor, opt_tensor};
use crate::bindings::random::pick_generator;
use crate::bindings::{detached, Obj};
use crate::ops::attention::{self, SdpaOptions, OP};
use crate::tensor::Tensor;

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
#[pyfunction]
#[pyo3(signature = (query, key, value, attn_mask=None, dropout_p=0.0, is_causal=false, scale=None, enable_gqa=false, generator=None))]
#[allow(clippy::too_many_arguments)]
fn _scaled_dot_product_attention(
    py: Python<'_>,
    query: &Obj<'_>,
    key: &Obj<'_>,
    value: &Obj<'_>,
    attn_mask: Option<&Obj<'_>>,
    dropout_p: f64,
    is_causal: bool,
    scale: Option<f64>,
    enable_gqa: bool,
    generator: Option<&Obj<'_>>,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("scaled_dot_product_attention", || {
        let q = extract_tensor(OP, "query", query)?;
        let k = extract_tensor(OP, "key", key)?;
        let v = extract_tensor(OP, "value", value)?;
        let m = opt_tensor(OP, "attn_mask", attn_mask)?;
        let g = pick_generator(OP, generator)?;
        let o = SdpaOptions {
            dropout_p,
            is_causal,
            scale,
            enable_gqa,
        };
        detached(py, || {
            attention::scaled_dot_product_attention(&q, &k, &v, m.as_ref(), o, &g)
        })
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m, _scaled_dot_product_attention }
    Ok(())
}
