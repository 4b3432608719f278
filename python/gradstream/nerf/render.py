"""NeRF volume rendering (``raw2outputs``) as one fused kernel with its own backward.

The composite written with tensor ops saves several (rays, samples) intermediates for its
backward (sigmoid, alpha, the cumulative product, the weights...). The fused op saves only
its inputs and recomputes the rest per ray in the backward, in O(samples) memory per ray.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import _core
from .._core import Tensor


class RenderResult(NamedTuple):
    """The rendered maps; each a view of one (..., 5 + S) tensor, all differentiable."""

    rgb_map: Tensor
    depth_map: Tensor
    acc_map: Tensor
    weights: Tensor


def volume_render(
    raw: Tensor,
    z_vals: Tensor,
    rays_d: Tensor | None = None,
    *,
    white_background: bool = False,
    raw_noise_std: float = 0.0,
    generator=None,
) -> RenderResult:
    """Composite samples along rays into colour, depth and opacity (NeRF's ``raw2outputs``).

    Args:
        raw: (..., S, 4) network output per sample: rgb logits, then density.
        z_vals: (..., S) sample depths along each ray.
        rays_d: optional (..., 3) ray directions; sample distances are scaled by their norm.
        white_background: composite onto white (``rgb + 1 - acc``).
        raw_noise_std: standard deviation of Gaussian noise added to the density (training).
        generator: the generator the noise is drawn from (default: the global one).

    Returns:
        ``RenderResult(rgb_map (..., 3), depth_map (...), acc_map (...), weights (..., S))``.
    """
    for name, t in (("raw", raw), ("z_vals", z_vals), ("rays_d", rays_d)):
        if t is not None and not isinstance(t, Tensor):
            kind = type(t).__name__
            raise TypeError(f"volume_render(): argument '{name}' must be Tensor, not {kind}")
    noise = None
    if raw_noise_std > 0.0 and raw.ndim >= 1:
        # Drawn here, added to the density inside the kernel (it saves this (..., S)
        # tensor rather than a noisy copy of raw).
        noise = _core.randn(*raw.shape[:-1], dtype=raw.dtype, generator=generator) * raw_noise_std
    out = _core._volume_render(raw, z_vals, rays_d, noise, white_background)
    return RenderResult(out[..., 0:3], out[..., 3], out[..., 4], out[..., 5:])
