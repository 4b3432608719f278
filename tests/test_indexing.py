"""Indexing against PyTorch: __getitem__/__setitem__ in every form, the gather/scatter
family, views sharing memory, in-place history and version checks, and errors."""

import functools

import helpers
import numpy as np
import pytest
from helpers import arr, assert_close

import gradstream as gs

# Integer and masked indexing may leave an unused input without any gradient.
run_both = functools.partial(helpers.run_both, missing_grad_ok=True)


def lib_index(lib, idx):
    """Turn the test's index description into real index objects of `lib`."""
    if isinstance(idx, tuple):
        return tuple(lib_index(lib, i) for i in idx)
    if isinstance(idx, np.ndarray):
        return lib.tensor(idx)
    return idx


X_SHAPE = (4, 5, 6)
MASK_01 = np.arange(20).reshape(4, 5) % 3 == 0

GETITEM_CASES = [
    2,
    -1,
    (1, -2),
    (0, 1, 2),
    (-4, -5, -6),
    slice(1, 3),
    slice(None, None, 2),
    (slice(None), slice(1, None, 3)),
    (Ellipsis, slice(-4, -1, 2)),
    (slice(10, 20),),
    (slice(-100, 100),),
    (slice(3, 1),),
    None,
    (None, 1, None),
    (Ellipsis, None),
    (1, Ellipsis, None, 2),
    Ellipsis,
    (),
    True,
    False,
    (0, True),
    [0, 2, -1],
    np.array([[0, 1], [2, 3]]),
    np.array([3, 0, 0]),
    (slice(None), np.array([4, 0, 1])),
    (slice(None), [1, 3], [0, 5]),
    ([0, 2], slice(None), [1, 3]),
    ([[0], [3]], [1, 2]),
    (np.array([1, 2]), slice(1, 4), np.array([[0], [5]])),
    (Ellipsis, [0, 0, 5]),
    (None, [1, 2], 0),
    (1, [0, 4], slice(None, None, 2)),
    ([0, 1], 2, [3, 4]),
    ([True, False, True, True],),
    (slice(None), np.array([True, False, False, True, True])),
    MASK_01,
    (MASK_01, slice(0, 4)),
    (Ellipsis, np.arange(6) > 2),
    (np.array([[True] * 5] * 4), Ellipsis, None),
    (np.array(2),),
    (slice(None), np.array(-1), [0, 1]),
    np.array([], dtype=np.int64),
]


@pytest.mark.parametrize("idx", GETITEM_CASES, ids=[repr(c)[:40] for c in GETITEM_CASES])
def test_getitem_matches_torch(torch_ref, idx):
    run_both(torch_ref, lambda L, x: x[lib_index(L, idx)], arr(*X_SHAPE))


@pytest.mark.parametrize("idx", [(slice(None), [0, 2]), (1, slice(None, None, 2)), [1, 0]])
def test_getitem_noncontiguous(torch_ref, idx):
    run_both(torch_ref, lambda L, x: x.transpose(0, 1)[lib_index(L, idx)], arr(3, 4))
    run_both(torch_ref, lambda L, x: x[::2, 1:][lib_index(L, idx)], arr(6, 5))


def test_getitem_dtypes(torch_ref):
    for a in [np.arange(12).reshape(3, 4), np.arange(12).reshape(3, 4) % 2 == 0]:
        run_both(torch_ref, lambda L, x: x[1:, [0, 3]], a, grad=False)
        run_both(torch_ref, lambda L, x: x[x.bool()] if L is gs else x[x.bool()], a, grad=False)
    run_both(torch_ref, lambda L, x: x[[0, 1], [1, 2]], arr(3, 3, dtype=np.float32))
    idx32 = np.array([2, 0], dtype=np.int32)
    run_both(torch_ref, lambda L, x, i: x[i], arr(3, 2), idx32)


