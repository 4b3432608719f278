"""Volume rendering: composite the samples along each ray into a colour, a depth and an opacity.

This is the reference implementation in gradstream ops; a fused kernel with the same
signature and results may take its place.
"""

from __future__ import annotations

from typing import NamedTuple

from .. import _core
from .._core import Tensor

__all__ = ["RenderResult", "volume_render"]


class RenderResult(NamedTuple):
    """What `volume_render` returns: per-ray colour (..., 3), depth (...), opacity (...), and
    each sample's compositing weight (..., S)."""

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
    """Composite the network's raw output along each ray (NeRF's quadrature).

    Args:
        raw: (..., S, 4) pre-activation network output: rgb logits (3) then density (1).
        z_vals: (..., S) sample depths along each ray, non-decreasing.
        rays_d: (..., 3) ray directions; distances between samples are scaled by their norm.
        white_background: composite onto white instead of black.
        raw_noise_std: standard deviation of Gaussian noise added to the density logits.
        generator: the generator the noise is drawn from (the global one when None).

    Returns:
        RenderResult(rgb_map (..., 3), depth_map (...), acc_map (...), weights (..., S)).
    """
    if raw.ndim < 2 or raw.shape[-1] != 4:
        raise ValueError(f"volume_render: raw must have shape (..., S, 4), got {tuple(raw.shape)}")
    if tuple(z_vals.shape) != tuple(raw.shape[:-1]):
        raise ValueError(
            f"volume_render: z_vals has shape {tuple(z_vals.shape)}; expected "
            f"{tuple(raw.shape[:-1])} to match raw {tuple(raw.shape)}"
        )
    if rays_d is not None and tuple(rays_d.shape) != tuple(raw.shape[:-2]) + (3,):
        raise ValueError(
            f"volume_render: rays_d has shape {tuple(rays_d.shape)}; expected "
            f"{tuple(raw.shape[:-2]) + (3,)} for raw {tuple(raw.shape)}"
        )
    rgb = _core.sigmoid(raw[..., :3])
    density = raw[..., 3]
    if raw_noise_std > 0.0:
        noise = _core.randn(*density.shape, dtype=density.dtype, generator=generator)
        density = density + noise * raw_noise_std
    sigma = _core.relu(density)

    last = _core.full((*z_vals.shape[:-1], 1), 1e10, dtype=z_vals.dtype)
    dists = _core.cat([z_vals[..., 1:] - z_vals[..., :-1], last], -1)
    if rays_d is not None:
        dists = dists * _core.norm(rays_d, dim=-1, keepdim=True)

    alpha = 1.0 - _core.exp(-sigma * dists)
    trans = _core.cumprod(1.0 - alpha + 1e-10, -1)
    ones = _core.ones((*alpha.shape[:-1], 1), dtype=alpha.dtype)
    weights = alpha * _core.cat([ones, trans[..., :-1]], -1)

    rgb_map = (weights.unsqueeze(-1) * rgb).sum(-2)
    depth_map = (weights * z_vals).sum(-1)
    acc_map = weights.sum(-1)
    if white_background:
        rgb_map = rgb_map + (1.0 - acc_map).unsqueeze(-1)
    return RenderResult(rgb_map, depth_map, acc_map, weights)
