"""Reductions against PyTorch: values, dtypes, dims, keepdim, gradients, bad input."""

import math

import numpy as np
import pytest
from helpers import assert_close, pair
from helpers import check_op as check

import gradstream as gs
from gradstream.autograd import gradcheck

INF = math.inf


REDUCTIONS = [
    ("sum", {}),
    ("sum", {"dim": 1}),
    ("sum", {"dim": -1, "keepdim": True}),
    ("sum", {"dim": (0, 2)}),
    ("sum", {"dim": [-1, 0], "keepdim": True}),
    ("sum", {"dim": ()}),
    ("mean", {}),
    ("mean", {"dim": (0, -1), "keepdim": True}),
    ("mean", {"dim": 1}),
    ("prod", {}),
    ("prod", {"dim": 1}),
    ("prod", {"dim": -1, "keepdim": True}),
    ("amax", {"dim": 1}),
    ("amax", {"dim": (0, 2), "keepdim": True}),
    ("amax", {}),
    ("amax", {"dim": ()}),
    ("amin", {"dim": -1}),
    ("logsumexp", {"dim": 1}),
    ("logsumexp", {"dim": (0, 2), "keepdim": True}),
    ("norm", {}),
    ("norm", {"dim": 1}),
    ("norm", {"p": 1, "dim": -1}),
    ("norm", {"p": INF, "dim": (0, 1)}),
    ("norm", {"p": -INF}),
    ("norm", {"p": 3, "dim": 2, "keepdim": True}),
    ("norm", {"p": "fro", "dim": (1, 2)}),
    ("norm", {"p": 0, "dim": 1}),
    ("var", {}),
    ("var", {"dim": 1}),
    ("var", {"dim": (0, 2), "correction": 0}),
    ("var", {"dim": -1, "unbiased": False, "keepdim": True}),
    ("std", {"dim": 1}),
    ("std", {"correction": 2}),
    ("std", {"dim": (0, 1), "keepdim": True}),
]


@pytest.mark.parametrize("op,kw", REDUCTIONS, ids=[f"{o}-{k}" for o, k in REDUCTIONS])
@pytest.mark.parametrize("layout", ["contiguous", "permuted", "transposed"])
def test_reduction_matches_torch(torch_ref, op, kw, layout):
    arr = np.random.randn(3, 4, 5)
    view = {
        "contiguous": None,
        "permuted": lambda x: x.permute(2, 0, 1),
        "transposed": lambda x: x.transpose(0, 2),
    }[layout]
    check(torch_ref, lambda x: getattr(x, op)(**kw), arr, view=view)


@pytest.mark.parametrize("op", ["sum", "mean", "prod", "amax", "logsumexp", "norm", "var"])
def test_function_form_and_float32(torch_ref, op):
    arr = np.random.rand(4, 6).astype(np.float32) + 0.5
    g, t = pair(torch_ref, arr)
    assert_close(getattr(gs, op)(g, 1), getattr(torch_ref, op)(t, 1), rtol=1e-5, atol=1e-6)


def test_gradcheck_float64():
    x = gs.tensor(np.random.randn(3, 4), requires_grad=True)
    for f in [
        lambda x: x.prod(1),
        lambda x: x.prod(),
        lambda x: x.var(0),
        lambda x: x.std(1, keepdim=True),
        lambda x: x.logsumexp(1),
        lambda x: x.norm(dim=1),
        lambda x: x.norm(p=3),
        lambda x: x.norm(p=1, dim=0),
        lambda x: x.softmax(1),
        lambda x: x.log_softmax(0),
        lambda x: x.max(1).values,
        lambda x: x.amin(0),
        lambda x: x.mean((0, 1)),
    ]:
        assert gradcheck(f, (x,))


# ---- prod with zeros ----


@pytest.mark.parametrize(
    "row",
    [[2.0, 0.0, 3.0, 4.0], [0.0, 0.0, 3.0, 4.0], [0.0, 1.5, 2.0, -1.0], [1.0, 2.0, 3.0, 0.0]],
)
def test_prod_gradient_with_zeros(torch_ref, row):
    arr = np.array([row, [1.0, 2.0, 3.0, 4.0]])
    check(torch_ref, lambda x: x.prod(1), arr)
    check(torch_ref, lambda x: x.prod(), arr)
    check(torch_ref, lambda x: x.prod(0, keepdim=True), arr)
    x = gs.tensor(arr, requires_grad=True)
    assert gradcheck(lambda x: x.prod(1), (x,))


