"""Gradient clipping, as `torch.nn.utils.clip_grad_norm_` / `clip_grad_value_`.

The norms are summed in Rust (float64) and the gradients scaled in place.
"""

from __future__ import annotations

import math

from ... import _core
from ..._core import Tensor

__all__ = ["clip_grad_norm_", "clip_grad_value_"]


def _grads(parameters) -> list:
    if isinstance(parameters, Tensor):
        parameters = [parameters]
    return [p.grad for p in parameters if p.grad is not None]


def clip_grad_norm_(
    parameters, max_norm: float, norm_type: float = 2.0, error_if_nonfinite: bool = False,
    foreach=None,
) -> Tensor:  # fmt: skip
    """Scale all gradients together so their joint ``norm_type``-norm is at most
    ``max_norm``; returns the total norm before clipping."""
    grads = _grads(parameters)
    max_norm = float(max_norm)
    norm_type = float(norm_type)
    if not grads:
        return _core.tensor(0.0)
    measured = _core._norm_pow(grads, norm_type)
    total = measured if math.isinf(norm_type) else measured ** (1.0 / norm_type)
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(
            f"The total norm of order {norm_type} for gradients from `parameters` is non-finite, "
            "so it cannot be clipped. To disable this error and scale the gradients by the "
            "non-finite norm anyway, set `error_if_nonfinite=False`"
        )
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            _core._scale_(g, coef)
    return _core.tensor(total, dtype=grads[0].dtype)


def clip_grad_value_(parameters, clip_value: float, foreach=None) -> None:
    """Clamp every gradient element into ``[-clip_value, clip_value]``."""
    clip_value = float(clip_value)
    for g in _grads(parameters):
        _core._clamp_(g, -clip_value, clip_value)
