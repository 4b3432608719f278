"""`gradstream.nn.init`: in-place initialisers drawing from ``generator`` or, by default,
the global generator (``gradstream.manual_seed`` seeds it). Each runs without recording
autograd history and returns its tensor."""

from __future__ import annotations

import math
import warnings

import numpy as np

from .. import _core
from .._core import Tensor
from ..autograd.grad_mode import no_grad

__all__ = [
    "calculate_gain",
    "uniform_",
    "normal_",
    "zeros_",
    "ones_",
    "constant_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "trunc_normal_",
    "eye_",
    "dirac_",
    "sparse_",
    "orthogonal_",
    "uniform",
    "normal",
    "constant",
    "xavier_uniform",
    "xavier_normal",
    "kaiming_uniform",
    "kaiming_normal",
    "eye",
    "dirac",
    "sparse",
    "orthogonal",
]


def calculate_gain(nonlinearity: str, param=None) -> float:
    linear_fns = {
        "linear",
        "conv1d",
        "conv2d",
        "conv3d",
        "conv_transpose1d",
        "conv_transpose2d",
        "conv_transpose3d",
    }
    if nonlinearity in linear_fns or nonlinearity == "sigmoid":
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        if param is None:
            slope = 0.01
        elif not isinstance(param, bool) and isinstance(param, (int, float)):
            slope = param
        else:
            raise ValueError(f"negative_slope {param} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _check(op: str, tensor) -> None:
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{op}: expected a Tensor, got {type(tensor).__name__}")


def _calculate_fan_in_and_fan_out(tensor: Tensor) -> tuple[int, int]:
    if tensor.dim() < 2:
        raise ValueError(
            "Fan in and fan out can not be computed for tensor with fewer than 2 dimensions"
        )
    receptive = 1
    for s in tuple(tensor.shape)[2:]:
        receptive *= s
    return tensor.shape[1] * receptive, tensor.shape[0] * receptive


def _calculate_correct_fan(tensor: Tensor, mode: str) -> int:
    mode = mode.lower()
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of fan_in, fan_out")
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    return fan_in if mode == "fan_in" else fan_out


def uniform_(tensor: Tensor, a: float = 0.0, b: float = 1.0, generator=None) -> Tensor:
    _check("uniform_", tensor)
    _core._nn_random_(tensor, "uniform", float(a), float(b), generator)
    return tensor


def normal_(tensor: Tensor, mean: float = 0.0, std: float = 1.0, generator=None) -> Tensor:
    _check("normal_", tensor)
    _core._nn_random_(tensor, "normal", float(mean), float(std), generator)
    return tensor


def constant_(tensor: Tensor, val: float) -> Tensor:
    _check("constant_", tensor)
    with no_grad():
        tensor.fill_(val)
    return tensor


def zeros_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 0.0)


def ones_(tensor: Tensor) -> Tensor:
    return constant_(tensor, 1.0)


def xavier_uniform_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    a = math.sqrt(3.0) * std
    return uniform_(tensor, -a, a, generator)


def xavier_normal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    fan_in, fan_out = _calculate_fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def kaiming_uniform_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:  # fmt: skip
    if 0 in tuple(tensor.shape):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    gain = calculate_gain(nonlinearity, a)
    bound = math.sqrt(3.0) * gain / math.sqrt(fan)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(
    tensor: Tensor, a: float = 0, mode: str = "fan_in", nonlinearity: str = "leaky_relu",
    generator=None,
) -> Tensor:  # fmt: skip
    if 0 in tuple(tensor.shape):
        return tensor
    fan = _calculate_correct_fan(tensor, mode)
    std = calculate_gain(nonlinearity, a) / math.sqrt(fan)
    return normal_(tensor, 0.0, std, generator)


def _erfinv(y: Tensor) -> Tensor:
    """Inverse error function for ``|y| < 1``: Winitzki's closed-form estimate, refined by
    Newton steps on ``erf(x) - y``."""
    a = 0.147
    ln = (1.0 - y * y).log()
    t = 2.0 / (math.pi * a) + ln * 0.5
    x = y.sign() * ((t * t - ln / a).sqrt() - t).sqrt()
    for _ in range(3):
        x = x - (x.erf() - y) / ((-(x * x)).exp() * (2.0 / math.sqrt(math.pi)))
    return x


