"""Composite layers: ``bilinear``, RMS, group, instance and local response normalisation,
channel-wise dropouts, ``embedding_bag``."""

from __future__ import annotations

import math

from ... import _core
from ..._core import Tensor
from ...autograd.grad_mode import no_grad
from .._reduction import _check_tensor
from .activation import _SELU_ALPHA, _SELU_SCALE

__all__ = [
    "bilinear", "rms_norm", "group_norm", "dropout1d", "dropout2d", "dropout3d",
    "alpha_dropout", "feature_alpha_dropout", "local_response_norm", "embedding_bag",
    "instance_norm",
]  # fmt: skip

_FLOAT_EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def bilinear(input1: Tensor, input2: Tensor, weight: Tensor, bias: Tensor | None = None):
    """``y[..., o] = input1 @ weight[o] @ input2 + bias[o]``; ``weight`` is ``(out, in1,
    in2)``."""
    _check_tensor("bilinear", "input1", input1)
    _check_tensor("bilinear", "input2", input2)
    if weight.dim() != 3:
        raise RuntimeError(f"bilinear(): weight must be 3-dimensional, got {weight.dim()}D")
    out, in1, in2 = weight.shape
    if input1.shape[-1:] != (in1,) or input2.shape[-1:] != (in2,):
        raise RuntimeError(
            f"bilinear(): input sizes {list(input1.shape)} and {list(input2.shape)} do not "
            f"match weight of size {list(weight.shape)}"
        )
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError(
            "bilinear(): input batch dimensions do not match: got "
            f"{list(input1.shape[:-1])} and {list(input2.shape[:-1])}"
        )
    # (*, in1) @ (in1, out * in2) -> (*, out, in2), then the dot with input2 over in2.
    w = weight.permute(1, 0, 2).reshape(in1, out * in2)
    left = input1.matmul(w).reshape(*input1.shape[:-1], out, in2)
    y = (left * input2.unsqueeze(-2)).sum(-1)
    return y + bias if bias is not None else y


def _check_normalized_shape(op: str, input: Tensor, normalized_shape) -> tuple[int, ...]:
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    shape = tuple(input.shape)
    if len(ns) > len(shape) or shape[len(shape) - len(ns) :] != ns:
        raise RuntimeError(
            f"Given normalized_shape={list(ns)}, expected input with shape [*, "
            f"{', '.join(str(d) for d in ns)}], but got input of size{list(shape)}"
        )
    return ns


def rms_norm(
    input: Tensor, normalized_shape, weight: Tensor | None = None, eps: float | None = None
) -> Tensor:
    """``input / sqrt(mean(input^2) + eps)`` over the last ``len(normalized_shape)`` dims;
    ``eps=None`` is the dtype's machine epsilon."""
    _check_tensor("rms_norm", "input", input)
    ns = _check_normalized_shape("rms_norm", input, normalized_shape)
    if eps is None:
        eps = _FLOAT_EPS[repr(input.dtype).split(".")[-1]]
    dims = tuple(range(input.dim() - len(ns), input.dim()))
    sq = input * input
    out = input * ((sq.mean(dims, keepdim=True) if dims else sq) + eps).rsqrt()
    return out * weight if weight is not None else out


def group_norm(
    input: Tensor,
    num_groups: int,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    """Normalises each of ``num_groups`` channel groups per sample, then the per-channel
    affine ``weight``, ``bias``."""
    _check_tensor("group_norm", "input", input)
    if input.dim() < 2:
        raise RuntimeError(
            f"Expected at least 2 dimensions for input tensor but received {input.dim()}"
        )
    n, c = input.shape[0], input.shape[1]
    if num_groups <= 0 or c % num_groups:
        raise RuntimeError(
            "Expected number of channels in input to be divisible by num_groups, but got input "
            f"of shape {list(input.shape)} and num_groups={num_groups}"
        )
    if input.numel() // num_groups == 1:  # PyTorch's check, though the group mean is defined
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size "
            f"{list(input.shape)}"
        )
    x = input.reshape(n, num_groups, -1)
    mean = x.mean(-1, keepdim=True)
    var = x.var(-1, unbiased=False, keepdim=True)
    y = ((x - mean) * (var + eps).rsqrt()).reshape(*input.shape)
    cshape = [1, c] + [1] * (input.dim() - 2)
    if weight is not None:
        y = y * weight.reshape(*cshape)
    if bias is not None:
        y = y + bias.reshape(*cshape)
    return y


def _check_p(p: float) -> None:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")


def _feature_mask(input: Tensor, p: float, spatial: int) -> Tensor:
    """1 or 0 per (sample, channel), broadcast over the ``spatial`` trailing dims."""
    shape = list(input.shape[: input.dim() - spatial]) + [1] * spatial
    return (_core.rand(*shape, dtype=input.dtype) >= p).to(input.dtype)


