"""Matrix products: values and gradients against PyTorch, gradcheck, errors, and what is saved."""

import numpy as np
import pytest
from helpers import assert_close, to_torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradstream as gs
from gradstream.autograd import gradcheck

MATMUL_SHAPES = [
    ((3,), (3,)),
    ((2, 3), (3,)),
    ((3,), (3, 4)),
    ((2, 3), (3, 4)),
    ((5, 2, 3), (3,)),
    ((3,), (5, 3, 4)),
    ((5, 2, 3), (3, 4)),
    ((2, 3), (5, 3, 4)),
    ((5, 2, 3), (5, 3, 4)),
    ((2, 1, 2, 3), (4, 3, 5)),
    ((1, 2, 3), (4, 3, 5)),
]


def _grads_vs_torch(torch, fn_gs, fn_t, *arrays, rtol=1e-5, atol=1e-5, dtype=np.float32):
    """Forward value and every input's gradient agree with PyTorch (random upstream grad)."""
    xs = [gs.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    ts = [to_torch(x, requires_grad=True) for x in xs]
    out, ref = fn_gs(*xs), fn_t(*ts)
    # products and their gradients are sums over at most the longest dim
    terms = max(max(a.shape, default=1) for a in arrays)
    assert_close(out, ref, rtol=rtol, atol=atol, terms=terms)
    g = np.asarray(np.random.randn(*tuple(ref.shape)), dtype=dtype)
    out.backward(gs.tensor(g))
    ref.backward(torch.from_numpy(g))
    for x, t in zip(xs, ts, strict=True):
        assert_close(x.grad, t.grad, rtol=rtol, atol=atol, terms=terms)


@pytest.mark.parametrize(("sa", "sb"), MATMUL_SHAPES)
def test_matmul_matches_torch(torch_ref, sa, sb):
    a, b = np.random.randn(*sa), np.random.randn(*sb)
    _grads_vs_torch(torch_ref, lambda x, y: x @ y, lambda x, y: x @ y, a, b)
    _grads_vs_torch(torch_ref, gs.matmul, torch_ref.matmul, a, b, dtype=np.float64)


@pytest.mark.parametrize(
    ("sa", "sb"), [((2, 3), (3, 4)), ((5, 2, 3), (3,)), ((2, 1, 2, 3), (4, 3, 5))]
)
def test_matmul_gradcheck(sa, sb):
    a = gs.randn(*sa, dtype=gs.float64, requires_grad=True)
    b = gs.randn(*sb, dtype=gs.float64, requires_grad=True)
    assert gradcheck(gs.matmul, (a, b))


def test_matmul_noncontiguous(torch_ref):
    a = gs.randn(4, 3, dtype=gs.float64).t().requires_grad_()  # (3, 4) column-major
    b = gs.randn(5, 6, 4, dtype=gs.float64).permute(2, 0, 1)  # (4, 5, 6), no dense axis
    b.requires_grad_()
    ta, tb = to_torch(a, True), to_torch(b, True)
    out = (a @ b.permute(1, 0, 2)).sum()
    ref = (ta @ tb.permute(1, 0, 2)).sum()
    assert_close(out, ref, rtol=1e-10, atol=1e-10)
    out.backward()
    ref.backward()
    assert_close(a.grad, ta.grad, rtol=1e-10, atol=1e-10)
    assert_close(b.grad, tb.grad, rtol=1e-10, atol=1e-10)
    assert gradcheck(lambda x, y: x @ y.permute(1, 0, 2), (a, b))


def test_mm_bmm_dot_outer_match_torch(torch_ref):
    t = torch_ref
    _grads_vs_torch(t, gs.mm, t.mm, np.random.randn(2, 3), np.random.randn(3, 4))
    _grads_vs_torch(t, gs.bmm, t.bmm, np.random.randn(4, 2, 3), np.random.randn(4, 3, 5))
    _grads_vs_torch(t, gs.dot, t.dot, np.random.randn(7), np.random.randn(7))
    _grads_vs_torch(t, gs.outer, t.outer, np.random.randn(3), np.random.randn(5))
    _grads_vs_torch(
        t, lambda a, b: a.mm(b), lambda a, b: a.mm(b), np.random.randn(1, 3), np.random.randn(3, 1)
    )
    _grads_vs_torch(
        t,
        lambda a, b: a.bmm(b),
        lambda a, b: a.bmm(b),
        np.random.randn(1, 1, 3),
        np.random.randn(1, 3, 2),
    )
    _grads_vs_torch(
        t, lambda a, b: a.dot(b), lambda a, b: a.dot(b), np.random.randn(3), np.random.randn(3)
    )
    _grads_vs_torch(
        t, lambda a, b: a.outer(b), lambda a, b: a.outer(b), np.random.randn(2), np.random.randn(4)
    )


@pytest.mark.parametrize("in_shape", [(2, 4), (4,), (1, 4), (2, 1), (1,), ()])
@pytest.mark.parametrize(("beta", "alpha"), [(1.0, 1.0), (0.5, 2.0), (0.0, -1.5)])
def test_addmm_matches_torch(torch_ref, in_shape, beta, alpha):
    def f_gs(i, a, b):
        return gs.addmm(i, a, b, beta=beta, alpha=alpha)

    def f_t(i, a, b):
        return torch_ref.addmm(i, a, b, beta=beta, alpha=alpha)

    arrays = (np.asarray(np.random.randn(*in_shape)), np.random.randn(2, 3), np.random.randn(3, 4))
    xs = [gs.tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    ts = [to_torch(x, True) for x in xs]
    out, ref = f_gs(*xs), f_t(*ts)
    assert_close(out, ref, rtol=1e-10, atol=1e-10)
    g = np.random.randn(2, 4)
    out.backward(gs.tensor(g))
    ref.backward(torch_ref.from_numpy(g))
    for x, t in zip(xs, ts, strict=True):
        expected = t.grad if t.grad is not None else torch_ref.zeros_like(t)
        got = x.grad if x.grad is not None else gs.zeros(x.shape, dtype=gs.float64)
        assert_close(got, expected, rtol=1e-10, atol=1e-10)
    method = xs[0].addmm(xs[1], xs[2], beta=beta, alpha=alpha)
    assert_close(method, ref, rtol=1e-10, atol=1e-10)
    if beta != 0.0:
        assert gradcheck(f_gs, xs)


def test_addmm_beta_zero_ignores_nan(torch_ref):
    inp = gs.full((2, 2), float("nan"))
    out = gs.addmm(inp, gs.ones(2, 3), gs.ones(3, 2), beta=0.0)
    assert_close(out, torch_ref.full((2, 2), 3.0))


def test_grad_fn_names():
    a = gs.randn(2, 3, requires_grad=True)
    assert (a @ gs.randn(3, 4)).grad_fn.name() == "MmBackward0"
    assert gs.mm(a, gs.randn(3, 4)).grad_fn.name() == "MmBackward0"
    assert gs.bmm(a.unsqueeze(0), gs.randn(1, 3, 4)).grad_fn.name() == "BmmBackward0"
    v = gs.randn(3, requires_grad=True)
    assert gs.dot(v, v).grad_fn.name() == "DotBackward0"
    assert gs.outer(v, v).grad_fn.name() == "MulBackward0"  # as in PyTorch


def test_double_backward_through_matmul(torch_ref):
    a = gs.randn(3, 4, dtype=gs.float64, requires_grad=True)
    b = gs.randn(4, 2, dtype=gs.float64, requires_grad=True)
    ta, tb = to_torch(a, True), to_torch(b, True)

    def loss(x, y, lib):
        p = lib.matmul(x, y)
        return (p * p * p).sum()

    (ga, gb) = gs.autograd.grad(loss(a, b, gs), (a, b), create_graph=True)
    (tga, tgb) = torch_ref.autograd.grad(loss(ta, tb, torch_ref), (ta, tb), create_graph=True)
    assert_close(ga, tga, rtol=1e-10, atol=1e-10)
    (ga.sum() + (gb * gb).sum()).backward()
    (tga.sum() + (tgb * tgb).sum()).backward()
    assert_close(a.grad, ta.grad, rtol=1e-9, atol=1e-9)
    assert_close(b.grad, tb.grad, rtol=1e-9, atol=1e-9)


def test_dot_and_mm_double_backward(torch_ref):
    x = gs.randn(5, dtype=gs.float64, requires_grad=True)
    tx = to_torch(x, True)
    (g,) = gs.autograd.grad(gs.dot(x, x.sin()), x, create_graph=True)
    (tg,) = torch_ref.autograd.grad(torch_ref.dot(tx, tx.sin()), tx, create_graph=True)
    assert_close(g, tg, rtol=1e-10, atol=1e-10)
    g.sum().backward()
    tg.sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-10, atol=1e-10)


def test_integer_matmul_matches_numpy():
    a = np.arange(6, dtype=np.int64).reshape(2, 3) - 2
    b = np.arange(12, dtype=np.int64).reshape(3, 4)
    out = gs.tensor(a) @ gs.tensor(b)
    assert out.dtype == gs.int64
    np.testing.assert_array_equal(out.numpy(), a @ b)
    np.testing.assert_array_equal(
        gs.dot(gs.tensor(a[0]), gs.tensor(b[:, 0])).numpy(), a[0] @ b[:, 0]
    )


def test_empty_products(torch_ref):
    # An empty inner dimension sums nothing: zeros, and zero-sized gradients.
    a = gs.zeros(2, 0, requires_grad=True)
    b = gs.zeros(0, 3, requires_grad=True)
    out = a @ b
    assert_close(out, torch_ref.zeros(2, 3))
    out.sum().backward()
    assert tuple(a.grad.shape) == (2, 0) and tuple(b.grad.shape) == (0, 3)
    assert tuple((gs.zeros(0, 3) @ gs.zeros(3, 4)).shape) == (0, 4)
    assert tuple(gs.bmm(gs.zeros(0, 2, 3), gs.zeros(0, 3, 4)).shape) == (0, 2, 4)


def test_saves_only_what_backward_needs():
    """x @ W saves x only when W needs a gradient, W only when x needs one."""

    def saved_bytes(x_grad, w_grad):
        x = gs.randn(64, 32, requires_grad=x_grad)
        w = gs.randn(32, 16, requires_grad=w_grad)
        before = gs.memory.memory_by_category()["activation"]
        out = x @ w
        saved = gs.memory.memory_by_category()["activation"] - before
        del out
        assert gs.memory.memory_by_category()["activation"] == before
        return saved

    assert saved_bytes(False, True) == 64 * 32 * 4  # x
    assert saved_bytes(True, False) == 32 * 16 * 4  # W
    assert saved_bytes(True, True) == 64 * 32 * 4 + 32 * 16 * 4
    assert saved_bytes(False, False) == 0  # nothing recorded at all


@pytest.mark.parametrize(
    ("fn", "args", "names"),
    [
        (gs.matmul, ((2, 3), (4, 5)), ["2x3", "4x5"]),
        (gs.matmul, ((3,), (4,)), ["[3]", "[4]"]),
        (gs.matmul, ((2, 2, 3), (3, 3, 4)), ["[2, 2, 3]", "[3, 3, 4]"]),
        (gs.mm, ((2, 3), (4, 5)), ["2x3", "4x5"]),
        (gs.mm, ((3,), (3, 4)), ["[3]"]),
        (gs.bmm, ((2, 2, 3), (2, 4, 5)), ["[2, 2, 3]", "[2, 4, 5]"]),
        (gs.bmm, ((2, 3), (2, 3)), ["[2, 3]"]),
        (gs.dot, ((2,), (3,)), ["[2]", "[3]"]),
        (gs.dot, ((2, 2), (2,)), ["[2, 2]", "[2]"]),
        (gs.outer, ((2, 2), (3,)), ["[2, 2]", "[3]"]),
    ],
)
def test_shape_errors_name_both_shapes(fn, args, names):
    with pytest.raises(RuntimeError) as e:
        fn(*(gs.zeros(*s) for s in args))
    for n in names:
        assert n in str(e.value), str(e.value)


def test_addmm_errors():
    with pytest.raises(RuntimeError, match=r"2x3 and 4x5"):
        gs.addmm(gs.zeros(2, 5), gs.zeros(2, 3), gs.zeros(4, 5))
    with pytest.raises(RuntimeError, match=r"\[3, 4\].*\[2, 5\]"):
        gs.addmm(gs.zeros(3, 4), gs.zeros(2, 3), gs.zeros(3, 5))
    with pytest.raises(RuntimeError, match=r"mat1 must be a matrix.*\[3\]"):
        gs.addmm(gs.zeros(2), gs.zeros(3), gs.zeros(3, 2))


def test_dtype_errors_name_both_dtypes():
    with pytest.raises(RuntimeError, match=r"float32 and float64.*\[2, 3\] and \[3, 4\]"):
        gs.zeros(2, 3) @ gs.zeros(3, 4, dtype=gs.float64)
    with pytest.raises(RuntimeError, match=r"float32 and float64"):
        gs.dot(gs.zeros(3), gs.zeros(3, dtype=gs.float64))
    with pytest.raises(RuntimeError, match=r"Bool.*\[2, 2\]"):
        gs.mm(gs.zeros(2, 2, dtype=gs.bool), gs.zeros(2, 2, dtype=gs.bool))
    with pytest.raises(RuntimeError, match=r"0D and 1D"):
        gs.tensor(1.0) @ gs.zeros(3)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    n=st.integers(1, 4),
    k=st.integers(1, 4),
    m=st.integers(1, 4),
    perm_seed=st.integers(0, 1000),
)
def test_matmul_of_batched_views_in_any_layout_matches_torch(torch_ref, batch, n, k, m, perm_seed):
    """Operands with several batch dims, their batch dims permuted (q.transpose(1, 2) @ k):
    candle's gemm takes one batch stride, so they are flattened first."""
    rng = np.random.default_rng(perm_seed)
    perm = list(rng.permutation(len(batch)))
    inv = list(np.argsort(perm))
    a = rng.standard_normal([batch[p] for p in perm] + [n, k])
    b = rng.standard_normal(batch + [k, m])
    r = len(batch)
    order = inv + [r, r + 1]
    ga, ta = gs.tensor(a, requires_grad=True), torch_ref.tensor(a, requires_grad=True)
    out = ga.permute(*order) @ gs.tensor(b)
    ref = ta.permute(*order) @ torch_ref.tensor(b)
    assert_close(out, ref, rtol=1e-10, atol=1e-10)
    out.sum().backward()
    ref.sum().backward()
    assert_close(ga.grad, ta.grad, rtol=1e-10, atol=1e-10)
