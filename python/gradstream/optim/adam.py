"""Adam and AdamW (PyTorch's single-tensor formulas, bias correction included)."""

from __future__ import annotations

from . import _checks as check
from .optimizer import Optimizer

__all__ = ["Adam", "AdamW"]

_ADAM_KEYS = check.keys(
    "betas", "eps", "amsgrad", "fused", "decoupled_weight_decay", *check.STATE_KEYS
)


class Adam(Optimizer):
    """``Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0, amsgrad=False,
    *, maximize=False, decoupled_weight_decay=False, in_backward=False, state_dtype=None,
    block_size=None, min_quantized_size=4096)``.

    ``state_dtype`` keeps the moments in fewer bits: ``"int8"`` (block-wise dynamic code),
    ``"int4"`` (block-wise; the second moment of a matrix rank-1 normalised), ``"fp8"``
    (e4m3, block-wise scaled) or ``"bfloat16"``, decoded and coded back inside each fused
    step; parameters under ``min_quantized_size`` elements keep dense state. See
    ``docs/low-bit-optimizers.md``."""

    _kind = "adam"
    _hyper_keys = _ADAM_KEYS

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        *,
        foreach: bool | None = None,
        maximize: bool = False,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        decoupled_weight_decay: bool = False,
        in_backward: bool = False,
        state_dtype: str | None = None,
        block_size: int | None = None,
        min_quantized_size: int | None = None,
    ):
        defaults = dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=weight_decay,
            amsgrad=amsgrad,
            maximize=maximize,
            foreach=foreach,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=decoupled_weight_decay,
            **check.state_defaults(state_dtype, block_size, min_quantized_size),
        )
        super().__init__(params, defaults, in_backward=in_backward)

    def _validate_group(self, g: dict) -> None:
        check.lr(g)
        check.eps(g)
        check.betas(g)
        check.nonneg(g, "weight_decay")
        check.state(g)


class AdamW(Adam):
    """``AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, maximize=False, in_backward=False, state_dtype=None, block_size=None,
    min_quantized_size=4096)``: decoupled weight decay; ``state_dtype`` as in `Adam`."""

    _kind = "adamw"

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        maximize: bool = False,
        foreach: bool | None = None,
        capturable: bool = False,
        differentiable: bool = False,
        fused: bool | None = None,
        in_backward: bool = False,
        state_dtype: str | None = None,
        block_size: int | None = None,
        min_quantized_size: int | None = None,
    ):
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            foreach=foreach,
            maximize=maximize,
            capturable=capturable,
            differentiable=differentiable,
            fused=fused,
            decoupled_weight_decay=True,
            in_backward=in_backward,
            state_dtype=state_dtype,
            block_size=block_size,
            min_quantized_size=min_quantized_size,
        )