def test_getitem_0d_and_empty(torch_ref):
    run_both(torch_ref, lambda L, x: x[...], np.array(3.0))
    run_both(torch_ref, lambda L, x: x[None], np.array(3.0))
    run_both(torch_ref, lambda L, x: x[True], np.array(3.0))
    run_both(torch_ref, lambda L, x: x[1:], arr(0, 3))
    run_both(torch_ref, lambda L, x: x[:, [0, 0]], arr(0, 3))
    run_both(torch_ref, lambda L, x: x[x > 100], arr(3, 3))


def test_basic_slices_are_views():
    x = gs.tensor(arr(4, 6))
    v = x[1:3, ::2]
    v[0, 1] = 100.0
    assert x[1, 2].item() == 100.0
    x[3, 4] = -7.0
    assert x[3:, ::2][0, 2].item() == -7.0
    col = x[:, -1]
    col.fill_(9.0)
    assert (x[:, 5] == 9.0).numpy().all()
    e = x[..., None, 0]
    e.zero_()
    assert (x[:, 0] == 0).numpy().all()
    # Advanced indexing copies, as in PyTorch.
    c = x[[0, 1]]
    c.fill_(55.0)
    assert not (x[0] == 55.0).numpy().any()


def test_stepped_view_writes_reach_base(torch_ref):
    g = gs.tensor(arr(5, 7))
    t = torch_ref.tensor(arr(5, 7))
    g[::2, 1::3].mul_(0) if hasattr(g, "mul_") else g[::2, 1::3].zero_()
    t[::2, 1::3].zero_()
    assert_close(g, t)


SETITEM_CASES = [
    (1, "scalar"),
    ((slice(None), 0), "scalar"),
    ((Ellipsis, 0), "row"),
    ((slice(1, 3), slice(None, None, 2)), "tensor"),
    ((slice(None, None, 2), Ellipsis, 1), "scalar"),
    ((None, 0), "row"),
    ([0, 2], "tensor"),
    ((slice(None), [1, 3]), "tensor"),
    (([0, 1, 3], [2, 2, 0]), "row"),
    (([0, 2], slice(None), [1, 3]), "tensor"),
    ((1, [0, 4], slice(None, None, 2)), "tensor"),
    (MASK_01, "scalar"),
    (MASK_01, "tensor"),
    ((Ellipsis, np.arange(6) % 2 == 1), "tensor"),
    ((slice(None), np.array([[True] * 6] * 5)), "scalar"),
]


def _value(lib, kind, target_shape):
    if kind == "scalar":
        return 3.5
    if kind == "row":
        return lib.tensor(np.linspace(-1, 1, target_shape[-1]))
    return lib.tensor(np.linspace(-2, 2, int(np.prod(target_shape))).reshape(target_shape))


@pytest.mark.parametrize("idx,kind", SETITEM_CASES, ids=[repr(c)[:40] for c in SETITEM_CASES])
def test_setitem_nonleaf_gradients(torch_ref, idx, kind):
    target = torch_ref.zeros(X_SHAPE)[lib_index(torch_ref, idx)].shape

    def f(L, x, v):
        y = x * 2.0
        ix = lib_index(L, idx)
        val = 3.5 if kind == "scalar" else (v[0] if kind == "row" else v)
        y[ix] = val
        return y * y

    v = np.linspace(-2, 2, int(np.prod(target))).reshape(target)
    if kind == "row":
        v = np.stack([np.linspace(-1, 1, target[-1])] * 2)
    run_both(torch_ref, f, arr(*X_SHAPE), v)


def test_setitem_broadcast_and_casts(torch_ref):
    def f(L, x):
        x = x.clone()
        x[1:] = L.tensor([[1.0, 2.0, 3.0]])
        x[0] = L.tensor([[7, 8, 9]])
        x[[0, 1], [2, 0]] = L.tensor(5.0, dtype=L.float64)
        x[:, 1] = L.tensor([4, 5, 6, 7])
        return x

    run_both(torch_ref, f, arr(4, 3))

    def g(L, x):
        x = x.clone()
        x[x > 0] = 1
        x[0] = True
        return x

    run_both(torch_ref, g, np.arange(12).reshape(3, 4) - 5, grad=False)


