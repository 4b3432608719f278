//! Python surface of the NeRF kernels (`gradstream.nerf` wraps these).

use pyo3::prelude::*;

use crate::bindings::convert::{extract_tensor, opt_tensor};
use crate::bindings::detached;
use crate::bindings::Obj;
use crate::ops::volume_render::volume_render;
use crate::tensor::Tensor;

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
#[pyfunction]
#[pyo3(signature = (raw, z_vals, rays_d=None, noise=None, white_background=false))]
fn _volume_render(
    py: Python<'_>,
    raw: &Obj<'_>,
    z_vals: &Obj<'_>,
    rays_d: Option<&Obj<'_>>,
    noise: Option<&Obj<'_>>,
    white_background: bool,
) -> PyResult<Tensor> {
    let raw = extract_tensor("volume_render", "raw", raw)?;
    let z = extract_tensor("volume_render", "z_vals", z_vals)?;
    let d = opt_tensor("volume_render", "rays_d", rays_d)?;
    let n = opt_tensor("volume_render", "noise", noise)?;
    detached(py, || {
        volume_render(&raw, &z, d.as_ref(), n.as_ref(), white_background)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(_volume_render, m)?)?;
    Ok(())
}
