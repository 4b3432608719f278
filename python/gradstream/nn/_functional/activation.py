"""Activations composed from gradstream's differentiable ops.

Where PyTorch's backward picks a side at a kink (``hardtanh`` passes no gradient at its
bounds, ``elu`` takes the negative branch at 0), the ``where`` conditions here are chosen
to give the same one-sided gradient.
"""

from __future__ import annotations

from ... import _core
from ..._core import Tensor, softplus, where
from .._reduction import _check_tensor

__all__ = [
    "leaky_relu", "leaky_relu_", "elu", "elu_", "selu", "selu_", "celu", "celu_", "relu6",
    "hardtanh", "hardtanh_", "hardsigmoid", "hardswish", "mish", "logsigmoid", "softsign",
    "tanhshrink", "softshrink", "hardshrink", "glu", "prelu", "rrelu", "rrelu_",
    "gumbel_softmax",
]  # fmt: skip

_SELU_ALPHA = 1.6732632423543772848170429916717
_SELU_SCALE = 1.0507009873554804934193349852946


def _apply(fn, input: Tensor, inplace: bool) -> Tensor:
    """``fn(input)``, or written into ``input`` when ``inplace``. The in-place result is
    computed from a copy, so the graph never saves the tensor that is overwritten."""
    if not inplace:
        return fn(input)
    return input.copy_(fn(input.clone()))


def leaky_relu(input: Tensor, negative_slope: float = 0.01, inplace: bool = False) -> Tensor:
    """``input`` where positive, else ``negative_slope * input``."""
    _check_tensor("leaky_relu", "input", input)
    return _apply(lambda x: where(x > 0, x, x * negative_slope), input, inplace)


def leaky_relu_(input: Tensor, negative_slope: float = 0.01) -> Tensor:
    return leaky_relu(input, negative_slope, inplace=True)


def _elu(input: Tensor, alpha: float, scale: float, input_scale: float) -> Tensor:
    # expm1 sees only the non-positive side, so a large positive input cannot make the
    # masked-out branch (and its gradient) overflow.
    neg = (input.clamp(max=0.0) * input_scale).expm1() * (alpha * scale)
    pos = input * scale if scale != 1.0 else input
    return where(input > 0, pos, neg)


def elu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``input`` where positive, else ``alpha * (exp(input) - 1)``."""
    _check_tensor("elu", "input", input)
    return _apply(lambda x: _elu(x, alpha, 1.0, 1.0), input, inplace)


def elu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return elu(input, alpha, inplace=True)


def selu(input: Tensor, inplace: bool = False) -> Tensor:
    """``scale * elu(input, alpha)`` with the self-normalising constants."""
    _check_tensor("selu", "input", input)
    return _apply(lambda x: _elu(x, _SELU_ALPHA, _SELU_SCALE, 1.0), input, inplace)


def selu_(input: Tensor) -> Tensor:
    return selu(input, inplace=True)


def celu(input: Tensor, alpha: float = 1.0, inplace: bool = False) -> Tensor:
    """``max(0, x) + min(0, alpha * (exp(x / alpha) - 1))``."""
    _check_tensor("celu", "input", input)
    if alpha == 0:
        raise RuntimeError("ZeroDivisionError")
    return _apply(lambda x: _elu(x, alpha, 1.0, 1.0 / alpha), input, inplace)


def celu_(input: Tensor, alpha: float = 1.0) -> Tensor:
    return celu(input, alpha, inplace=True)


def hardtanh(
    input: Tensor, min_val: float = -1.0, max_val: float = 1.0, inplace: bool = False
) -> Tensor:
    """``input`` clamped to ``[min_val, max_val]``; no gradient on or outside the bounds."""
    _check_tensor("hardtanh", "input", input)
    if min_val > max_val:
        raise ValueError("min_val cannot be greater than max_val")

    def fn(x):
        inside = (x > min_val).logical_and(x < max_val)
        return where(inside, x, x.detach().clamp(float(min_val), float(max_val)))

    return _apply(fn, input, inplace)


def hardtanh_(input: Tensor, min_val: float = -1.0, max_val: float = 1.0) -> Tensor:
    return hardtanh(input, min_val, max_val, inplace=True)


def relu6(input: Tensor, inplace: bool = False) -> Tensor:
    """``min(max(0, input), 6)``."""
    return hardtanh(input, 0.0, 6.0, inplace)


def hardsigmoid(input: Tensor, inplace: bool = False) -> Tensor:
    """``relu6(input + 3) / 6``."""
    _check_tensor("hardsigmoid", "input", input)

    def fn(x):
        inside = (x > -3.0).logical_and(x < 3.0)
        return where(inside, x / 6.0 + 0.5, (x >= 3.0).to(x.dtype))

    return _apply(fn, input, inplace)


def hardswish(input: Tensor, inplace: bool = False) -> Tensor:
    """``input * relu6(input + 3) / 6``."""
    _check_tensor("hardswish", "input", input)

    def fn(x):
        return where(x <= -3.0, 0.0, where(x < 3.0, x * (x + 3.0) / 6.0, x))

    return _apply(fn, input, inplace)


def mish(input: Tensor, inplace: bool = False) -> Tensor:
    """``input * tanh(softplus(input))``."""
    _check_tensor("mish", "input", input)
    return _apply(lambda x: x * softplus(x).tanh(), input, inplace)


def logsigmoid(input: Tensor) -> Tensor:
    """``log(sigmoid(input))``, exact for any input (no softplus threshold)."""
    _check_tensor("logsigmoid", "input", input)
    # x - log(1 + e^x) for x < 0 and -log(1 + e^-x) otherwise: exp never sees a positive
    # argument, and the clamps keep the branch that where() drops from overflowing.
    neg = input.clamp(max=0.0)
    pos = input.clamp(min=0.0)
    return where(input < 0, neg - neg.exp().log1p(), -((-pos).exp().log1p()))


def softsign(input: Tensor) -> Tensor:
    """``input / (1 + |input|)``."""
    return input / (input.abs() + 1.0)


def tanhshrink(input: Tensor) -> Tensor:
    """``input - tanh(input)``."""
    return input - input.tanh()


def softshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``input -+ lambd`` outside ``[-lambd, lambd]``, else 0."""
    _check_tensor("softshrink", "input", input)
    if lambd < 0:
        raise RuntimeError(f"softshrink: lambda must be non-negative, but found {lambd}")
    return where(input > lambd, input - lambd, where(input < -lambd, input + lambd, 0.0))