def _feature_dropout(op: str, input, p, training, inplace, spatial: int) -> Tensor:
    _check_tensor(op, "input", input)
    _check_p(p)
    if input.dim() not in (spatial + 1, spatial + 2):
        raise RuntimeError(
            f"{op}: Expected {spatial + 1}D or {spatial + 2}D input, but received a "
            f"{input.dim()}D input."
        )
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        out = input * (_feature_mask(input, p, spatial) / (1.0 - p))
    return input.copy_(out) if inplace else out


def dropout1d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zeroes whole channels of ``(N, C, L)`` or ``(C, L)`` input with probability ``p``."""
    return _feature_dropout("dropout1d", input, p, training, inplace, 1)


def dropout2d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zeroes whole channels of ``(N, C, H, W)`` or ``(C, H, W)`` input."""
    return _feature_dropout("dropout2d", input, p, training, inplace, 2)


def dropout3d(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False):
    """Zeroes whole channels of ``(N, C, D, H, W)`` or ``(C, D, H, W)`` input."""
    return _feature_dropout("dropout3d", input, p, training, inplace, 3)


def _alpha_dropout(input: Tensor, p: float, keep: Tensor) -> Tensor:
    # Dropped units take SELU's negative saturation value, then an affine map restores
    # zero mean and unit variance.
    alpha = -_SELU_ALPHA * _SELU_SCALE
    a = 1.0 / math.sqrt((1.0 - p) * (1.0 + p * alpha * alpha))
    b = -a * alpha * p
    return (input * keep + alpha * (1.0 - keep)) * a + b


def alpha_dropout(input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False):
    """Dropout that keeps the self-normalising property of SELU activations."""
    _check_tensor("alpha_dropout", "input", input)
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        keep = (_core.rand_like(input) >= p).to(input.dtype)
        out = _alpha_dropout(input, p, keep)
    return input.copy_(out) if inplace else out


def feature_alpha_dropout(
    input: Tensor, p: float = 0.5, training: bool = False, inplace: bool = False
) -> Tensor:
    """``alpha_dropout`` with one mask value per (sample, channel)."""
    _check_tensor("feature_alpha_dropout", "input", input)
    _check_p(p)
    if not training or p == 0.0:
        return input
    if p == 1.0:
        out = input * 0.0
    else:
        spatial = max(input.dim() - 2, 0)
        out = _alpha_dropout(input, p, _feature_mask(input, p, spatial))
    return input.copy_(out) if inplace else out


def local_response_norm(
    input: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, k: float = 1.0
) -> Tensor:
    """``input / (k + alpha * mean of input^2 over a window of size channels) ** beta``; the
    window around channel ``c`` spans ``[c - size // 2, c + (size - 1) // 2]``, zero-padded."""
    _check_tensor("local_response_norm", "input", input)
    if input.dim() < 3:
        raise ValueError(
            f"Expected 3D or higher dimensionality input (got {input.dim()} dimensions)"
        )
    if input.numel() == 0:
        return input
    c = input.shape[1]
    sq = input * input
    zeros = [list(input.shape) for _ in range(2)]
    zeros[0][1], zeros[1][1] = size // 2, (size - 1) // 2
    padded = _core.cat([_core.zeros(*zeros[0], dtype=input.dtype), sq,
                        _core.zeros(*zeros[1], dtype=input.dtype)], 1)  # fmt: skip
    window = padded.narrow(1, 0, c)
    for o in range(1, size):
        window = window + padded.narrow(1, o, c)
    return input / (window * (alpha / size) + k).pow(beta)


def _bag_bounds(input: Tensor, offsets, include_last_offset: bool) -> tuple[Tensor, list[int]]:
    """The flat indices and each bag's start, end positions."""
    if input.dim() == 2:
        if offsets is not None:
            raise ValueError(
                "if input is 2D, then offsets has to be None, as input is treated is a "
                "mini-batch of fixed length sequences. However, found offsets of type "
                f"{type(offsets).__name__}"
            )
        b, n = input.shape
        return input.reshape(-1), [i * n for i in range(b + 1)]
    if input.dim() != 1:
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.dim()}")  # fmt: skip
    if offsets is None or offsets.dim() != 1:
        raise ValueError(
            f"offsets has to be a 1D Tensor but got {None if offsets is None else offsets.dim()}"
        )
    starts = [int(o) for o in offsets.tolist()]
    if starts and starts[0] != 0:
        raise RuntimeError(
            "offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start "
            f"from position 0. However, got {starts[0]}"
        )
    n = input.shape[0]
    bounds = starts if include_last_offset else [*starts, n]
    if any(a > b for a, b in zip(bounds, bounds[1:], strict=False)) or (bounds and bounds[-1] > n):
        raise RuntimeError("embedding_bag: offsets must be non-decreasing and within the input")
    return input, bounds


