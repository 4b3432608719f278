"""Finite-difference gradient checks in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from .. import _core
from .backward import grad
from .grad_mode import enable_grad


def _as_tuple(x):
    return tuple(x) if isinstance(x, (tuple, list)) else (x,)


def _numerical_jacobian(fn, inputs, i, eps):
    """d(outputs)/d(inputs[i]) by central differences, one column per input element."""
    x = inputs[i]
    base = x.detach().numpy().astype(np.float64)
    cols = []
    for j in range(base.size):
        outs = []
        for sign in (1.0, -1.0):
            pert = base.copy().reshape(-1)
            pert[j] += sign * eps
            args = list(inputs)
            args[i] = _core.tensor(pert.reshape(base.shape), dtype=x.dtype)
            with _no_grad():
                out = _as_tuple(fn(*args))
            outs.append(
                np.concatenate([o.detach().numpy().astype(np.float64).reshape(-1) for o in out])
            )
        cols.append((outs[0] - outs[1]) / (2 * eps))
    if not cols:  # an empty input: one column per element, so none
        with _no_grad():
            n_out = sum(o.numel() for o in _as_tuple(fn(*inputs)))
        return np.zeros((n_out, 0))
    return np.stack(cols, axis=1)


def _analytical_jacobian(fn, inputs, i):
    outs = _as_tuple(fn(*inputs))
    n_out = sum(o.numel() for o in outs)
    rows = []
    for k in range(n_out):
        grads = []
        offset = 0
        for o in outs:
            g = np.zeros(o.numel())
            if offset <= k < offset + o.numel():
                g[k - offset] = 1.0
            grads.append(_core.tensor(g.reshape(tuple(o.shape)), dtype=o.dtype))
            offset += o.numel()
        diff = [(o, g) for o, g in zip(outs, grads, strict=True) if o.requires_grad]
        if not diff:
            rows.append(np.zeros(inputs[i].numel()))
            continue
        (gi,) = grad(
            [o for o, _ in diff],
            [inputs[i]],
            grad_outputs=[g for _, g in diff],
            retain_graph=True,
            allow_unused=True,
        )
        if gi is not None and (
            tuple(gi.shape) != tuple(inputs[i].shape) or gi.dtype != inputs[i].dtype
        ):
            raise GradcheckError(
                f"gradcheck: the gradient of input {i} has shape {tuple(gi.shape)} and dtype "
                f"{gi.dtype}, but the input has shape {tuple(inputs[i].shape)} and dtype "
                f"{inputs[i].dtype}"
            )
        rows.append(
            np.zeros(inputs[i].numel()) if gi is None else gi.numpy().astype(np.float64).reshape(-1)
        )
    if not rows:  # no output elements
        return np.zeros((0, inputs[i].numel()))
    return np.stack(rows, axis=0)


class _no_grad:
    def __enter__(self):
        self.prev = _core.is_grad_enabled()
        _core._set_grad_enabled(False)

    def __exit__(self, *exc):
        _core._set_grad_enabled(self.prev)


def gradcheck(
    fn: Callable,
    inputs: Sequence | object,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """Compare the engine's gradients of `fn` with central finite differences.

    Inputs that require grad must be float64 (as in PyTorch). Returns True, or raises
    `GradcheckError` (a RuntimeError) naming the input and the largest mismatch.
    """
    inputs = _as_tuple(inputs)
    for i, x in enumerate(inputs):
        if not isinstance(x, _core.Tensor) or not x.requires_grad:
            continue
        if x.dtype != _core.float64:
            raise ValueError(
                f"gradcheck: input {i} requires grad but has dtype {x.dtype}; use float64 inputs"
            )
        num = _numerical_jacobian(fn, inputs, i, eps)
        ana = _analytical_jacobian(fn, inputs, i)
        if num.shape != ana.shape or not np.allclose(ana, num, atol=atol, rtol=rtol):
            err = np.abs(ana - num).max() if num.shape == ana.shape else float("nan")
            msg = (
                f"Jacobian mismatch with respect to input {i}: max abs difference "
                f"{err:.3e}\nnumerical:\n{num}\nanalytical:\n{ana}"
            )
            if raise_exception:
                raise GradcheckError(msg)
            return False
    return True


class GradcheckError(RuntimeError):
    pass


def gradgradcheck(
    fn: Callable,
    inputs: Sequence | object,
    grad_outputs: Sequence | object | None = None,
    *,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """`gradcheck` of the first derivative: the gradients of `fn`'s vector-Jacobian product
    with respect to the inputs and to `grad_outputs` (random float64 ones when not given),
    against finite differences."""
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        outs = [o for o in _as_tuple(fn(*inputs)) if o.requires_grad]
        grad_outputs = tuple(
            _core.tensor(rng.standard_normal(tuple(o.shape)), dtype=o.dtype, requires_grad=True)
            for o in outs
        )
    grad_outputs = _as_tuple(grad_outputs)
    n = len(inputs)
    wrt = [i for i, x in enumerate(inputs) if isinstance(x, _core.Tensor) and x.requires_grad]

    def first_derivative(*args):
        # Finite differences call this with fresh, grad-less copies of the inputs.
        xs = [
            x.detach().requires_grad_(True) if i in wrt and not x.requires_grad else x
            for i, x in enumerate(args[:n])
        ]
        with enable_grad():
            outs = [o for o in _as_tuple(fn(*xs)) if o.requires_grad]
            found = grad(
                outs, [xs[i] for i in wrt], list(args[n:]), create_graph=True, allow_unused=True
            )
        return tuple(g for g in found if g is not None)

    return gradcheck(first_derivative, inputs + grad_outputs, eps, atol, rtol, raise_exception)
