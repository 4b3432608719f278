"""Convolution against PyTorch: `conv1d`/`conv2d`/`conv_transpose1d`/`conv_transpose2d`
values and the gradients of input, weight and bias over drawn geometries (stride, padding
incl. strings, dilation, groups, bias, output_padding, unbatched, batch 0, non-contiguous
inputs); float64 gradcheck and gradgradcheck; bad inputs raise PyTorch's exception class;
the modules match PyTorch's with the same weights; the forward saves exactly x and w.
"""

from __future__ import annotations

import gc
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from helpers import assert_close  # noqa: E402
from hypothesis import HealthCheck, assume, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn as nn  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402
from gradstream import memory  # noqa: E402
from gradstream.autograd import gradcheck, gradgradcheck  # noqa: E402

TF = torch.nn.functional
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _arr(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


@st.composite
def geometries(draw, transposed: bool):
    """A valid convolution: shapes, arguments, and the layout options."""
    n = draw(st.sampled_from([1, 2]))
    groups = draw(st.integers(1, 3))
    cin, cout = groups * draw(st.integers(1, 3)), groups * draw(st.integers(1, 3))
    k = [draw(st.integers(1, 3)) for _ in range(n)]
    stride = [draw(st.integers(1, 3)) for _ in range(n)]
    dilation = [draw(st.integers(1, 2)) for _ in range(n)]
    kw = dict(stride=stride, dilation=dilation, groups=groups)
    if transposed:
        padding = [draw(st.integers(0, 2)) for _ in range(n)]
        op = [draw(st.integers(0, max(s, d) - 1)) for s, d in zip(stride, dilation, strict=True)]
        size = [draw(st.integers(1, 5)) for _ in range(n)]
        parts = zip(size, stride, padding, dilation, k, op, strict=True)
        out = [(i - 1) * s - 2 * p + d * (kk - 1) + o + 1 for i, s, p, d, kk, o in parts]
        assume(all(o > 0 for o in out))
        kw.update(padding=padding, output_padding=op)
        wshape = (cin, cout // groups, *k)
        bias_n = cout
    else:
        padding = draw(st.one_of(st.just("valid"), st.just("same"),
                                 st.lists(st.integers(0, 2), min_size=n, max_size=n)))  # fmt: skip
        if padding == "same":
            kw["stride"] = stride = [1] * n
        pads = padding if isinstance(padding, list) else [0] * n
        size = [draw(st.integers(max(1, d * (kk - 1) + 1 - 2 * p), 7))
                for d, kk, p in zip(dilation, k, pads, strict=True)]  # fmt: skip
        kw["padding"] = padding
        wshape = (cout, cin // groups, *k)
        bias_n = cout
    batch = draw(st.sampled_from([None, 0, 1, 2, 3]))
    xshape = (cin, *size) if batch is None else (batch, cin, *size)
    bias = draw(st.booleans())
    layout = draw(st.sampled_from(["contiguous", "transposed", "sliced"]))
    return n, xshape, wshape, bias_n if bias else None, kw, layout


def _layout(lib, t, layout):
    """The same values through a non-contiguous view of the input."""
    if layout == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "sliced":
        # each element twice along the last dim, then every other one: a strided view
        return lib.stack([t, t], -1).flatten(-2)[..., ::2]
    return t


def _run(lib, fname, arrays, bias_n, kw, layout, dtype):
    rng_arrays = arrays
    x = lib.tensor(rng_arrays[0], requires_grad=True)
    w = lib.tensor(rng_arrays[1], requires_grad=True)
    b = lib.tensor(rng_arrays[2], requires_grad=True) if bias_n is not None else None
    xv = _layout(lib, x, layout)
    fn = getattr(TF if lib is torch else F, fname)
    y = fn(xv, w, b, **kw)
    g = lib.tensor(rng_arrays[3][: y.numel()].reshape(tuple(y.shape)))
    (y * g).sum().backward()
    return y, x.grad, w.grad, (b.grad if b is not None else None)


def _compare(transposed: bool, geo, dtype):
    n, xshape, wshape, bias_n, kw, layout = geo
    fname = f"conv_transpose{n}d" if transposed else f"conv{n}d"
    rng = np.random.default_rng(0)
    arrays = [_arr(rng, xshape, dtype), _arr(rng, wshape, dtype),
              _arr(rng, (bias_n or 1,), dtype), _arr(rng, (4096,), dtype)]  # fmt: skip
    ours = _run(gs, fname, arrays, bias_n, kw, layout, dtype)
    ref = _run(torch, fname, arrays, bias_n, kw, layout, dtype)
    terms = math.prod(wshape) * (xshape[0] if len(xshape) == n + 2 else 1) * 64
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-9, atol=1e-11)
    names = ["output", "input grad", "weight grad", "bias grad"]
    for name, a, e in zip(names, ours, ref, strict=True):
        if e is None:
            assert a is None, name
            continue
        assert a is not None, name
        assert_close(a, e, terms=terms, **tol)


@SETTINGS
@given(geometries(False), st.sampled_from([np.float32, np.float64]))
def test_conv_matches_torch(geo, dtype):
    _compare(False, geo, dtype)


@SETTINGS
@given(geometries(True), st.sampled_from([np.float32, np.float64]))
def test_conv_transpose_matches_torch(geo, dtype):
    _compare(True, geo, dtype)


def test_same_padding_even_kernel_pads_right():
    rng = np.random.default_rng(1)
    x, w = _arr(rng, (2, 3, 6, 7), np.float64), _arr(rng, (4, 3, 2, 4), np.float64)
    for dil in (1, 2):
        ours = F.conv2d(gs.tensor(x), gs.tensor(w), padding="same", dilation=dil)
        ref = TF.conv2d(torch.tensor(x), torch.tensor(w), padding="same", dilation=dil)
        assert_close(ours, ref, rtol=1e-12, atol=1e-12)


def test_half_precision_computes_in_float32():
    rng = np.random.default_rng(2)
    x, w = _arr(rng, (2, 3, 5, 5), np.float32), _arr(rng, (4, 3, 3, 3), np.float32)
    for name in ("bfloat16", "float16"):
        xg, wg = gs.tensor(x).to(getattr(gs, name)), gs.tensor(w).to(getattr(gs, name))
        y = F.conv2d(xg, wg, padding=1)
        assert y.dtype == getattr(gs, name)
        ref = TF.conv2d(torch.tensor(x), torch.tensor(w), padding=1)
        assert_close(y.float(), ref, rtol=2e-2, atol=5e-2, check_dtype=False)


# ---------------------------------------------------------------- finite differences


CASES = [
    ("conv2d", (2, 4, 5, 4), (6, 2, 3, 2), 6,
     dict(stride=(2, 1), padding=(1, 0), dilation=(1, 2), groups=2)),
    ("conv1d", (2, 3, 7), (2, 3, 3), 2, dict(stride=2, padding=1, dilation=2)),
    ("conv_transpose2d", (1, 4, 3, 3), (4, 3, 2, 3), 6,
     dict(stride=2, padding=1, output_padding=1, groups=2)),
    ("conv_transpose1d", (2, 2, 4), (2, 3, 3), 3,
     dict(stride=3, padding=1, output_padding=2, dilation=2)),
]  # fmt: skip


@pytest.mark.parametrize("fname,xs,ws,bn,kw", CASES)
def test_gradcheck_and_gradgradcheck(fname, xs, ws, bn, kw):
    rng = np.random.default_rng(3)
    x = gs.tensor(_arr(rng, xs, np.float64), requires_grad=True)
    w = gs.tensor(_arr(rng, ws, np.float64), requires_grad=True)
    b = gs.tensor(_arr(rng, (bn,), np.float64), requires_grad=True)
    fn = getattr(F, fname)

    def f(x, w, b):
        return fn(x, w, b, **kw)

    assert gradcheck(f, (x, w, b))
    assert gradgradcheck(f, (x, w, b))


def test_double_backward_matches_torch():
    rng = np.random.default_rng(4)
    arrays = [_arr(rng, (2, 4, 6, 5), np.float64), _arr(rng, (6, 2, 3, 3), np.float64)]
    out = []
    for lib, fn in ((gs, F.conv2d), (torch, TF.conv2d)):
        x, w = (lib.tensor(a, requires_grad=True) for a in arrays)
        y = fn(x, w, stride=2, padding=1, groups=2)
        gx, gw = lib.autograd.grad((y * y).sum(), (x, w), create_graph=True)
        ((gx * gx).sum() + (gw.sin()).sum()).backward()
        out.append((gx, gw, x.grad, w.grad))
    for a, e in zip(*out, strict=True):
        assert_close(a, e, rtol=1e-9, atol=1e-9)


# ---------------------------------------------------------------- path pruning and memory


def test_forward_saves_only_input_and_weight():
    gc.collect()
    assert memory.memory_by_category()["activation"] == 0
    x = gs.randn(4, 3, 16, 16, requires_grad=True)
    w = gs.randn(8, 3, 3, 3, requires_grad=True)
    b = gs.randn(8, requires_grad=True)
    y = F.conv2d(x, w, b, padding=1)
    assert memory.memory_by_category()["activation"] == x.nbytes + w.nbytes
    y.sum().backward()
    assert memory.memory_by_category()["activation"] == 0
    assert x.grad is not None and w.grad is not None and b.grad is not None


def test_only_needed_gradients_are_saved_and_computed():
    gc.collect()
    x = gs.randn(2, 3, 8, 8)
    w = gs.randn(4, 3, 3, 3, requires_grad=True)
    y = F.conv2d(x, w)
    assert memory.memory_by_category()["activation"] == x.nbytes  # w is not needed for dw
    y.sum().backward()
    assert x.grad is None and w.grad is not None
    x2 = gs.randn(2, 3, 8, 8, requires_grad=True)
    y2 = F.conv2d(x2, gs.randn(4, 3, 3, 3))
    assert memory.memory_by_category()["activation"] == 4 * 3 * 3 * 3 * 4
    y2.sum().backward()
    assert x2.grad is not None


def test_large_sample_is_tiled_and_matches():
    """A sample whose columns exceed the column budget (32 MiB) is done in row tiles."""
    rng = np.random.default_rng(5)
    x, w = _arr(rng, (1, 64, 96, 96), np.float32), _arr(rng, (8, 64, 5, 5), np.float32)
    xs, ws = gs.tensor(x, requires_grad=True), gs.tensor(w, requires_grad=True)
    xt, wt = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    y, yt = F.conv2d(xs, ws, padding=2), TF.conv2d(xt, wt, padding=2)
    assert_close(y, yt, rtol=1e-4, atol=1e-5, terms=64 * 25)
    y.sum().backward()
    yt.sum().backward()
    assert_close(xs.grad, xt.grad, rtol=1e-4, atol=1e-5, terms=8 * 25)
    assert_close(ws.grad, wt.grad, rtol=1e-4, atol=1e-5, terms=96 * 96)


# ---------------------------------------------------------------- bad inputs


def _both_raise(call):
    """`call(lib, F)` raises the same exception class in gradstream as in PyTorch."""
    with pytest.raises(Exception) as ref:
        call(torch, TF)
    with pytest.raises(Exception) as ours:
        call(gs, F)
    assert type(ours.value) is type(ref.value), (ours.value, ref.value)
    return str(ours.value), str(ref.value)


BAD = [
    lambda lib, f: f.conv2d(lib.zeros(4, 5, 8, 8), lib.zeros(16, 3, 3, 3)),
    lambda lib, f: f.conv2d(lib.zeros(2, 3), lib.zeros(16, 3, 3, 3)),
    lambda lib, f: f.conv1d(lib.zeros(5), lib.zeros(4, 3, 3)),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 2, 2), lib.zeros(4, 3, 3, 3)),
    lambda lib, f: f.conv2d(lib.zeros(1, 6, 8, 8), lib.zeros(3, 3, 3, 3), groups=2),
    lambda lib, f: f.conv2d(lib.zeros(1, 6, 8, 8), lib.zeros(4, 3, 3, 3), groups=0),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), stride=0),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), padding=-1),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), dilation=0),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8, dtype=lib.float64), lib.zeros(4, 3, 3, 3)),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), lib.zeros(5)),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3),
                            lib.zeros(4, dtype=lib.float64)),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), padding="foo"),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), padding="same", stride=2),
    lambda lib, f: f.conv2d(lib.zeros(1, 3, 8, 8), lib.zeros(4, 3, 3, 3), padding=(1, 1, 1)),
    lambda lib, f: f.conv_transpose2d(lib.zeros(1, 3, 8, 8), lib.zeros(3, 4, 3, 3), stride=2,
                                      output_padding=2),
    lambda lib, f: f.conv_transpose2d(lib.zeros(1, 5, 8, 8), lib.zeros(3, 4, 3, 3)),
    lambda lib, f: f.conv_transpose2d(lib.zeros(1, 6, 8, 8), lib.zeros(6, 4, 3, 3), groups=4),
    lambda lib, f: f.conv_transpose2d(lib.zeros(1, 3, 1, 1), lib.zeros(3, 4, 3, 3), padding=3),
    lambda lib, f: f.conv_transpose1d(lib.zeros(1, 3, 4), lib.zeros(3, 4, 3), lib.zeros(5)),
]  # fmt: skip