def test_prod_double_backward_with_zero(torch_ref):
    arr = np.array([2.0, 0.0, 3.0, 5.0])
    g, t = pair(torch_ref, arr, True)
    (dg,) = gs.autograd.grad(g.prod(), g, create_graph=True)
    (dt,) = torch_ref.autograd.grad(t.prod(), t, create_graph=True)
    assert_close(dg, dt)
    w = np.array([1.0, -2.0, 0.5, 3.0])
    (dg * gs.tensor(w)).sum().backward()
    (dt * torch_ref.tensor(w)).sum().backward()
    assert_close(g.grad, t.grad)


# ---- max / min / amax / argmax ----


def test_max_all_splits_ties(torch_ref):
    arr = np.array([[1.0, 3.0, 3.0], [0.0, 3.0, 2.0]])
    check(torch_ref, lambda x: x.max(), arr)
    check(torch_ref, lambda x: x.min(), arr)
    check(torch_ref, lambda x: x.amax(1), arr)
    check(torch_ref, lambda x: x.amax((0, 1)), arr)
    check(torch_ref, lambda x: x.amin(0, keepdim=True), np.array([[1.0, 2.0], [1.0, 0.0]]))
    g = gs.tensor(arr, requires_grad=True)
    g.max().backward()
    np.testing.assert_allclose(g.grad.numpy(), [[0, 1 / 3, 1 / 3], [0, 1 / 3, 0]])


@pytest.mark.parametrize("which", ["max", "min"])
@pytest.mark.parametrize("dim,keepdim", [(0, False), (1, True), (-1, False), (-2, True)])
def test_max_dim_values_indices(torch_ref, which, dim, keepdim):
    arr = np.array([[1.0, 5.0, 5.0, -2.0], [7.0, 7.0, 0.0, -2.0], [3.0, 1.0, 2.0, 9.0]])
    g, t = pair(torch_ref, arr, True)
    rg = getattr(g, which)(dim, keepdim)
    rt = getattr(t, which)(dim, keepdim)
    assert_close(rg.values, rt.values)
    assert_close(rg.indices, rt.indices)
    values, indices = rg  # unpacks as a tuple
    assert_close(values, rt[0])
    assert_close(indices, rt[1])
    assert type(rg).__name__ == which
    assert "values=" in repr(rg)
    w = np.random.randn(*rt.values.shape)
    rg.values.backward(gs.tensor(w))
    rt.values.backward(torch_ref.tensor(w))
    assert_close(g.grad, t.grad)
    fn = getattr(gs, which)(g, dim, keepdim=keepdim)
    assert_close(fn.indices, rt.indices)


def test_max_with_tensor_other_is_maximum(torch_ref):
    a, b = np.random.randn(3, 4), np.random.randn(4)
    ga, ta = pair(torch_ref, a)
    gb, tb = pair(torch_ref, b)
    assert_close(gs.max(ga, gb), torch_ref.max(ta, tb))
    assert_close(ga.min(gb), ta.min(tb))


def test_max_noncontiguous_and_nan(torch_ref):
    arr = np.random.randn(5, 6)
    check(torch_ref, lambda x: x.max(0).values, arr, view=lambda x: x.transpose(0, 1))
    nan = np.array([[1.0, np.nan, 3.0], [2.0, 1.0, 0.0]])
    g, t = pair(torch_ref, nan)
    assert_close(g.amax(1), t.amax(1))
    assert_close(g.max(1).indices, t.max(1).indices)
    assert_close(g.argmax(1), t.argmax(1))


@pytest.mark.parametrize("which", ["argmax", "argmin"])
def test_argmax(torch_ref, which):
    arr = np.array([[1.0, 5.0, 5.0], [7.0, 7.0, 0.0]])
    g, t = pair(torch_ref, arr)
    for kw in [{}, {"dim": 0}, {"dim": -1, "keepdim": True}, {"keepdim": True}]:
        assert_close(getattr(g, which)(**kw), getattr(t, which)(**kw))
    ints = np.array([[3, 1, 4], [1, 5, 9]], dtype=np.int32)
    g, t = pair(torch_ref, ints)
    assert_close(getattr(gs, which)(g, 1), getattr(torch_ref, which)(t, 1))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.float32, np.bool_])
