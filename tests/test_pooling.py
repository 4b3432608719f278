"""Max, average and adaptive pooling against PyTorch.

Hypothesis draws shapes (batch 0, size-1 and unbatched inputs included), the window options
(padding up to half the window, dilation, ceil_mode, count_include_pad, divisor_override),
the dtype and the layout (contiguous or a transposed view); values with many ties check that
max pooling picks PyTorch's maximum. Options PyTorch rejects must raise the same exception
class. Max pooling's backward keeps exactly one byte per output, the others nothing.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from helpers import assert_close  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402
from gradstream import memory  # noqa: E402
from gradstream.autograd import gradcheck, gradgradcheck  # noqa: E402

TF = torch.nn.functional
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tol(dtype, terms=1) -> dict:
    if dtype == np.float32:
        return dict(rtol=1e-4, atol=1e-5 * np.sqrt(terms))
    return dict(rtol=1e-10, atol=1e-12)


def _data(seed, shape, dtype, ties):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(shape) * 2
    return (np.round(a) if ties else a).astype(dtype)


def _inputs(lib, arr, transposed):
    """A leaf holding `arr`, and the op's input: the leaf itself, or (`transposed`) a
    non-contiguous view of a leaf whose last two dims are swapped."""
    if transposed and arr.ndim >= 2:
        leaf = lib.tensor(np.ascontiguousarray(np.swapaxes(arr, -1, -2))).requires_grad_(True)
        return leaf, leaf.transpose(-1, -2)
    leaf = lib.tensor(arr).requires_grad_(True)
    return leaf, leaf


def _compare(f_gs, f_t, arr, transposed=False, terms=1, multi=False):
    """Same values, dtype and input gradient as PyTorch, or the same exception class."""
    lg, g = _inputs(gs, arr, transposed)
    lt, t = _inputs(torch, arr, transposed)
    try:
        ot = f_t(t)
    except (RuntimeError, ValueError, TypeError) as e:
        with pytest.raises(type(e)):
            f_gs(g)
        return
    og = f_gs(g)
    outs_g, outs_t = (og, ot) if multi else ((og,), (ot,))
    tol = _tol(arr.dtype, terms)
    for a, b in zip(outs_g, outs_t, strict=True):
        if b.dtype == torch.int64:
            assert a.dtype == gs.int64
            np.testing.assert_array_equal(a.numpy(), b.numpy())
        else:
            assert_close(a, b, **tol)
    if outs_t[0].numel() > 0:
        w = np.random.default_rng(1).standard_normal(tuple(outs_t[0].shape)).astype(arr.dtype)
        outs_g[0].backward(gs.tensor(w))
        outs_t[0].backward(torch.tensor(w))
        assert_close(lg.grad, lt.grad, **tol)


def _shape(draw, spatial, allow_unbatched=True):
    n = draw(st.integers(0, 3))
    c = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 9)) for _ in range(spatial)]
    unbatched = allow_unbatched and draw(st.booleans())
    return ([c] if unbatched else [n, c]) + sizes


@st.composite
def max_pool_case(draw, spatial):
    shape = _shape(draw, spatial)
    k = draw(st.integers(1, 4))
    kernel = k if draw(st.booleans()) else tuple(draw(st.integers(1, 4)) for _ in range(spatial))
    stride = draw(st.one_of(st.none(), st.integers(1, 3)))
    kmin = k if isinstance(kernel, int) else min(kernel)
    padding = draw(st.integers(0, kmin // 2 + (1 if draw(st.integers(0, 9)) == 0 else 0)))
    dilation = draw(st.integers(1, 2))
    ceil_mode = draw(st.booleans())
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    ties = draw(st.booleans())
    transposed = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return shape, kernel, stride, padding, dilation, ceil_mode, dtype, ties, transposed, seed


def _windows_touch_input(sizes, kernel, stride, padding, dilation, ceil):
    """Whether every window has an element inside the input (PyTorch's backward writes a
    window that lies wholly in the padding out of its plane: see the test below)."""
    for n, k in zip(sizes, kernel, strict=True):
        s = stride or k
        out = (n + 2 * padding - dilation * (k - 1) - 1 + (s - 1 if ceil else 0)) // s + 1
        if ceil and (out - 1) * s >= n + padding:
            out -= 1
        for o in range(max(out, 0)):
            if not any(0 <= o * s - padding + j * dilation < n for j in range(k)):
                return False
    return True


@pytest.mark.parametrize("spatial", [1, 2])
@SETTINGS
@given(data=st.data())
def test_max_pool_matches_torch(spatial, data):
    shape, kernel, stride, padding, dilation, ceil, dtype, ties, tr, seed = data.draw(
        max_pool_case(spatial)
    )
    ks = (kernel,) * spatial if isinstance(kernel, int) else kernel
    assume(_windows_touch_input(shape[-spatial:], ks, stride, padding, dilation, ceil))
    arr = _data(seed, shape, dtype, ties)
    name = f"max_pool{spatial}d"
    kw = dict(stride=stride, padding=padding, dilation=dilation, ceil_mode=ceil)
    _compare(
        lambda x: getattr(F, name)(x, kernel, return_indices=True, **kw),
        lambda x: getattr(TF, name)(x, kernel, return_indices=True, **kw),
        arr, transposed=tr, multi=True,
    )  # fmt: skip


@st.composite
def avg_pool_case(draw, spatial):
    shape = _shape(draw, spatial)
    kernel = tuple(draw(st.integers(1, 4)) for _ in range(spatial))
    stride = draw(st.one_of(st.none(), st.integers(1, 3)))
    padding = draw(st.integers(0, min(kernel) // 2 + (1 if draw(st.integers(0, 9)) == 0 else 0)))
    ceil_mode = draw(st.booleans())
    include = draw(st.booleans())
    divisor = draw(st.one_of(st.none(), st.integers(1, 5))) if spatial == 2 else None
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    transposed = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return shape, kernel, stride, padding, ceil_mode, include, divisor, dtype, transposed, seed


@pytest.mark.parametrize("spatial", [1, 2])
@SETTINGS
@given(data=st.data())
def test_avg_pool_matches_torch(spatial, data):
    shape, kernel, stride, padding, ceil, include, divisor, dtype, tr, seed = data.draw(
        avg_pool_case(spatial)
    )
    arr = _data(seed, shape, dtype, False)
    kw = dict(stride=stride, padding=padding, ceil_mode=ceil, count_include_pad=include)
    if spatial == 2:
        kw["divisor_override"] = divisor
        f_gs, f_t = F.avg_pool2d, TF.avg_pool2d
    else:
        f_gs, f_t = F.avg_pool1d, TF.avg_pool1d
    _compare(lambda x: f_gs(x, kernel, **kw), lambda x: f_t(x, kernel, **kw), arr,
             transposed=tr, terms=16)  # fmt: skip


@pytest.mark.parametrize("spatial", [1, 2])
@SETTINGS
@given(data=st.data())
def test_adaptive_avg_pool_matches_torch(spatial, data):
    shape = _shape(data.draw, spatial)
    out = tuple(data.draw(st.one_of(st.integers(1, 7), st.none())) for _ in range(spatial))
    if spatial == 1 or data.draw(st.booleans()):
        out = out[0] if out[0] is not None else 3
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    arr = _data(data.draw(st.integers(0, 2**16)), shape, dtype, False)
    name = f"adaptive_avg_pool{spatial}d"
    _compare(lambda x: getattr(F, name)(x, out), lambda x: getattr(TF, name)(x, out), arr,
             transposed=data.draw(st.booleans()), terms=9)  # fmt: skip


@pytest.mark.parametrize("spatial", [1, 2])
@SETTINGS
@given(data=st.data())
def test_adaptive_max_pool_matches_torch(spatial, data):
    shape = _shape(data.draw, spatial)
    out = tuple(data.draw(st.one_of(st.integers(1, 7), st.none())) for _ in range(spatial))
    if spatial == 1 or data.draw(st.booleans()):
        out = out[0] if out[0] is not None else 3
    dtype = data.draw(st.sampled_from([np.float32, np.float64]))
    ties = data.draw(st.booleans())
    arr = _data(data.draw(st.integers(0, 2**16)), shape, dtype, ties)
    name = f"adaptive_max_pool{spatial}d"
    _compare(lambda x: getattr(F, name)(x, out, return_indices=True),
             lambda x: getattr(TF, name)(x, out, return_indices=True), arr,
             transposed=data.draw(st.booleans()), multi=True)  # fmt: skip


@pytest.mark.parametrize(
    "call",
    [
        lambda F, x: F.max_pool2d(x, 0),
        lambda F, x: F.max_pool2d(x, 2, stride=0),
        lambda F, x: F.max_pool2d(x, 2, padding=2),
        lambda F, x: F.max_pool2d(x, 2, padding=-1),
        lambda F, x: F.max_pool2d(x, 2, dilation=0),
        lambda F, x: F.max_pool2d(x, 7),
        lambda F, x: F.max_pool2d(x[0, 0], 2),
        lambda F, x: F.max_pool2d(x[:, :0], 2),
        lambda F, x: F.avg_pool2d(x, 2, divisor_override=0),
        lambda F, x: F.avg_pool2d(x, 2, padding=2),
        lambda F, x: F.avg_pool2d(x, 9),
        lambda F, x: F.avg_pool1d(x[0], 2, padding=-1),
        lambda F, x: F.adaptive_avg_pool2d(x[:, :, :0], 3),
        lambda F, x: F.adaptive_avg_pool2d(x[0, 0], 3),
        lambda F, x: F.max_pool1d(x, 2),
        lambda F, x: F.adaptive_max_pool2d(x[:, :, :0], 3),
        lambda F, x: F.adaptive_max_pool2d(x[0, 0], (3, 3)),
        lambda F, x: F.adaptive_max_pool1d(x[0, 0, 0], 3),
    ],
)
def test_bad_arguments_raise_torchs_exception(call):
    arr = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    with pytest.raises(Exception) as expected:
        call(TF, torch.tensor(arr))
    with pytest.raises(expected.type):
        call(F, gs.tensor(arr))


def test_max_pool_window_wholly_in_padding():
    """PyTorch gives -inf and the first index past the padding (outside the input); its
    backward then writes into the next plane. gradstream keeps the gradient in bounds."""
    arr = np.array([[[0.5], [0.25]]], np.float32)
    og, ig = F.max_pool1d(gs.tensor(arr), 2, padding=1, dilation=2, return_indices=True)
    ot, it = TF.max_pool1d(torch.tensor(arr), 2, padding=1, dilation=2, return_indices=True)
    np.testing.assert_array_equal(og.numpy(), ot.numpy())
    np.testing.assert_array_equal(ig.numpy(), it.numpy())
    x = gs.tensor(arr).requires_grad_(True)
    F.max_pool1d(x, 2, padding=1, dilation=2).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(arr))


def test_max_pool_ties_pick_the_first_maximum_and_nan_wins():
    arr = np.zeros((1, 1, 4, 4), np.float32)
    arr[0, 0, 1, 1] = np.nan
    for f in (lambda m, x: m.max_pool2d(x, 2, return_indices=True),
              lambda m, x: m.max_pool2d(x, 3, 1, 1, return_indices=True)):  # fmt: skip
        og, ig = f(F, gs.tensor(arr))
        ot, it = f(TF, torch.tensor(arr))
        np.testing.assert_array_equal(ig.numpy(), it.numpy())
        np.testing.assert_array_equal(np.isnan(og.numpy()), np.isnan(ot.numpy()))


@pytest.mark.parametrize("f", [
    lambda F, x: F.max_pool2d(x, 2, 1, 1, 1),
    lambda F, x: F.max_pool1d(x.flatten(2), 3, 2, 1, 2, True),
    lambda F, x: F.avg_pool2d(x, 3, 2, 1, True, False),
    lambda F, x: F.avg_pool2d(x, 2, divisor_override=3),
    lambda F, x: F.adaptive_avg_pool2d(x, (3, 2)),
    lambda F, x: F.adaptive_avg_pool1d(x.flatten(2), 4),
    lambda F, x: F.adaptive_max_pool2d(x, (3, 2)),
    lambda F, x: F.adaptive_max_pool1d(x.flatten(2), 7),
])  # fmt: skip
def test_float64_gradcheck(f):
    # Distinct values: finite differences across a max pool's tie would be meaningless.
    arr = np.random.default_rng(2).permutation(2 * 2 * 5 * 5).reshape(2, 2, 5, 5) / 7.0
    x = gs.tensor(arr).requires_grad_(True)
    assert gradcheck(lambda x: f(F, x), (x,))


@pytest.mark.parametrize("f", [
    lambda F, x: F.avg_pool2d(x, 3, 2, 1, True, False),
    lambda F, x: F.adaptive_avg_pool2d(x, (3, 2)),
    lambda F, x: F.avg_pool1d(x.flatten(2), 2, 1, 1),
])  # fmt: skip
def test_float64_gradgradcheck_avg_pools(f):
    x = gs.tensor(np.random.default_rng(3).standard_normal((1, 2, 4, 5))).requires_grad_(True)
    assert gradgradcheck(lambda x: f(F, x), (x,))


def test_max_pool_double_backward_matches_torch():
    arr = np.random.default_rng(4).standard_normal((2, 3, 6, 6))
    outs = []
    for lib, mod in ((gs, F), (torch, TF)):
        x = lib.tensor(arr).requires_grad_(True)
        y = mod.max_pool2d(x, 3, 2, 1)
        (g,) = lib.autograd.grad((y * y).sum(), x, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), x)
        outs.append((g, gg))
    assert_close(outs[0][0], outs[1][0])
    assert_close(outs[0][1], outs[1][1])


def _saved_bytes(f, x):
    gc.collect()
    before = memory.memory_by_category()["activation"]
    y = f(x)
    return y, memory.memory_by_category()["activation"] - before


def test_max_pool_saves_one_byte_per_output():
    x = gs.randn(4, 8, 32, 32).requires_grad_(True)
    y, saved = _saved_bytes(lambda x: F.max_pool2d(x, 2), x)
    assert saved == y.numel() == 4 * 8 * 16 * 16
    y, saved = _saved_bytes(lambda x: F.max_pool2d(x, 3, 1, 1, return_indices=True)[0], x)
    assert saved == y.numel()
    y, saved = _saved_bytes(lambda x: F.max_pool1d(x.flatten(2), 4), x)
    assert saved == y.numel()
    y, saved = _saved_bytes(lambda x: F.adaptive_max_pool2d(x, 5), x)
    assert saved == y.numel()
    # A window of more than 256 positions needs a wider position: 4 bytes each.
    y, saved = _saved_bytes(lambda x: F.max_pool2d(x, 17), x)
    assert saved == 4 * y.numel()
    y.sum().backward()
    del y
    gc.collect()
    assert memory.memory_by_category()["activation"] == 0


@pytest.mark.parametrize("f", [
    lambda x: F.avg_pool2d(x, 2),
    lambda x: F.avg_pool1d(x.flatten(2), 3, 2, 1),
    lambda x: F.adaptive_avg_pool2d(x, 5),
])  # fmt: skip
def test_avg_pools_save_nothing(f):
    x = gs.randn(2, 3, 16, 16).requires_grad_(True)
    y, saved = _saved_bytes(f, x)
    assert saved == 0
    y.sum().backward()
    assert x.grad is not None


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_types_compute_through_float32(dtype):
    arr = np.random.default_rng(5).standard_normal((2, 3, 6, 6)).astype(np.float32)
    x = gs.tensor(arr).to(getattr(gs, dtype))
    t = torch.tensor(arr).to(getattr(torch, dtype))
    for name, args in (("max_pool2d", (2,)), ("avg_pool2d", (3, 2, 1)),
                       ("adaptive_avg_pool2d", (4,))):  # fmt: skip
        a, b = getattr(F, name)(x, *args), getattr(TF, name)(t, *args)
        assert a.dtype == x.dtype
        assert_close(a.float(), b.float(), rtol=1e-2, atol=1e-2)


def test_modules_match_torch():
    arr = np.random.default_rng(6).standard_normal((2, 3, 9, 8)).astype(np.float32)
    pairs = [
        (gs.nn.MaxPool2d(3, 2, 1, ceil_mode=True), torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)),
        (gs.nn.MaxPool2d(2, return_indices=True), torch.nn.MaxPool2d(2, return_indices=True)),
        (gs.nn.AvgPool2d(3, 2, 1, count_include_pad=False),
         torch.nn.AvgPool2d(3, 2, 1, count_include_pad=False)),
        (gs.nn.AdaptiveAvgPool2d((3, None)), torch.nn.AdaptiveAvgPool2d((3, None))),
        (gs.nn.AdaptiveMaxPool2d(4, return_indices=True),
         torch.nn.AdaptiveMaxPool2d(4, return_indices=True)),
    ]  # fmt: skip
    for m, mt in pairs:
        assert repr(m) == repr(mt)
        a, b = m(gs.tensor(arr)), mt(torch.tensor(arr))
        a, b = (a, b) if isinstance(a, tuple) else ((a,), (b,))
        for u, v in zip(a, b, strict=True):
            assert_close(u, v, rtol=1e-5, atol=1e-5)
    flat = arr.reshape(2, 3, -1)
    pairs1 = [
        (gs.nn.MaxPool1d(4, 3, 2, 2), torch.nn.MaxPool1d(4, 3, 2, 2)),
        (gs.nn.AvgPool1d(3, 2, 1), torch.nn.AvgPool1d(3, 2, 1)),
        (gs.nn.AdaptiveAvgPool1d(7), torch.nn.AdaptiveAvgPool1d(7)),
        (gs.nn.AdaptiveMaxPool1d(5), torch.nn.AdaptiveMaxPool1d(5)),
    ]
    for m, mt in pairs1:
        assert repr(m) == repr(mt)
        assert_close(m(gs.tensor(flat)), mt(torch.tensor(flat)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
@pytest.mark.parametrize("spatial", [1, 2])
@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(0, 2),
    c=st.integers(1, 3),
    size=st.integers(3, 7),
    k=st.integers(1, 3),
    stride=st.sampled_from([None, 1, 2]),
    ceil=st.booleans(),
)
def test_lp_pool_matches_torch(p, spatial, n, c, size, k, stride, ceil):
    shape = (n, c, size) if spatial == 1 else (n, c, size, size + 1)
    x = np.random.default_rng(size).uniform(0.1, 2.0, shape)
    g = gs.tensor(x, requires_grad=True)
    t = torch.tensor(x, requires_grad=True)
    name = f"lp_pool{spatial}d"
    out = getattr(gs.nn.functional, name)(g, p, k, stride, ceil)
    ref = getattr(torch.nn.functional, name)(t, p, k, stride, ceil)
    np.testing.assert_allclose(out.detach().numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    if ref.numel():
        out.sum().backward()
        ref.sum().backward()
        np.testing.assert_allclose(g.grad.numpy(), t.grad.numpy(), rtol=1e-9, atol=1e-12)
    module = (gs.nn.LPPool1d if spatial == 1 else gs.nn.LPPool2d)(p, k, stride, ceil)
    np.testing.assert_allclose(module(g).detach().numpy(), ref.detach().numpy(), rtol=1e-10)


def test_with_indices_forms_match_torch():
    x = np.random.default_rng(0).standard_normal((2, 3, 8, 8))
    for name, args in [
        ("max_pool2d_with_indices", (2,)),
        ("adaptive_max_pool2d_with_indices", (3,)),
    ]:
        out, idx = getattr(gs.nn.functional, name)(gs.tensor(x), *args)
        ref, ridx = getattr(torch.nn.functional, name)(torch.tensor(x), *args)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        np.testing.assert_array_equal(idx.numpy(), ridx.numpy())
    x1 = x[:, :, 0]
    for name, args in [
        ("max_pool1d_with_indices", (3,)),
        ("adaptive_max_pool1d_with_indices", (4,)),
    ]:
        out, idx = getattr(gs.nn.functional, name)(gs.tensor(x1), *args)
        ref, ridx = getattr(torch.nn.functional, name)(torch.tensor(x1), *args)
        np.testing.assert_array_equal(out.numpy(), ref.numpy())
        np.testing.assert_array_equal(idx.numpy(), ridx.numpy())
