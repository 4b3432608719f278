"""Sorting and searching against PyTorch: sort, argsort, msort, topk, kthvalue, searchsorted,
bucketize, unique, unique_consecutive.

Hypothesis draws the shape (0-d, empty and size-1 dims included), the dtype among float32,
float64, int64 and bool, the layout (contiguous, transposed, sliced), values with ties, NaN
and infinities, and dims in and out of range; each case compares values, indices, dtypes,
gradients and exception classes with PyTorch's. Sorts are compared with PyTorch's stable
sort, whose indices are deterministic; where PyTorch's indices are not (topk, kthvalue with
ties), the indices must read back the values.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

from backend_paths import reraise_missing  # noqa: E402
from helpers import assert_close, dtype_name, to_numpy  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
from gradstream.autograd import gradcheck  # noqa: E402

SETTINGS = settings(max_examples=400, derandomize=True, deadline=None, database=None)
NAN = float("nan")
INF = float("inf")
FLOAT_POOL = [-2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.5, NAN, INF, -INF]
INT_POOL = [-3, -1, 0, 1, 2, 7]


def np_dtype(name):
    return {"float32": np.float32, "float64": np.float64, "int64": np.int64, "bool": np.bool_}[name]


@st.composite
def arrays(
    draw,
    dtypes=("float32", "float64", "int64", "bool"),
    min_rank=0,
    max_rank=3,
    nan=True,
    max_side=5,
):
    """A NumPy array with ties (and NaN/inf for floats) and a layout to view it through."""
    rank = draw(st.integers(min_rank, max_rank))
    shape = tuple(draw(st.lists(st.integers(0, max_side), min_size=rank, max_size=rank)))
    dtype = draw(st.sampled_from(dtypes))
    n = math.prod(shape)
    if dtype == "bool":
        pool = [False, True]
    elif dtype == "int64":
        pool = INT_POOL
    else:
        pool = FLOAT_POOL if nan else [v for v in FLOAT_POOL if v == v]
    values = draw(st.lists(st.sampled_from(pool), min_size=n, max_size=n))
    arr = np.array(values, dtype=np_dtype(dtype)).reshape(shape)
    layouts = (
        ["contiguous"] + (["sliced"] if rank >= 1 else []) + (["transposed"] if rank >= 2 else [])
    )
    return arr, draw(st.sampled_from(layouts))


def make(lib, arr, layout, requires_grad=False):
    """`arr`'s values as a tensor of `lib` seen through `layout` (a non-contiguous view)."""
    if layout == "transposed":
        t = lib.tensor(np.ascontiguousarray(arr.swapaxes(0, -1)))
    elif layout == "sliced":
        t = lib.tensor(np.repeat(arr, 2, axis=-1))
    else:
        t = lib.tensor(arr)
    if requires_grad:
        t.requires_grad_(True)
    if layout == "transposed":
        return t, t.transpose(0, -1)
    if layout == "sliced":
        return t, t[..., ::2]
    return t, t


def pair(arr, layout, requires_grad=False):
    """(gradstream leaf, its view), (torch leaf, its view)."""
    grad = requires_grad and arr.dtype.kind == "f"
    return make(gs, arr, layout, grad), make(torch, arr, layout, grad)


def same(a, b):
    """Exactly equal values (NaN equal to NaN), shapes and dtypes."""
    assert dtype_name(a.dtype) == str(b.dtype).replace("torch.", ""), (a.dtype, b.dtype)
    x, y = to_numpy(a), to_numpy(b)
    assert x.shape == y.shape, (x.shape, y.shape)
    np.testing.assert_array_equal(x, y)


def outcome(f):
    """`f()`'s result, or the exception class it raised."""
    try:
        return f(), None
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        reraise_missing(e)
        return None, type(e)


def both(fg, ft):
    """Run the gradstream and torch calls; both raise the same class or both succeed."""
    rg, eg = outcome(fg)
    rt, et = outcome(ft)
    if et is not None:
        assert eg is et, f"torch raised {et.__name__}, gradstream {eg} ({rg})"
        return None, None
    assert eg is None, f"gradstream raised {eg.__name__}, torch returned {rt}"
    return rg, rt


def dims_for(arr):
    r = max(arr.ndim, 1)
    return st.integers(-r - 1, r)


