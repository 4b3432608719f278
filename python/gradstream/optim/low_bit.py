"""The low-bit optimizers under the names bitsandbytes and torchao give them.

Each is ``Adam``, ``AdamW`` or ``SGD`` with a ``state_dtype``: one keyword on the existing
classes carries the state format, so schedulers, accumulation, clipping, ``in_backward``
and ``state_dict`` are the same code for every format; these names exist so that a script
written for bitsandbytes (``bnb.optim.AdamW8bit``) or torchao
(``torchao.optim.AdamW4bit``) runs with an import changed.
"""

from __future__ import annotations

from .adam import Adam, AdamW
from .sgd import SGD

__all__ = ["Adam8bit", "AdamW8bit", "AdamW4bit", "AdamWFp8", "SGD8bit"]


def _bnb_defaults(optim_bits, percentile_clipping, block_wise, is_paged, name) -> None:
    """bitsandbytes' keywords that gradstream runs only at their defaults."""
    if percentile_clipping != 100:
        raise NotImplementedError(
            f"{name}: percentile_clipping={percentile_clipping} is not supported; clip with "
            "clip_grad(...) or nn.utils.clip_grad_norm_"
        )
    if not block_wise:
        raise NotImplementedError(f"{name}: only block-wise quantisation (block_wise=True)")
    if optim_bits not in (8, 32):
        raise ValueError(f"{name}: optim_bits must be 8 or 32, got {optim_bits}")
    del is_paged  # state is already only as large as its codes; nothing to page


class Adam8bit(Adam):
    """``Adam8bit(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    amsgrad=False, *, block_size=256, min_8bit_size=4096, in_backward=False)``: Adam with
    8-bit block-wise dynamic state (bitsandbytes' ``Adam8bit``)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0,
        amsgrad: bool = False,
        optim_bits: int = 32,
        args=None,
        min_8bit_size: int = 4096,
        percentile_clipping: int = 100,
        block_wise: bool = True,
        is_paged: bool = False,
        *,
        block_size: int = 256,
        in_backward: bool = False,
    ):
        _bnb_defaults(optim_bits, percentile_clipping, block_wise, is_paged, type(self).__name__)
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            in_backward=in_backward,
            state_dtype="int8",
            block_size=block_size,
            min_quantized_size=min_8bit_size,
        )


class _AdamWLowBit(AdamW):
    _state_dtype = "int8"
    _block_size = 256

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 1e-2,
        amsgrad: bool = False,
        *,
        block_size: int | None = None,
        min_8bit_size: int = 4096,
        in_backward: bool = False,
        **bnb,
    ):
        unknown = set(bnb) - {"optim_bits", "args", "percentile_clipping", "block_wise", "is_paged"}
        if unknown:
            raise TypeError(
                f"{type(self).__name__}() got unexpected keyword argument(s) {sorted(unknown)}"
            )
        _bnb_defaults(
            bnb.get("optim_bits", 32),
            bnb.get("percentile_clipping", 100),
            bnb.get("block_wise", True),
            bnb.get("is_paged", False),
            type(self).__name__,
        )
        super().__init__(
            params,
            lr,
            betas,
            eps,
            weight_decay,
            amsgrad,
            in_backward=in_backward,
            state_dtype=self._state_dtype,
            block_size=self._block_size if block_size is None else block_size,
            min_quantized_size=min_8bit_size,
        )


class AdamW8bit(_AdamWLowBit):
    """``AdamW8bit(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2,
    amsgrad=False, *, block_size=256, min_8bit_size=4096, in_backward=False)``: AdamW with
    8-bit block-wise dynamic state (bitsandbytes' and torchao's ``AdamW8bit``)."""


class AdamW4bit(_AdamWLowBit):
    """``AdamW4bit(..., block_size=128)``: AdamW with 4-bit state (torchao's ``AdamW4bit``;
    the second moment of a matrix rank-1 normalised, as Li et al. 2023)."""

    _state_dtype = "int4"
    _block_size = 128


class AdamWFp8(_AdamWLowBit):
    """``AdamWFp8(..., block_size=256)``: AdamW with fp8 (e4m3) state scaled per block
    (torchao's ``AdamWFp8``)."""

    _state_dtype = "fp8"


class SGD8bit(SGD):
    """``SGD8bit(params, lr, momentum=0, dampening=0, weight_decay=0, nesterov=False, *,
    block_size=256, min_8bit_size=4096, in_backward=False)``: SGD with an 8-bit momentum
    buffer (bitsandbytes' ``SGD8bit``)."""

    def __init__(
        self,
        params,
        lr: float = 1e-3,
        momentum: float = 0,
        dampening: float = 0,
        weight_decay: float = 0,
        nesterov: bool = False,
        *,
        block_size: int = 256,
        min_8bit_size: int = 4096,
        in_backward: bool = False,
    ):
        super().__init__(
            params,
            lr,
            momentum,
            dampening,
            weight_decay,
            nesterov,
            in_backward=in_backward,
            state_dtype="int8",
            block_size=block_size,
            min_quantized_size=min_8bit_size,
        )
