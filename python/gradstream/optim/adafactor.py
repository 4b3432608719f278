"""Adafactor (PyTorch's ``torch.optim.Adafactor``): a matrix's second moment kept as a row
and a column variance, so its state is R + C numbers per R×C matrix instead of Adam's
2·R·C."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["Adafactor"]


class Adafactor(Optimizer):
    """``Adafactor(params, lr=1e-2, beta2_decay=-0.8, eps=(None, 1e-3), d=1.0,
    weight_decay=0.0, *, maximize=False, in_backward=False)``.

    State per parameter: ``step``, and ``row_var`` (shape ``[..., R, 1]``) and ``col_var``
    (``[..., 1, C]``) for a parameter of two or more dimensions, else ``variance``."""

    _kind = "adafactor"
    _hyper_keys = check.keys("beta2_decay", "eps", "d")

    def __init__(
        self,
        params,
        lr: float = 1e-2,
        beta2_decay: float = -0.8,
        eps: tuple[float | None, float] = (None, 1e-3),
        d: float = 1.0,
        weight_decay: float = 0.0,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        in_backward: bool = False,
    ):
        defaults = dict(
            lr=lr,
            beta2_decay=beta2_decay,
            eps=eps,
            d=d,
            weight_decay=weight_decay,
            foreach=foreach,
            maximize=maximize,
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        # PyTorch's messages (its Adafactor does not use the shared ones).
        if not 0.0 <= g["lr"]:
            raise ValueError(f"Learning rate should be >= 0 but is: {g['lr']}")
        if not 0.0 >= g["beta2_decay"]:
            raise ValueError(f"beta2_decay should be <= 0 but is: {g['beta2_decay']}")
        eps = g["eps"]
        if not isinstance(eps, (tuple, list)) or len(eps) != 2:
            raise TypeError(f"eps must be a pair (eps1 or None, eps2), got {eps!r}")
        if eps[0] is not None and not 0.0 <= eps[0]:
            raise ValueError(f"epsilon1 should be >= 0 but is: {eps[0]}")
        if not 0.0 <= eps[1]:
            raise ValueError(f"epsilon2 should be >= 0 but is: {eps[1]}")
        if not 1.0 <= g["d"]:
            raise ValueError(f"Clipping threshold d should be >= 1 but is: {g['d']}")
        if not 0.0 <= g["weight_decay"]:
            raise ValueError(f"weight_decay should be >= 0 but is: {g['weight_decay']}")
