"""`gradstream.linalg` decompositions, solves and compositions against PyTorch.

Inputs are well-conditioned (`M Mᵀ + n I` for symmetric positive-definite ones, `M + n I`
otherwise), so float32 tolerances can stay honest: they scale with the matrix size. Factors
that are unique up to signs (QR, SVD, eigh) are compared through invariants: reconstruction,
orthogonality, sign-normalised factors, and gradients of gauge-invariant functions.
Hypothesis draws batch shapes (empty included), sizes (0×0 and 1×1 included), dtypes and
layouts (a transposed view).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from linalg_helpers import (  # noqa: E402
    close,
    distinct_singular,
    general,
    grad_of,
    pair,
    sign_fix_qr,
    spd,
    weights,
)

import gradstream as gs  # noqa: E402
from gradstream.autograd import gradcheck, gradgradcheck  # noqa: E402

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
DTYPES = st.sampled_from([np.float32, np.float64])
BATCH = st.lists(st.integers(0, 3), max_size=2).map(tuple)


# --- inv, det, slogdet, solve ------------------------------------------------------------


@SETTINGS
@given(batch=BATCH, n=st.integers(0, 4), dtype=DTYPES, transposed=st.booleans())
def test_inv_det_slogdet_match_torch(batch, n, dtype, transposed):
    arr = general(1, batch, n, dtype)
    for name in ("inv", "det", "slogdet"):
        x, tx = pair(arr, transposed=transposed)
        out, tout = getattr(gs.linalg, name)(x), getattr(torch.linalg, name)(tx)
        if name == "slogdet":
            close(out.sign, tout.sign, dtype)
            out, tout = out.logabsdet, tout.logabsdet
        assert out.dtype == getattr(gs, np.dtype(dtype).name)
        close(out, tout, dtype, n)
        if out.numel():
            grad_of(out, tout, dtype, x, tx, n)


@SETTINGS
@given(
    batch_a=BATCH,
    batch_b=BATCH,
    n=st.integers(1, 4),
    k=st.integers(1, 3),
    dtype=DTYPES,
    left=st.booleans(),
    vector=st.booleans(),
)
def test_solve_matches_torch_with_broadcasting(batch_a, batch_b, n, k, dtype, left, vector):
    try:
        np.broadcast_shapes(batch_a, batch_b)
    except ValueError:
        return
    a = general(2, batch_a, n, dtype)
    rng = np.random.default_rng(3)
    shape_b = (n,) if vector else ((*batch_b, n, k) if left else (*batch_b, k, n))
    if vector and not left:
        return
    b = rng.standard_normal(shape_b).astype(dtype)
    x, tx = pair(a)
    y, ty = pair(b)
    try:
        tout = torch.linalg.solve(tx, ty, left=left)
    except RuntimeError:
        # e.g. B of shape A.shape[:-1] is a vector to PyTorch, which refuses it for left=False
        with pytest.raises(RuntimeError):
            gs.linalg.solve(x, y, left=left)
        return
    out = gs.linalg.solve(x, y, left=left)
    close(out, tout, dtype, n)
    if out.numel():
        w, tw = weights(tuple(tout.shape), dtype)
        (out * w).sum().backward()
        (tout * tw).sum().backward()
        close(x.grad, tx.grad, dtype, n * n)
        close(y.grad, ty.grad, dtype, n * n)


def test_singular_input_raises_linalg_error_like_torch():
    assert issubclass(gs.linalg.LinAlgError, RuntimeError)
    a = np.array([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(gs.linalg.LinAlgError, match=r"linalg.inv: The diagonal element 2 is zero"):
        gs.linalg.inv(gs.tensor(a))
    with pytest.raises(torch.linalg.LinAlgError, match="The diagonal element 2 is zero"):
        torch.linalg.inv(torch.tensor(a))
    batched = np.stack([np.eye(2), a])
    with pytest.raises(gs.linalg.LinAlgError, match=r"\(Batch element 1\): The diagonal element 2"):
        gs.linalg.inv(gs.tensor(batched))
    with pytest.raises(gs.linalg.LinAlgError, match="singular"):
        gs.linalg.solve(gs.tensor(a), gs.ones(2, dtype=gs.float64))
    with pytest.raises(gs.linalg.LinAlgError, match=r"U\[1,1\] is zero"):
        gs.linalg.lu_factor(gs.tensor(a))
    out, info = gs.linalg.inv_ex(gs.tensor(batched))
    _, tinfo = torch.linalg.inv_ex(torch.tensor(batched))
    assert info.dtype == gs.int32 and info.tolist() == tinfo.tolist() == [0, 2]
    _, info = gs.linalg.solve_ex(gs.tensor(batched), gs.ones(2, 2, 1, dtype=gs.float64))
    assert (
        info.tolist()
        == torch.linalg.solve_ex(
            torch.tensor(batched), torch.ones(2, 2, 1, dtype=torch.float64)
        ).info.tolist()
    )
    assert gs.linalg.det(gs.tensor(a)).item() == 0.0
    sign, logabs = gs.linalg.slogdet(gs.tensor(a))
    assert sign.item() == 0.0 and logabs.item() == -math.inf


def test_non_positive_definite_raises_and_reports_info():
    a = np.diag([1.0, -1.0, 2.0])
    with pytest.raises(
        gs.linalg.LinAlgError,
        match=r"linalg.cholesky: The factorization could not be completed because the input is "
        r"not positive-definite \(the leading minor of order 2 is not positive-definite\)",
    ):
        gs.linalg.cholesky(gs.tensor(a))
    batched = np.stack([np.eye(3), a])
    with pytest.raises(gs.linalg.LinAlgError, match=r"\(Batch element 1\)"):
        gs.linalg.cholesky(gs.tensor(batched))
    _, info = gs.linalg.cholesky_ex(gs.tensor(batched))
    assert info.tolist() == torch.linalg.cholesky_ex(torch.tensor(batched)).info.tolist()


@pytest.mark.parametrize(
    "call",
    [
        lambda L, x: L.linalg.inv(x.ones(3)),
        lambda L, x: L.linalg.inv(x.ones(2, 3)),
        lambda L, x: L.linalg.inv(x.ones(3, 3, dtype=x.int64)),
        lambda L, x: L.linalg.det(x.ones(2, 3)),
        lambda L, x: L.linalg.cholesky(x.ones(2, 3)),
        lambda L, x: L.linalg.eigh(x.ones(2, 3)),
        lambda L, x: L.linalg.svd(x.ones(3)),
        lambda L, x: L.linalg.qr(x.ones(3, 3), mode="x"),
        lambda L, x: L.linalg.solve(x.eye(3), x.ones(4)),
        lambda L, x: L.linalg.solve(x.eye(3), x.ones(3, dtype=x.float64)),
        lambda L, x: L.linalg.solve_triangular(x.eye(3), x.ones(3), upper=True),
        lambda L, x: L.linalg.solve_triangular(x.eye(3), x.ones(4, 1), upper=True),
        lambda L, x: L.linalg.matrix_norm(x.ones(3, 3), 3),
        lambda L, x: L.linalg.multi_dot([x.ones(3, 3)]),
        lambda L, x: L.linalg.cross(x.ones(3, 4), x.ones(3, 4)),
        lambda L, x: L.linalg.lstsq(x.ones(3, 2), x.ones(3, 1), driver="x"),
        lambda L, x: L.linalg.eigh(x.eye(3), UPLO="X"),
    ],
)
def test_bad_input_raises_torchs_exception_class(call):
    with pytest.raises(Exception) as expected:
        call(torch, torch)
    with pytest.raises(Exception) as got:
        call(gs, gs)
    cls = expected.type
    if cls.__name__ == "_LinAlgError":
        cls = gs.linalg.LinAlgError
    assert isinstance(got.value, cls), (got.value, expected.value)


# --- cholesky, solve_triangular ----------------------------------------------------------


@SETTINGS
@given(
    batch=BATCH, n=st.integers(0, 4), dtype=DTYPES, upper=st.booleans(), transposed=st.booleans()
)
def test_cholesky_matches_torch(batch, n, dtype, upper, transposed):
    x, tx = pair(spd(4, batch, n, dtype), transposed=transposed)
    out, tout = gs.linalg.cholesky(x, upper=upper), torch.linalg.cholesky(tx, upper=upper)
    close(out, tout, dtype, n)
    l_ex, info = gs.linalg.cholesky_ex(x.detach(), upper=upper)
    assert info.shape == tuple(batch) and not info.any().item()
    if out.numel():
        grad_of(out, tout, dtype, x, tx, n)


@SETTINGS
@given(
    batch=BATCH,
    n=st.integers(1, 4),
    k=st.integers(1, 3),
    dtype=DTYPES,
    upper=st.booleans(),
    left=st.booleans(),
    unit=st.booleans(),
)
def test_solve_triangular_matches_torch(batch, n, k, dtype, upper, left, unit):
    a = general(5, batch, n, dtype)
    b = np.random.default_rng(6).standard_normal((*batch, n, k) if left else (*batch, k, n))
    x, tx = pair(a)
    y, ty = pair(b.astype(dtype))
    kw = dict(upper=upper, left=left, unitriangular=unit)
    out = gs.linalg.solve_triangular(x, y, **kw)
    tout = torch.linalg.solve_triangular(tx, ty, **kw)
    close(out, tout, dtype, n)
    if out.numel():
        w, tw = weights(tuple(tout.shape), dtype)
        (out * w).sum().backward()
        (tout * tw).sum().backward()
        close(x.grad, tx.grad, dtype, n * n)
        close(y.grad, ty.grad, dtype, n * n)


# --- QR, SVD, eigh -----------------------------------------------------------------------


@SETTINGS
@given(
    batch=BATCH,
    m=st.integers(1, 5),
    n=st.integers(1, 5),
    dtype=DTYPES,
    mode=st.sampled_from(["reduced", "complete", "r"]),
)
def test_qr_invariants_and_values(batch, m, n, dtype, mode):
    arr = general(8, batch, n, dtype, m=m)
    q, r = gs.linalg.qr(gs.tensor(arr), mode=mode)
    tq, tr = torch.linalg.qr(torch.tensor(arr), mode=mode)
    assert tuple(q.shape) == tuple(tq.shape) and tuple(r.shape) == tuple(tr.shape)
    close(r.abs(), tr.abs(), dtype, max(m, n))
    close(r, r.triu(), dtype)
    if mode != "r":
        close(q @ r, arr, dtype, max(m, n))
        k = q.shape[-1]
        close(q.mT @ q, np.broadcast_to(np.eye(k), (*batch, k, k)), dtype, m)


@SETTINGS
@given(batch=BATCH, m=st.integers(1, 5), n=st.integers(1, 5), dtype=DTYPES)
def test_qr_gradient_of_unique_factors(batch, m, n, dtype):
    if m < n:
        return
    arr = general(9, batch, n, dtype, m=m)
    x, tx = pair(arr)
    q, r = sign_fix_qr(*gs.linalg.qr(x))
    tq, tr = sign_fix_qr(*torch.linalg.qr(tx))
    close(q, tq, dtype, m)
    close(r, tr, dtype, m)
    w1, tw1 = weights(tuple(tq.shape), dtype, 1)
    w2, tw2 = weights(tuple(tr.shape), dtype, 2)
    if q.numel():
        ((q * w1).sum() + (r * w2).sum()).backward()
        ((tq * tw1).sum() + (tr * tw2).sum()).backward()
        close(x.grad, tx.grad, dtype, m * n)


@SETTINGS
@given(
    batch=BATCH,
    m=st.integers(0, 5),
    n=st.integers(0, 5),
    dtype=DTYPES,
    full=st.booleans(),
    transposed=st.booleans(),
)
def test_svd_invariants_and_gauge_invariant_gradients(batch, m, n, dtype, full, transposed):
    arr = distinct_singular(10, batch, m, n, dtype)
    x, tx = pair(arr, transposed=transposed)
    u, s, vh = gs.linalg.svd(x, full_matrices=full)
    tu, ts, tvh = torch.linalg.svd(tx, full_matrices=full)
    assert tuple(u.shape) == tuple(tu.shape) and tuple(vh.shape) == tuple(tvh.shape)
    close(s, ts, dtype, max(m, n))
    close(gs.linalg.svdvals(x), ts, dtype, max(m, n))
    k = min(m, n)
    if k == 0:
        return
    close((u[..., :k] * s.unsqueeze(-2)) @ vh[..., :k, :], arr, dtype, max(m, n))
    # Σ c_i u_i v_iᵀ is invariant to the sign of each singular pair.
    c, tc = weights((k,), dtype, 3)
    out = (u[..., :k] * (c * s).unsqueeze(-2)) @ vh[..., :k, :] + (
        u[..., :k] * c.unsqueeze(-2)
    ) @ vh[..., :k, :]
    tout = (tu[..., :k] * (tc * ts).unsqueeze(-2)) @ tvh[..., :k, :] + (
        tu[..., :k] * tc.unsqueeze(-2)
    ) @ tvh[..., :k, :]
    grad_of(out, tout, dtype, x, tx, max(m, n))


@SETTINGS
@given(batch=BATCH, n=st.integers(0, 5), dtype=DTYPES, uplo=st.sampled_from(["L", "U"]))
def test_eigh_invariants_and_gauge_invariant_gradients(batch, n, dtype, uplo):
    rng = np.random.default_rng(11)
    q, _ = np.linalg.qr(rng.standard_normal((*batch, n, n)))
    arr = ((q * np.arange(1.0, n + 1)[..., None, :]) @ np.swapaxes(q, -1, -2)).astype(dtype)
    x, tx = pair(arr)
    w, v = gs.linalg.eigh(x, UPLO=uplo)
    tw, tv = torch.linalg.eigh(tx, UPLO=uplo)
    close(w, tw, dtype, n)
    close(gs.linalg.eigvalsh(x, UPLO=uplo), tw, dtype, n)
    if n == 0:
        return
    close((v * w.unsqueeze(-2)) @ v.mT, arr, dtype, n)
    c, tc = weights((n,), dtype, 4)
    out = (v * c.unsqueeze(-2)) @ v.mT + (w * w).unsqueeze(-1)
    tout = (tv * tc.unsqueeze(-2)) @ tv.mT + (tw * tw).unsqueeze(-1)
    grad_of(out, tout, dtype, x, tx, n)


# --- LU ----------------------------------------------------------------------------------


@SETTINGS
@given(batch=BATCH, m=st.integers(1, 5), n=st.integers(1, 5), dtype=DTYPES)
def test_lu_factor_and_lu_match_torch(batch, m, n, dtype):
    arr = np.random.default_rng(12).standard_normal((*batch, m, n)).astype(dtype)
    lu_, piv = gs.linalg.lu_factor_ex(gs.tensor(arr))[:2]
    tlu, tpiv = torch.linalg.lu_factor_ex(torch.tensor(arr))[:2]
    assert piv.dtype == gs.int32 and piv.tolist() == tpiv.tolist()
    close(lu_, tlu, dtype, max(m, n))
    p, lower, upper = gs.linalg.lu(gs.tensor(arr))
    tp, tl, tu = torch.linalg.lu(torch.tensor(arr))
    close(p, tp, dtype)
    close(lower, tl, dtype, max(m, n))
    close(upper, tu, dtype, max(m, n))


@SETTINGS
@given(
    batch=BATCH,
    n=st.integers(1, 4),
    k=st.integers(1, 3),
    dtype=DTYPES,
    left=st.booleans(),
    adjoint=st.booleans(),
)
def test_lu_solve_matches_torch(batch, n, k, dtype, left, adjoint):
    a = general(13, batch, n, dtype)
    b = np.random.default_rng(14).standard_normal((*batch, n, k) if left else (*batch, k, n))
    lu_, piv = gs.linalg.lu_factor(gs.tensor(a))
    tlu, tpiv = torch.linalg.lu_factor(torch.tensor(a))
    y, ty = pair(b.astype(dtype))
    out = gs.linalg.lu_solve(lu_, piv, y, left=left, adjoint=adjoint)
    tout = torch.linalg.lu_solve(tlu, tpiv, ty, left=left, adjoint=adjoint)
    close(out, tout, dtype, n)
    if out.numel():
        w, tw = weights(tuple(tout.shape), dtype)
        (out * w).sum().backward()
        (tout * tw).sum().backward()
        close(y.grad, ty.grad, dtype, n * n)


# --- finite differences ------------------------------------------------------------------


def _f64(arr):
    return gs.tensor(arr).requires_grad_(True)


def test_gradcheck_and_gradgradcheck_float64():
    a = _f64(general(20, (2,), 3, np.float64))
    b = _f64(np.random.default_rng(21).standard_normal((2, 3, 2)))
    p = _f64(spd(22, (2,), 3, np.float64))
    sym = lambda f: lambda x: f((x + x.mT) / 2)  # noqa: E731
    for fn, inputs in [
        (gs.linalg.inv, (a,)),
        (gs.linalg.det, (a,)),
        (lambda x: gs.linalg.slogdet(x).logabsdet, (a,)),
        (gs.linalg.solve, (a, b)),
        (sym(gs.linalg.cholesky), (p,)),
        (lambda x, y: gs.linalg.solve_triangular(x, y, upper=True), (a, b)),
        (lambda x, y: gs.linalg.solve_triangular(x, y, upper=False, unitriangular=True), (a, b)),
    ]:
        assert gradcheck(fn, inputs)
        assert gradgradcheck(fn, inputs)
    s = _f64(distinct_singular(23, (2,), 4, 3, np.float64))
    for fn, inputs in [
        (lambda x: sign_fix_qr(*gs.linalg.qr(x))[0], (s,)),
        (lambda x: sign_fix_qr(*gs.linalg.qr(x))[1], (s,)),
        (gs.linalg.svdvals, (s,)),
        (lambda x: (lambda u, S, vh: (u * S.unsqueeze(-2)) @ vh)(*gs.linalg.svd(x, False)), (s,)),
        (lambda x: gs.linalg.pinv(x), (s,)),
        (sym(gs.linalg.eigvalsh), (p,)),
        (
            sym(lambda x: (lambda w, v: (v * w.unsqueeze(-2).exp()) @ v.mT)(*gs.linalg.eigh(x))),
            (p,),
        ),
        (lambda x: gs.linalg.matrix_norm(x, "nuc"), (s,)),
    ]:
        assert gradcheck(fn, inputs)


def test_double_backward_through_svd_says_it_is_missing():
    x = gs.tensor(distinct_singular(24, (), 3, 3, np.float64)).requires_grad_(True)
    (g,) = gs.autograd.grad(gs.linalg.svdvals(x).sum(), x)
    assert g.shape == x.shape
    for fn in (gs.linalg.svdvals, lambda a: gs.linalg.eigh(a).eigenvalues):
        with pytest.raises(NotImplementedError, match="double backward"):
            gs.autograd.grad(fn(x).sum(), x, create_graph=True)
