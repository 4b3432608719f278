"""`nn.functional.scaled_dot_product_attention` and `nn.MultiheadAttention` against PyTorch.

Hypothesis draws the shapes (L != S, E != Ev, lengths across block boundaries, length 1,
empty batches, extra and broadcast batch dims), masks (bool and float, broadcast), causal,
scale, grouped-query heads and non-contiguous views; values and gradients must match
PyTorch's CPU op. float64 gradients are checked by finite differences (and double
backward); dropout is checked against the math formula with the mask it used. The saved
bytes of the op are exactly q, k, v, the output and one log-sum-exp per query row.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from helpers import assert_close  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402
from gradstream import memory  # noqa: E402
from gradstream.autograd import gradcheck, gradgradcheck  # noqa: E402

TF = torch.nn.functional
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NP = {"float32": np.float32, "float64": np.float64}


def _pair(arr, grad=True):
    """The same values as a gradstream and a torch leaf."""
    g = gs.tensor(arr)
    t = torch.from_numpy(arr.copy())
    if grad:
        g.requires_grad_(True)
        t.requires_grad_(True)
    return g, t


def _tol(dtype, terms):
    """rtol and atol for sums of `terms` products (float32), or float64's tight ones."""
    if dtype == "float64":
        return dict(rtol=1e-9, atol=1e-11)
    return dict(rtol=1e-4, atol=1e-5 * math.sqrt(max(terms, 1)))


def _check(q, k, v, mask=None, dtype="float32", view=None, **kw):
    """Value and input gradients of gradstream's op against torch's."""
    rng = np.random.default_rng(0)
    (gq, tq), (gk, tk), (gv, tv) = (_pair(x.astype(NP[dtype])) for x in (q, k, v))
    gm = tm = None
    if mask is not None:
        gm, tm = _pair(mask if mask.dtype == bool else mask.astype(NP[dtype]), grad=False)
    ins_g, ins_t = (gq, gk, gv), (tq, tk, tv)
    if view is not None:
        ins_g, ins_t = view(ins_g, gs), view(ins_t, torch)
    want = TF.scaled_dot_product_attention(*ins_t, attn_mask=tm, **kw)
    got = F.scaled_dot_product_attention(*ins_g, attn_mask=gm, **kw)
    s, e = k.shape[-2], q.shape[-1]
    scale = float(np.abs(want.detach().numpy()).max(initial=1.0))
    tol = _tol(dtype, max(s, e))
    assert_close(got, want, rtol=tol["rtol"], atol=tol["atol"] * scale)
    w = rng.standard_normal(tuple(want.shape)).astype(NP[dtype])
    (want * torch.from_numpy(w)).sum().backward()
    (got * gs.tensor(w)).sum().backward()
    for a, b in zip((gq, gk, gv), (tq, tk, tv), strict=True):
        scale = float(np.abs(b.grad.numpy()).max(initial=1.0))
        assert_close(a.grad, b.grad, rtol=tol["rtol"], atol=tol["atol"] * scale * 4)


@st.composite
def problems(draw):
    """(q, k, v, mask, kwargs) arrays with broadcastable batch dims."""
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    batch = draw(st.lists(st.integers(0, 3), min_size=0, max_size=2))
    big = draw(st.booleans())
    lengths = st.integers(1, 150) if big else st.integers(1, 9)
    l_, s_ = draw(lengths), draw(lengths)
    e, ev = draw(st.integers(1, 9)), draw(st.integers(1, 9))

    def bshape():  # the batch dims of k/v: some of q's broadcast from 1, or dropped
        b = [1 if draw(st.booleans()) else d for d in batch]
        return b[draw(st.integers(0, len(b))) :]

    kb = bshape()
    q = rng.standard_normal((*batch, l_, e))
    k = rng.standard_normal((*kb, s_, e))
    v = rng.standard_normal((*kb, s_, ev))
    kw = {}
    mask = None
    kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    if kind == "causal":
        kw["is_causal"] = True
    elif kind != "none":
        mshape = [d if draw(st.booleans()) else 1 for d in (*batch, l_, s_)]
        mshape = mshape[draw(st.integers(0, len(batch))) :]
        if kind == "bool":
            mask = rng.random(mshape) < 0.7
        else:
            mask = rng.standard_normal(mshape)
    if draw(st.booleans()):
        kw["scale"] = draw(st.floats(0.05, 2.0))
    return q, k, v, mask, kw