def test_setitem_with_value_requiring_grad_into_plain_tensor(torch_ref):
    def f(L, v):
        x = L.zeros(3, 4, dtype=L.float64)
        x[1] = v
        x[[0, 2], 1:3] = v[:2] * 2
        return x

    run_both(torch_ref, f, np.linspace(0, 1, 4))


def test_setitem_on_noncontiguous_target(torch_ref):
    def f(L, x):
        y = (x * 1.0).t()
        y[1, [0, 2]] = 0.0
        y[:, 0] = -1.0
        return y

    run_both(torch_ref, f, arr(3, 4))


def test_setitem_overlapping_self():
    # PyTorch refuses overlapping source and destination; gradstream reads the source first.
    x = gs.tensor(arr(4, 2))
    x[1:] = x[:-1]
    x[[0, 3]] = x[[3, 0]]
    a = arr(4, 2)
    a[1:] = a[:-1].copy()
    a[[0, 3]] = a[[3, 0]]
    assert_close(x, a)


def test_setitem_bumps_version_and_saved_check():
    x = gs.tensor(arr(3, 3), requires_grad=True)
    a = x * 1.0
    b = a * a  # saves a
    a[0, 0] = 5.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        b.sum().backward()
    a2 = x * 1.0
    c = a2 * a2
    a2[[0, 1]] = 0.0
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        c.sum().backward()
    a3 = x * 1.0
    d = a3 * a3
    a3.masked_fill_(a3.detach() > 1, 0.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        d.sum().backward()


def test_setitem_on_leaf_requiring_grad_raises():
    x = gs.tensor(arr(3), requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[0] = 1.0
    with pytest.raises(RuntimeError, match="leaf Variable"):
        x[[0]] = 1.0
    with gs.no_grad():
        x[0] = 1.0
        x[[1]] = 2.0
    assert x.tolist()[:2] == [1.0, 2.0]


def test_getitem_double_backward(torch_ref):
    def f(L, x0):
        x = x0 * 1.0
        y = x[1:, [0, 2]] * x[::2][:, None, :2]
        (g,) = L.autograd.grad((y * y).sum(), x0, create_graph=True)
        return g

    run_both(torch_ref, f, arr(3, 3))


def test_setitem_double_backward(torch_ref):
    def f(L, x0):
        x = x0 * 1.0
        y = x * x
        y[0] = x[1] * 3.0
        y[[1, 2], [0, 1]] = x[0, :2] * x[0, :2]
        (g,) = L.autograd.grad((y * y).sum(), x0, create_graph=True)
        return g

    run_both(torch_ref, f, arr(3, 2))


def test_gradcheck_indexing():
    x = gs.tensor(arr(3, 4), requires_grad=True)
    assert gs.autograd.gradcheck(lambda t: t[[2, 0, 2], 1:][:, ::2] * t[0, 0], (x,))

    def put(t):
        y = t * 1.0
        y[[0, 2, 1], [1, 1, 2]] = t[2, :3] * t[1, :3]
        return y

    assert gs.autograd.gradcheck(put, (x,))


# ---- errors ----


def test_index_errors():
    x = gs.tensor(arr(3, 4))
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x[3]
    with pytest.raises(IndexError, match="index -5 is out of bounds for dimension 1 with size 4"):
        x[0, -5]
    with pytest.raises(IndexError, match="index 7 is out of bounds for dimension 1 with size 4"):
        x[:, [0, 7]]
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 0 with size 3"):
        x[[9]] = 1.0
    with pytest.raises(IndexError, match="too many indices for tensor of dimension 2"):
        x[0, 0, 0]
    with pytest.raises(IndexError, match="0-dim"):
        gs.tensor(1.0)[0]
    with pytest.raises(IndexError, match=r"mask \[4\].*\[3, 4\]"):
        x[gs.tensor([True, False, True, True])]
    with pytest.raises(IndexError, match=r"mask \[3, 3\]"):
        x[gs.ones(3, 3).bool()]
    with pytest.raises(IndexError, match=r"broadcast together with shapes \[2\], \[3\]"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="long, int, byte or bool"):
        x[gs.tensor([0.0, 1.0])]
    with pytest.raises(IndexError, match="only integers"):
        x[1.5]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., ...]
    with pytest.raises(ValueError, match="step must be greater than zero"):
        x[::-1]


@pytest.mark.filterwarnings("ignore:Using a non-tuple sequence")
def test_index_error_types_match_torch(torch_ref):
    x, t = gs.tensor(arr(3, 4)), torch_ref.tensor(arr(3, 4))
    for idx in [3, (0, 5), [0, 9], "a", 1.5, (0, 0, 0)]:
        with pytest.raises(Exception) as te:
            t[idx]
        with pytest.raises(te.type):
            x[idx]


def test_setitem_shape_errors():
    x = gs.tensor(arr(3, 4))
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[3\].*shape \[4\]"):
        x[0] = gs.tensor([1.0, 2.0, 3.0])
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[2, 4\].*shape \[3, 1\]"):
        x[:, [0]] = gs.zeros(2, 4)
    with pytest.raises(RuntimeError, match=r"value tensor of shape \[5\].*shape \[2\]"):
        x[[0, 1], [1, 2]] = gs.zeros(5)
    with pytest.raises(TypeError):
        x[0] = "abc"


# ---- gather / scatter family ----

IDX = np.array([[0, 2, 1], [1, 1, 0], [2, 0, 2]])


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x, i: x.gather(1, i),
        lambda L, x, i: L.gather(x, 0, i[:, :2]),
        lambda L, x, i: x.t().gather(-1, i[:, :2]),
        lambda L, x, i: L.take_along_dim(x, i, 1),
        lambda L, x, i: L.take_along_dim(x, i[:1], dim=1),
        lambda L, x, i: x.take_along_dim(i),
        lambda L, x, i: x.index_select(1, i[0]),
        lambda L, x, i: L.index_select(x, 0, i[1]),
        lambda L, x, i: x.t().index_select(-1, i[1]),
        lambda L, x, i: L.index_select(x, 0, i[1, 0]),
        lambda L, x, i: x.scatter_add(1, i, x * 2.0),
        lambda L, x, i: L.scatter_add(x, 0, i[:, :2], x[:, :2] + 1),
        lambda L, x, i: x.scatter(1, i[:, :1], x[:, 1:2] * 3.0),
        lambda L, x, i: x.scatter(0, i[:1], 7.0),
        lambda L, x, i: x.masked_fill(x > 0, -1.0),
        lambda L, x, i: L.masked_fill(x, (x > 0)[0], 2),
        lambda L, x, i: x.masked_select(x < 0.5),
        lambda L, x, i: L.masked_select(x, (x > 0)[:, :1]),
        lambda L, x, i: x.t().masked_select(x.t() > 0),
        lambda L, x, i: x.index_put((i[0], i[1]), x[0] * 2, accumulate=True),
        lambda L, x, i: L.index_put(x, (i[1],), x[0, :1], accumulate=False),
    ],
)
def test_gather_family(torch_ref, fn):
    run_both(torch_ref, fn, arr(3, 3), IDX)