@pytest.mark.parametrize("call", BAD)
def test_bad_input_raises_like_torch(call):
    _both_raise(call)


def test_messages_match_torch():
    ours, ref = _both_raise(BAD[0])
    assert (
        ours
        == ref
        == (
            "Given groups=1, weight of size [16, 3, 3, 3], expected input[4, 5, 8, 8] to have 3 "
            "channels, but got 5 channels instead"
        )
    )
    for i in (1, 2, 3, 4, 5, 6, 7, 10, 16, 18):
        ours, ref = _both_raise(BAD[i])
        assert ours == ref


@SETTINGS
@given(
    st.sampled_from([1, 2]), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
    st.integers(1, 6), st.integers(1, 5), st.integers(0, 2),
)  # fmt: skip
def test_mismatched_shapes_raise_like_torch(n, cin, cw, groups, size, k, pad):
    """Channels, groups and kernel sizes that may not fit: both accept or both reject."""
    cout = groups * 2
    xs, ws = (2, cin, *[size] * n), (cout, cw, *[k] * n)

    def call(lib, f):
        fn = f.conv1d if n == 1 else f.conv2d
        return fn(lib.ones(*xs), lib.ones(*ws), padding=pad, groups=groups)

    try:
        ref = call(torch, TF)
    except Exception:
        _both_raise(call)
        return
    assert tuple(call(gs, F).shape) == tuple(ref.shape)