def embedding_bag(
    input: Tensor,
    weight: Tensor,
    offsets: Tensor | None = None,
    max_norm: float | None = None,
    norm_type: float = 2,
    scale_grad_by_freq: bool = False,
    mode: str = "mean",
    sparse: bool = False,
    per_sample_weights: Tensor | None = None,
    include_last_offset: bool = False,
    padding_idx: int | None = None,
) -> Tensor:
    """The sum, mean or max of the embeddings in each bag: the rows of a 2-D ``input``, or
    the runs of a 1-D ``input`` that start at ``offsets``. ``padding_idx`` entries are left
    out (an empty bag gives zeros)."""
    _check_tensor("embedding_bag", "weight", weight)
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding_bag: max_norm, scale_grad_by_freq and sparse are not supported"
        )
    if mode not in ("sum", "mean", "max"):
        raise ValueError(f"mode has to be one of sum, mean or max, but got {mode}")
    if per_sample_weights is not None:
        if mode != "sum":
            raise NotImplementedError(
                "embedding_bag: per_sample_weights was not None. per_sample_weights is only "
                f"supported for mode='sum' (got mode='{mode}'). Please open a feature request "
                "on GitHub."
            )
        if tuple(per_sample_weights.shape) != tuple(input.shape):
            raise ValueError(
                f"embedding_bag: If per_sample_weights ({list(per_sample_weights.shape)}) is not "
                f"None, then it must have the same shape as the input ({list(input.shape)})"
            )
    idx, bounds = _bag_bounds(input, offsets, include_last_offset)
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    num_bags, dim = len(bounds) - 1, weight.shape[1]
    emb = weight.index_select(0, idx)  # [N, D]
    keep = (idx != padding_idx) if padding_idx is not None else _core.ones_like(idx).bool()
    if mode == "max":
        rows = []
        kept = keep.tolist()
        for a, b in zip(bounds, bounds[1:], strict=False):
            sel = emb.index_select(0, _core.tensor([p for p in range(a, b) if kept[p]],
                                                   dtype=_core.int64))  # fmt: skip
            # An empty bag is zeros: the sum over no rows, which stays in the graph.
            rows.append(sel.amax(0) if sel.shape[0] else sel.sum(0))
        return _core.stack(rows, 0) if rows else emb.narrow(0, 0, 0)
    w = keep.to(weight.dtype)
    if per_sample_weights is not None:
        w = w * per_sample_weights.reshape(-1)
    bag = [i for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)) for _ in range(a, b)]
    bag_index = _core.tensor(bag, dtype=_core.int64).reshape(-1, 1).expand(len(bag), dim)
    out = _core.zeros(num_bags, dim, dtype=weight.dtype).scatter_add(
        0, bag_index, emb * w.unsqueeze(1)
    )
    if mode == "mean":
        counts = _core.zeros(num_bags, dtype=weight.dtype).scatter_add(
            0, bag_index[:, 0], keep.to(weight.dtype)
        )
        out = out / counts.clamp(min=1.0).unsqueeze(1)
    return out


def instance_norm(
    input: Tensor,
    running_mean: Tensor | None = None,
    running_var: Tensor | None = None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalises each (sample, channel) over its spatial dims, then the per-channel affine
    ``weight``, ``bias``. With ``use_input_stats`` the given running stats are updated in
    place (batch mean of the per-instance mean and unbiased variance); without it they
    normalise instead."""
    _check_tensor("instance_norm", "input", input)
    if input.dim() < 3:
        raise ValueError(f"instance_norm: expected input with at least 3 dimensions, got "
                         f"{input.dim()}D")  # fmt: skip
    spatial = tuple(range(2, input.dim()))
    count = math.prod(input.shape[2:])
    cshape = [1, input.shape[1]] + [1] * len(spatial)
    if use_input_stats:
        if count == 1:
            raise ValueError(
                "Expected more than 1 spatial element when training, got input size "
                f"{list(input.shape)}"
            )
        mean = input.mean(spatial, keepdim=True)
        var = input.var(spatial, unbiased=False, keepdim=True)
        if running_mean is not None or running_var is not None:
            with no_grad():
                m = float(momentum)
                if running_mean is not None:
                    batch_mean = mean.detach().reshape(input.shape[0], -1).mean(0)
                    running_mean.mul_(1 - m).add_(batch_mean.to(running_mean.dtype) * m)
                if running_var is not None:
                    unbiased = var.detach().reshape(input.shape[0], -1) * (count / (count - 1))
                    running_var.mul_(1 - m).add_(unbiased.mean(0).to(running_var.dtype) * m)
    else:
        if running_mean is None or running_var is None:
            raise ValueError("Expected running_mean and running_var to be defined when "
                             "use_input_stats is false")  # fmt: skip
        mean, var = running_mean.reshape(*cshape), running_var.reshape(*cshape)
    y = (input - mean) * (var + eps).rsqrt()
    if weight is not None:
        y = y * weight.reshape(*cshape)
    if bias is not None:
        y = y + bias.reshape(*cshape)
    return y