def test_scatter_add_src_larger_than_index(torch_ref):
    # PyTorch's own backward fails here; values must agree and our gradient is exact.
    run_both(
        torch_ref, lambda L, x, i: x.scatter_add(0, i[:, :2], x + 1), arr(3, 3), IDX, grad=False
    )
    x = gs.tensor(arr(3, 3), requires_grad=True)
    assert gs.autograd.gradcheck(lambda t: t.scatter_add(0, gs.tensor(IDX[:2, :2]), t * t), (x,))


def test_inplace_family_on_nonleaf(torch_ref):
    def f(L, x, s, i):
        y = x * 1.0
        y.scatter_add_(0, i, s)
        y.masked_fill_(y > 3, L.tensor(0.25, dtype=L.float64))
        y.index_put_((i[0], i[1]), s[0], accumulate=True)
        y.scatter_(1, i[:, :1], s[:, :1] * 2.0)
        return y

    run_both(torch_ref, f, arr(3, 3), arr(2, 3) * 0.3, np.array([[0, 2, 1], [1, 1, 0]]))


def test_masked_fill_value_gradient(torch_ref):
    def f(L, x, v):
        return x.masked_fill(x > 0, v) * (x + 1.0)

    run_both(torch_ref, f, arr(3, 3), np.array(2.0))