@SETTINGS
@given(problems(), st.sampled_from(["float32", "float64"]))
def test_matches_torch(problem, dtype):
    q, k, v, mask, kw = problem
    _check(q, k, v, mask, dtype, **kw)


def _heads_view(ts, lib):
    """The common non-contiguous layout: q, k, v as (b, t, h, d) views, heads second."""
    q, k, v = ts
    b, t, hd = q.shape[0], q.shape[1], q.shape[2]
    qkv = lib.cat([q, k, v], -1)  # (b, t, 3 * hd)
    out = []
    for x in qkv.split(hd, -1):
        out.append(x.reshape(b, t, 2, hd // 2).transpose(1, 2))
    return tuple(out)


def _stored_as(order, offset):
    """A view that gives q, k, v their logical (b, h, t, e) shape over storage laid out in
    dim `order` (e last: rows read in place; else: columns strided, copied first), starting
    `offset` rows' worth of elements into a wider buffer when `offset`."""
    inverse = [order.index(i) for i in range(4)]

    def view(ts, lib):
        out = []
        for x in ts:
            y = x.permute(*order).contiguous()
            if offset:
                n = y.shape[-1]
                y = lib.cat([y, y], -1)[..., n:]
            out.append(y.permute(*inverse))
        return tuple(out)

    return view


@SETTINGS
@given(
    order=st.permutations(range(4)),
    offset=st.booleans(),
    causal=st.booleans(),
    dims=st.tuples(st.integers(1, 2), st.integers(1, 3), st.integers(1, 70), st.integers(1, 9)),
    dtype=st.sampled_from(["float32", "float64"]),
)
def test_strided_operands_match_torch(order, offset, causal, dims, dtype):
    """q, k, v whose storage is in any dim order, with an offset: the kernel reads rows in
    place through their strides; values and gradients as PyTorch's."""
    rng = np.random.default_rng(sum(dims))
    q, k, v = (rng.standard_normal(dims) for _ in range(3))
    _check(q, k, v, dtype=dtype, view=_stored_as(list(order), offset), is_causal=causal)


def test_forward_of_split_heads_allocates_out_and_lse_only():
    """q, k, v split out of one projection and viewed as (b, h, t, d), as every attention
    block does: the forward's tensors are its output, contiguous as PyTorch's, and the
    log-sum-exp."""
    b, t, h, d = 2, 64, 3, 16
    qkv = gs.randn(b, t, 3 * h * d, requires_grad=True)
    q, k, v = (x.view(b, t, h, d).transpose(1, 2) for x in qkv.split(h * d, -1))
    gc.collect()
    base = memory.memory_allocated()
    memory.reset_peak_memory_stats()
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert memory.max_memory_allocated() - base == out.nbytes + b * h * t * 4
    assert out.is_contiguous()
    assert out.view(b * h, t, d).shape == (b * h, t, d)


@pytest.mark.parametrize("t", [1, 5, 70])
def test_noncontiguous_split_heads(t):
    rng = np.random.default_rng(t)
    q, k, v = (rng.standard_normal((2, t, 8)) for _ in range(3))
    _check(q, k, v, view=_heads_view, is_causal=True)


@pytest.mark.parametrize(("hq", "hk"), [(4, 2), (6, 1), (4, 4)])
@pytest.mark.parametrize("causal", [False, True])
def test_grouped_query_attention(hq, hk, causal):
    rng = np.random.default_rng(hq * 10 + hk)
    q = rng.standard_normal((2, hq, 67, 8))
    k = rng.standard_normal((2, hk, 70, 8))
    v = rng.standard_normal((2, hk, 70, 5))
    _check(q, k, v, enable_gqa=True, is_causal=causal)


def test_fully_masked_rows_give_zeros():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 4, 6)) for _ in range(3))
    mask = rng.random((4, 4)) < 0.5
    mask[1] = False
    _check(q[..., :4, :], k[..., :4, :], v[..., :4, :], mask)
    fmask = rng.standard_normal((4, 4))
    fmask[2] = -np.inf
    _check(q[..., :4, :], k[..., :4, :], v[..., :4, :], fmask)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_compute_in_float32(dtype):
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, 9, 8)).astype(np.float32) for _ in range(3))
    gq, gk, gv = (gs.tensor(x).to(getattr(gs, dtype)).requires_grad_(True) for x in (q, k, v))
    tq, tk, tv = (torch.tensor(x).to(getattr(torch, dtype)).requires_grad_(True) for x in (q, k, v))
    got = F.scaled_dot_product_attention(gq, gk, gv, is_causal=True)
    want = TF.scaled_dot_product_attention(tq, tk, tv, is_causal=True)
    assert str(got.dtype).split(".")[-1] == dtype
    assert_close(got.float(), want.float(), rtol=2e-2, atol=2e-2, check_dtype=False)
    got.sum().backward()
    want.sum().backward()
    for a, b in zip((gq, gk, gv), (tq, tk, tv), strict=True):
        assert_close(a.grad.float(), b.grad.float(), rtol=5e-2, atol=5e-2, check_dtype=False)


