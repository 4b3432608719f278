"""Adadelta (PyTorch's single-tensor formulas)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["Adadelta"]


class Adadelta(Optimizer):
    """``Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, *, maximize=False,
    in_backward=False)``."""

    _kind = "adadelta"
    _hyper_keys = check.keys("rho", "eps")

    def __init__(
        self,
        params,
        lr: float = 1.0,
        rho: float = 0.9,
        eps: float = 1e-6,
        weight_decay: float = 0,
        foreach: bool | None = None,
        *,
        capturable: bool = False,
        maximize: bool = False,
        differentiable: bool = False,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            rho=rho,
            eps=eps,
            weight_decay=weight_decay,
            maximize=maximize,
            capturable=capturable,
            foreach=foreach,
            differentiable=differentiable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        if not 0.0 <= g["rho"] <= 1.0:
            raise ValueError(f"Invalid rho value: {g['rho']}")
        check.eps(g)
        check.nonneg(g, "weight_decay")
