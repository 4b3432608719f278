"""Convolution: ``conv1d``, ``conv2d``, ``conv_transpose1d``, ``conv_transpose2d``.

Thin over the Rust op (``_core._conv``/``_core._conv_transpose``), which checks shapes,
handles unbatched inputs and runs im2col + GEMM kernels. Here: ints become per-dim lists
and string padding is resolved (``'same'`` with an even kernel pads the extra element on the
right/bottom, as PyTorch does, through ``pad``).
"""

from __future__ import annotations

from ... import _core
from ..._core import Tensor
from .shape import pad

__all__ = ["conv1d", "conv2d", "conv_transpose1d", "conv_transpose2d"]


def _per_dim(v, n: int) -> list[int]:
    if isinstance(v, int):
        return [v] * n
    return [int(e) for e in v]


def _same_padding(op: str, input: Tensor, weight: Tensor, n: int, stride, dilation):
    """Padding ``'same'``: the symmetric part, and the input padded by the odd extra."""
    if any(s != 1 for s in stride):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    if weight.dim() != n + 2 or len(dilation) != n:
        return [0] * n, input  # the Rust op reports the bad shape
    left, extra = [], []
    for d, k in zip(dilation, weight.shape[2:], strict=True):
        total = d * (k - 1)
        left.append(total // 2)
        extra.append(total - 2 * (total // 2))
    if any(extra):
        pads: list[int] = []
        for e in reversed(extra):
            pads += [0, e]
        input = pad(input, pads)
    return left, input


def _conv(n: int, input, weight, bias, stride, padding, dilation, groups) -> Tensor:
    op = f"conv{n}d"
    stride, dilation = _per_dim(stride, n), _per_dim(dilation, n)
    if isinstance(padding, str):
        if padding == "valid":
            padding = [0] * n
        elif padding == "same":
            padding, input = _same_padding(op, input, weight, n, stride, dilation)
        else:
            raise RuntimeError(f"Invalid padding string: '{padding}'")
    return _core._conv(input, weight, bias, n, stride, _per_dim(padding, n), dilation, int(groups))


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """1-d convolution of ``input`` (N, C_in, L) or (C_in, L) with ``weight`` (C_out,
    C_in / groups, k); ``padding`` is an int, a tuple, ``'valid'`` or ``'same'``."""
    return _conv(1, input, weight, bias, stride, padding, dilation, groups)


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> Tensor:
    """2-d convolution of ``input`` (N, C_in, H, W) or (C_in, H, W) with ``weight``
    (C_out, C_in / groups, kh, kw); ``padding`` is an int, a pair, ``'valid'`` or
    ``'same'``."""
    return _conv(2, input, weight, bias, stride, padding, dilation, groups)


def _conv_transpose(n, input, weight, bias, stride, padding, output_padding, groups, dilation):
    return _core._conv_transpose(
        input, weight, bias, n, _per_dim(stride, n), _per_dim(padding, n),
        _per_dim(output_padding, n), int(groups), _per_dim(dilation, n),
    )  # fmt: skip


def conv_transpose1d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    """1-d transposed convolution (the gradient of ``conv1d`` with respect to its input);
    ``weight`` is (C_in, C_out / groups, k)."""
    return _conv_transpose(1, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)  # fmt: skip


def conv_transpose2d(
    input, weight, bias=None, stride=1, padding=0, output_padding=0, groups=1, dilation=1
) -> Tensor:
    """2-d transposed convolution (the gradient of ``conv2d`` with respect to its input);
    ``weight`` is (C_in, C_out / groups, kh, kw)."""
    return _conv_transpose(2, input, weight, bias, stride, padding, output_padding, groups,
                           dilation)  # fmt: skip