def test_max_min_other_dtypes(torch_ref, dtype):
    arr = (np.random.rand(4, 5) * 10).astype(dtype)
    g, t = pair(torch_ref, arr)
    assert_close(g.max(), t.max())
    assert_close(g.amin(1), t.amin(1))
    r, rt = g.max(0), t.max(0)
    assert_close(r.values, rt.values)
    assert_close(r.indices, rt.indices)


# ---- dtypes ----


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float32, np.float16])
def test_sum_prod_dtypes(torch_ref, dtype):
    arr = (np.random.rand(3, 4) * 3).astype(dtype)
    g, t = pair(torch_ref, arr)
    tol = {"rtol": 1e-3, "atol": 1e-3}
    assert_close(g.sum(), t.sum(), **tol)
    assert_close(g.sum(1), t.sum(1), **tol)
    assert_close(g.prod(0), t.prod(0), **tol)
    assert_close(g.sum(dtype=gs.float64), t.sum(dtype=torch_ref.float64), **tol)
    assert_close(gs.mean(g, 0, dtype=gs.float64), torch_ref.mean(t, 0, dtype=torch_ref.float64))


def test_mean_of_integers_raises():
    x = gs.tensor([[1, 2], [3, 4]])
    with pytest.raises(RuntimeError, match="int64"):
        x.mean()
    with pytest.raises(RuntimeError, match="int64"):
        gs.mean(x, 0, dtype=gs.int64)
    with pytest.raises(RuntimeError, match="int64"):
        x.var()
    with pytest.raises(RuntimeError, match="int64"):
        x.norm()


# ---- all / any / count_nonzero ----


@pytest.mark.parametrize("dtype", [np.bool_, np.float32, np.int64, np.uint8])
def test_all_any(torch_ref, dtype):
    arr = (np.random.rand(3, 4, 2) > 0.3).astype(dtype)
    arr[0, 1, 0] = 0
    g, t = pair(torch_ref, arr)
    for op in ["all", "any"]:
        for kw in [{}, {"dim": 1}, {"dim": -1, "keepdim": True}, {"dim": (0, 2)}]:
            assert_close(getattr(g, op)(**kw), getattr(t, op)(**kw))
        assert_close(getattr(gs, op)(g), getattr(torch_ref, op)(t))
    assert_close(g.count_nonzero(), t.count_nonzero())
    assert_close(gs.count_nonzero(g, (0, 2)), torch_ref.count_nonzero(t, (0, 2)))


# ---- empty and 0-d ----


def test_empty_reductions(torch_ref):
    arr = np.zeros((0, 3))
    g, t = pair(torch_ref, arr)
    for f in [
        lambda x: x.sum(),
        lambda x: x.sum(0),
        lambda x: x.sum(1),
        lambda x: x.mean(),
        lambda x: x.mean(0),
        lambda x: x.prod(0),
        lambda x: x.prod(),
        lambda x: x.var(0),
        lambda x: x.all(),
        lambda x: x.any(0),
        lambda x: x.logsumexp(0),
        lambda x: x.norm(),
        lambda x: x.amax(1),
        lambda x: x.max(1).values,
        lambda x: x.softmax(0),
        lambda x: x.count_nonzero(0),
    ]:
        assert_close(f(g), f(t))
    gr, tr = pair(torch_ref, arr, True)
    gr.sum().backward()
    tr.sum().backward()
    assert_close(gr.grad, tr.grad)
    with pytest.raises(IndexError, match=r"\[0, 3\]"):
        g.amax(0)
    with pytest.raises(IndexError, match=r"\[0, 3\]"):
        g.max(0)
    with pytest.raises(RuntimeError, match="numel"):
        g.max()
    with pytest.raises(IndexError, match="numel"):
        g.argmax()


