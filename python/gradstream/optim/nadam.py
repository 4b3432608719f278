"""NAdam (PyTorch's single-tensor formulas: the momentum schedule, decoupled weight decay)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["NAdam"]


class NAdam(Optimizer):
    """``NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    momentum_decay=4e-3, decoupled_weight_decay=False, *, maximize=False,
    in_backward=False)``."""

    _kind = "nadam"
    _hyper_keys = check.keys("betas", "eps", "momentum_decay", "decoupled_weight_decay")

    def __init__(
        self,
        params,
        lr: float = 2e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        momentum_decay: float = 4e-3,
        decoupled_weight_decay: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            momentum_decay=momentum_decay,
            decoupled_weight_decay=decoupled_weight_decay,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.eps(g)
        check.betas(g)
        check.nonneg(g, "weight_decay")
        check.nonneg(g, "momentum_decay")