# ---------------------------------------------------------------- modules


MODULES = [
    ("Conv1d", (3, 4, 3), dict(stride=2, padding=1), (2, 3, 9)),
    ("Conv2d", (4, 6, (3, 2)), dict(padding="same", dilation=2, groups=2, bias=False),
     (2, 4, 7, 6)),
    ("Conv2d", (3, 5, 3), dict(padding=1, padding_mode="reflect"), (2, 3, 6, 6)),
    ("Conv2d", (3, 5, 3), dict(padding=2, padding_mode="circular"), (3, 6, 6)),
    ("Conv1d", (3, 5, 4), dict(padding="same", padding_mode="replicate"), (2, 3, 8)),
    ("ConvTranspose1d", (3, 4, 3), dict(stride=2, output_padding=1), (2, 3, 5)),
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, padding=1, groups=2), (2, 4, 4, 5)),
]  # fmt: skip


@pytest.mark.parametrize("name,args,kw,xs", MODULES)
def test_module_matches_torch(name, args, kw, xs):
    ours, ref = getattr(nn, name)(*args, **kw), getattr(torch.nn, name)(*args, **kw)
    assert list(ours.state_dict()) == list(ref.state_dict())
    assert repr(ours) == repr(ref)
    with torch.no_grad():
        for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
            assert tuple(p.shape) == tuple(q.shape)
            q.copy_(torch.tensor(p.detach().numpy()))
    x = np.random.default_rng(6).standard_normal(xs).astype(np.float32)
    xg, xt = gs.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    y, yt = ours(xg), ref(xt)
    assert_close(y, yt, rtol=1e-4, atol=1e-5, terms=64)
    (y * y).sum().backward()
    (yt * yt).sum().backward()
    assert_close(xg.grad, xt.grad, rtol=1e-4, atol=1e-4, terms=256)
    for p, q in zip(ours.parameters(), ref.parameters(), strict=True):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, terms=1024)


