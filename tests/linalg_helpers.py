"""Inputs and comparisons shared by the linalg tests: well-conditioned matrices, tolerances
that scale with the matrix size, and gradstream/torch pairs."""

from __future__ import annotations

import numpy as np
import torch

import gradstream as gs


def tol(dtype, n=1):
    if dtype == np.float32:
        return dict(rtol=1e-4 * max(n, 1), atol=1e-5 * max(n, 1))
    return dict(rtol=1e-9, atol=1e-10 * max(n, 1))


def close(a, e, dtype, n=1):
    a = a.detach().numpy() if hasattr(a, "detach") else np.asarray(a)
    e = e.detach().numpy() if hasattr(e, "detach") else np.asarray(e)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    scale = max(1.0, float(np.max(np.abs(e), initial=0.0)))
    t = tol(dtype, n)
    np.testing.assert_allclose(a, e, rtol=t["rtol"], atol=t["atol"] * scale)


def general(seed, batch, n, dtype, m=None):
    rng = np.random.default_rng(seed)
    m = n if m is None else m
    a = rng.standard_normal((*batch, m, n))
    if m == n:
        a = a + n * np.eye(n)
    return a.astype(dtype)


def spd(seed, batch, n, dtype):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch, n, n))
    return (a @ np.swapaxes(a, -1, -2) + n * np.eye(n)).astype(dtype)


def pair(arr, grad=True, transposed=False):
    """A gradstream and a torch tensor of `arr` (as a transposed view when asked)."""
    if transposed and arr.ndim >= 2:
        base = np.ascontiguousarray(np.swapaxes(arr, -1, -2))
        g = gs.tensor(base).transpose(-1, -2)
        t = torch.tensor(base).transpose(-1, -2)
    else:
        g, t = gs.tensor(arr), torch.tensor(arr)
    if grad:
        g = g.detach().requires_grad_(True)
        t = t.detach().requires_grad_(True)
    return g, t


def weights(shape, dtype, seed=7):
    w = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return gs.tensor(w), torch.tensor(w)


def grad_of(out, tout, dtype, x, tx, n):
    """Backward of `sum(w * out)` in both libraries; the input gradients agree."""
    w, tw = weights(tuple(tout.shape), dtype)
    (out * w).sum().backward()
    (tout * tw).sum().backward()
    close(x.grad, tx.grad, dtype, n * n)


def sign_fix_qr(q, r):
    """Q and R with R's diagonal made non-negative (the unique factorisation)."""
    d = torch.diagonal(r, dim1=-2, dim2=-1) if isinstance(r, torch.Tensor) else None
    if d is None:
        k = min(r.shape[-2], r.shape[-1])
        d = gs.linalg.diagonal(r[..., :k, :k])
    s = (d >= 0) * 2.0 - 1.0
    return q[..., : s.shape[-1]] * s.unsqueeze(-2), r[..., : s.shape[-1], :] * s.unsqueeze(-1)


def distinct_singular(seed, batch, m, n, dtype):
    """Matrices with well-separated singular values (the SVD's gradient divides by gaps)."""
    rng = np.random.default_rng(seed)
    k = min(m, n)
    u, _ = np.linalg.qr(rng.standard_normal((*batch, m, m)))
    v, _ = np.linalg.qr(rng.standard_normal((*batch, n, n)))
    s = np.zeros((*batch, m, n))
    for i in range(k):
        s[..., i, i] = k + 1.0 - i
    return (u @ s @ np.swapaxes(v, -1, -2)).astype(dtype)