def test_empty_sizes():
    for qs, ks, vs in [((0, 4, 8), (0, 5, 8), (0, 5, 3)), ((2, 0, 8), (2, 5, 8), (2, 5, 3)),
                       ((2, 3, 8), (2, 0, 8), (2, 0, 3)), ((2, 3, 0), (2, 4, 0), (2, 4, 3)),
                       ((2, 3, 4), (2, 4, 4), (2, 4, 0))]:  # fmt: skip
        rng = np.random.default_rng(0)
        _check(rng.standard_normal(qs), rng.standard_normal(ks), rng.standard_normal(vs))


def test_float_mask_gradient():
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((2, 3, 5, 4)) for _ in range(3))
    m = rng.standard_normal((3, 5, 5))
    (gq, tq), (gk, tk), (gv, tv), (gm, tm) = (_pair(x) for x in (q, k, v, m))
    got = F.scaled_dot_product_attention(gq, gk, gv, attn_mask=gm)
    want = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=tm)
    assert_close(got, want, rtol=1e-10, atol=1e-12)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    for a, b in zip((gq, gk, gv, gm), (tq, tk, tv, tm), strict=True):
        assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize(
    "kw",
    [{}, {"is_causal": True}, {"scale": 0.3}, {"mask": "bool"}, {"mask": "float"},
     {"enable_gqa": True}],
)  # fmt: skip
def test_gradcheck_and_gradgradcheck(kw):
    rng = np.random.default_rng(4)
    kw = dict(kw)
    hk = 1 if kw.get("enable_gqa") else 2
    q = gs.tensor(rng.standard_normal((2, 2, 3, 4)), requires_grad=True)
    k = gs.tensor(rng.standard_normal((2, hk, 5, 4)), requires_grad=True)
    v = gs.tensor(rng.standard_normal((2, hk, 5, 3)), requires_grad=True)
    inputs = [q, k, v]
    kind = kw.pop("mask", None)
    if kind == "bool":
        kw["attn_mask"] = gs.tensor(rng.random((3, 5)) < 0.6)
    elif kind == "float":
        inputs.append(gs.tensor(rng.standard_normal((2, 1, 3, 5)), requires_grad=True))

    def fn(q, k, v, m=None):
        extra = {} if m is None else {"attn_mask": m}
        return F.scaled_dot_product_attention(q, k, v, **kw, **extra)

    assert gradcheck(fn, inputs)
    assert gradgradcheck(fn, inputs)


