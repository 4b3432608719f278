"""Distances and similarities between rows of tensors."""

from __future__ import annotations

import math

from ... import _core
from ..._core import Tensor
from ...broadcasting import broadcast_tensors
from ...linalg import vector_norm
from .._reduction import _check_tensor

__all__ = ["pairwise_distance", "cosine_similarity", "pdist"]


def pairwise_distance(
    x1: Tensor, x2: Tensor, p: float = 2.0, eps: float = 1e-6, keepdim: bool = False
) -> Tensor:
    """``||x1 - x2 + eps||_p`` over the last dimension (of the broadcast shape)."""
    _check_tensor("pairwise_distance", "x1", x1)
    _check_tensor("pairwise_distance", "x2", x2)
    ndim = max(x1.dim(), x2.dim())
    diff = x1 - x2 + eps
    if ndim == 0:
        return diff.abs() if p != 0 else (diff != 0).to(diff.dtype)
    if diff.shape[-1] == 0 and math.isinf(p):
        raise RuntimeError(
            "pairwise_distance: cannot compute the inf norm over an empty last dimension, "
            "which has no identity"
        )
    return vector_norm(diff, p, ndim - 1, keepdim)


def cosine_similarity(x1: Tensor, x2: Tensor, dim: int = 1, eps: float = 1e-8) -> Tensor:
    """``sum(x1 * x2) / (max(||x1||, eps) * max(||x2||, eps))`` along ``dim``."""
    _check_tensor("cosine_similarity", "x1", x1)
    _check_tensor("cosine_similarity", "x2", x2)
    x1, x2 = broadcast_tensors(x1, x2)
    n1 = vector_norm(x1, 2, dim, True)
    n2 = vector_norm(x2, 2, dim, True)
    # PyTorch clamps the norms at eps outside autograd: the value is clamped, the gradient
    # is the unclamped norm's.
    n1 = n1 + (n1.clamp(min=eps) - n1).detach()
    n2 = n2 + (n2.clamp(min=eps) - n2).detach()
    return ((x1 / n1) * (x2 / n2)).sum(dim)


def pdist(input: Tensor, p: float = 2) -> Tensor:
    """``||input[i] - input[j]||_p`` for every row pair ``i < j``, in row-major order."""
    _check_tensor("pdist", "input", input)
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    n = input.shape[0]
    rows = [i for i in range(n) for _ in range(i + 1, n)]
    cols = [j for i in range(n) for j in range(i + 1, n)]
    a = input.index_select(0, _core.tensor(rows, dtype=_core.int64))
    b = input.index_select(0, _core.tensor(cols, dtype=_core.int64))
    return vector_norm(a - b, p, 1)
