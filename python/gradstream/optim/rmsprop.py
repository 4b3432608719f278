"""RMSprop (PyTorch's single-tensor formulas: momentum, centered)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """``RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
    centered=False, *, maximize=False, in_backward=False)``."""

    _kind = "rmsprop"
    _hyper_keys = check.keys("alpha", "eps", "momentum", "centered")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        alpha: float = 0.99,
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum: float = 0,
        centered: bool = False,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        *,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            alpha=alpha,
            eps=eps,
            centered=centered,
            weight_decay=weight_decay,
            capturable=capturable,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.eps(g)
        check.nonneg(g, "momentum")
        check.nonneg(g, "weight_decay")
        check.nonneg(g, "alpha")
