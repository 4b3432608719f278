"""Running one call on gradstream and on PyTorch and comparing what each gave.

`Outcome` holds a call's value or the exception it raised; `compare` asserts two outcomes
agree: both raise an exception of the same builtin class, or both return values of the same
structure, dtype, shape and values (float tolerances scale with the values' magnitude).
`make_tensor` builds a library's tensor from a NumPy array in a given memory layout.
"""

from __future__ import annotations

import numpy as np
from backend_paths import reraise_missing
from helpers import dtype_name, to_numpy

import gradstream as gs

LAYOUTS = ["contiguous", "transposed", "sliced", "expanded"]

# The spacing of numbers near 1 in each float dtype, for tolerances.
EPS = {"float32": 2.0**-23, "float64": 2.0**-52, "bfloat16": 2.0**-8, "float16": 2.0**-10}


def data(shape: tuple[int, ...], dtype: str, seed: int) -> np.ndarray:
    """Small values of `dtype` (bool, int64 in [-4, 4], floats in [-3, 3])."""
    rng = np.random.default_rng(seed)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype == "int64":
        return rng.integers(-4, 5, shape).astype(np.int64)
    return rng.uniform(-3, 3, shape).astype(np.float32 if dtype == "bfloat16" else dtype)


def make_tensor(lib, arr: np.ndarray, layout: str = "contiguous", dtype: str | None = None):
    """`arr`'s values as a tensor of `lib` (gradstream or torch) with the given layout;
    layouts a shape cannot have (a transposed 0-d tensor) fall back to contiguous."""
    if lib is gs:
        make = gs.tensor
    else:
        import torch

        def make(a):
            return torch.from_numpy(np.array(a, order="C", copy=True))

    def cast(t):
        return t.to(getattr(lib, dtype)) if dtype and dtype != dtype_name(t.dtype) else t

    if layout == "transposed" and arr.ndim >= 1:
        return cast(make(np.ascontiguousarray(arr.swapaxes(0, -1)))).transpose(0, -1)
    if layout == "sliced" and arr.ndim >= 1:
        return cast(make(np.repeat(arr, 2, axis=-1)))[..., ::2]
    if layout == "expanded" and arr.ndim >= 1 and arr.shape[0] > 0:
        # The first row broadcast (both libraries get the same values).
        return cast(make(arr[:1])).expand(*arr.shape)
    return cast(make(arr))


class Outcome:
    """What `fn(*args, **kwargs)` gave: a value, or the exception it raised."""

    def __init__(self, fn, *args, **kwargs):
        try:
            self.value, self.error = fn(*args, **kwargs), None
        except Exception as e:  # noqa: BLE001  (the class is what is compared)
            reraise_missing(e)
            self.value, self.error = None, e


def error_class(e: BaseException) -> type:
    """The builtin class PyTorch's and gradstream's exceptions are compared by."""
    for cls in (TypeError, NotImplementedError, IndexError, ValueError, RuntimeError):
        if isinstance(e, cls):
            return cls
    return type(e)


def describe(o: Outcome) -> str:
    return "ok" if o.error is None else f"{type(o.error).__name__}: {o.error}"


def compare(ours: Outcome, ref: Outcome, what: str, terms: int = 1, eps: float = 0.0) -> None:
    """Both raised the same class of exception, or both gave the same values; `terms` is
    the length of the sums behind a value, which widens float tolerances, and `eps` the
    spacing of the least precise dtype among the inputs (PyTorch computes some mixed-dtype
    gradients in it), if it is coarser than the result's."""
    if ref.error is not None or ours.error is not None:
        msg = f"{what}: {describe(ours)}; torch {describe(ref)}"
        assert ours.error is not None and ref.error is not None, msg
        assert error_class(ours.error) is error_class(ref.error), msg
        return
    compare_values(ours.value, ref.value, what, terms, eps)


def compare_values(a, e, what: str, terms: int = 1, eps: float = 0.0) -> None:
    if isinstance(e, (tuple, list)):
        assert isinstance(a, (tuple, list)) and len(a) == len(e), f"{what}: {a!r} vs {e!r}"
        for x, y in zip(a, e, strict=True):
            compare_values(x, y, what, terms, eps)
        return
    if not hasattr(e, "dtype"):
        assert a == e, f"{what}: {a!r}, torch {e!r}"
        return
    assert isinstance(a, gs.Tensor), f"{what}: got {type(a).__name__}"
    name = str(e.dtype).replace("torch.", "")
    assert dtype_name(a.dtype) == name, f"{what}: dtype {a.dtype}, torch {e.dtype}"
    x, y = to_numpy(a), to_numpy(e)
    assert x.shape == y.shape, f"{what}: shape {x.shape}, torch {y.shape}"
    if y.dtype.kind == "f":
        tol = 32 * max(EPS.get(name, EPS["float32"]), eps) * max(terms, 1)
        scale = max(1.0, float(np.max(np.abs(y), initial=0.0, where=np.isfinite(y))))
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(x, y, err_msg=what)
