"""Comparing gradstream with NumPy and PyTorch."""

from __future__ import annotations

import numpy as np

import gradstream as gs


def dtype_name(dt) -> str:
    return repr(dt).split(".")[-1]


def to_numpy(t) -> np.ndarray:
    """Any tensor (gradstream or torch) or array as a NumPy array."""
    if isinstance(t, gs.Tensor):
        if t.dtype == gs.bfloat16:
            t = t.float()
        return t.detach().numpy()
    if hasattr(t, "detach"):  # torch
        t = t.detach()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        return t.numpy()
    return np.asarray(t)


def to_torch(t, requires_grad: bool | None = None):
    import torch

    arr = to_numpy(t)
    out = torch.from_numpy(arr.copy())
    if isinstance(t, gs.Tensor):
        out = out.to(getattr(torch, dtype_name(t.dtype)))
        if requires_grad is None:
            requires_grad = t.requires_grad
    if requires_grad:
        out.requires_grad_(True)
    return out


def sum_atol(expected, terms: int) -> float:
    """The absolute tolerance for values that are float sums of `terms` terms.

    Each addition may round by half an ulp of the running sum, and two correct programs may add
    in different orders (blocked matmuls, chunked batches, SIMD widths differ between CPUs), so
    two results can differ by about `terms * eps * scale`, where the scale is the largest
    magnitude in the result: near-zero entries that come from cancelling sums have no
    relative accuracy at all.
    """
    e = to_numpy(expected)
    if e.size == 0 or e.dtype.kind != "f":
        return 0.0
    eps = float(np.finfo(np.float32 if e.dtype.itemsize <= 4 else e.dtype).eps)
    return terms * eps * float(np.max(np.abs(e[np.isfinite(e)]), initial=0.0))


def assert_close(actual, expected, rtol=1e-5, atol=1e-6, check_dtype=True, terms=None):
    """Values (and dtype names) of two tensors agree. `terms`: the values are sums of that many
    terms, so the tolerance widens with their magnitude and the summation length."""
    a, e = to_numpy(actual), to_numpy(expected)
    if terms is not None:
        atol = max(atol, sum_atol(e, terms))
    if check_dtype and isinstance(actual, gs.Tensor) and hasattr(expected, "dtype"):
        if isinstance(expected, gs.Tensor):
            exp_name = dtype_name(expected.dtype)
        else:
            exp_name = str(expected.dtype).replace("torch.", "")
        assert dtype_name(actual.dtype) == exp_name, f"dtype {actual.dtype} != {expected.dtype}"
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    np.testing.assert_allclose(a.astype(np.float64), e.astype(np.float64), rtol=rtol, atol=atol)


def noncontiguous(t):
    """The same values through a non-contiguous view (a transposed copy, transposed back)."""
    if t.ndim < 2:
        return gs.stack([t, t], 0)[0] if hasattr(gs, "stack") else t
    return t.transpose(0, 1).contiguous().transpose(0, 1)


def lib_inputs(lib, arrays, grad):
    """The NumPy arrays among `arrays` as tensors of `lib` (gradstream or torch); floats
    require grad when `grad`. Other arguments pass through."""
    out = []
    for a in arrays:
        if isinstance(a, np.ndarray):
            t = lib.tensor(a)
            if grad and a.dtype.kind == "f":
                t.requires_grad_(True)
            out.append(t)
        else:
            out.append(a)
    return out


def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]


def pair(torch, arr, requires_grad=False):
    """The same data as a gradstream and a torch tensor (dtype kept)."""
    g = gs.tensor(arr)
    t = torch.tensor(arr)
    if requires_grad:
        g.requires_grad_(True)
        t.requires_grad_(True)
    return g, t


def check_op(torch, f, arr, grad=True, view=None, rtol=1e-6, atol=1e-8):
    """`f(x)` agrees with torch in value, dtype and (for floats) input gradient."""
    g, t = pair(torch, arr, grad)
    gi, ti = (view(g), view(t)) if view else (g, t)
    og, ot = f(gi), f(ti)
    assert_close(og, ot, rtol=rtol, atol=atol)
    if grad:
        w = np.asarray(np.random.randn(*ot.shape)).astype(arr.dtype)
        og.backward(gs.tensor(w))
        ot.backward(torch.tensor(w))
        # PyTorch leaves the gradient of a constant output (norm p=0) undefined: zeros.
        tg = t.grad if t.grad is not None else torch.zeros_like(t)
        assert_close(g.grad, tg, rtol=rtol, atol=atol)


def run_both(torch, fn, *arrays, grad=True, rtol=1e-6, missing_grad_ok=False):
    """fn(lib, *tensors) on gradstream and torch: same values, and same gradients of a
    random weighting of every floating output. Where torch leaves an input's gradient
    undefined, gradstream's must be zeros; `missing_grad_ok` also accepts none at all."""
    rng = np.random.default_rng(1)
    g_in, t_in = lib_inputs(gs, arrays, grad), lib_inputs(torch, arrays, grad)
    g_out, t_out = as_list(fn(gs, *g_in)), as_list(fn(torch, *t_in))
    assert len(g_out) == len(t_out)
    for a, b in zip(g_out, t_out, strict=True):
        assert_close(a, b, rtol=rtol)
    if not grad:
        return g_out
    g_loss, t_loss = 0, 0
    for a, b in zip(g_out, t_out, strict=True):
        if b.dtype.is_floating_point and b.requires_grad:
            w = rng.standard_normal(tuple(b.shape))
            g_loss = g_loss + (a * gs.tensor(w)).sum()
            t_loss = t_loss + (b * torch.tensor(w)).sum()
    if isinstance(t_loss, int):
        return g_out
    g_loss.backward()
    t_loss.backward()
    for a, b in zip(g_in, t_in, strict=True):
        if hasattr(b, "requires_grad") and b.requires_grad:
            if b.grad is None and missing_grad_ok:
                assert a.grad is None or not a.grad.numpy().any()
                continue
            tg = b.grad if b.grad is not None else torch.zeros_like(b)
            assert a.grad is not None, "missing gradient"
            assert_close(a.grad, tg, rtol=rtol)
    return g_out


def arr(*shape, dtype=np.float64):
    """Deterministic distinct values of `shape`: 0.5 * arange - 1."""
    n = int(np.prod(shape))
    return (np.arange(n, dtype=np.float64).reshape(shape) * 0.5 - 1).astype(dtype)