def test_zero_dim(torch_ref):
    arr = np.array(2.5)
    for f in [
        lambda x: x.sum(),
        lambda x: x.sum(0),
        lambda x: x.mean(-1, keepdim=True),
        lambda x: x.prod(),
        lambda x: x.prod(0),
        lambda x: x.amax(),
        lambda x: x.max(),
        lambda x: x.max(0).values,
        lambda x: x.logsumexp(0),
        lambda x: x.norm(),
        lambda x: x.var(correction=0),
        lambda x: x.softmax(0),
        lambda x: x.log_softmax(-1),
    ]:
        check(torch_ref, f, arr)
    g, t = pair(torch_ref, arr)
    assert_close(g.argmax(), t.argmax())
    assert_close(g.max(0).indices, t.max(0).indices)


# ---- norm ----


@pytest.mark.parametrize("p", [2, 1, INF, -INF, 3, "fro", 0.5, -1])
def test_norm_gradient_at_zero_is_zero(torch_ref, p):
    g = gs.zeros(2, 3, dtype=gs.float64, requires_grad=True)
    g.norm(p=p).backward()
    assert not np.isnan(g.grad.numpy()).any()
    np.testing.assert_array_equal(g.grad.numpy(), 0)
    t = torch_ref.zeros(2, 3, dtype=torch_ref.float64, requires_grad=True)
    t.norm(p=p).backward()
    assert_close(g.grad, t.grad)
    # a zero row among non-zero rows, and zeros inside a non-zero row
    arr = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 2.0], [0.0, 3.0, -1.0]])
    check(torch_ref, lambda x: x.norm(p=p, dim=1), arr)


def test_norm_inf_ties_and_vector_norm(torch_ref):
    arr = np.array([[3.0, -3.0, 1.0], [2.0, 0.0, -2.0]])
    check(torch_ref, lambda x: x.norm(p=INF, dim=1), arr)
    check(torch_ref, lambda x: x.norm(p=INF), arr)
    g, t = pair(torch_ref, arr)
    assert_close(
        gs.linalg.vector_norm(g, 3, dim=0, keepdim=True),
        torch_ref.linalg.vector_norm(t, 3, dim=0, keepdim=True),
    )
    assert_close(gs.linalg.vector_norm(g), torch_ref.linalg.vector_norm(t))
    f32 = np.random.randn(4, 3).astype(np.float32)
    g, t = pair(torch_ref, f32)
    assert_close(g.norm(dtype=gs.float64), t.norm(dtype=torch_ref.float64))


# ---- var / std ----


def test_var_std_argument_forms(torch_ref):
    arr = np.random.randn(4, 5)
    for f in [
        lambda m, x: m.var(x, 0, True),
        lambda m, x: m.var(x, 1, False, True),
        lambda m, x: m.std(x, True),
        lambda m, x: m.std(x, False),
        lambda m, x: m.var(x, dim=1, correction=3),
        lambda m, x: m.std(x, (0, 1), correction=0, keepdim=True),
    ]:
        g, t = pair(torch_ref, arr)
        assert_close(f(gs, g), f(torch_ref, t))
    g, t = pair(torch_ref, np.array([1.5]))
    assert_close(g.var(), t.var())  # one element, correction 1: nan
    assert_close(g.std(correction=0), t.std(correction=0))


# ---- logsumexp ----


def test_logsumexp_is_stable(torch_ref):
    arr = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1001.0, -1002.0], [-INF, -INF, -INF]])
    check(torch_ref, lambda x: x.logsumexp(1), arr[:2])
    g, t = pair(torch_ref, arr)
    assert_close(g.logsumexp(1), t.logsumexp(1))
    gi, ti = pair(torch_ref, np.array([[1, 2], [3, 4]]))
    assert_close(gi.logsumexp(1), ti.logsumexp(1), rtol=1e-5)


# ---- softmax ----


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("log", [False, True])
def test_softmax_matches_torch(torch_ref, dim, dtype, log):
    arr = (np.random.randn(4, 5, 6) * 3).astype(dtype)
    op = "log_softmax" if log else "softmax"
    tol = {"rtol": 1e-5, "atol": 1e-6} if dtype == np.float32 else {}
    check(torch_ref, lambda x: getattr(x, op)(dim), arr, **tol)
    check(torch_ref, lambda x: getattr(x, op)(dim), arr, view=lambda x: x.transpose(0, 2), **tol)
    g, t = pair(torch_ref, arr)
    assert_close(getattr(gs, op)(g, dim), getattr(torch_ref, op)(t, dim), **tol)


