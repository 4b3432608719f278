"""`view` on non-contiguous tensors, against PyTorch: PyTorch's stride rule decides when a
new shape shares the buffer; values, strides, shared writes, gradients and memory."""

import gc

import numpy as np
import pytest
from helpers import to_numpy

import gradstream as gs
from gradstream import memory

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

VIEW_ERROR = (
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces). Use .reshape(...) instead."
)


def pair(*shape):
    """The same float32 values 0, 1, 2, ... in torch and gradstream."""
    n = int(np.prod(shape))
    a = np.arange(n, dtype=np.float32).reshape(shape)
    return torch.from_numpy(a.copy()), gs.tensor(a)


def writes_through(view, base):
    """Writing `view` changes `base` (unless it overlaps itself, as an expanded view
    does), and writing `base` changes `view`."""
    with gs.no_grad():
        seen_in_base = True
        if 0 not in view.stride():
            view.fill_(-7.0)
            seen_in_base = (base.numpy() == -7.0).sum() > 0
        base.fill_(5.0)
        seen_in_view = bool((view.numpy() == 5.0).all())
    return seen_in_base and seen_in_view


def check_same(fn, *shape):
    """`fn` gives equal values and strides on both, or raises the same error on both."""
    t, g = pair(*shape)
    try:
        expected = fn(t)
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as got:
            fn(g)
        assert str(got.value) == str(e)
        return None
    out = fn(g)
    assert tuple(out.shape) == tuple(expected.shape)
    if expected.numel():  # PyTorch's strides of an empty view are arbitrary
        assert out.stride() == expected.stride()
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    return out, g


CASES = {
    "attention_heads": (lambda x: x.split(64, -1)[0].view(2, 5, 4, 16), (2, 5, 192)),
    "narrow_merge": (lambda x: x.narrow(2, 0, 96).view(10, 96), (2, 5, 192)),
    "narrow_split": (lambda x: x.narrow(1, 1, 3).view(2, 3, 2, 96), (2, 5, 192)),
    "expand_split": (lambda x: x.expand(3, 4, 6).view(3, 4, 2, 3), (1, 4, 6)),
    "expand_merge_broadcast": (lambda x: x.expand(3, 4, 6).view(12, 6), (1, 1, 6)),
    "step_slice_merge": (lambda x: x[:, ::2].view(12, 3), (4, 6, 3)),
    "step_slice_last": (lambda x: x[:, :, ::2].view(-1, 6), (2, 3, 12)),
    "transposed_split": (lambda x: x.t().view(6, 2, 2), (4, 6)),
    "transposed_same": (lambda x: x.t().view(6, 4), (4, 6)),
    "transposed_unsqueeze": (lambda x: x.t().view(6, 1, 4, 1), (4, 6)),
    "permuted_merge": (lambda x: x.permute(1, 2, 0).view(12, 2), (2, 3, 4)),
    "row_vector_t": (lambda x: x.t().view(3, 1), (1, 3)),
    "select_then_merge": (lambda x: x[:, :, 1].view(-1), (3, 4, 5)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_view_matches_torch_and_shares_buffer(name):
    fn, shape = CASES[name]
    res = check_same(fn, *shape)
    assert res is not None, f"{name}: torch refused the view"
    out, g = res
    assert writes_through(out, g)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: x.t().view(24), (4, 6)),
        (lambda x: x.narrow(1, 0, 3).view(12), (4, 6)),
        (lambda x: x[::2, ::2].view(-1), (4, 6)),
        (lambda x: x.expand(3, 4).view(12), (1, 4)),
        (lambda x: x.permute(1, 0, 2).view(6, 4), (2, 3, 4)),
        (
            lambda x: x.t().view_as(
                torch.empty(24) if isinstance(x, torch.Tensor) else gs.empty(24)
            ),
            (4, 6),
        ),
    ],
)
def test_impossible_view_raises_like_torch(fn, shape):
    t, g = pair(*shape)
    with pytest.raises(RuntimeError) as expected:
        fn(t)
    assert str(expected.value) == VIEW_ERROR
    with pytest.raises(RuntimeError) as got:
        fn(g)
    assert str(got.value) == VIEW_ERROR


def test_reshape_is_a_view_when_view_is_possible():
    _, g = pair(4, 6, 3)
    assert writes_through(g[:, ::2].reshape(12, 3), g)
    _, g = pair(4, 6)
    r = g.t().reshape(24)
    assert r.is_contiguous()
    np.testing.assert_array_equal(r.numpy(), np.arange(24).reshape(4, 6).T.reshape(-1))
    assert not writes_through(r, g)