# ---------------------------------------------------------------- dropout


def _dropout_factor(shape_q, s, p, seed):
    """The factor keep / (1 - p) of every weight of a dropout run under `seed`, recovered
    with q = 0 (uniform weights 1/S) and v = identity (the output is the weights)."""
    q = gs.zeros(*shape_q, dtype=gs.float64)
    k = gs.tensor(np.random.default_rng(0).standard_normal((*shape_q[:-2], s, shape_q[-1])))
    v = gs.eye(s, dtype=gs.float64).expand(*shape_q[:-2], s, s)
    gs.manual_seed(seed)
    return F.scaled_dot_product_attention(q, k, v, dropout_p=p).numpy() * s


@pytest.mark.parametrize("p", [0.2, 0.6])
def test_dropout_matches_the_math_formula_with_its_mask(p):
    shape_q, s = (2, 3, 70, 4), 66
    z = _dropout_factor(shape_q, s, p, seed=11)
    keep = np.isclose(z, 1 / (1 - p))
    assert np.all(keep | np.isclose(z, 0.0))
    assert abs(keep.mean() - (1 - p)) < 0.02
    rng = np.random.default_rng(5)
    q, k, v = (
        rng.standard_normal(shape_q),
        rng.standard_normal((2, 3, s, 4)),
        rng.standard_normal((2, 3, s, 5)),
    )
    (gq, tq), (gk, tk), (gv, tv) = (_pair(x) for x in (q, k, v))
    gs.manual_seed(11)
    got = F.scaled_dot_product_attention(gq, gk, gv, dropout_p=p)
    w = torch.softmax(tq @ tk.transpose(-2, -1) / 2.0, -1) * torch.from_numpy(z)
    want = w @ tv
    assert_close(got, want, rtol=1e-9, atol=1e-11)
    g = rng.standard_normal(tuple(want.shape))
    (got * gs.tensor(g)).sum().backward()
    (want * torch.from_numpy(g)).sum().backward()
    for a, b in zip((gq, gk, gv), (tq, tk, tv), strict=True):
        assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-11)


def test_dropout_gradcheck_under_a_fixed_seed():
    rng = np.random.default_rng(6)
    ins = [gs.tensor(rng.standard_normal((2, 4, 3)), requires_grad=True) for _ in range(3)]

    def fn(q, k, v):
        gs.manual_seed(5)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.4)

    assert gradcheck(fn, ins)
    assert gradgradcheck(fn, ins)


def test_dropout_masks_follow_the_generator():
    a = _dropout_factor((1, 8, 4), 8, 0.5, seed=1)
    b = _dropout_factor((1, 8, 4), 8, 0.5, seed=1)
    c = _dropout_factor((1, 8, 4), 8, 0.5, seed=2)
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)


# ---------------------------------------------------------------- memory


@pytest.mark.parametrize("t", [64, 256])
def test_saves_only_q_k_v_out_and_lse(t):
    gc.collect()
    before = memory.memory_by_category()["activation"]
    b, h, d = 2, 3, 16
    q, k, v = (gs.randn(b, h, t, d, requires_grad=True) for _ in range(3))
    out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    lse = b * h * t * 4
    saved = memory.memory_by_category()["activation"] - before
    assert saved == q.nbytes + k.nbytes + v.nbytes + out.nbytes + lse
    assert saved == 4 * (b * h * t * d * 4) + lse  # linear in t: no t x t matrix
    out.sum().backward()
    assert memory.memory_by_category()["activation"] == before


# ---------------------------------------------------------------- bad input


