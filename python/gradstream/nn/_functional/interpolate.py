"""``interpolate`` (nearest, nearest-exact, linear, bilinear, area) and the deprecated
``upsample*`` aliases; PyTorch's argument rules, the resampling in Rust."""

from __future__ import annotations

import math
import warnings

from ... import _core
from ..._core import Tensor
from .._reduction import _check_tensor
from .pooling import adaptive_avg_pool1d, adaptive_avg_pool2d

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]

_LINEAR = {"linear": 3, "bilinear": 4}


def _spatial_sizes(input: Tensor, size, scale_factor, dim: int):
    """(output size, scale factors) as PyTorch's ``interpolate`` reads its arguments."""
    shape = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if isinstance(size, (list, tuple)):
            if len(size) != dim:
                raise ValueError(
                    "Input and output must have the same number of spatial dimensions, but "
                    f"got input with spatial dimensions of {shape} and output size of {size}. "
                    "Please provide input tensor in (N, C, d1, d2, ...,dK) format and output "
                    "size in (o1, o2, ...,oK) format."
                )
            if not all(isinstance(s, int) for s in size):
                raise TypeError(
                    "expected size to be one of int or Tuple[int] or Tuple[int, int] or "
                    f"Tuple[int, int, int], but got size with types {[type(s) for s in size]}"
                )
            return list(size), None
        return [size] * dim, None
    if scale_factor is not None:
        if isinstance(scale_factor, (list, tuple)):
            if len(scale_factor) != dim:
                raise ValueError(
                    "Input and scale_factor must have the same number of spatial dimensions, "
                    f"but got input with spatial dimensions of {shape} and scale_factor of "
                    f"shape {scale_factor}. Please provide input tensor in (N, C, d1, d2, "
                    "...,dK) format and scale_factor in (s1, s2, ...,sK) format."
                )
            return None, [float(s) for s in scale_factor]
        return None, [float(scale_factor)] * dim
    raise ValueError("either size or scale_factor should be defined")


def interpolate(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
    recompute_scale_factor: bool | None = None,
    antialias: bool = False,
) -> Tensor:
    """Resample the spatial dims of ``(N, C, L)`` or ``(N, C, H, W)`` input to ``size`` or
    by ``scale_factor``."""
    _check_tensor("interpolate", "input", input)
    if mode in ("nearest", "area", "nearest-exact"):
        if align_corners is not None:
            raise ValueError(
                "align_corners option can only be set with the interpolating modes: "
                "linear | bilinear | bicubic | trilinear"
            )
    elif align_corners is None:
        align_corners = False
    dim = input.dim() - 2
    output_size, scales = _spatial_sizes(input, size, scale_factor, dim)
    if recompute_scale_factor and size is not None:
        raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
    if mode == "area" and output_size is None:
        recompute_scale_factor = True
    if recompute_scale_factor:
        output_size = [math.floor(float(input.shape[i + 2]) * scales[i]) for i in range(dim)]
        scales = None
    if antialias and not (mode in ("bilinear", "bicubic") and input.dim() == 4):
        raise ValueError(
            "Anti-alias option is restricted to bilinear and bicubic modes and requires a "
            "4-D tensor as input"
        )
    if antialias:
        raise NotImplementedError("interpolate: antialias=True is not supported by gradstream")
    if output_size is None:
        output_size = [int(float(input.shape[i + 2]) * scales[i]) for i in range(dim)]
    if mode in _LINEAR and input.dim() != _LINEAR[mode] and input.dim() in (3, 4, 5):
        raise NotImplementedError(
            f"Got {input.dim()}D input, but {mode} mode needs {_LINEAR[mode]}D input"
        )
    if dim not in (1, 2) or mode not in ("nearest", "nearest-exact", "area", *_LINEAR):
        raise NotImplementedError(
            f"Input Error: Only 3D and 4D input Tensors are supported by gradstream (got "
            f"{input.dim()}D) for the modes: nearest | linear | bilinear | area | "
            f"nearest-exact (got {mode})"
        )
    if mode == "area":
        pool = adaptive_avg_pool1d if dim == 1 else adaptive_avg_pool2d
        return pool(input, output_size)
    kernel_mode = "linear" if mode in _LINEAR else mode
    sc = scales if scales is not None else [None] * dim
    if dim == 1:
        output_size, sc = [1, *output_size], [None, *sc]
    return _core._nn_interpolate(
        input, dim, list(output_size), list(sc), kernel_mode, bool(align_corners)
    )


def upsample(
    input: Tensor,
    size=None,
    scale_factor=None,
    mode: str = "nearest",
    align_corners: bool | None = None,
) -> Tensor:
    """Deprecated alias of ``interpolate``."""
    warnings.warn(
        "nn.functional.upsample is deprecated. Use nn.functional.interpolate instead.",
        stacklevel=2,
    )
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(..., mode='nearest')``."""
    warnings.warn(
        "nn.functional.upsample_nearest is deprecated. Use nn.functional.interpolate instead.",
        stacklevel=2,
    )
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input: Tensor, size=None, scale_factor=None) -> Tensor:
    """Deprecated: ``interpolate(..., mode='bilinear', align_corners=True)``."""
    warnings.warn(
        "nn.functional.upsample_bilinear is deprecated. Use nn.functional.interpolate instead.",
        stacklevel=2,
    )
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
