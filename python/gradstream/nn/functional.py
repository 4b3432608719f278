"""`gradstream.nn.functional`: PyTorch's functional API.

An activation that is also a ``gradstream.X`` (``sigmoid``, ``tanh``, ``silu``, ``gelu``,
``softplus``) is that very function: one binding, one behaviour. Layer norm, embedding,
dropout and the row gather under nll_loss are fused Rust kernels with their own backward;
losses are composed from them. The composite activations, losses, distances, shape ops and
layers live by theme in ``nn/_functional/`` and are re-exported here.
"""

from __future__ import annotations

from .. import _core
from .._core import Tensor, gelu, sigmoid, silu, softplus, tanh
from ..amp.autocast_mode import float32_under_autocast
from ..linalg import vector_norm
from ._functional.activation import *  # noqa: F403
from ._functional.activation import __all__ as _activation_all
from ._functional.activation import logsigmoid
from ._functional.attention import *  # noqa: F403
from ._functional.attention import __all__ as _attention_all
from ._functional.batch_norm import *  # noqa: F403
from ._functional.batch_norm import __all__ as _batch_norm_all
from ._functional.conv import *  # noqa: F403
from ._functional.conv import __all__ as _conv_all
from ._functional.distance import *  # noqa: F403
from ._functional.distance import __all__ as _distance_all
from ._functional.fold import *  # noqa: F403
from ._functional.fold import __all__ as _fold_all
from ._functional.interpolate import *  # noqa: F403
from ._functional.interpolate import __all__ as _interpolate_all
from ._functional.layers import *  # noqa: F403
from ._functional.layers import __all__ as _layers_all
from ._functional.loss import *  # noqa: F403
from ._functional.loss import __all__ as _loss_all
from ._functional.pooling import *  # noqa: F403
from ._functional.pooling import __all__ as _pooling_all
from ._functional.shape import *  # noqa: F403
from ._functional.shape import __all__ as _shape_all
from ._reduction import _check_tensor, _legacy_reduction, _reduce

__all__ = [
    "linear",
    "relu",
    "relu_",
    "threshold",
    "threshold_",
    "sigmoid",
    "tanh",
    "softplus",
    "gelu",
    "silu",
    "dropout",
    "layer_norm",
    "embedding",
    "softmax",
    "log_softmax",
    "mse_loss",
    "l1_loss",
    "smooth_l1_loss",
    "cross_entropy",
    "nll_loss",
    "binary_cross_entropy",
    "binary_cross_entropy_with_logits",
    "normalize",
    "softmin",
    *_activation_all,
    *_attention_all,
    *_conv_all,
    *_fold_all,
    *_distance_all,
    *_layers_all,
    *_loss_all,
    *_shape_all,
    *_pooling_all,
    *_interpolate_all,
    *_batch_norm_all,
]


# ---- layers ----


