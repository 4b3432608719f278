"""``unfold`` (im2col) and ``fold`` (col2im), on the convolution kernels.

Unfolding C channels is a depthwise convolution (groups=C) with one one-hot kernel per
kernel position: output channel ``c * kh * kw + i * kw + j`` picks ``x[c, i, j]`` of each
block, which is exactly ``unfold``'s row order. ``fold`` is the transposed convolution with
the same weight, so each is the other's gradient, with no kernel of their own.
"""

from __future__ import annotations

from ... import _core
from ..._core import Tensor
from .conv import conv2d, conv_transpose2d

__all__ = ["unfold", "fold"]


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))


def _check_args(stride, padding, dilation, kernel) -> None:
    if min(kernel) <= 0:
        raise RuntimeError(
            "kernel size should be greater than zero, but got kernel_height: "
            f"{kernel[0]} kernel_width: {kernel[1]}"
        )
    if min(stride) <= 0:
        raise RuntimeError(
            "stride should be greater than zero, but got stride_height: "
            f"{stride[0]} stride_width: {stride[1]}"
        )
    if min(padding) < 0:
        raise RuntimeError(
            f"padding should be non-negative, but got pad_height: {padding[0]} pad_width: "
            f"{padding[1]}"
        )
    if min(dilation) <= 0:
        raise RuntimeError(
            "dilation should be greater than zero, but got dilation_height: "
            f"{dilation[0]} dilation_width: {dilation[1]}"
        )


def _one_hot_kernels(channels: int, kernel: tuple[int, int], like: Tensor) -> Tensor:
    """Weight (channels * kh * kw, 1, kh, kw): kernel ``r`` of each channel is 1 at ``r``."""
    k = kernel[0] * kernel[1]
    eye = _core.eye(k, dtype=like.dtype).reshape(k, 1, kernel[0], kernel[1])
    return eye.repeat(channels, 1, 1, 1)


def _blocks(size, kernel, dilation, padding, stride) -> list[int]:
    return [
        (size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
        for i in range(2)
    ]


def unfold(input: Tensor, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sliding blocks of ``input`` (N, C, H, W) or (C, H, W) as columns: (N, C * kh * kw,
    L), L the number of blocks."""
    kernel, dilation, padding, stride = map(_pair, (kernel_size, dilation, padding, stride))
    _check_args(stride, padding, dilation, kernel)
    if input.dim() < 3:  # PyTorch reads the channel dim first
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-input.dim()}, "
            f"{input.dim() - 1}], but got {input.dim()})"
        )
    if input.dim() > 4 or any(d == 0 for d in input.shape[-3:]):
        raise RuntimeError(
            "Expected 3D or 4D (batch mode) tensor with possibly 0 batch size and other "
            f"non-zero dimensions for input, but got: {list(input.shape)}"
        )
    size = input.shape[-2:]
    blocks = _blocks(size, kernel, dilation, padding, stride)
    if min(blocks) < 1:
        raise RuntimeError(
            f"Given input with spatial size {tuple(size)}, kernel_size={kernel}, "
            f"dilation={dilation}, padding={padding}, calculated shape of the array of sliding "
            f"blocks as {tuple(blocks)}, but its components must be at least one."
        )
    c = input.shape[-3]
    w = _one_hot_kernels(c, kernel, input)
    cols = conv2d(input, w, None, stride, padding, dilation, groups=c)
    return cols.flatten(-2)


def fold(input: Tensor, output_size, kernel_size, dilation=1, padding=0, stride=1) -> Tensor:
    """Sum columns (N, C * kh * kw, L) or (C * kh * kw, L) back into an image of
    ``output_size``: the adjoint of ``unfold``."""
    size, kernel = _pair(output_size), _pair(kernel_size)
    dilation, padding, stride = map(_pair, (dilation, padding, stride))
    _check_args(stride, padding, dilation, kernel)
    if input.dim() not in (2, 3) or any(d == 0 for d in input.shape[-2:]):
        raise RuntimeError(
            "Expected 2D or 3D (batch mode) tensor for input with possibly 0 batch size and "
            f"non-zero dimensions for input, but got: {list(input.shape)}"
        )
    k = kernel[0] * kernel[1]
    rows, length = input.shape[-2], input.shape[-1]
    if rows % k:
        raise RuntimeError(
            "Expected size of input's dimension 1 to be divisible by the product of "
            f"kernel_size, but got input.size(1)={rows} and kernel_size={kernel}."
        )
    blocks = _blocks(size, kernel, dilation, padding, stride)
    if min(blocks) < 1 or blocks[0] * blocks[1] != length:
        raise RuntimeError(
            f"Given output_size={size}, kernel_size={kernel}, dilation={dilation}, "
            f"padding={padding}, stride={stride}, expected size of input's dimension 2 to match "
            f"the calculated number of sliding blocks {blocks[0]} * {blocks[1]} = "
            f"{blocks[0] * blocks[1]}, but got input.size(2)={length}."
        )
    c = rows // k
    w = _one_hot_kernels(c, kernel, input)
    x = input.reshape(*input.shape[:-1], blocks[0], blocks[1])
    full = [
        (blocks[i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (kernel[i] - 1) + 1
        for i in range(2)
    ]
    extra = [size[i] - full[i] for i in range(2)]
    return conv_transpose2d(x, w, None, stride, padding, extra, groups=c, dilation=dilation)