def test_module_init_bounds_and_dtype():
    m = nn.Conv2d(8, 16, 3, dtype=gs.float64)
    assert m.weight.dtype == gs.float64
    bound = 1 / math.sqrt(8 * 9)
    assert float(m.weight.abs().max()) <= bound + 1e-12
    assert float(m.bias.abs().max()) <= bound + 1e-12
    m.reset_parameters()
    t = nn.ConvTranspose2d(8, 16, 3)
    assert tuple(t.weight.shape) == (8, 16, 3, 3)


def test_transposed_output_size():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 4, 5, 5)).astype(np.float32)
    ours, ref = nn.ConvTranspose2d(4, 2, 3, stride=2), torch.nn.ConvTranspose2d(4, 2, 3, stride=2)
    with torch.no_grad():
        ref.weight.copy_(torch.tensor(ours.weight.detach().numpy()))
        ref.bias.copy_(torch.tensor(ours.bias.detach().numpy()))
    for size in ([12, 12], [1, 4, 11, 12]):
        assert_close(ours(gs.tensor(x), output_size=size), ref(torch.tensor(x), output_size=size),
                     rtol=1e-4, atol=1e-5, terms=64)  # fmt: skip
    with pytest.raises(ValueError):
        ref(torch.tensor(x), output_size=[14, 14])
    with pytest.raises(ValueError):
        ours(gs.tensor(x), output_size=[14, 14])