def trunc_normal_(
    tensor: Tensor,
    mean: float = 0.0,
    std: float = 1.0,
    a: float = -2.0,
    b: float = 2.0,
    generator=None,
) -> Tensor:
    """Fills ``tensor`` from ``N(mean, std^2)`` restricted to ``[a, b]``, by the inverse CDF
    of a uniform draw between the CDF values of ``a`` and ``b``."""
    _check("trunc_normal_", tensor)
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn(
            "mean is more than 2 std from [a, b] in nn.init.trunc_normal_. The distribution "
            "of values may be incorrect.",
            stacklevel=2,
        )

    def cdf(x: float) -> float:
        return (1.0 + math.erf(x / math.sqrt(2.0))) / 2.0

    lo, hi = cdf((a - mean) / std), cdf((b - mean) / std)
    with no_grad():
        u = _core.rand(*tuple(tensor.shape), dtype=_core.float64, generator=generator)
        u = u * (hi - lo) + lo
        # 2u - 1 in the open interval (-1, 1), where erfinv is finite.
        y = (u * 2.0 - 1.0).clamp(-1.0 + 1e-15, 1.0 - 1e-15)
        x = _erfinv(y) * (std * math.sqrt(2.0)) + mean
        tensor.copy_(x.clamp(float(a), float(b)).to(tensor.dtype))
    return tensor


def eye_(tensor: Tensor) -> Tensor:
    """Fills the 2-D ``tensor`` with the identity matrix."""
    _check("eye_", tensor)
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        tensor.copy_(_core.eye(*tuple(tensor.shape), dtype=tensor.dtype))
    return tensor


def dirac_(tensor: Tensor, groups: int = 1) -> Tensor:
    """Fills the 3-, 4- or 5-D convolution weight ``tensor`` with the Dirac delta: each of
    the first input channels of a group passes through to its output channel unchanged."""
    _check("dirac_", tensor)
    shape = tuple(tensor.shape)
    if len(shape) not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    out_per_group = shape[0] // groups
    values = np.zeros(shape)
    centre = tuple(k // 2 for k in shape[2:])
    for g in range(groups):
        for d in range(min(out_per_group, shape[1])):
            values[(g * out_per_group + d, d, *centre)] = 1.0
    with no_grad():
        tensor.copy_(_core.tensor(values, dtype=tensor.dtype))
    return tensor


def sparse_(tensor: Tensor, sparsity: float, std: float = 0.01, generator=None) -> Tensor:
    """Fills the 2-D ``tensor`` from ``N(0, std^2)``, then zeroes ``ceil(sparsity * rows)``
    randomly chosen rows in each column."""
    _check("sparse_", tensor)
    if tensor.dim() != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tuple(tensor.shape)
    num_zeros = int(math.ceil(sparsity * rows))
    normal_(tensor, 0.0, std, generator)
    if num_zeros == 0 or cols == 0:
        return tensor
    keep = np.ones((rows, cols), dtype=bool)
    for c in range(cols):
        keep[_core.randperm(rows, generator=generator)[:num_zeros].numpy(), c] = False
    with no_grad():
        tensor.mul_(_core.tensor(keep).to(tensor.dtype))
    return tensor


def _orthonormal_columns(a: Tensor) -> Tensor:
    """Q of the QR decomposition of the tall ``a`` with R's diagonal positive (the
    Haar-distributed Q for Gaussian ``a``), by modified Gram-Schmidt, orthogonalising
    twice so float64 rounding does not erode orthogonality."""
    cols = []
    for j in range(a.shape[1]):
        v = a[:, j]
        for _ in range(2):
            for q in cols:
                v = v - q * (q * v).sum()
        cols.append(v / (v * v).sum().sqrt())
    return _core.stack(cols, 1)


def orthogonal_(tensor: Tensor, gain: float = 1.0, generator=None) -> Tensor:
    """Fills ``tensor`` (viewed as ``rows x rest``) with a random (semi-)orthogonal matrix
    times ``gain``: orthonormal rows or columns, whichever are fewer."""
    _check("orthogonal_", tensor)
    if tensor.dim() < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    with no_grad():
        a = _core.randn(rows, cols, dtype=_core.float64, generator=generator)
        q = _orthonormal_columns(a.t() if rows < cols else a)
        if rows < cols:
            q = q.t()
        tensor.copy_((q * gain).reshape(*tuple(tensor.shape)).to(tensor.dtype))
    return tensor


def _deprecated(new):
    old = new.__name__[:-1]

    def fn(*args, **kwargs):
        warnings.warn(
            f"`nn.init.{old}` is now deprecated in favor of `nn.init.{new.__name__}`.",
            FutureWarning,
            stacklevel=2,
        )
        return new(*args, **kwargs)

    fn.__name__ = old
    fn.__doc__ = f"Deprecated spelling of ``{new.__name__}``."
    return fn


uniform = _deprecated(uniform_)
normal = _deprecated(normal_)
constant = _deprecated(constant_)
xavier_uniform = _deprecated(xavier_uniform_)
xavier_normal = _deprecated(xavier_normal_)
kaiming_uniform = _deprecated(kaiming_uniform_)
kaiming_normal = _deprecated(kaiming_normal_)
eye = _deprecated(eye_)
dirac = _deprecated(dirac_)
sparse = _deprecated(sparse_)
orthogonal = _deprecated(orthogonal_)
