"""Camera rays: one ray per pixel from a camera-to-world pose and a focal length.

The camera convention is tiny NeRF's (OpenGL): the camera looks down its -z axis, +x is
right and +y is up, so pixel (i, j) (column i, row j) has the camera-space direction
``[(i - W/2) / f, -(j - H/2) / f, -1]``.
"""

from __future__ import annotations

import numpy as np

from .. import _core
from .._core import Tensor

__all__ = ["get_rays", "get_rays_np", "camera_dirs_np"]


def camera_dirs_np(height: int, width: int, focal: float) -> np.ndarray:
    """(H, W, 3) float64 camera-space ray directions (unnormalised, z = -1)."""
    i, j = np.meshgrid(
        np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64), indexing="xy"
    )
    return np.stack([(i - width * 0.5) / focal, -(j - height * 0.5) / focal, -np.ones_like(i)], -1)


def get_rays_np(height: int, width: int, focal: float, c2w) -> tuple[np.ndarray, np.ndarray]:
    """`get_rays` in NumPy: c2w (..., 4, 4) or (..., 3, 4) -> origins and directions
    (..., H, W, 3), in c2w's dtype when it is floating (float64 otherwise)."""
    c2w = np.asarray(c2w)
    dtype = c2w.dtype if np.issubdtype(c2w.dtype, np.floating) else np.float64
    dirs = camera_dirs_np(height, width, focal)
    rot = c2w[..., :3, :3].astype(np.float64)
    rays_d = np.einsum("hwc,...rc->...hwr", dirs, rot)
    origin = c2w[..., None, None, :3, 3].astype(np.float64)
    rays_o = np.broadcast_to(origin, rays_d.shape)
    return rays_o.astype(dtype), rays_d.astype(dtype)


def get_rays(height: int, width: int, focal: float, c2w: Tensor) -> tuple[Tensor, Tensor]:
    """One ray per pixel of an H x W image seen from the pose ``c2w``.

    Args:
        height, width: the image size in pixels.
        focal: the focal length in pixels.
        c2w: (..., 4, 4) or (..., 3, 4) camera-to-world matrices (a Tensor or an array).

    Returns:
        (rays_o, rays_d): (..., H, W, 3) each, in c2w's dtype; directions are not normalised.
    """
    if not isinstance(c2w, Tensor):
        c2w = _core.from_numpy(np.ascontiguousarray(c2w))
    if c2w.ndim < 2 or tuple(c2w.shape[-2:]) not in ((4, 4), (3, 4)):
        raise ValueError(f"get_rays: c2w must have shape (..., 4, 4), got {tuple(c2w.shape)}")
    dirs = _core.from_numpy(camera_dirs_np(height, width, focal)).to(c2w.dtype)
    rot = c2w[..., :3, :3]
    # (H*W, 3) @ R^T for every pose: rays_d[p] = R @ dirs[p]
    flat = _core.matmul(dirs.reshape(-1, 3), rot.transpose(-1, -2))
    batch = tuple(c2w.shape[:-2])
    rays_d = flat.reshape(*batch, height, width, 3)
    origin = c2w[..., :3, 3].reshape(*batch, 1, 1, 3)
    rays_o = origin.expand(*batch, height, width, 3)
    return rays_o, rays_d