@pytest.mark.parametrize(
    "fn, shape",
    [
        (lambda x: x.t().flatten(), (2, 3)),
        (lambda x: x[:, ::2].flatten(), (3, 4)),
        (lambda x: x[::2].flatten(0, 1), (4, 3, 2)),
        (lambda x: x.t().unflatten(1, (2, 2)), (4, 6)),
        (lambda x: x.t().unflatten(0, (-1, 2)), (4, 6)),
        (lambda x: x[:, ::2].reshape(-1, 3), (4, 6)),
        (lambda x: x.t().reshape(2, 12), (4, 6)),
        (lambda x: x.expand(2, 3, 4).reshape(6, 4), (3, 1)),
    ],
)
def test_flatten_unflatten_reshape_follow_torch(fn, shape):
    t, g = pair(*shape)
    expected, out = fn(t), fn(g)
    assert out.stride() == expected.stride()
    np.testing.assert_array_equal(out.numpy(), expected.numpy())
    assert writes_through(out, g) == (expected._base is not None)


def test_0d_empty_size1_and_inference():
    s_t, s_g = torch.tensor(2.5), gs.tensor(2.5)
    for shape in [(1, 1), (1,), (-1,), (1, -1, 1)]:
        assert s_g.view(*shape).stride() == s_t.view(*shape).stride()
        assert s_g.view(*shape).item() == 2.5
    check_same(lambda x: x[:, :, 0].view(-1), 3, 2, 4)
    check_same(lambda x: x.t().view(0, 3), 3, 0)
    check_same(lambda x: x.t()[:, ::2].view(2, -1), 3, 4)
    check_same(lambda x: x.t().view(1, 3, -1, 1), 2, 3)
    check_same(lambda x: x.t().view(-1, 1, 2), 2, 3)
    check_same(lambda x: x[::2].view(-1), 1, 5)
    _, g = pair(3, 0)
    assert g.t().view(0, 3).shape == (0, 3)
    with pytest.raises(RuntimeError, match="only one dimension can be inferred"):
        pair(4, 6)[1].t().view(-1, -1)


def test_empty_slices_past_the_end_read_back():
    x = gs.zeros(2, 3, 5)
    y = x.narrow(2, 5, 0).narrow(1, 3, 0).narrow(0, 1, 1)
    assert y.numpy().shape == (1, 0, 0)
    assert x[:, :, 2:2][1:][:, 3:].expand(3, 0, 0).view(0, 7).numpy().shape == (0, 7)


def test_base_writes_reach_view_and_view_writes_reach_base():
    t, g = pair(4, 6, 3)
    v = g[:, ::2].view(12, 3)
    with gs.no_grad():
        v[5] = 100.0
        g[3, 4] = -1.0
    with torch.no_grad():
        tv = t[:, ::2].view(12, 3)
        tv[5] = 100.0
        t[3, 4] = -1.0
    np.testing.assert_array_equal(g.numpy(), t.numpy())
    np.testing.assert_array_equal(v.numpy(), tv.numpy())


def test_gradients_through_views():
    t, g = pair(2, 5, 12)
    t.requires_grad_(True)
    g.requires_grad_(True)
    w = np.linspace(-1, 1, 2 * 5 * 3 * 2, dtype=np.float32).reshape(2, 5, 3, 2)
    for x, W in ((t, torch.from_numpy(w)), (g, gs.tensor(w))):
        q = x.split(6, -1)[1].view(2, 5, 3, 2)
        m = x[:, :, ::2].view(-1)
        u = x.transpose(0, 1).view(5, 2, 3, 4)
        (q * W).sum().backward()
        (m * m).sum().backward()
        (u * u * u).sum().backward()
    np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-6)


def test_inplace_write_through_view_is_seen_by_autograd():
    t, g = pair(4, 6)
    for x, lib in ((t, torch), (g, gs)):
        x.requires_grad_(True)
        y = lib.exp(x / 10)
        with lib.no_grad():
            y[:, ::2].view(-1).mul_(2.0)  # exp saved y: backward must notice the write
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_view_allocates_nothing():
    x = gs.randn(64, 96, 3)
    gc.collect()
    before = memory.memory_allocated()
    views = [
        x[:, ::2].view(3072, 3),
        x.narrow(1, 0, 48).view(64, 2, 24, 3),
        x.transpose(0, 1).view(96, 8, 8, 3),
        x[:1].expand(5, 96, 3).view(5, 2, 48, 3),
    ]
    assert memory.memory_allocated() == before
    del views
    gc.collect()
    assert memory.memory_allocated() == before