def _bad_cases():
    r = np.random.default_rng(0).standard_normal
    f = lambda *s: r(s).astype(np.float32)  # noqa: E731
    return [
        ((f(2, 4, 8), f(2, 5, 7), f(2, 5, 6)), {}),
        ((f(2, 4, 8), f(2, 5, 8), f(2, 4, 6)), {}),
        ((f(8), f(8), f(8)), {}),
        ((f(2, 4, 8), f(3, 5, 8), f(3, 5, 8)), {}),
        ((f(2, 4, 8), f(2, 5, 8), f(2, 5, 8)),
         {"attn_mask": np.ones((4, 5), bool), "is_causal": True}),
        ((f(2, 4, 8), f(2, 5, 8), f(2, 5, 8)), {"attn_mask": np.ones((3, 5), np.float32)}),
        ((f(2, 4, 8), f(2, 5, 8), f(2, 5, 8)), {"attn_mask": np.ones((4, 5), np.int64)}),
        ((f(2, 4, 8), f(2, 5, 8), f(2, 5, 8)), {"dropout_p": 1.5}),
        ((f(2, 3, 4, 8), f(2, 2, 5, 8), f(2, 2, 5, 8)), {"enable_gqa": True}),
        ((f(2, 4, 8), f(2, 5, 8).astype(np.float64), f(2, 5, 8)), {}),
    ]  # fmt: skip


@pytest.mark.parametrize(("arrays", "kw"), _bad_cases())
def test_bad_input_raises_like_torch(arrays, kw):
    kw_t, kw_g = dict(kw), dict(kw)
    if "attn_mask" in kw:
        kw_t["attn_mask"] = torch.from_numpy(kw["attn_mask"])
        kw_g["attn_mask"] = gs.tensor(kw["attn_mask"])
    with pytest.raises(Exception) as want:
        TF.scaled_dot_product_attention(*(torch.from_numpy(a) for a in arrays), **kw_t)
    with pytest.raises(want.type, match="scaled_dot_product_attention|dropout"):
        F.scaled_dot_product_attention(*(gs.tensor(a) for a in arrays), **kw_g)


def test_non_tensor_argument_is_a_type_error():
    q = gs.randn(2, 3)
    with pytest.raises(TypeError):
        F.scaled_dot_product_attention(q, q, [1.0])


@pytest.mark.parametrize("wanted", ["q", "k", "v", "qv"])
def test_only_the_wanted_gradients(wanted):
    rng = np.random.default_rng(7)
    arrays = [rng.standard_normal((2, 70, 6)) for _ in range(3)]
    pairs = [_pair(a, grad=name in wanted) for a, name in zip(arrays, "qkv", strict=True)]
    got = F.scaled_dot_product_attention(*(p[0] for p in pairs), is_causal=True)
    want = TF.scaled_dot_product_attention(*(p[1] for p in pairs), is_causal=True)
    got.sum().backward()
    want.sum().backward()
    for (g, t), name in zip(pairs, "qkv", strict=True):
        if name in wanted:
            assert_close(g.grad, t.grad, rtol=1e-9, atol=1e-11)
        else:
            assert g.grad is None


def test_create_graph_second_derivative_matches_torch():
    rng = np.random.default_rng(8)
    (gq, tq), (gk, tk), (gv, tv) = (_pair(rng.standard_normal((2, 5, 4))) for _ in range(3))
    mask = rng.random((5, 5)) < 0.7
    got = F.scaled_dot_product_attention(gq, gk, gv, attn_mask=gs.tensor(mask))
    want = TF.scaled_dot_product_attention(tq, tk, tv, attn_mask=torch.tensor(mask))
    (ggq,) = gs.autograd.grad(got.pow(2).sum(), gq, create_graph=True)
    (tgq,) = torch.autograd.grad(want.pow(2).sum(), tq, create_graph=True)
    assert_close(ggq, tgq, rtol=1e-9, atol=1e-11)
    ggq.sum().backward()
    tgq.sum().backward()
    for a, b in zip((gq, gk, gv), (tq, tk, tv), strict=True):
        assert_close(a.grad, b.grad, rtol=1e-8, atol=1e-10)
