"""``batch_norm``: a fused Rust kernel whose backward keeps the input and two floats per
channel."""

from __future__ import annotations

from ... import _core
from ..._core import Tensor
from .._reduction import _check_tensor

__all__ = ["batch_norm"]


def _verify_batch_size(size) -> None:
    prod = size[0]
    for s in size[2:]:
        prod *= s
    if prod == 1:
        raise ValueError(
            f"Expected more than 1 value per channel when training, got input size {size}"
        )


def batch_norm(
    input: Tensor,
    running_mean: Tensor | None,
    running_var: Tensor | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
) -> Tensor:
    """Normalise each channel (dim 1) by the batch's statistics when ``training`` (and
    move ``running_mean``/``running_var`` towards them in place), else by the running ones."""
    _check_tensor("batch_norm", "input", input)
    if training:
        _verify_batch_size(input.shape)
    return _core._nn_batch_norm(
        input, running_mean, running_var, weight, bias, bool(training), float(momentum), eps
    )