def check_grad(g_leaf, t_leaf, g_out, t_out):
    """Backpropagate the same random weights through both; compare the leaf gradients."""
    if not t_leaf.requires_grad or t_out.numel() == 0:
        return
    w = np.random.default_rng(0).standard_normal(tuple(t_out.shape))
    (g_out * gs.tensor(w).to(g_out.dtype)).sum().backward()
    (t_out * torch.tensor(w).to(t_out.dtype)).sum().backward()
    assert_close(g_leaf.grad, t_leaf.grad, rtol=0, atol=0)


# ------------------------------------------------------------------------- sort


@SETTINGS
@given(data=st.data())
def test_sort_matches_torch(data):
    arr, layout = data.draw(arrays())
    dim = data.draw(dims_for(arr))
    descending = data.draw(st.booleans())
    (gl, g), (tl, t) = pair(arr, layout, requires_grad=True)
    spelling = data.draw(st.sampled_from(["function", "method"]))
    if spelling == "function":
        rg, rt = both(
            lambda: gs.sort(g, dim=dim, descending=descending, stable=True),
            lambda: torch.sort(t, dim=dim, descending=descending, stable=True),
        )
    else:
        rg, rt = both(
            lambda: g.sort(dim=dim, descending=descending, stable=True),
            lambda: t.sort(dim=dim, descending=descending, stable=True),
        )
    if rg is None:
        return
    assert type(rg).__name__ == "sort" and rg._fields == ("values", "indices")
    same(rg.values, rt.values)
    same(rg.indices, rt.indices)
    check_grad(gl, tl, rg.values, rt.values)


@SETTINGS
@given(data=st.data())
def test_argsort_and_msort_match_torch(data):
    arr, layout = data.draw(arrays())
    dim = data.draw(dims_for(arr))
    descending = data.draw(st.booleans())
    (gl, g), (tl, t) = pair(arr, layout, requires_grad=True)
    rg, rt = both(
        lambda: gs.argsort(g, dim=dim, descending=descending, stable=True),
        lambda: torch.argsort(t, dim=dim, descending=descending, stable=True),
    )
    if rg is not None:
        same(rg, rt)
        same(g.argsort(dim=dim, descending=descending, stable=True), rt)
    rg, rt = both(lambda: gs.msort(g), lambda: torch.msort(t))
    if rg is not None:
        same(rg, rt)
        same(g.msort(), rt)
        check_grad(gl, tl, rg, rt)


def test_sort_defaults_and_unstable_flag():
    x = gs.tensor([[3.0, 1.0, 2.0], [0.0, -1.0, 5.0]])
    v, i = gs.sort(x)
    same(v, torch.sort(torch.tensor(to_numpy(x))).values)
    same(i, torch.tensor([[1, 2, 0], [1, 0, 2]]))
    # stable=False is still a stable sort (any order is allowed there; this one is PyTorch's
    # stable one).
    ties = gs.tensor([1, 0, 1, 0, 1])
    same(gs.sort(ties, stable=False).indices, torch.tensor([1, 3, 0, 2, 4]))
    same(gs.argsort(ties, descending=True), torch.tensor([0, 2, 4, 1, 3]))


def test_sort_dtypes_beyond_the_drawn_ones():
    for np_dt in (np.int32, np.uint8):
        a = np.array([[3, 1, 2, 1], [0, 9, 9, 4]], dtype=np_dt)
        rg, rt = (
            gs.sort(gs.tensor(a), dim=1, stable=True),
            torch.sort(torch.tensor(a), dim=1, stable=True),
        )
        same(rg.values, rt.values)
        same(rg.indices, rt.indices)
    a = np.array([1.5, -2.0, 0.25, 1.5], dtype=np.float32)
    rg = gs.sort(gs.tensor(a).to(gs.bfloat16), stable=True)
    rt = torch.sort(torch.tensor(a).to(torch.bfloat16), stable=True)
    same(rg.values, rt.values)
    same(rg.indices, rt.indices)


def test_sort_large_parallel_paths():
    """Lines long and many enough for the rayon paths, along both dims."""
    rng = np.random.default_rng(3)
    a = rng.integers(-50, 50, size=(300, 257)).astype(np.float32)
    a[::7, ::5] = NAN
    for dim in (0, 1):
        for descending in (False, True):
            rg = gs.sort(gs.tensor(a), dim=dim, descending=descending, stable=True)
            rt = torch.sort(torch.tensor(a), dim=dim, descending=descending, stable=True)
            same(rg.values, rt.values)
            same(rg.indices, rt.indices)