def hardshrink(input: Tensor, lambd: float = 0.5) -> Tensor:
    """``input`` outside ``[-lambd, lambd]``, else 0."""
    _check_tensor("hardshrink", "input", input)
    inside = (input >= -lambd).logical_and(input <= lambd)
    return where(inside, 0.0, input)


def glu(input: Tensor, dim: int = -1) -> Tensor:
    """``a * sigmoid(b)`` where ``a`` and ``b`` are the two halves of ``input`` along ``dim``."""
    _check_tensor("glu", "input", input)
    if input.dim() == 0:
        raise RuntimeError("glu does not support scalars because halving size must be even")
    n = input.shape[dim]
    if n % 2:
        d = dim % input.dim() if -input.dim() <= dim < input.dim() else dim
        raise RuntimeError(f"Halving dimension must be even, but dimension {d} is size {n}")
    a = input.narrow(dim, 0, n // 2)
    if input.numel() == 0:
        # An empty result; narrow's backward from a non-zero start on an empty tensor
        # panics in the engine, so take both halves from the start.
        return a * a.sigmoid()
    return a * input.narrow(dim, n // 2, n // 2).sigmoid()


def prelu(input: Tensor, weight: Tensor) -> Tensor:
    """``input`` where positive, else ``weight * input``; ``weight`` has one slope or one
    per channel (dim 1)."""
    _check_tensor("prelu", "input", input)
    _check_tensor("prelu", "weight", weight)
    n = weight.numel()
    if n != 1:
        channels = input.shape[1] if input.dim() >= 2 else (input.shape[0] if input.dim() else 1)
        if n != channels:
            raise RuntimeError(
                "Mismatch of parameter numbers and input channel size. Found parameter "
                f"numbers = {n} and channel size = {channels}."
            )
        shape = [1] * input.dim()
        shape[1 if input.dim() >= 2 else 0] = n
        weight = weight.reshape(*shape)
    elif weight.dim() > 0:
        weight = weight.reshape(())
    return where(input > 0, input, weight * input)


def rrelu(
    input: Tensor,
    lower: float = 1.0 / 8,
    upper: float = 1.0 / 3,
    training: bool = False,
    inplace: bool = False,
) -> Tensor:
    """Leaky ReLU with a slope drawn from ``U(lower, upper)`` per element in training, and
    ``(lower + upper) / 2`` otherwise."""
    _check_tensor("rrelu", "input", input)
    if not training:
        return leaky_relu(input, (lower + upper) / 2, inplace)
    slope = _core.rand_like(input) * (upper - lower) + lower
    return _apply(lambda x: where(x > 0, x, x * slope), input, inplace)


def rrelu_(
    input: Tensor, lower: float = 1.0 / 8, upper: float = 1.0 / 3, training: bool = False
) -> Tensor:
    return rrelu(input, lower, upper, training, inplace=True)


def gumbel_softmax(
    logits: Tensor, tau: float = 1, hard: bool = False, eps: float = 1e-10, dim: int = -1
) -> Tensor:
    """Softmax of ``(logits + Gumbel noise) / tau``; ``hard`` returns the one-hot of its
    argmax, with the soft sample's gradient (straight-through)."""
    _check_tensor("gumbel_softmax", "logits", logits)
    # -log(E) with E = -log(U) ~ Exp(1) is Gumbel(0, 1); U = 0 gives -inf, a zero weight.
    gumbels = -(_core.rand_like(logits).log().neg().log())
    y_soft = _core.softmax((logits + gumbels) / tau, dim)
    if not hard:
        return y_soft
    index = y_soft.argmax(dim, keepdim=True)
    y_hard = _core.zeros_like(logits).scatter(dim, index, 1.0)
    return y_hard - y_soft.detach() + y_soft
