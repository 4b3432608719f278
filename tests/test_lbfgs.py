"""LBFGS against torch.optim.LBFGS: the same iterates on a quadratic and on Rosenbrock,
with and without the strong-Wolfe line search."""

from __future__ import annotations

import numpy as np
import pytest

import gradstream as gs

torch = pytest.importorskip("torch")


def quadratic(lib, x, a, b):
    """``0.5 x^T A x - b^T x`` with A symmetric positive definite."""
    return 0.5 * (x * (lib.tensor(a) @ x)).sum() - (lib.tensor(b) * x).sum()


def rosenbrock(lib, x):
    return (100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2).sum()


def iterates(lib, f, x0, steps, **kw):
    x = lib.tensor(x0.copy(), requires_grad=True)
    opt = lib.optim.LBFGS([x], **kw)

    def closure():
        opt.zero_grad()
        loss = f(lib, x)
        loss.backward()
        return loss

    out = []
    for _ in range(steps):
        loss = opt.step(closure)
        out.append((float(loss.detach()), x.detach().numpy().copy()))
    return out, opt


def spd(n, seed):
    rng = np.random.default_rng(seed)
    m = rng.standard_normal((n, n))
    return m @ m.T / n + np.eye(n), rng.standard_normal(n)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_quadratic(line_search_fn, dtype):
    a, b = spd(6, 0)
    a, b = a.astype(dtype), b.astype(dtype)
    x0 = np.zeros(6, dtype)
    kw = dict(lr=1.0 if line_search_fn else 0.3, max_iter=5, history_size=4)
    kw["line_search_fn"] = line_search_fn
    mine, _ = iterates(gs, lambda lib, x: quadratic(lib, x, a, b), x0, 4, **kw)
    ref, _ = iterates(torch, lambda lib, x: quadratic(lib, x, a, b), x0, 4, **kw)
    if dtype == np.float64:
        for (la, xa), (lb, xb) in zip(mine, ref, strict=True):
            np.testing.assert_allclose(la, lb, rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(xa, xb, rtol=1e-9, atol=1e-9)
    else:
        # Twenty line-search iterations amplify float32 rounding, and the order of a CPU's
        # sums (its SIMD width) sets that rounding: the float32 iterates are held to the
        # exact (float64) trajectory, within a few times PyTorch's own float32 error there.
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        exact, _ = iterates(
            torch, lambda lib, x: quadratic(lib, x, a64, b64), x0.astype(np.float64), 4, **kw
        )
        eps = np.finfo(np.float32).eps
        for (la, xa), (lb, xb), (le, xe) in zip(mine, ref, exact, strict=True):
            x_tol = 4 * np.abs(xb - xe).max() + 64 * eps * (1 + np.abs(xe).max())
            assert np.abs(xa - xe).max() <= x_tol
            assert abs(la - le) <= 4 * abs(lb - le) + 64 * eps * (1 + abs(le))
    # It solves the system.
    if line_search_fn:
        np.testing.assert_allclose(mine[-1][1], np.linalg.solve(a, b), rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("line_search_fn", [None, "strong_wolfe"])
def test_rosenbrock_float64(line_search_fn):
    x0 = np.array([-1.5, 2.0, -0.5, 1.2])
    kw = dict(lr=1.0 if line_search_fn else 1e-3, max_iter=10, line_search_fn=line_search_fn)
    mine, gopt = iterates(gs, rosenbrock, x0, 5, **kw)
    ref, topt = iterates(torch, rosenbrock, x0, 5, **kw)
    # Fifty iterations with line searches amplify last-bit differences in the sums and
    # powers (a device kernel's order is not the CPU's): the iterates agree to about 1e-8
    # relative on the CUDA kernels, exactly on the CPU's; 1e-6 leaves room for other orders.
    for (la, xa), (lb, xb) in zip(mine, ref, strict=True):
        np.testing.assert_allclose(la, lb, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(xa, xb, rtol=1e-6, atol=1e-9)
    sa = gopt.state[next(iter(gopt.param_groups[0]["params"]))]
    sb = topt.state[topt.param_groups[0]["params"][0]]
    assert sa["func_evals"] == sb["func_evals"]
    assert sa["n_iter"] == sb["n_iter"]


def test_rosenbrock_float32_strong_wolfe():
    x0 = np.array([-1.2, 1.0], np.float32)
    kw = dict(lr=1.0, max_iter=20, line_search_fn="strong_wolfe")
    mine, _ = iterates(gs, rosenbrock, x0, 3, **kw)
    ref, _ = iterates(torch, rosenbrock, x0, 3, **kw)
    for (la, xa), (lb, xb) in zip(mine, ref, strict=True):
        np.testing.assert_allclose(xa, xb, rtol=1e-3, atol=1e-4)
        np.testing.assert_allclose(la, lb, rtol=1e-3, atol=1e-5)
    np.testing.assert_allclose(mine[-1][1], [1.0, 1.0], atol=1e-3)


def test_no_in_backward_mode_and_one_group():
    x = gs.zeros(3, requires_grad=True)
    with pytest.raises(ValueError, match="in_backward"):
        gs.optim.LBFGS([x], in_backward=True)
    with pytest.raises(ValueError, match="Invalid learning rate"):
        gs.optim.LBFGS([x], lr=-1.0)
    with pytest.raises(ValueError, match="parameter groups"):
        gs.optim.LBFGS([{"params": [x]}, {"params": [gs.zeros(2, requires_grad=True)]}])
    opt = gs.optim.LBFGS([x])
    with pytest.raises(TypeError):
        opt.step()  # the closure is required, as in PyTorch
    with pytest.raises(RuntimeError, match="closure"):
        opt.step(None)
    with pytest.raises(NotImplementedError):
        opt.step_param(x)