@pytest.mark.parametrize(
    "name,args,kw",
    [("Conv2d", (3, 4, 3), dict(groups=2)), ("Conv2d", (4, 4, 3), dict(padding="full")),
     ("Conv2d", (4, 4, 3), dict(padding_mode="bad")), ("Conv2d", (4, 4, 3), dict(groups=0)),
     ("Conv1d", (4, 4, 3), dict(padding="same", stride=2)),
     ("ConvTranspose2d", (4, 4, 3), dict(padding_mode="reflect"))],
)  # fmt: skip
def test_module_bad_arguments_raise_like_torch(name, args, kw):
    with pytest.raises(ValueError):
        getattr(torch.nn, name)(*args, **kw)
    with pytest.raises(ValueError):
        getattr(nn, name)(*args, **kw)


def test_batch_zero_matches_torch():
    out = []
    for lib, f in ((gs, F), (torch, TF)):
        x = lib.zeros(0, 3, 5, 5, requires_grad=True)
        w = lib.ones(4, 3, 3, 3, requires_grad=True)
        b = lib.arange(4, dtype=lib.float32).requires_grad_(True)
        y = f.conv2d(x, w, b, padding=1)
        y.sum().backward()
        out.append((y, x.grad, w.grad, b.grad))
    for a, e in zip(*out, strict=True):
        assert_close(a, e)


def test_no_input_channels_gives_the_bias():
    """(PyTorch returns an empty (N, 0, H, W) here; the sum over no channels is the bias.)"""
    x = gs.zeros(3, 0, 5, 5, requires_grad=True)
    w = gs.ones(4, 0, 3, 3, requires_grad=True)
    b = gs.arange(4, dtype=gs.float32).requires_grad_(True)
    y = F.conv2d(x, w, b, padding=1)
    assert_close(y, b.detach().reshape(1, 4, 1, 1).expand(3, 4, 5, 5))
    y.sum().backward()
    assert tuple(x.grad.shape) == (3, 0, 5, 5) and tuple(w.grad.shape) == (4, 0, 3, 3)
    assert_close(b.grad, gs.full((4,), 75.0))