@pytest.mark.parametrize("op", ["sort", "msort", "topk", "kthvalue"])
def test_values_gradcheck(op):
    """float64 finite differences: the gradient goes back to each value's source."""
    x = gs.tensor(np.random.default_rng(2).standard_normal((3, 5)), requires_grad=True)
    f = {
        "sort": lambda t: gs.sort(t, 1, descending=True).values,
        "msort": gs.msort,
        "topk": lambda t: gs.topk(t, 3, dim=0, largest=False).values,
        "kthvalue": lambda t: gs.kthvalue(t, 2, 1).values,
    }[op]
    assert gradcheck(f, (x.transpose(0, 1).contiguous().transpose(0, 1),))


def test_sort_double_backward():
    """create_graph: the gradient of the gradient goes through the same indices."""
    a = np.array([[2.0, -1.0, 0.5], [4.0, 3.0, -2.0]])
    xs = []
    for lib in (gs, torch):
        x = lib.tensor(a, requires_grad=True)
        y = (lib.sort(x, 1).values ** 3 * lib.tensor([1.0, 2.0, 3.0], dtype=x.dtype)).sum()
        (gx,) = (gs if lib is gs else torch).autograd.grad(y, x, create_graph=True)
        (gx * gx).sum().backward()
        xs.append(x.grad)
    assert_close(xs[0], xs[1], rtol=1e-12)


# ------------------------------------------------------------------ topk, kthvalue


def read_back(g, indices, values, dim):
    """The indices name elements holding the values (ties may pick other elements)."""
    if g.ndim == 0:
        np.testing.assert_array_equal(to_numpy(g), to_numpy(values))
        return
    picked = torch.gather(torch.tensor(to_numpy(g)), dim, torch.tensor(to_numpy(indices)))
    np.testing.assert_array_equal(picked.numpy(), to_numpy(values))


@SETTINGS
@given(data=st.data())
def test_topk_matches_torch(data):
    arr, layout = data.draw(arrays())
    dim = data.draw(dims_for(arr))
    n = arr.shape[dim] if arr.ndim and -arr.ndim <= dim < arr.ndim else 1
    k = data.draw(st.integers(-1, n + 1))
    largest = data.draw(st.booleans())
    (gl, g), (tl, t) = pair(arr, layout, requires_grad=True)
    rg, rt = both(lambda: gs.topk(g, k, dim, largest), lambda: torch.topk(t, k, dim, largest))
    if rg is None:
        return
    assert type(rg).__name__ == "topk"
    same(rg.values, rt.values)
    assert dtype_name(rg.indices.dtype) == "int64"
    assert tuple(rg.indices.shape) == tuple(rt.indices.shape)
    kd = dim if dim >= 0 else dim + max(arr.ndim, 1)
    read_back(g.detach(), rg.indices, rg.values, kd)
    same(g.topk(k, dim=dim, largest=largest).values, rt.values)
    distinct = arr.dtype.kind == "f" and len(set(arr.ravel().tolist())) == arr.size
    if distinct and not np.isnan(arr).any():
        same(rg.indices, rt.indices)
        check_grad(gl, tl, rg.values, rt.values)


@SETTINGS
@given(data=st.data())
def test_kthvalue_matches_torch(data):
    arr, layout = data.draw(arrays(dtypes=("float32", "float64", "int64")))
    dim = data.draw(dims_for(arr))
    n = arr.shape[dim] if arr.ndim and -arr.ndim <= dim < arr.ndim else 1
    k = data.draw(st.integers(0, n + 1))
    keepdim = data.draw(st.booleans())
    (gl, g), (tl, t) = pair(arr, layout, requires_grad=True)
    rg, rt = both(
        lambda: gs.kthvalue(g, k, dim, keepdim), lambda: torch.kthvalue(t, k, dim, keepdim)
    )
    if rg is None:
        return
    assert type(rg).__name__ == "kthvalue"
    same(rg.values, rt.values)
    assert tuple(rg.indices.shape) == tuple(rt.indices.shape)
    same(g.kthvalue(k, dim, keepdim).values, rt.values)
    kd = dim if dim >= 0 else dim + max(arr.ndim, 1)
    vi = (rg.values, rg.indices)
    if not keepdim and arr.ndim:
        vi = (rg.values.unsqueeze(kd), rg.indices.unsqueeze(kd))
    read_back(g.detach(), vi[1], vi[0], kd)
    distinct = arr.dtype.kind == "f" and len(set(arr.ravel().tolist())) == arr.size
    if distinct and not np.isnan(arr).any():
        same(rg.indices, rt.indices)
        check_grad(gl, tl, rg.values, rt.values)


