"""Averaged SGD (PyTorch's single-tensor formulas; ``ax`` holds the average)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["ASGD"]


class ASGD(Optimizer):
    """``ASGD(params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0, *,
    maximize=False, in_backward=False)``."""

    _kind = "asgd"
    _hyper_keys = check.keys("lambd", "alpha", "t0")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lambd: float = 1e-4,
        alpha: float = 0.75,
        t0: float = 1e6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
        *,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            lambd=lambd,
            alpha=alpha,
            t0=t0,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.nonneg(g, "weight_decay")
