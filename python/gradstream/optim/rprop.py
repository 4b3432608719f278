"""Rprop (PyTorch's single-tensor formulas: sign-based steps with adaptive step sizes)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["Rprop"]


class Rprop(Optimizer):
    """``Rprop(params, lr=1e-2, etas=(0.5, 1.2), step_sizes=(1e-6, 50), *, maximize=False,
    in_backward=False)``. Each parameter's ``step_size`` starts at its group's ``lr``."""

    _kind = "rprop"
    _hyper_keys = check.keys("etas", "step_sizes") - {"weight_decay"}

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        etas: tuple[float, float] = (0.5, 1.2),
        step_sizes: tuple[float, float] = (1e-6, 50),
        *,
        capturable: bool = False,
        foreach: bool | None = None,
        maximize: bool = False,
        differentiable: bool = False,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            etas=etas,
            step_sizes=step_sizes,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            capturable=capturable,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        etas = check.pair(g, "etas")
        if not 0.0 < etas[0] < 1.0 < etas[1]:
            raise ValueError(f"Invalid eta values: {etas[0]}, {etas[1]}")
        check.pair(g, "step_sizes")
