"""Adamax (PyTorch's single-tensor formulas: Adam with the infinity norm)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """``Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, *,
    maximize=False, in_backward=False)``."""

    _kind = "adamax"
    _hyper_keys = check.keys("betas", "eps")

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        capturable: bool = False,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.eps(g)
        check.betas(g)
        check.nonneg(g, "weight_decay")