def linear(input: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``input @ weight.T + bias``."""
    _check_tensor("linear", "input", input)
    _check_tensor("linear", "weight", weight)
    if input.shape[-1:] != weight.shape[-1:]:
        raise RuntimeError(
            f"linear: mat1 and mat2 shapes cannot be multiplied (input {tuple(input.shape)}, "
            f"weight {tuple(weight.shape)})"
        )
    return _core._linear(input, weight, bias)


def dropout(input: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return input
    return _core._nn_dropout(input, float(p))


def layer_norm(
    input: Tensor,
    normalized_shape,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    _check_tensor("layer_norm", "input", input)
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    shape = tuple(input.shape)
    if k == 0 or k > len(shape) or shape[len(shape) - k :] != ns:
        raise RuntimeError(
            f"Given normalized_shape={list(ns)}, expected input with shape [*, "
            f"{', '.join(str(d) for d in ns)}], but got input of size{list(shape)}"
        )
    return _core._nn_layer_norm(input, k, weight, bias, float(eps))


def embedding(
    input: Tensor,
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    if max_norm is not None or scale_grad_by_freq or sparse:
        raise NotImplementedError(
            "embedding: max_norm, scale_grad_by_freq and sparse are not supported"
        )
    if padding_idx is not None:
        n = weight.shape[0]
        if padding_idx >= n or padding_idx < -n:
            raise AssertionError("Padding_idx must be within num_embeddings")
        if padding_idx < 0:
            padding_idx += n
    return _core._nn_embedding(weight, input, padding_idx)


# ---- activations ----


def relu(input: Tensor, inplace: bool = False) -> Tensor:
    """``max(input, 0)``. Its backward saves one bit per element (see ``threshold``)."""
    return _core.relu_(input) if inplace else _core.relu(input)


relu_ = _core.relu_


def threshold(input: Tensor, threshold: float, value: float, inplace: bool = False) -> Tensor:
    """``input`` where ``input > threshold``, else ``value``.

    When a backward node is recorded, the forward also writes which elements passed as
    1 bit per element, and the backward needs only that (a float32 input's saved
    activation shrinks 32x); ``gradstream.autograd.graph.set_relu_bitmask(False)`` saves
    the input instead, as PyTorch does.
    """
    f = _core.threshold_ if inplace else _core.threshold
    return f(input, float(threshold), float(value))


threshold_ = _core.threshold_


def _softmax_dim(ndim: int) -> int:
    return 0 if ndim in (0, 1, 3) else 1


def softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``gradstream.softmax``, with PyTorch's implicit ``dim`` when it is None."""
    if dim is None:
        dim = _softmax_dim(input.dim())
    return _core.softmax(input, dim, dtype)


def log_softmax(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``gradstream.log_softmax``, with PyTorch's implicit ``dim`` when it is None."""
    if dim is None:
        dim = _softmax_dim(input.dim())
    return _core.log_softmax(input, dim, dtype)


def softmin(input: Tensor, dim: int | None = None, _stacklevel: int = 3, dtype=None) -> Tensor:
    """``softmax(-input)``, with PyTorch's implicit ``dim`` when it is None."""
    if dim is None:
        dim = _softmax_dim(input.dim())
    return _core.softmax(-input, dim, dtype)


# ---- losses ----


@float32_under_autocast
def mse_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    d = input - target
    return _reduce(d * d, reduction)


@float32_under_autocast
def l1_loss(input, target, size_average=None, reduce=None, reduction: str = "mean") -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    return _reduce((input - target).abs(), reduction)


@float32_under_autocast
def smooth_l1_loss(
    input, target, size_average=None, reduce=None, reduction: str = "mean", beta: float = 1.0
) -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if beta < 0:
        raise RuntimeError("smooth_l1_loss does not support negative values for beta.")
    a = (input - target).abs()
    if beta == 0:
        return _reduce(a, reduction)
    # 0.5 m^2 / beta + (a - m) with m = min(a, beta): the quadratic and linear pieces.
    m = a.minimum(float(beta))
    return _reduce(m * m * (0.5 / beta) + (a - m), reduction)


def _index_target(target: Tensor) -> Tensor:
    if target.is_floating_point():
        raise RuntimeError(
            f"expected scalar type Long but found {str(target.dtype).replace('gradstream.', '')}"
        )
    return target


@float32_under_autocast
def nll_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood over class indices; input ``[N, C]``, ``[C]`` or
    ``[N, C, d1, ...]``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    target = _index_target(target)
    out_shape = tuple(target.shape)
    if input.dim() == 1:
        x2 = input.reshape(1, input.shape[0])
        t1 = target.reshape(1)
    elif input.dim() == 2:
        x2, t1 = input, target
    else:
        x2 = _core._nn_class_last(input)
        t1 = target.reshape(-1)
    if input.dim() >= 2 and (tuple(target.shape) != (input.shape[0],) + tuple(input.shape[2:])):
        raise ValueError(
            f"Expected target of shape {(input.shape[0],) + tuple(input.shape[2:])} for input of "
            f"shape {tuple(input.shape)}, got {tuple(target.shape)}"
        )
    n, c = x2.shape
    picked = _core._nn_gather_rows(x2, t1, ignore_index)
    if weight is not None:
        if tuple(weight.shape) != (c,):
            raise RuntimeError(
                f"weight tensor should be defined either for all {c} classes or no classes but "
                f"got weight tensor of shape: {list(weight.shape)}"
            )
        w = _core._nn_gather_rows(weight.unsqueeze(0).expand(n, c), t1, ignore_index)
        w = w.detach().to(picked.dtype)
    else:
        w = (t1 != ignore_index).to(picked.dtype)
    loss = -(picked * w)
    if reduction == "none":
        return loss.reshape(*out_shape)
    if reduction == "sum":
        return loss.sum()
    return loss.sum() / w.sum()


@float32_under_autocast
def cross_entropy(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    ignore_index: int = -100,
    reduce=None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """``nll_loss(log_softmax(input, 1), target)``; class indices or class probabilities,
    optional ``label_smoothing``."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if not 0.0 <= label_smoothing <= 1.0:
        raise ValueError(f"label_smoothing must be between 0.0 and 1.0. Got: {label_smoothing}")
    class_dim = 0 if input.dim() == 1 else 1
    logp = log_softmax(input, class_dim)
    c = input.shape[class_dim]
    wshape = [1] * input.dim()
    wshape[class_dim] = c
    if target.is_floating_point():
        if tuple(target.shape) != tuple(input.shape):
            raise RuntimeError(
                "cross_entropy: expected class-probability target of the input's shape "
                f"{tuple(input.shape)}, got {tuple(target.shape)}"
            )
        if label_smoothing > 0:
            target = target * (1 - label_smoothing) + label_smoothing / c
        prod = logp * target
        if weight is not None:
            prod = prod * weight.reshape(*wshape)
        loss = -prod.sum(class_dim)
        if reduction == "mean":
            n = loss.numel()
            return loss.sum() / n if n else loss.sum()
        return _reduce(loss, reduction)
    nll = nll_loss(logp, target, weight, ignore_index=ignore_index, reduction=reduction)
    if label_smoothing <= 0:
        return nll
    if weight is not None:
        smooth = -(logp * weight.reshape(*wshape)).sum(class_dim)
    else:
        smooth = -logp.sum(class_dim)
    keep = (target != ignore_index).to(smooth.dtype)
    smooth = smooth * keep
    if reduction == "mean":
        if weight is not None:
            t1 = target.reshape(-1)
            n = t1.shape[0]
            wsum = _core._nn_gather_rows(weight.unsqueeze(0).expand(n, c), t1, ignore_index).sum()
            ret = smooth.sum() / wsum
        else:
            ret = smooth.sum() / keep.sum()
    elif reduction == "sum":
        ret = smooth.sum()
    else:
        ret = smooth
    return nll * (1 - label_smoothing) + ret * (label_smoothing / c)


@float32_under_autocast
def binary_cross_entropy(
    input, target, weight=None, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Using a target size ({target.shape}) that is different to the input size "
            f"({input.shape}) is deprecated. Please ensure they have the same size."
        )
    # PyTorch clamps the logs at -100 so a 0 or 1 input gives a finite loss.
    log_x = input.log().maximum(-100.0)
    log_1mx = (1 - input).log().maximum(-100.0)
    loss = -(target * log_x + (1 - target) * log_1mx)
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@float32_under_autocast
def binary_cross_entropy_with_logits(
    input,
    target,
    weight=None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    pos_weight=None,
) -> Tensor:
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if tuple(target.shape) != tuple(input.shape):
        raise ValueError(
            f"Target size ({target.shape}) must be the same as input size ({input.shape})"
        )
    # -t log(sigmoid(x)) - (1 - t) log(sigmoid(-x)) = (1 - t) x - log(sigmoid(x)); with
    # pos_weight the log(sigmoid(x)) term is scaled by 1 + (pos_weight - 1) t.
    log_sig = logsigmoid(input)
    if pos_weight is not None:
        loss = (1 - target) * input - ((pos_weight - 1) * target + 1) * log_sig
    else:
        loss = (1 - target) * input - log_sig
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


def normalize(input: Tensor, p: float = 2.0, dim: int = 1, eps: float = 1e-12, out=None) -> Tensor:
    """``input / max(||input||_p, eps)`` along ``dim``."""
    norm = vector_norm(input, p, dim, keepdim=True)
    return input / norm.clamp(min=float(eps))
