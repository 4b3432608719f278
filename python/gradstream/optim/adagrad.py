"""Adagrad (PyTorch's single-tensor formulas, ``lr_decay`` and ``initial_accumulator_value``)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer, _key

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """``Adagrad(params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
    eps=1e-10, *, maximize=False, in_backward=False)``. As in PyTorch, the state (``step``,
    ``sum``) is made at construction."""

    _kind = "adagrad"
    _hyper_keys = check.keys("lr_decay", "initial_accumulator_value", "eps", "fused")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        lr_decay: float = 0,
        weight_decay: float = 0,
        initial_accumulator_value: float = 0,
        eps: float = 1e-10,
        foreach: bool | None = None,
        *,
        maximize: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            lr_decay=lr_decay,
            eps=eps,
            weight_decay=weight_decay,
            initial_accumulator_value=initial_accumulator_value,
            foreach=foreach,
            maximize=maximize,
            differentiable=differentiable,
            fused=fused,
        )
        super().__init__(params, defaults, in_backward=in_backward)
        from .. import full_like

        for g in self.param_groups:
            for p in g["params"]:
                s = full_like(p.detach(), g["initial_accumulator_value"])
                self._rust_states[_key(p)].load(p, {"step": 0.0, "sum": s})

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.nonneg(g, "lr_decay")
        check.nonneg(g, "weight_decay")
        check.nonneg(g, "initial_accumulator_value")
        check.eps(g)
