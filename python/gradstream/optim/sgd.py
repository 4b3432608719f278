"""Stochastic gradient descent, with momentum and Nesterov momentum (PyTorch's formulas)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["SGD"]


class SGD(Optimizer):
    """``SGD(params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
    maximize=False, in_backward=False, state_dtype=None, block_size=None,
    min_quantized_size=4096)``. Each step is one fused Rust kernel per parameter;
    ``state_dtype`` keeps the momentum buffer in fewer bits, as in `Adam`."""

    _kind = "sgd"
    _hyper_keys = frozenset(
        {
            "lr",
            "momentum",
            "dampening",
            "weight_decay",
            "nesterov",
            "maximize",
            "foreach",
            "differentiable",
            "fused",
            *check.STATE_KEYS,
        }
    )

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        differentiable: bool = False,
        fused: bool | None = None,
        in_backward: bool = False,
        state_dtype: str | None = None,
        block_size: int | None = None,
        min_quantized_size: int | None = None,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
            maximize=maximize,
            foreach=foreach,
            differentiable=differentiable,
            fused=fused,
            **check.state_defaults(state_dtype, block_size, min_quantized_size),
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        if not isinstance(g["lr"], (int, float)) and not hasattr(g["lr"], "__float__"):
            raise TypeError(f"Invalid learning rate type: {type(g['lr']).__name__}")
        if float(g["lr"]) < 0.0:
            raise ValueError(f"Invalid learning rate: {g['lr']}")
        if g["momentum"] < 0.0:
            raise ValueError(f"Invalid momentum value: {g['momentum']}")
        if g["weight_decay"] < 0.0:
            raise ValueError(f"Invalid weight_decay value: {g['weight_decay']}")
        if g["nesterov"] and (g["momentum"] <= 0 or g["dampening"] != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        check.state(g)
