"""`isclose`, `allclose`, `equal`: comparisons of whole tensors, as `torch`'s."""

from . import _core

Tensor = _core.Tensor


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """`|input - other| <= atol + rtol * |other|` element-wise (broadcast), or equal;
    NaNs are close to each other only with `equal_nan`."""
    for name, t in (("input", input), ("other", other)):
        if not isinstance(t, Tensor):
            raise TypeError(f"isclose(): argument '{name}' must be Tensor, not {type(t).__name__}")
    if input.dtype != other.dtype:
        raise RuntimeError(
            f"isclose(): expected both inputs to have the same dtype, got {input.dtype} "
            f"and {other.dtype}"
        )
    for name, v in (("rtol", rtol), ("atol", atol)):
        if v < 0:
            raise RuntimeError(
                f"isclose(): {name} must be greater than or equal to zero, but got {v}"
            )
    close = input == other
    if equal_nan and input.is_floating_point():
        close = close | (input.isnan() & other.isnan())
    if rtol == 0 and atol == 0:
        return close
    a, b = (input, other) if input.is_floating_point() else (input.double(), other.double())
    diff = (a - b).abs()
    return close | (diff.isfinite() & (diff <= atol + rtol * b.abs()))


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    """Whether every element of `input` is close to `other`'s (see `isclose`)."""
    return bool(isclose(input, other, rtol, atol, equal_nan).all())


def equal(input, other):
    """Whether the two tensors have the same shape and the same values."""
    if input.shape != other.shape:
        return False
    return bool((input == other).all())
