"""Losses composed from gradstream's differentiable ops."""

from __future__ import annotations

import math
import warnings

from ... import _core
from ..._core import Tensor, where
from ...amp.autocast_mode import float32_under_autocast
from .._reduction import _check_reduction, _check_tensor, _legacy_reduction, _reduce
from .activation import logsigmoid
from .distance import pairwise_distance

__all__ = [
    "huber_loss", "kl_div", "poisson_nll_loss", "gaussian_nll_loss", "margin_ranking_loss",
    "hinge_embedding_loss", "soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss",
    "triplet_margin_with_distance_loss", "multilabel_soft_margin_loss", "multi_margin_loss",
    "multilabel_margin_loss", "ctc_loss",
]  # fmt: skip


def _xlogx(t: Tensor) -> Tensor:
    """``t * log(t)`` with ``0 log 0 = 0`` (no NaN in value or gradient at 0)."""
    zero = t == 0
    return where(zero, 0.0, t * where(zero, 1.0, t).log())


@float32_under_autocast
def huber_loss(
    input: Tensor,
    target: Tensor,
    reduction: str = "mean",
    delta: float = 1.0,
    weight: Tensor | None = None,
) -> Tensor:
    """``0.5 d^2`` where ``|d| < delta``, else ``delta * (|d| - 0.5 delta)``; ``d = input -
    target``."""
    _check_reduction(reduction)
    if delta <= 0:
        raise RuntimeError("huber_loss does not support non-positive values for delta.")
    a = (input - target).abs()
    # m = min(|d|, delta) splits the quadratic and the linear pieces.
    m = a.minimum(float(delta))
    loss = m * m * 0.5 + (a - m) * delta
    if weight is not None:
        loss = loss * weight
    return _reduce(loss, reduction)


@float32_under_autocast
def kl_div(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
    log_target: bool = False,
) -> Tensor:
    """Pointwise ``target * (log(target) - input)``; ``input`` holds log-probabilities.
    ``reduction='batchmean'`` divides the sum by the batch size."""
    reduction = _legacy_reduction(size_average, reduce, reduction)
    if reduction not in ("none", "mean", "sum", "batchmean"):
        raise ValueError(f"{reduction} is not a valid value for reduction")
    if reduction == "mean":
        warnings.warn(
            "reduction: 'mean' divides the total loss by both the batch size and the support "
            "size.'batchmean' divides only by the batch size, and aligns with the KL div math "
            "definition.'mean' will be changed to behave the same as 'batchmean' in the next "
            "major release.",
            stacklevel=2,
        )
    if log_target:
        loss = target.exp() * (target - input)
    else:
        loss = _xlogx(target) - target * input
    if reduction == "batchmean":
        if input.dim() == 0:
            return loss.sum()
        return loss.sum() / input.shape[0]
    return _reduce(loss, reduction)


@float32_under_autocast
def poisson_nll_loss(
    input: Tensor,
    target: Tensor,
    log_input: bool = True,
    full: bool = False,
    size_average=None,
    eps: float = 1e-8,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log likelihood of ``target ~ Poisson(input)`` (``exp(input)`` when
    ``log_input``), without the constant ``log(target!)`` unless ``full`` (Stirling)."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    if log_input:
        loss = input.exp() - target * input
    else:
        loss = input - target * (input + eps).log()
    if full:
        # Stirling's log(t!) ~ t log t - t + log(2 pi t) / 2, counted only for t > 1.
        t = where(target > 1, target, 1.0)
        stirling = t * t.log() - t + (t * (2 * math.pi)).log() * 0.5
        loss = loss + where(target > 1, stirling, 0.0)
    return _reduce(loss, reduction)


def gaussian_nll_loss(
    input: Tensor,
    target: Tensor,
    var,
    full: bool = False,
    eps: float = 1e-6,
    reduction: str = "mean",
) -> Tensor:
    """``0.5 * (log(var) + (input - target)^2 / var)``, ``var`` clamped at ``eps`` (the
    clamp passes the gradient through, as PyTorch's does)."""
    if not isinstance(var, Tensor):
        var_f = float(var)
        if var_f < 0:
            raise ValueError("var has negative entry/entries")
        var = _core.full_like(input, var_f)
    else:
        in_shape, v_shape = tuple(input.shape), tuple(var.shape)
        if v_shape != in_shape:
            if in_shape[:-1] == v_shape:
                var = var.unsqueeze(-1)  # one variance per sample (homoscedastic)
            elif not (in_shape[:-1] == v_shape[:-1] and v_shape[-1:] == (1,)):
                raise ValueError("var is of incorrect size")
    _check_reduction(reduction)
    if bool((var < 0).any()):
        raise ValueError("var has negative entry/entries")
    var = var + (var.clamp(min=eps) - var).detach()
    d = input - target
    loss = (var.log() + d * d / var) * 0.5
    if full:
        loss = loss + 0.5 * math.log(2 * math.pi)
    return _reduce(loss, reduction)


@float32_under_autocast
def margin_ranking_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, -target * (input1 - input2) + margin)``."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    if not input1.dim() == input2.dim() == target.dim():
        raise RuntimeError(
            "margin_ranking_loss : All input tensors should have same dimension but got sizes: "
            f"input1: {input1.shape}, input2: {input2.shape}, target: {target.shape} "
        )
    return _reduce((-target * (input1 - input2) + margin).clamp(min=0.0), reduction)


