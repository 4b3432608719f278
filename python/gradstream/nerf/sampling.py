"""Stratified sampling of points along rays between a near and a far bound."""

from __future__ import annotations

from .. import _core
from .._core import Tensor

__all__ = ["sample_stratified"]


def sample_stratified(
    rays_o: Tensor,
    rays_d: Tensor,
    near: float,
    far: float,
    num_samples: int,
    *,
    perturb: bool = True,
    generator=None,
) -> tuple[Tensor, Tensor]:
    """Depths ``linspace(near, far, S)`` along each ray; with ``perturb`` each depth is instead
    drawn uniformly from its stratum, the interval between the midpoints to its neighbours
    (NeRF's stratified sampling), so samples stay sorted and inside [near, far].

    Args:
        rays_o, rays_d: (..., 3) ray origins and directions.
        near, far: the depth bounds, ``near < far``.
        num_samples: S >= 1.
        perturb: jitter each depth inside its stratum (training); off for evaluation.
        generator: the generator the jitter is drawn from (the global one when None).

    Returns:
        (pts, z_vals): (..., S, 3) points ``o + z d`` and (..., S) depths, non-decreasing,
        within [near, far].
    """
    if num_samples < 1:
        raise ValueError(f"sample_stratified: num_samples must be >= 1, got {num_samples}")
    if not near < far:
        raise ValueError(f"sample_stratified: need near < far, got near={near}, far={far}")
    batch = tuple(rays_o.shape[:-1])
    z = _core.linspace(near, far, num_samples, dtype=rays_o.dtype)
    z_vals = z.expand(*batch, num_samples)
    if perturb and num_samples > 1:
        mids = (z[1:] + z[:-1]) * 0.5
        lower = _core.cat([z[:1], mids])
        upper = _core.cat([mids, z[-1:]])
        jitter = _core.rand(*batch, num_samples, dtype=rays_o.dtype, generator=generator)
        z_vals = lower + (upper - lower) * jitter
    pts = rays_o.unsqueeze(-2) + rays_d.unsqueeze(-2) * z_vals.unsqueeze(-1)
    return pts, z_vals