def test_topk_kthvalue_errors():
    x = gs.tensor([1.0, 2.0])
    for k in (-1, 3):
        with pytest.raises(RuntimeError, match="selected index k out of range"):
            gs.topk(x, k)
    for k in (0, 3):
        with pytest.raises(RuntimeError, match="kthvalue.*k out of range"):
            gs.kthvalue(x, k)
    with pytest.raises(TypeError, match="must be int"):
        gs.topk(x, 1.0)
    with pytest.raises(TypeError, match="must be int"):
        gs.topk(x, True)
    with pytest.raises(IndexError, match="non-zero size"):
        gs.kthvalue(gs.zeros(2, 0), 1)
    with pytest.raises(RuntimeError, match="bool"):
        gs.topk(gs.tensor([True, False]), 1)
    with pytest.raises(NotImplementedError, match="Bool"):
        gs.kthvalue(gs.tensor([True, False]), 1)
    with pytest.raises(IndexError, match="Dimension out of range"):
        gs.sort(x, dim=1)


def test_topk_unsorted_and_smallest():
    x = gs.tensor([[5.0, 1.0, 4.0, 1.0], [NAN, 0.0, 2.0, -INF]])
    t = torch.tensor(to_numpy(x))
    v = gs.topk(x, 2, sorted=False).values
    np.testing.assert_array_equal(np.sort(to_numpy(v), 1), np.sort(torch.topk(t, 2).values, 1))
    same(gs.topk(x, 3, largest=False).values, torch.topk(t, 3, largest=False).values)


# --------------------------------------------------------- searchsorted, bucketize


@st.composite
def search_cases(draw):
    dtype = draw(st.sampled_from(["float32", "float64", "int64"]))
    vdtype = draw(st.sampled_from([dtype, "float64", "int64"]))
    lead = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    m = draw(st.integers(0, 6))
    one_d = draw(st.booleans())
    seq_shape = (m,) if one_d else lead + (m,)
    pool = INT_POOL if dtype == "int64" else FLOAT_POOL
    seq = np.array(
        draw(
            st.lists(
                st.sampled_from(pool), min_size=math.prod(seq_shape), max_size=math.prod(seq_shape)
            )
        ),
        dtype=np_dtype(dtype),
    ).reshape(seq_shape)
    seq = np.sort(seq, axis=-1)  # NaN last, as PyTorch's sort
    n = draw(st.integers(0, 4))
    vshape = (lead + (n,)) if not one_d else tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    vpool = INT_POOL if vdtype == "int64" else FLOAT_POOL
    values = np.array(
        draw(
            st.lists(st.sampled_from(vpool), min_size=math.prod(vshape), max_size=math.prod(vshape))
        ),
        dtype=np_dtype(vdtype),
    ).reshape(vshape)
    return seq, values


@SETTINGS
@given(case=search_cases(), data=st.data())
def test_searchsorted_matches_torch(case, data):
    seq, values = case
    right = data.draw(st.booleans())
    side = data.draw(st.sampled_from([None, "left", "right"]))
    out_int32 = data.draw(st.booleans())
    use_sorter = data.draw(st.booleans())
    kw = {"right": right, "side": side, "out_int32": out_int32}
    gseq, tseq = gs.tensor(seq), torch.tensor(seq)
    if use_sorter and seq.size:
        perm = np.random.default_rng(seq.size).permutation(seq.shape[-1])
        shuffled = np.ascontiguousarray(seq[..., perm])
        sorter = np.argsort(perm) * np.ones(seq.shape, dtype=np.int64)
        gseq, tseq = gs.tensor(shuffled), torch.tensor(shuffled)
        kw_g = {**kw, "sorter": gs.tensor(sorter)}
        kw_t = {**kw, "sorter": torch.tensor(sorter)}
    else:
        kw_g = kw_t = kw
    rg, rt = both(
        lambda: gs.searchsorted(gseq, gs.tensor(values), **kw_g),
        lambda: torch.searchsorted(tseq, torch.tensor(values), **kw_t),
    )
    if rg is not None:
        same(rg, rt)