@float32_under_autocast
def hinge_embedding_loss(
    input: Tensor,
    target: Tensor,
    margin: float = 1.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``input`` where ``target == 1``, ``max(0, margin - input)`` where ``target == -1``."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    # A target that is neither 1 nor -1 counts both terms, as in PyTorch.
    neg = where(target != 1, (margin - input).clamp(min=0.0), 0.0)
    pos = where(target != -1, input, 0.0)
    return _reduce(neg + pos, reduction)


@float32_under_autocast
def soft_margin_loss(
    input: Tensor, target: Tensor, size_average=None, reduce=None, reduction: str = "mean"
) -> Tensor:
    """``log(1 + exp(-target * input))``."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    return _reduce(-logsigmoid(target * input), reduction)


@float32_under_autocast
def cosine_embedding_loss(
    input1: Tensor,
    input2: Tensor,
    target: Tensor,
    margin: float = 0.0,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``1 - cos(x1, x2)`` where ``target == 1``, ``max(0, cos(x1, x2) - margin)`` where
    ``target == -1``; the cosine is taken over the last dimension of 1-D or 2-D inputs."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    if target.dim() not in (0, 1):
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")
    expected = target.dim() + 1
    if input1.dim() != expected or input2.dim() != expected:
        raise RuntimeError(
            f"{target.dim()}D target tensor expects {expected}D input tensors, but found "
            f"inputs with sizes {list(input1.shape)} and {list(input2.shape)}."
        )
    dim = input1.dim() - 1
    eps = 1e-12  # keeps an all-zero row from dividing by zero
    dot = (input1 * input2).sum(dim)
    mag1 = (input1 * input1).sum(dim) + eps
    mag2 = (input2 * input2).sum(dim) + eps
    cos = dot / (mag1 * mag2).sqrt()
    pos = where(target == 1, 1.0 - cos, 0.0)
    neg = where(target == -1, (cos - margin).clamp(min=0.0), 0.0)
    return _reduce(pos + neg, reduction)


def _check_triplet_dims(op: str, anchor: Tensor, positive: Tensor, negative: Tensor) -> None:
    a, p, n = anchor.dim(), positive.dim(), negative.dim()
    if not a == p == n:
        raise RuntimeError(
            f"The anchor, positive, and negative tensors are expected to have the same number "
            f"of dimensions, but got: anchor {a}D, positive {p}D, and negative {n}D inputs"
        )


@float32_under_autocast
def triplet_margin_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    margin: float = 1.0,
    p: float = 2,
    eps: float = 1e-6,
    swap: bool = False,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``max(0, margin + d(anchor, positive) - d(anchor, negative))`` with the p-norm
    ``pairwise_distance``; ``swap`` uses ``d(positive, negative)`` when it is smaller."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    _check_triplet_dims("triplet_margin_loss", anchor, positive, negative)
    d_pos = pairwise_distance(anchor, positive, p, eps)
    d_neg = pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_neg = d_neg.minimum(pairwise_distance(positive, negative, p, eps))
    return _reduce((d_pos - d_neg + margin).clamp(min=0.0), reduction)


def triplet_margin_with_distance_loss(
    anchor: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    distance_function=None,
    margin: float = 1.0,
    swap: bool = False,
    reduction: str = "mean",
) -> Tensor:
    """``triplet_margin_loss`` with any ``distance_function`` (``pairwise_distance`` by
    default)."""
    _check_reduction(reduction)
    if margin <= 0:
        raise ValueError(
            "triplet_margin_with_distance_loss: expected margin to be greater than 0, got "
            f"{margin} instead"
        )
    _check_triplet_dims("triplet_margin_with_distance_loss", anchor, positive, negative)
    dist = pairwise_distance if distance_function is None else distance_function
    d_pos = dist(anchor, positive)
    d_neg = dist(anchor, negative)
    if swap:
        d_neg = d_neg.minimum(dist(positive, negative))
    return _reduce((d_pos - d_neg + margin).clamp(min=0.0), reduction)


@float32_under_autocast
def multilabel_soft_margin_loss(
    input: Tensor,
    target: Tensor,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """Binary cross entropy of ``sigmoid(input)`` per class, averaged over the classes (the
    last dimension)."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    loss = -(target * logsigmoid(input) + (1 - target) * logsigmoid(-input))
    if weight is not None:
        loss = loss * weight
    dim = input.dim() - 1
    loss = loss.sum(dim) / input.shape[dim] if input.dim() else loss
    return _reduce(loss, reduction)


@float32_under_autocast
def multi_margin_loss(
    input: Tensor,
    target: Tensor,
    p: int = 1,
    margin: float = 1.0,
    weight: Tensor | None = None,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_{i != y} max(0, margin - x[y] + x[i])^p / C`` per sample; ``y = target``."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    if p not in (1, 2):
        raise ValueError("only p == 1 and p == 2 supported")
    _check_tensor("multi_margin_loss", "input", input)
    if input.dim() > 2:
        raise RuntimeError(
            "Expected non-empty vector or matrix with optional 0-dim batch size, but got: "
            f"{list(input.shape)}"
        )
    x = input.reshape(1, -1) if input.dim() < 2 else input
    n, c = x.shape
    t = target.reshape(-1)
    if t.shape[0] != n:
        raise RuntimeError(f"inconsistent target size, expected {n} but got {list(target.shape)}")
    if n and (bool((t < 0).any()) or bool((t >= c).any())):
        raise RuntimeError("target out of range")
    idx = t.unsqueeze(1)
    m = (x - x.gather(1, idx) + margin).clamp(min=0.0)
    if p == 2:
        m = m * m
    if weight is not None:
        m = m * weight.index_select(0, t).unsqueeze(1)
    is_target = idx == _core.arange(c, dtype=_core.int64)
    loss = where(is_target, 0.0, m).sum(1) / c
    if input.dim() < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


@float32_under_autocast
def multilabel_margin_loss(
    input: Tensor,
    target: Tensor,
    size_average=None,
    reduce=None,
    reduction: str = "mean",
) -> Tensor:
    """``sum_{j in targets, i not in targets} max(0, 1 - (x[j] - x[i])) / C`` per sample;
    ``target`` lists class indices, ending at the first -1."""
    reduction = _check_reduction(_legacy_reduction(size_average, reduce, reduction))
    _check_tensor("multilabel_margin_loss", "input", input)
    if input.dim() > 2 or tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(
            "multilabel_margin_loss: expected input and target of the same shape, 1-D or 2-D, "
            f"but got input {list(input.shape)} and target {list(target.shape)}"
        )
    x = input.reshape(1, -1) if input.dim() < 2 else input
    t = target.reshape(*x.shape)
    c = x.shape[1]
    if t.numel() and (bool((t < -1).any()) or bool((t >= c).any())):
        raise RuntimeError("argument #2 'target' is out of range")
    # The positions before the first -1 are the targets; a repeated class counts per repeat.
    valid = (t != -1).to(x.dtype).cumprod(1)
    hits = (t.unsqueeze(-1) == _core.arange(c, dtype=_core.int64)).to(x.dtype)
    count = (hits * valid.unsqueeze(-1)).sum(1)  # [N, C]: how often class j is listed
    others = (count == 0).to(x.dtype)  # [N, C]: classes that are not targets
    margins = (1.0 - x.unsqueeze(2) + x.unsqueeze(1)).clamp(min=0.0)  # [N, j, i]
    loss = (margins * count.unsqueeze(2) * others.unsqueeze(1)).sum((1, 2)) / c
    if input.dim() < 2:
        loss = loss.reshape(())
    return _reduce(loss, reduction)


# Stands in for log(0) in the CTC recursion: a finite value keeps logsumexp's gradient
# finite where every path is impossible (exp(-inf - -inf) would be NaN).
_LOG_ZERO = -1e30


def _lengths(x, name: str) -> list[int]:
    if isinstance(x, Tensor):
        if x.is_floating_point():
            raise RuntimeError(f"ctc_loss: {name} must be integral")
        return [int(v) for v in x.reshape(-1).tolist()]
    return [int(v) for v in x]


def ctc_loss(
    log_probs: Tensor,
    targets: Tensor,
    input_lengths,
    target_lengths,
    blank: int = 0,
    reduction: str = "mean",
    zero_infinity: bool = False,
) -> Tensor:
    """Connectionist temporal classification: ``-log`` of the total probability of the
    alignments of each target with its ``(T, C)`` slice of ``log_probs`` (``(T, N, C)``), by
    the forward recursion over the blank-interleaved target. ``'mean'`` divides each loss by
    its target length before averaging. An impossible alignment gives ``inf`` (0 with
    ``zero_infinity``)."""
    _check_reduction(reduction)
    _check_tensor("ctc_loss", "log_probs", log_probs)
    unbatched = log_probs.dim() == 2
    lp = log_probs.unsqueeze(1) if unbatched else log_probs
    if lp.dim() != 3:
        raise RuntimeError(f"ctc_loss: expected log_probs of 2 or 3 dimensions, got {lp.dim()}")
    t_max, n, c = lp.shape
    in_lens = _lengths(input_lengths, "input_lengths")
    tg_lens = _lengths(target_lengths, "target_lengths")
    if len(in_lens) != n or len(tg_lens) != n:
        raise RuntimeError(
            f"ctc_loss: expected {n} input and target lengths, got {len(in_lens)} and "
            f"{len(tg_lens)}"
        )
    if any(t > t_max or t < 0 for t in in_lens):
        raise RuntimeError(f"ctc_loss: input_lengths must be in [0, {t_max}], got {in_lens}")
    flat = [int(v) for v in targets.reshape(-1).tolist()]
    if unbatched or targets.dim() == 1:
        starts = [sum(tg_lens[:i]) for i in range(n)]
    else:
        starts = [i * targets.shape[1] for i in range(n)]
    labels = [flat[a : a + k] for a, k in zip(starts, tg_lens, strict=True)]
    s_max = 2 * max(tg_lens, default=0) + 1
    # The extended label sequences: blank, l1, blank, l2, ..., blank (padded with blanks).
    ext = [[blank] * s_max for _ in range(n)]
    skip = [[False] * s_max for _ in range(n)]
    for i, lab in enumerate(labels):
        for j, v in enumerate(lab):
            ext[i][2 * j + 1] = v
            # A label may be reached from two back unless it repeats the previous label.
            skip[i][2 * j + 1] = j > 0 and v != lab[j - 1]
    ext_t = _core.tensor(ext, dtype=_core.int64)  # [N, S]
    emit = lp.gather(2, ext_t.unsqueeze(0).expand(t_max, n, s_max))  # [T, N, S]
    skip_ok = _core.tensor(skip)
    pos = _core.arange(s_max, dtype=_core.int64).unsqueeze(0)
    neg1 = _core.full([n, 1], _LOG_ZERO, dtype=lp.dtype)
    neg2 = _core.full([n, 2], _LOG_ZERO, dtype=lp.dtype)
    alpha = where(pos < 2, emit[0], _LOG_ZERO)
    active = _core.tensor(in_lens, dtype=_core.int64).unsqueeze(1)
    for t in range(1, t_max):
        # Each position is reached from itself, the one before, or two before (skip_ok).
        terms = [alpha, _core.cat([neg1, alpha.narrow(1, 0, s_max - 1)], 1)]
        if s_max > 2:
            two_back = _core.cat([neg2, alpha.narrow(1, 0, s_max - 2)], 1)
            terms.append(where(skip_ok, two_back, _LOG_ZERO))
        new = _core.stack(terms, 0).logsumexp(0) + emit[t]
        alpha = where(active > t, new, alpha)  # a finished sequence keeps its alphas
    ends = _core.tensor([[2 * k, max(2 * k - 1, 0)] for k in tg_lens], dtype=_core.int64)
    last = alpha.gather(1, ends)
    # With an empty target the two ends coincide: count the single path once.
    last = where(_core.tensor([[False, k == 0] for k in tg_lens]), _LOG_ZERO, last)
    loss = -last.logsumexp(1)
    # No frames: the empty target has the one empty alignment (loss 0), any other none.
    lens = list(zip(in_lens, tg_lens, strict=True))
    loss = where(_core.tensor([t == 0 and k == 0 for t, k in lens]), 0.0, loss)
    never = _core.tensor([t == 0 and k > 0 for t, k in lens])
    impossible = (loss > -_LOG_ZERO / 2).logical_or(never)
    loss = where(impossible, 0.0 if zero_infinity else math.inf, loss)
    if reduction == "mean":
        lens = _core.tensor(tg_lens, dtype=lp.dtype).clamp(min=1.0)
        return (loss / lens).mean()
    if reduction == "sum":
        return loss.sum()
    return loss.reshape(()) if unbatched else loss
