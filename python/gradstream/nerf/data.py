"""NeRF data in tiny NeRF's ``.npz`` layout: ``images`` (N, H, W, 3) in [0, 1], ``poses``
(N, 4, 4) camera-to-world, ``focal`` (a scalar, in pixels). The last view is held out."""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass

import numpy as np

__all__ = ["DataError", "NerfData", "load_data", "save_data", "validate"]


class DataError(ValueError):
    """A NeRF data file that cannot be used; the message is one line naming the problem."""


@dataclass(frozen=True)
class NerfData:
    """Views of one scene: ``images`` (N, H, W, 3) float32 in [0, 1], ``poses`` (N, 4, 4)
    float32 camera-to-world, ``focal`` in pixels. Views ``[:-1]`` train, view ``-1`` tests."""

    images: np.ndarray
    poses: np.ndarray
    focal: float
    source: str = "<memory>"

    @property
    def num_views(self) -> int:
        return int(self.images.shape[0])

    @property
    def height(self) -> int:
        return int(self.images.shape[1])

    @property
    def width(self) -> int:
        return int(self.images.shape[2])

    @property
    def train_images(self) -> np.ndarray:
        return self.images[:-1]

    @property
    def train_poses(self) -> np.ndarray:
        return self.poses[:-1]

    @property
    def test_image(self) -> np.ndarray:
        return self.images[-1]

    @property
    def test_pose(self) -> np.ndarray:
        return self.poses[-1]


def _fail(source: str, problem: str):
    raise DataError(f"gradstream.nerf: {source}: {problem}")


def _shape(a: np.ndarray) -> str:
    return str(tuple(int(d) for d in a.shape))


def validate(images, poses, focal, source: str = "<memory>") -> NerfData:
    """Check arrays against the layout and return them as `NerfData`; raise `DataError`
    naming the first problem. ``images`` may be floats in [0, 1] or uint8 (scaled by 1/255)."""
    images, poses, focal = np.asarray(images), np.asarray(poses), np.asarray(focal)
    for key, a in (("images", images), ("poses", poses), ("focal", focal)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            _fail(source, f"{key!r} has dtype {a.dtype}; expected a real number type")
    if images.ndim != 4 or images.shape[-1] != 3:
        _fail(source, f"'images' has shape {_shape(images)}; expected (N, H, W, 3)")
    if images.shape[1] < 1 or images.shape[2] < 1:
        _fail(source, f"'images' has shape {_shape(images)}; images must be at least 1x1")
    if poses.ndim != 3 or poses.shape[1:] != (4, 4):
        _fail(source, f"'poses' has shape {_shape(poses)}; expected (N, 4, 4)")
    if images.shape[0] != poses.shape[0]:
        _fail(
            source,
            f"'images' has {images.shape[0]} views but 'poses' has {poses.shape[0]}; "
            "they must match",
        )
    if images.shape[0] < 2:
        _fail(source, f"{images.shape[0]} view(s); need at least 2 (training views + 1 held out)")
    if focal.size != 1:
        _fail(source, f"'focal' has shape {_shape(focal)}; expected a scalar")
    f = float(focal.reshape(()))
    if not (np.isfinite(f) and f > 0):
        _fail(source, f"'focal' is {f}; expected a positive finite number")
    if np.issubdtype(images.dtype, np.integer):
        if images.dtype != np.uint8:
            _fail(source, f"'images' has dtype {images.dtype}; expected floats in [0, 1] or uint8")
        images = images.astype(np.float32) / 255.0
    images = images.astype(np.float32, copy=False)
    poses = poses.astype(np.float32, copy=False)
    if not np.isfinite(images).all():
        _fail(source, "'images' has non-finite values (NaN or inf)")
    lo, hi = float(images.min()), float(images.max())
    if lo < 0.0 or hi > 1.0:
        _fail(source, f"'images' values span [{lo:.4g}, {hi:.4g}]; expected values in [0, 1]")
    if not np.isfinite(poses).all():
        _fail(source, "'poses' has non-finite values (NaN or inf)")
    return NerfData(np.ascontiguousarray(images), np.ascontiguousarray(poses), f, source)


def load_data(path: str | os.PathLike) -> NerfData:
    """Read a tiny-NeRF ``.npz`` (``images``, ``poses``, ``focal``) and validate it.

    Raises:
        DataError (a ValueError): the file is missing, not an .npz, lacks a key, or an array
        has the wrong shape, type or values. The message is one line naming the problem.
    """
    source = os.fspath(path)
    name = os.path.basename(source) or source
    if not os.path.exists(source):
        _fail(name, "no such file")
    if os.path.isdir(source):
        _fail(name, "is a directory, not an .npz file")
    if not zipfile.is_zipfile(source):
        _fail(name, "not an .npz file (not a zip archive)")
    try:
        with np.load(source, allow_pickle=False) as npz:
            missing = [k for k in ("images", "poses", "focal") if k not in npz.files]
            if missing:
                found = ", ".join(repr(k) for k in npz.files) or "none"
                _fail(name, f"missing key {missing[0]!r} (found: {found})")
            arrays = {k: npz[k] for k in ("images", "poses", "focal")}
    except DataError:
        raise
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as e:
        detail = str(e).splitlines()[0] if str(e) else type(e).__name__
        _fail(name, f"cannot be read as .npz ({detail})")
    return validate(arrays["images"], arrays["poses"], arrays["focal"], name)


def save_data(data: NerfData, path: str | os.PathLike) -> None:
    """Write ``data`` in the tiny-NeRF layout (``focal`` as a 0-d float64 array)."""
    with open(path, "wb") as f:  # a file object: np.savez would append ".npz" to the name
        np.savez_compressed(
            f,
            images=data.images.astype(np.float32),
            poses=data.poses.astype(np.float32),
            focal=np.array(data.focal, dtype=np.float64),
        )
