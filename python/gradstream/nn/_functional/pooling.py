"""Max, average and adaptive average pooling over the last one or two dims (Rust kernels;
max pooling's backward keeps one byte per output, the others keep nothing)."""

from __future__ import annotations

from ... import _core
from ..._core import Tensor
from .._reduction import _check_tensor

__all__ = [
    "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d", "adaptive_avg_pool1d",
    "adaptive_avg_pool2d", "adaptive_max_pool1d", "adaptive_max_pool2d",
    "max_pool1d_with_indices", "max_pool2d_with_indices", "adaptive_max_pool1d_with_indices",
    "adaptive_max_pool2d_with_indices", "lp_pool1d", "lp_pool2d",
]  # fmt: skip


def _ints(op: str, name: str, v, n: int) -> list[int]:
    """An int or a sequence of 1 or ``n`` ints as ``n`` ints."""
    if isinstance(v, int):
        return [v] * n
    vals = list(v)
    if len(vals) == 1:
        vals = vals * n
    if len(vals) != n or not all(isinstance(e, int) for e in vals):
        raise RuntimeError(f"{op}: {name} must either be a single int, or a tuple of {n} ints")
    return vals


def _hw(op: str, spatial: int, kernel_size, stride, padding, dilation=1):
    """The window options as (H, W) pairs, H's entries neutral for the 1-d ops."""
    k = _ints(op, "kernel_size", kernel_size, spatial)
    s = k if stride is None or (not isinstance(stride, int) and len(stride) == 0) else None
    s = s if s is not None else _ints(op, "stride", stride, spatial)
    p = _ints(op, "padding", padding, spatial)
    d = _ints(op, "dilation", dilation, spatial)
    if spatial == 1:
        return [1, *k], [1, *s], [0, *p], [1, *d]
    return k, s, p, d


def _max_pool(
    op, spatial, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
):
    _check_tensor(op, "input", input)
    k, s, p, d = _hw(op, spatial, kernel_size, stride, padding, dilation)
    out, idx = _core._nn_max_pool(input, spatial, k, s, p, d, bool(ceil_mode), return_indices)
    return (out, idx) if return_indices else out


def max_pool1d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Max over windows of the last dim; with ``return_indices`` also each maximum's index."""
    return _max_pool(
        "max_pool1d", 1, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def max_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    dilation=1,
    ceil_mode: bool = False,
    return_indices: bool = False,
):
    """Max over windows of the last two dims; with ``return_indices`` also each maximum's
    flat index into H * W."""
    return _max_pool(
        "max_pool2d", 2, input, kernel_size, stride, padding, dilation, ceil_mode, return_indices
    )


def avg_pool1d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
) -> Tensor:
    """Mean over windows of the last dim."""
    _check_tensor("avg_pool1d", "input", input)
    k, s, p, _ = _hw("avg_pool1d", 1, kernel_size, stride, padding)
    return _core._nn_avg_pool(input, 1, k, s, p, bool(ceil_mode), bool(count_include_pad))


