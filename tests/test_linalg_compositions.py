"""`gradstream.linalg`'s compositions (pinv, lstsq, matrix_norm, cond, matrix_rank,
matrix_power, matrix_exp, cross, diagonal, ...) and top-level aliases against PyTorch:
values and input gradients, float32 and float64."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from linalg_helpers import (  # noqa: E402
    close,
    pair,
    spd,
    weights,
)

import gradstream as gs  # noqa: E402


def _both(fn, *arrays, grad=True):
    """`fn(lib, *tensors)` in both libraries, and the input pairs."""
    pairs = [pair(a, grad=grad) for a in arrays]
    return fn(gs, *[p[0] for p in pairs]), fn(torch, *[p[1] for p in pairs]), pairs


COMPOSITIONS = [
    ("pinv", lambda L, x: L.linalg.pinv(x), [(4, 3)]),
    ("pinv_hermitian", lambda L, x: L.linalg.pinv(x @ x.mT, hermitian=True), [(3, 3)]),
    ("lstsq", lambda L, x, y: L.linalg.lstsq(x, y).solution, [(5, 3), (5, 2)]),
    (
        "lstsq_gelsd_residuals",
        lambda L, x, y: L.linalg.lstsq(x, y, driver="gelsd").residuals,
        [(5, 3), (5, 2)],
    ),
    ("matrix_norm_fro", lambda L, x: L.linalg.matrix_norm(x), [(2, 3, 4)]),
    ("matrix_norm_nuc", lambda L, x: L.linalg.matrix_norm(x, "nuc"), [(2, 3, 4)]),
    ("matrix_norm_2", lambda L, x: L.linalg.matrix_norm(x, 2), [(3, 4)]),
    ("matrix_norm_-2", lambda L, x: L.linalg.matrix_norm(x, -2, keepdim=True), [(2, 4, 3)]),
    ("matrix_norm_1", lambda L, x: L.linalg.matrix_norm(x, 1), [(2, 3, 4)]),
    ("matrix_norm_-1", lambda L, x: L.linalg.matrix_norm(x, -1, keepdim=True), [(3, 4)]),
    ("matrix_norm_inf", lambda L, x: L.linalg.matrix_norm(x, math.inf, dim=(0, 2)), [(3, 2, 4)]),
    ("matrix_norm_-inf", lambda L, x: L.linalg.matrix_norm(x, -math.inf), [(3, 4)]),
    ("norm_nuc", lambda L, x: L.linalg.norm(x, "nuc"), [(3, 4)]),
    ("norm_2", lambda L, x: L.linalg.norm(x, 2), [(3, 4)]),
    ("cond", lambda L, x: L.linalg.cond(x), [(2, 3, 3)]),
    ("cond_1", lambda L, x: L.linalg.cond(x, 1), [(3, 3)]),
    ("cond_fro", lambda L, x: L.linalg.cond(x, "fro"), [(3, 3)]),
    ("matrix_power_3", lambda L, x: L.linalg.matrix_power(x, 3), [(2, 3, 3)]),
    ("matrix_power_-2", lambda L, x: L.linalg.matrix_power(x, -2), [(3, 3)]),
    ("matrix_power_0", lambda L, x: L.linalg.matrix_power(x, 0), [(2, 3, 3)]),
    ("cross", lambda L, x, y: L.linalg.cross(x, y), [(4, 3), (4, 3)]),
    ("cross_dim0", lambda L, x, y: L.linalg.cross(x, y, dim=0), [(3, 2), (3, 2)]),
    ("diagonal", lambda L, x: L.linalg.diagonal(x), [(2, 3, 4)]),
    ("diagonal_offset", lambda L, x: L.linalg.diagonal(x, offset=-1, dim1=0, dim2=2), [(4, 2, 3)]),
    ("multi_dot", lambda L, x, y, z: L.linalg.multi_dot([x, y, z]), [(3,), (3, 4), (4, 2)]),
    ("vecdot", lambda L, x, y: L.linalg.vecdot(x, y), [(2, 4), (4,)]),
    ("vander", lambda L, x: L.linalg.vander(x), [(2, 4)]),
    ("vander_N", lambda L, x: L.linalg.vander(x, N=2), [(3,)]),
    (
        "tensorinv",
        lambda L, x: L.linalg.tensorinv(
            x.reshape(4, 2, 2, 4) + L.eye(8, dtype=x.dtype).reshape(4, 2, 2, 4) * 8, ind=2
        ),
        [(4, 2, 2, 4)],
    ),
    (
        "tensorsolve",
        lambda L, x, y: L.linalg.tensorsolve(x + 6 * L.eye(6, dtype=x.dtype).reshape(2, 3, 6), y),
        [(2, 3, 6), (2, 3)],
    ),
    ("matmul", lambda L, x, y: L.linalg.matmul(x, y), [(2, 3, 4), (4, 2)]),
    ("matrix_exp", lambda L, x: L.linalg.matrix_exp(x), [(2, 3, 3)]),
    ("matrix_exp_large", lambda L, x: L.linalg.matrix_exp(x * 3), [(4, 4)]),
    (
        "householder_product",
        lambda L, x, t: L.linalg.householder_product(x, t),
        [(2, 5, 3), (2, 2)],
    ),
    ("inverse_alias", lambda L, x: L.inverse(x + 3 * L.eye(3, dtype=x.dtype)), [(3, 3)]),
    ("det_method", lambda L, x: (x + 3 * L.eye(3, dtype=x.dtype)).det(), [(2, 3, 3)]),
    ("logdet", lambda L, x: L.logdet(x @ x.mT + L.eye(3, dtype=x.dtype)), [(3, 3)]),
    ("slogdet_top", lambda L, x: L.slogdet(x).logabsdet, [(3, 3)]),
    ("cholesky_top", lambda L, x: L.cholesky(x @ x.mT + L.eye(3, dtype=x.dtype)), [(3, 3)]),
    ("diagonal_top", lambda L, x: L.diagonal(x, 1), [(3, 4)]),
]


@pytest.mark.filterwarnings("ignore:torch.cholesky is deprecated")
@pytest.mark.parametrize("name, fn, shapes", COMPOSITIONS, ids=[c[0] for c in COMPOSITIONS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_compositions_match_torch(name, fn, shapes, dtype):
    rng = np.random.default_rng(30)
    arrays = [rng.standard_normal(s).astype(dtype) for s in shapes]
    if name in ("cond", "cond_1", "cond_fro", "matrix_power_-2"):
        arrays[0] = arrays[0] + 3 * np.eye(3, dtype=dtype)
    out, tout, pairs = _both(fn, *arrays)
    n = max(max(s) for s in shapes)
    close(out, tout, dtype, n)
    # PyTorch's own backward of cond with p != 2 fails (it reuses an inverse in place).
    if name in ("matrix_power_0", "cond_1", "cond_fro"):
        return
    w, tw = weights(tuple(tout.shape), dtype)
    (out * w).sum().backward()
    (tout * tw).sum().backward()
    for x, tx in pairs:
        close(x.grad, tx.grad, dtype, n * n)


@pytest.mark.parametrize("hermitian", [False, True])
@pytest.mark.parametrize("atol, rtol", [(None, None), (0.5, None), (None, 0.3)])
def test_matrix_rank_matches_torch(hermitian, atol, rtol):
    rng = np.random.default_rng(31)
    a = rng.standard_normal((2, 5, 3))
    a = a @ rng.standard_normal((2, 3, 5)) if hermitian else a
    if hermitian:
        a = a @ np.swapaxes(a, -1, -2)
    a[0] = 0.0 if not hermitian else a[0]
    kw = dict(atol=atol, rtol=rtol, hermitian=hermitian)
    out = gs.linalg.matrix_rank(gs.tensor(a), **kw)
    tout = torch.linalg.matrix_rank(torch.tensor(a), **kw)
    assert out.dtype == gs.int64 and out.tolist() == tout.tolist()


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
def test_lstsq_named_tuple_matches_torch(driver):
    rng = np.random.default_rng(32)
    a, b = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 2))
    out = gs.linalg.lstsq(gs.tensor(a), gs.tensor(b), driver=driver)
    tout = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    assert type(out).__name__ == "linalg_lstsq"
    for f in ("solution", "residuals", "rank", "singular_values"):
        g, t = getattr(out, f), getattr(tout, f)
        assert tuple(g.shape) == tuple(t.shape), f
        if g.numel():
            close(g, t, np.float64, 5)


def test_named_tuples_have_torchs_fields():
    a = gs.tensor(spd(33, (), 3, np.float64))
    assert gs.linalg.slogdet(a)._fields == ("sign", "logabsdet")
    assert gs.linalg.qr(a)._fields == ("Q", "R")
    assert gs.linalg.svd(a)._fields == ("U", "S", "Vh")
    assert gs.linalg.eigh(a)._fields == ("eigenvalues", "eigenvectors")
    assert gs.linalg.lu_factor(a)._fields == ("LU", "pivots")
    assert gs.linalg.lu(a)._fields == ("P", "L", "U")
    assert gs.linalg.inv_ex(a)._fields == ("inverse", "info")
    assert gs.linalg.cholesky_ex(a)._fields == ("L", "info")


def test_large_batch_runs_in_parallel_and_matches_torch():
    arr = spd(34, (64,), 8, np.float64)
    close(gs.linalg.inv(gs.tensor(arr)), torch.linalg.inv(torch.tensor(arr)), np.float64, 8)
    close(
        gs.linalg.cholesky(gs.tensor(arr)), torch.linalg.cholesky(torch.tensor(arr)), np.float64, 8
    )
    close(
        gs.linalg.eigvalsh(gs.tensor(arr)), torch.linalg.eigvalsh(torch.tensor(arr)), np.float64, 8
    )