def test_softmax_large_parallel_and_stable(torch_ref):
    arr = (np.random.randn(300, 200) * 5).astype(np.float32)
    for dim in (0, 1):
        check(torch_ref, lambda x, d=dim: x.softmax(d), arr, rtol=1e-5, atol=1e-5)
        check(torch_ref, lambda x, d=dim: x.log_softmax(d), arr, rtol=1e-5, atol=1e-5)
    big = np.array([[1000.0, 1001.0, 1002.0], [-INF, 0.0, 1.0]])
    g, t = pair(torch_ref, big)
    assert_close(g.softmax(1), t.softmax(1))
    assert_close(g.log_softmax(1), t.log_softmax(1))
    f = np.random.randn(3, 4).astype(np.float32)
    g, t = pair(torch_ref, f)
    assert_close(g.softmax(1, dtype=gs.float64), t.softmax(1, dtype=torch_ref.float64))
    assert_close(gs.log_softmax(g, 0, gs.float64), torch_ref.log_softmax(t, 0, torch_ref.float64))


def test_softmax_double_backward(torch_ref):
    arr = np.random.randn(3, 4)
    for op in ["softmax", "log_softmax"]:
        g, t = pair(torch_ref, arr, True)
        w = np.random.randn(3, 4)
        (dg,) = gs.autograd.grad((getattr(g, op)(1) * gs.tensor(w)).sum(), g, create_graph=True)
        (dt,) = torch_ref.autograd.grad(
            (getattr(t, op)(1) * torch_ref.tensor(w)).sum(), t, create_graph=True
        )
        assert_close(dg, dt)
        (dg * dg).sum().backward()
        (dt * dt).sum().backward()
        assert_close(g.grad, t.grad)


# ---- bad input ----


@pytest.mark.parametrize(
    "f",
    [
        lambda x: x.sum(3),
        lambda x: x.mean((0, -4)),
        lambda x: x.prod(5),
        lambda x: x.amax(3),
        lambda x: x.max(-4),
        lambda x: x.argmax(3),
        lambda x: x.norm(dim=3),
        lambda x: x.var(3),
        lambda x: x.all(3),
        lambda x: x.logsumexp(3),
        lambda x: x.softmax(3),
        lambda x: gs.sum(x, 7),
    ],
)
def test_dim_out_of_range(f):
    x = gs.ones(2, 3, 4)
    with pytest.raises(IndexError, match=r"range of \[-3, 2\]"):
        f(x)


@pytest.mark.parametrize(
    "f,word",
    [
        (lambda x: x.sum(1.5), "float"),
        (lambda x: x.sum("a"), "str"),
        (lambda x: x.prod((0, 1)), "tuple"),
        (lambda x: x.max(1.5), "float"),
        (lambda x: x.argmax("0"), "str"),
        (lambda x: x.softmax((0, 1)), "tuple"),
        (lambda x: x.norm(p=[1]), "list"),
        (lambda x: gs.sum([1, 2]), "list"),
        (lambda x: gs.amax(np.ones(3)), "ndarray"),
        (lambda x: x.mean(dtype="float"), "float"),
    ],
)
def test_wrong_types(f, word):
    x = gs.ones(2, 3)
    with pytest.raises(TypeError, match=word):
        f(x)


def test_bad_dtypes_and_orders():
    x = gs.tensor([[1, 2], [3, 4]])
    with pytest.raises(NotImplementedError, match="int64"):
        x.softmax(0)
    with pytest.raises(NotImplementedError, match="nuc"):
        gs.ones(2, 2).norm(p="nuc")
    with pytest.raises(RuntimeError, match="dim 0 appears multiple times"):
        gs.ones(2, 2).sum((0, 0))


def test_half_sums_accumulate_wide(torch_ref):
    arr = np.full((2, 5000), 0.1, dtype=np.float16)
    g, t = pair(torch_ref, arr)
    assert_close(g.sum(1), t.sum(1), rtol=1e-3)
    assert_close(g.mean(), t.mean(), rtol=1e-3)