def avg_pool2d(
    input: Tensor,
    kernel_size,
    stride=None,
    padding=0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """Mean over windows of the last two dims (or the window's sum / ``divisor_override``)."""
    _check_tensor("avg_pool2d", "input", input)
    k, s, p, _ = _hw("avg_pool2d", 2, kernel_size, stride, padding)
    return _core._nn_avg_pool(
        input, 2, k, s, p, bool(ceil_mode), bool(count_include_pad), divisor_override
    )


def _adaptive_size(op: str, input: Tensor, output_size, spatial: int) -> list[int]:
    sizes = (
        [output_size] * spatial
        if isinstance(output_size, int) or output_size is None
        else list(output_size)
    )
    if len(sizes) != spatial:
        raise ValueError(f"{op}: output_size must be an int or {spatial} ints, got {output_size}")
    dims = tuple(input.shape)
    sizes = [dims[len(dims) - spatial + i] if v is None else v for i, v in enumerate(sizes)]
    return [1, *sizes] if spatial == 1 else sizes


def adaptive_avg_pool1d(input: Tensor, output_size) -> Tensor:
    """Mean over ``output_size`` near-equal windows of the last dim."""
    _check_tensor("adaptive_avg_pool1d", "input", input)
    size = _adaptive_size("adaptive_avg_pool1d", input, output_size, 1)
    return _core._nn_adaptive_avg_pool(input, 1, size)


def adaptive_avg_pool2d(input: Tensor, output_size) -> Tensor:
    """Mean over an ``output_size`` grid of near-equal windows of the last two dims."""
    _check_tensor("adaptive_avg_pool2d", "input", input)
    if not isinstance(output_size, int) and input.dim() <= len(output_size):
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    size = _adaptive_size("adaptive_avg_pool2d", input, output_size, 2)
    return _core._nn_adaptive_avg_pool(input, 2, size)


def adaptive_max_pool1d(input: Tensor, output_size, return_indices: bool = False):
    """Max over ``output_size`` near-equal windows of the last dim."""
    _check_tensor("adaptive_max_pool1d", "input", input)
    size = _adaptive_size("adaptive_max_pool1d", input, output_size, 1)
    out, idx = _core._nn_adaptive_max_pool(input, 1, size, return_indices)
    return (out, idx) if return_indices else out


def adaptive_max_pool2d(input: Tensor, output_size, return_indices: bool = False):
    """Max over an ``output_size`` grid of near-equal windows of the last two dims."""
    _check_tensor("adaptive_max_pool2d", "input", input)
    if not isinstance(output_size, int) and input.dim() <= len(output_size):
        raise ValueError(f"Input dimension should be at least {len(output_size) + 1}")
    size = _adaptive_size("adaptive_max_pool2d", input, output_size, 2)
    out, idx = _core._nn_adaptive_max_pool(input, 2, size, return_indices)
    return (out, idx) if return_indices else out


def max_pool1d_with_indices(
    input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
    return_indices: bool = True,
):  # fmt: skip
    """``max_pool1d`` that returns the indices too (PyTorch's underlying form)."""
    return max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(
    input: Tensor, kernel_size, stride=None, padding=0, dilation=1, ceil_mode: bool = False,
    return_indices: bool = True,
):  # fmt: skip
    """``max_pool2d`` that returns the indices too (PyTorch's underlying form)."""
    return max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def adaptive_max_pool1d_with_indices(input: Tensor, output_size, return_indices: bool = True):
    return adaptive_max_pool1d(input, output_size, True)


def adaptive_max_pool2d_with_indices(input: Tensor, output_size, return_indices: bool = True):
    return adaptive_max_pool2d(input, output_size, True)


def _lp_pool(op: str, spatial: int, input, norm_type, kernel_size, stride, ceil_mode):
    """PyTorch's power-average pooling: ``(sum over the window of x^p)^(1/p)``, as the
    average of ``x^p`` times the window size (the sign/relu guard keeps a negative
    average of an odd power from reaching a fractional root)."""
    _check_tensor(op, "input", input)
    k = _ints(op, "kernel_size", kernel_size, spatial)
    avg = avg_pool1d if spatial == 1 else avg_pool2d
    out = avg(input.pow(norm_type), k, stride if stride is not None else k, 0, ceil_mode)
    window = k[0] if spatial == 1 else k[0] * k[1]
    return (out.sign() * out.abs().relu()).mul(window).pow(1.0 / norm_type)


def lp_pool1d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False):
    return _lp_pool("lp_pool1d", 1, input, norm_type, kernel_size, stride, ceil_mode)


def lp_pool2d(input: Tensor, norm_type, kernel_size, stride=None, ceil_mode: bool = False):
    return _lp_pool("lp_pool2d", 2, input, norm_type, kernel_size, stride, ceil_mode)
