"""Ops that move or pad elements: ``one_hot``, ``pad``, pixel and channel shuffles."""

from __future__ import annotations

import warnings

from ... import _core
from ..._core import Tensor
from .._reduction import _check_tensor

__all__ = [
    "one_hot", "pad", "pixel_shuffle", "pixel_unshuffle", "channel_shuffle",
    "native_channel_shuffle", "affine_grid",
]  # fmt: skip


def one_hot(tensor: Tensor, num_classes: int = -1) -> Tensor:
    """``int64`` tensor of shape ``(*tensor.shape, num_classes)``, 1 at each value's index;
    ``num_classes=-1`` takes ``max + 1``."""
    _check_tensor("one_hot", "tensor", tensor)
    if tensor.dtype != _core.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if tensor.numel() == 0:
        if num_classes <= 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        return _core.zeros(*tuple(tensor.shape), num_classes, dtype=_core.int64)
    if int(tensor.min()) < 0:
        raise RuntimeError("Class values must be non-negative.")
    if num_classes == -1:
        num_classes = int(tensor.max()) + 1
    elif int(tensor.max()) >= num_classes:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return (tensor.unsqueeze(-1) == _core.arange(num_classes, dtype=_core.int64)).long()


def _pad_constant(input: Tensor, pads: list[int], value: float) -> Tensor:
    shape = list(input.shape)
    for i in range(len(pads) // 2):
        dim = input.dim() - 1 - i
        shape[dim] = max(shape[dim] + pads[2 * i] + pads[2 * i + 1], 0)
    if input.numel() == 0:
        # Nothing of the input survives; the engine's narrow and cat backwards panic on empty
        # tensors at a non-zero offset, so build the result and keep the graph by adding
        # the input's (zero) sum.
        return _core.full(shape, value, dtype=input.dtype) + input.sum()
    out = input
    for i in range(len(pads) // 2):
        dim = input.dim() - 1 - i
        left, right = pads[2 * i], pads[2 * i + 1]
        # Negative padding crops.
        start, stop = max(-left, 0), out.shape[dim] - max(-right, 0)
        if start or stop != out.shape[dim]:
            out = out.narrow(dim, start, max(stop - start, 0))
        if left > 0 or right > 0:
            parts = []
            for n in (left, right):
                part_shape = list(out.shape)
                part_shape[dim] = max(n, 0)
                parts.append(_core.full(part_shape, value, dtype=out.dtype))
            out = _core.cat([parts[0], out, parts[1]], dim)
    return out


def _source_index(j: int, n: int, mode: str) -> int:
    if mode == "replicate":
        return min(max(j, 0), n - 1)
    if mode == "circular":
        return j % n
    # reflect: mirror about the edge elements, which are not repeated
    if j < 0:
        return -j
    if j >= n:
        return 2 * (n - 1) - j
    return j


def pad(input: Tensor, pad, mode: str = "constant", value: float | None = None) -> Tensor:
    """Pads the last ``len(pad) // 2`` dimensions: ``pad = (last_left, last_right,
    second_last_left, ...)``; ``mode`` is ``'constant'``, ``'reflect'``, ``'replicate'`` or
    ``'circular'``; negative padding crops."""
    _check_tensor("pad", "input", input)
    pads = [int(p) for p in pad]
    if len(pads) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pads) // 2 > input.dim():
        raise RuntimeError(
            "Padding length should be less than or equal to two times the input dimension but "
            f"got padding length {len(pads)} and input of dimension {input.dim()}"
        )
    if mode == "constant":
        return _pad_constant(input, pads, 0.0 if value is None else float(value))
    if mode not in ("reflect", "replicate", "circular"):
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    k = len(pads) // 2
    if k not in (1, 2, 3) or input.dim() not in (k + 1, k + 2):
        raise NotImplementedError(
            f"Padding size {len(pads)} is not supported for {input.dim()}D input tensor.\n"
            "Supported combinations for non-constant padding: (padding size, input dim) in "
            "(2, 2D or 3D), (4, 3D or 4D), (6, 4D or 5D)"
        )
    out = input
    for i in range(k):
        dim = input.dim() - 1 - i
        left, right, n = pads[2 * i], pads[2 * i + 1], input.shape[dim]
        if mode == "reflect" and (left >= n or right >= n):
            raise RuntimeError(
                f"Argument #4: Padding size should be less than the corresponding input "
                f"dimension, but got: padding ({left}, {right}) at dimension {dim} of input "
                f"{list(input.shape)}"
            )
        if mode == "circular" and (left > n or right > n):
            raise RuntimeError("Padding value causes wrapping around more than once.")
        if mode == "replicate" and n == 0 and (left > 0 or right > 0):
            raise RuntimeError(f"pad: cannot replicate an empty dimension {dim}")
        index = [_source_index(j, n, mode) for j in range(-left, n + right)]
        out = out.index_select(dim, _core.tensor(index, dtype=_core.int64))
    return out


def pixel_shuffle(input: Tensor, upscale_factor: int) -> Tensor:
    """``(*, C r^2, H, W)`` to ``(*, C, H r, W r)``."""
    _check_tensor("pixel_shuffle", "input", input)
    if input.dim() < 3:
        raise RuntimeError(
            f"pixel_shuffle expects input to have at least 3 dimensions, but got input with "
            f"{input.dim()} dimension(s)"
        )
    r = int(upscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_shuffle expects a positive upscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    if c % (r * r):
        raise RuntimeError(
            "pixel_shuffle expects its input's 'channel' dimension to be divisible by the "
            f"square of upscale_factor, but input.size(-3)={c} is not divisible by {r * r}"
        )
    nb = len(batch)
    x = input.reshape(*batch, c // (r * r), r, r, h, w)
    x = x.permute(*range(nb), nb, nb + 3, nb + 1, nb + 4, nb + 2)
    return x.reshape(*batch, c // (r * r), h * r, w * r)


def pixel_unshuffle(input: Tensor, downscale_factor: int) -> Tensor:
    """``(*, C, H r, W r)`` to ``(*, C r^2, H, W)``: the inverse of ``pixel_shuffle``."""
    _check_tensor("pixel_unshuffle", "input", input)
    if input.dim() < 3:
        raise RuntimeError(
            f"pixel_unshuffle expects input to have at least 3 dimensions, but got input with "
            f"{input.dim()} dimension(s)"
        )
    r = int(downscale_factor)
    if r <= 0:
        raise RuntimeError(f"pixel_unshuffle expects a positive downscale_factor, but got {r}")
    *batch, c, h, w = input.shape
    if h % r or w % r:
        raise RuntimeError(
            "pixel_unshuffle expects height and width to be divisible by downscale_factor, "
            f"but got height={h}, width={w}, downscale_factor={r}"
        )
    nb = len(batch)
    x = input.reshape(*batch, c, h // r, r, w // r, r)
    x = x.permute(*range(nb), nb, nb + 2, nb + 4, nb + 1, nb + 3)
    return x.reshape(*batch, c * r * r, h // r, w // r)


def channel_shuffle(input: Tensor, groups: int) -> Tensor:
    """Channels (dim 1) viewed as ``(groups, C / groups)`` and transposed."""
    _check_tensor("channel_shuffle", "input", input)
    if groups <= 0:
        raise RuntimeError(f"Number of groups to divide channels in must be positive. Value of "
                           f"groups:{groups}")  # fmt: skip
    if input.dim() <= 2:
        raise RuntimeError(
            f"channel_shuffle expects input to have at least 3 dimensions, but got input with "
            f"sizes {list(input.shape)}"
        )
    n, c, *rest = input.shape
    if c % groups:
        raise RuntimeError(
            f"Number of channels must be divisible by groups. Got {c} channels and {groups} groups."
        )
    x = input.reshape(n, groups, c // groups, *rest).transpose(1, 2)
    return x.reshape(n, c, *rest)


native_channel_shuffle = channel_shuffle


def _grid_coords(n: int, align_corners: bool, dtype) -> Tensor:
    """The normalised pixel coordinates in ``[-1, 1]``: of the pixel centres, or with
    ``align_corners`` of the corner pixels' centres."""
    if n <= 1:
        return _core.zeros(max(n, 0), dtype=dtype)
    coords = _core.linspace(-1.0, 1.0, n, dtype=dtype)
    return coords if align_corners else coords * ((n - 1) / n)


def affine_grid(theta: Tensor, size, align_corners: bool | None = None) -> Tensor:
    """The sampling grid ``theta @ [x, y, (z,) 1]`` over the normalised output coordinates
    of ``size = (N, C, H, W)`` or ``(N, C, D, H, W)``: shape ``(N, H, W, 2)`` or
    ``(N, D, H, W, 3)``."""
    _check_tensor("affine_grid", "theta", theta)
    if align_corners is None:
        warnings.warn(
            "Default grid_sample and affine_grid behavior has changed to align_corners=False "
            "since 1.3.0. Please specify align_corners=True if the old behavior is desired. "
            "See the documentation of grid_sample for details.",
            stacklevel=2,
        )
        align_corners = False
    if not theta.is_floating_point():
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = [int(s) for s in size]
    if len(size) not in (4, 5):
        raise NotImplementedError(
            "affine_grid only supports 4D and 5D sizes, for 2D and 3D affine transforms, "
            f"respectively. Got size {size}."
        )
    k = len(size) - 2
    if theta.dim() != 3 or tuple(theta.shape[1:]) != (k, k + 1) or theta.shape[0] != size[0]:
        raise ValueError(
            f"Expected a batch of {k}D affine matrices of shape Nx{k}x{k + 1} for size "
            f"{size}. Got {list(theta.shape)}."
        )
    if min(size[2:]) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn(
            "Since version 1.3.0, affine_grid behavior has changed for unit-size grids when "
            "align_corners=True. This is not an intended use case of affine_grid. See the "
            "documentation of affine_grid for details.",
            stacklevel=2,
        )
    # Coordinates are (x, y[, z]) with x along the last (width) dimension.
    axes = [_grid_coords(n, align_corners, theta.dtype) for n in reversed(spatial)]
    mesh = _core.meshgrid(*reversed(axes), indexing="ij")  # each of shape spatial
    base = _core.stack([*reversed(mesh), _core.ones(*spatial, dtype=theta.dtype)], -1)
    flat = base.reshape(1, -1, k + 1)
    grid = flat.matmul(theta.transpose(1, 2))  # (N, prod(spatial), k)
    return grid.reshape(size[0], *spatial, k)