@pytest.mark.filterwarnings("ignore:torch.searchsorted.*non-contiguous")
@SETTINGS
@given(data=st.data())
def test_bucketize_matches_torch(data):
    arr, layout = data.draw(arrays(dtypes=("float32", "float64", "int64")))
    bounds = np.sort(
        np.array(data.draw(st.lists(st.sampled_from([-1.0, 0.0, 0.5, 2.0, NAN]), max_size=5)))
    )
    right = data.draw(st.booleans())
    out_int32 = data.draw(st.booleans())
    (_, g), (_, t) = pair(arr, layout)
    rg, rt = both(
        lambda: gs.bucketize(g, gs.tensor(bounds), right=right, out_int32=out_int32),
        lambda: torch.bucketize(t, torch.tensor(bounds), right=right, out_int32=out_int32),
    )
    if rg is not None:
        same(rg, rt)


def test_searchsorted_scalars_and_errors():
    seq = [1.0, 2.0, 2.0, 3.0]
    for v in (2.0, 2, 0.5, 9):
        for right in (False, True):
            same(
                gs.searchsorted(gs.tensor(seq), v, right=right),
                torch.searchsorted(torch.tensor(seq), v, right=right),
            )
    same(gs.bucketize(2, gs.tensor(seq)), torch.bucketize(2, torch.tensor(seq)))
    same(gs.searchsorted(gs.tensor(seq), True), torch.searchsorted(torch.tensor(seq), True))
    s2 = gs.tensor([[1.0, 2.0, 3.0]])
    cases = [
        (
            RuntimeError,
            "opposites",
            lambda: gs.searchsorted(gs.tensor(seq), gs.tensor([1.0]), right=True, side="left"),
        ),
        (
            RuntimeError,
            "side can only be",
            lambda: gs.searchsorted(gs.tensor(seq), 1.0, side="mid"),
        ),
        (RuntimeError, "first N-1 dimensions", lambda: gs.searchsorted(s2, gs.tensor([1.0]))),
        (RuntimeError, "scalar only", lambda: gs.searchsorted(s2, 1.0)),
        (RuntimeError, "positive dimension", lambda: gs.searchsorted(gs.tensor(1.0), 1.0)),
        (
            RuntimeError,
            "long dtype",
            lambda: gs.searchsorted(gs.tensor(seq), 1.0, sorter=gs.tensor([0.0, 1.0, 2.0, 3.0])),
        ),
        (
            RuntimeError,
            "same size",
            lambda: gs.searchsorted(gs.tensor(seq), 1.0, sorter=gs.tensor([0, 1])),
        ),
        (
            RuntimeError,
            "out of range",
            lambda: gs.searchsorted(gs.tensor(seq), 1.0, sorter=gs.tensor([0, 1, 2, 9])),
        ),
        (RuntimeError, "1 dimension", lambda: gs.bucketize(gs.tensor([1.0]), s2)),
        (
            NotImplementedError,
            "Bool",
            lambda: gs.searchsorted(gs.tensor([False, True]), gs.tensor([True])),
        ),
        (TypeError, "sorted_sequence", lambda: gs.searchsorted([1.0, 2.0], 1.0)),
    ]
    for cls, msg, f in cases:
        with pytest.raises(cls, match=msg):
            f()