def test_nonzero(torch_ref):
    a = np.array([[0, 1.5, 0], [2, 0, -1]])
    run_both(torch_ref, lambda L, x: x.nonzero(), a, grad=False)
    run_both(torch_ref, lambda L, x: L.nonzero(x, as_tuple=True), a, grad=False)
    run_both(torch_ref, lambda L, x: L.argwhere(x), a, grad=False)
    run_both(torch_ref, lambda L, x: x.nonzero(), np.array(3.0), grad=False)
    run_both(torch_ref, lambda L, x: x.nonzero(as_tuple=True), np.array(0.0), grad=False)
    run_both(torch_ref, lambda L, x: x.t().nonzero(), a, grad=False)
    run_both(torch_ref, lambda L, x: x.nonzero(), arr(0, 3), grad=False)


def test_gather_family_0d_and_empty(torch_ref):
    run_both(torch_ref, lambda L, x, i: x.gather(0, i), np.array(2.0), np.array(0))
    run_both(torch_ref, lambda L, x, i: x.gather(1, i), arr(2, 3), np.zeros((2, 0), np.int64))
    run_both(torch_ref, lambda L, x, i: x.index_select(0, i), arr(2, 3), np.zeros(0, np.int64))
    run_both(torch_ref, lambda L, x: x.masked_fill(x > 0, 1.0), np.array(2.0))
    run_both(torch_ref, lambda L, x: x.masked_select(x > 0), np.array(2.0))


def test_gather_family_errors():
    x = gs.tensor(arr(2, 3))
    i = gs.tensor([[0, 5]])
    with pytest.raises(RuntimeError, match="index 5 is out of bounds for dimension 1 with size 3"):
        x.gather(1, i)
    with pytest.raises(RuntimeError, match="int64"):
        x.gather(1, gs.tensor([[0.0]]))
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        x.gather(1, gs.tensor([0]))
    with pytest.raises(RuntimeError, match=r"\[3, 1\].*\[2, 3\]"):
        x.gather(1, gs.zeros(3, 1, dtype=gs.int64))
    with pytest.raises(IndexError, match="index out of range in self"):
        x.index_select(0, gs.tensor([2]))
    with pytest.raises(IndexError):
        x.index_select(1, gs.tensor([[0]]))
    with pytest.raises(RuntimeError, match="out of bounds"):
        x.scatter_add(0, gs.tensor([[3, 0, 0]]), x)
    with pytest.raises(RuntimeError, match=r"no larger than src"):
        x.scatter_add(0, gs.tensor([[0, 0, 0]]), x[:, :2])
    with pytest.raises(RuntimeError, match="boolean masks"):
        x.masked_fill(gs.ones(2, 3), 0.0)
    with pytest.raises(RuntimeError, match="0-dimensional value"):
        x.masked_fill(x > 0, gs.tensor([1.0]))
    with pytest.raises(RuntimeError, match=r"\[4\]"):
        x.masked_select(gs.tensor([True, False, True, True]))
    with pytest.raises(TypeError):
        x.masked_fill(x > 0, "a")
    with pytest.raises(TypeError):
        x.gather(0, [[0]])