@pytest.mark.parametrize(
    "fn",
    [
        lambda x: x.t().view(5, 671, 6001),
        lambda x: x[::2].view(3001, 5, 671),
        lambda x: x[:, 1::2].view(-1, 1677),
        lambda x: x[1:].t().view(3355, 2, 3000),
    ],
)
def test_views_spanning_more_than_2_pow_24_elements(fn):
    """candle counts unfold windows in f32, which is inexact past 2**24 elements."""
    a = (np.arange(6001 * 3355) % 251).astype(np.uint8).reshape(6001, 3355)
    expected, out = fn(torch.from_numpy(a)), fn(gs.tensor(a))
    assert out.stride() == expected.stride()
    np.testing.assert_array_equal(out.numpy(), expected.numpy())


# ---- property: gradstream views exactly when torch does ----

LAYOUT_OPS = st.lists(
    st.tuples(
        st.sampled_from(["t", "narrow", "step", "expand", "unsqueeze"]),
        st.integers(0, 99),
        st.integers(0, 99),
    ),
    max_size=4,
)


def apply_layout(x, ops):
    """Apply layout ops, each chosen so that it is valid for x's current shape."""
    for op, a, b in ops:
        r = x.dim()
        if op == "unsqueeze" or r == 0:
            x = x.unsqueeze(a % (r + 1))
        elif op == "t" and r >= 2:
            x = x.transpose(a % r, b % r)
        elif op == "narrow":
            d = a % r
            n = x.shape[d]
            start = b % (n + 1)
            x = x.narrow(d, start, (a // r) % (n - start + 1))
        elif op == "step":
            d = a % r
            x = x[(slice(None),) * d + (slice(b % 2, None, 1 + b % 3),)]
        elif op == "expand":
            ones = [d for d in range(r) if x.shape[d] == 1]
            if ones:
                sizes = list(x.shape)
                sizes[ones[a % len(ones)]] = 1 + b % 3
                x = x.expand(*sizes)
    return x


@st.composite
def target_shape(draw, numel):
    """A shape with `numel` elements, size-1 dims sprinkled in, maybe one -1."""
    dims, rest = [], numel
    for _ in range(draw(st.integers(0, 3))):
        if rest == 0:
            dims.append(draw(st.integers(0, 3)))
            continue
        divisors = [k for k in range(1, rest + 1) if rest % k == 0]
        k = draw(st.sampled_from(divisors))
        dims.append(k)
        rest //= k
    dims.append(rest)
    for _ in range(draw(st.integers(0, 2))):
        dims.insert(draw(st.integers(0, len(dims))), 1)
    dims = draw(st.permutations(dims))
    if numel and draw(st.booleans()):
        dims[draw(st.integers(0, len(dims) - 1))] = -1
    return dims


@hypothesis.settings(max_examples=200, derandomize=True, deadline=None)
@hypothesis.given(
    base=st.lists(st.integers(1, 5), min_size=0, max_size=3),
    ops=LAYOUT_OPS,
    data=st.data(),
)
def test_property_view_iff_torch_views(base, ops, data):
    t, g = pair(*base)
    tx, gx = apply_layout(t, ops), apply_layout(g, ops)
    if tx.numel():
        assert gx.stride() == tx.stride()
    shape = data.draw(target_shape(tx.numel()))
    try:
        expected = tx.view(*shape)
    except RuntimeError as e:
        with pytest.raises(RuntimeError) as got:
            gx.view(*shape)
        assert str(got.value) == str(e)
        return
    out = gx.view(*shape)
    assert tuple(out.shape) == tuple(expected.shape)
    if expected.numel():
        # PyTorch's strides of an empty view are arbitrary; gradstream's are contiguous.
        assert out.stride() == expected.stride()
    np.testing.assert_array_equal(to_numpy(out), expected.numpy())


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.zeros(0, 4)[:, 2:],
        lambda m: m.zeros(0, 4).narrow(1, 2, 2),
        lambda m: m.zeros(3, 0, 2)[1:],
        lambda m: m.zeros(0, 4).split(2, 1)[1],
        lambda m: m.zeros(2, 0, 4)[:, :, 3:].transpose(0, 2),
    ],
)
@pytest.mark.parametrize(
    "use",
    [
        lambda m, t: t.clone(),
        lambda m, t: t.contiguous(),
        lambda m, t: m.cat([t, t], 0),
        lambda m, t: t.numpy() if hasattr(t, "numpy") else t,
        lambda m, t: t.tolist(),
        lambda m, t: t * 2,
        lambda m, t: t.sum(-1),
    ],
)
def test_empty_views_with_an_offset_copy_like_torch(torch_ref, make, use):
    """A slice of an empty tensor can start past the end of its (empty) buffer; every copy
    of it works, as in PyTorch (it used to panic in candle's copy)."""
    got, want = use(gs, make(gs)), use(torch_ref, make(torch_ref))
    if isinstance(want, list):
        assert got == want
    else:
        assert tuple(got.shape) == tuple(want.shape)