def test_nerf_hierarchical_sampling_matches_torch():
    """NeRF's sample_pdf: cumsum, searchsorted(right=True), gather, and a sort of the
    merged samples: the same samples as PyTorch, and the same gradients to the bins."""
    rng = np.random.default_rng(7)
    bins_np = np.sort(rng.uniform(2.0, 6.0, size=(64, 33)), axis=-1)
    weights_np = rng.uniform(0.0, 1.0, size=(64, 32))
    u_np = rng.uniform(0.0, 1.0, size=(64, 16))

    def sample_pdf(lib, bins, weights, u):
        weights = weights + 1e-5
        pdf = weights / lib.sum(weights, -1, keepdim=True)
        cdf = lib.cumsum(pdf, -1)
        cdf = lib.cat([lib.zeros_like(cdf[..., :1]), cdf], -1)
        inds = lib.searchsorted(cdf, u, right=True)
        below = lib.clamp(inds - 1, min=0)
        above = lib.clamp(inds, max=cdf.shape[-1] - 1)
        inds_g = lib.stack([below, above], -1)
        shape = [inds_g.shape[0], inds_g.shape[1], cdf.shape[-1]]
        cdf_g = lib.gather(cdf.unsqueeze(1).expand(*shape), 2, inds_g)
        bins_g = lib.gather(bins.unsqueeze(1).expand(*shape), 2, inds_g)
        denom = cdf_g[..., 1] - cdf_g[..., 0]
        denom = lib.where(denom < 1e-5, lib.ones_like(denom), denom)
        t = (u - cdf_g[..., 0]) / denom
        samples = bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])
        z, _ = lib.sort(lib.cat([bins, samples], -1), -1)
        return z

    outs = []
    for lib in (gs, torch):
        bins = lib.tensor(bins_np, requires_grad=True)
        z = sample_pdf(lib, bins, lib.tensor(weights_np), lib.tensor(u_np))
        (z * lib.tensor(np.linspace(-1, 1, z.shape[-1]))).sum().backward()
        outs.append((z, bins.grad))
    assert_close(outs[0][0], outs[1][0], rtol=1e-12, atol=1e-12)
    assert_close(outs[0][1], outs[1][1], rtol=1e-12, atol=1e-12)


# ------------------------------------------------------------------ unique


def compare_unique(rg, rt):
    rg = rg if isinstance(rg, tuple) else (rg,)
    rt = rt if isinstance(rt, tuple) else (rt,)
    assert len(rg) == len(rt)
    for a, b in zip(rg, rt, strict=True):
        same(a, b)


@SETTINGS
@given(data=st.data())
def test_unique_matches_torch(data):
    by_dim = data.draw(st.booleans())
    # PyTorch's unique(dim=...) does not treat NaN slices consistently: no NaN there.
    arr, layout = data.draw(arrays(nan=not by_dim))
    dim = data.draw(dims_for(arr)) if by_dim else None
    inv, cnt = data.draw(st.booleans()), data.draw(st.booleans())
    (_, g), (_, t) = pair(arr, layout)
    consecutive = data.draw(st.booleans())
    if consecutive:
        rg, rt = both(
            lambda: gs.unique_consecutive(g, return_inverse=inv, return_counts=cnt, dim=dim),
            lambda: torch.unique_consecutive(t, return_inverse=inv, return_counts=cnt, dim=dim),
        )
        if rg is not None:
            compare_unique(rg, rt)
            compare_unique(g.unique_consecutive(inv, cnt, dim), rt)
    else:
        rg, rt = both(
            lambda: gs.unique(g, return_inverse=inv, return_counts=cnt, dim=dim),
            lambda: torch.unique(t, return_inverse=inv, return_counts=cnt, dim=dim),
        )
        if rg is not None:
            compare_unique(rg, rt)
            compare_unique(g.unique(return_inverse=inv, return_counts=cnt, dim=dim), rt)


def test_unique_nan_and_unsorted_flag():
    x = [NAN, 1.0, NAN, 1.0, -0.0, 0.0]
    compare_unique(
        gs.unique(gs.tensor(x), return_inverse=True, return_counts=True),
        torch.unique(torch.tensor(x), return_inverse=True, return_counts=True),
    )
    compare_unique(
        gs.unique(gs.tensor([3, 1, 2, 1]), sorted=False),
        torch.unique(torch.tensor([3, 1, 2, 1]), sorted=False),
    )
    with pytest.raises(IndexError, match="no dimensions"):
        gs.unique(gs.tensor(1.0), dim=0)
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        gs.unique(gs.zeros(2, 0), dim=0)


def test_ops_are_not_differentiable_where_torch_says_so():
    x = gs.tensor([3.0, 1.0, 2.0], requires_grad=True)
    assert not gs.argsort(x).requires_grad
    assert not gs.searchsorted(x.detach().sort().values, x).requires_grad
    assert not gs.unique(x).requires_grad
    assert not gs.sort(x).indices.requires_grad
    assert gs.sort(x).values.grad_fn.name() == "SortBackward0"
    assert gs.topk(x, 2).values.grad_fn.name() == "TopkBackward0"
    assert gs.kthvalue(x, 2).values.grad_fn.name() == "KthvalueBackward0"
