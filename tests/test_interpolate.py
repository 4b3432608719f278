"""`interpolate` and the `Upsample` modules against PyTorch.

Hypothesis draws the input shape (batch 0 and size-1 dims included), the mode, `size` or
`scale_factor` (up and down, non-integer), `align_corners`, `recompute_scale_factor`, the
dtype and the layout; values and input gradients must match PyTorch's, and argument
combinations PyTorch rejects raise the same exception class. The backward saves nothing.
"""

from __future__ import annotations

import gc

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
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tol(dtype, terms=4) -> dict:
    if dtype == np.float32:
        return dict(rtol=1e-4, atol=1e-5 * np.sqrt(terms))
    return dict(rtol=1e-9, atol=1e-10)


def _inputs(lib, arr, transposed):
    if transposed:
        leaf = lib.tensor(np.ascontiguousarray(np.swapaxes(arr, -1, -2))).requires_grad_(True)
        return leaf, leaf.transpose(-1, -2)
    leaf = lib.tensor(arr).requires_grad_(True)
    return leaf, leaf


@st.composite
def case(draw):
    spatial = draw(st.integers(1, 2))
    mode = draw(st.sampled_from(["nearest", "nearest-exact", "area",
                                 "linear" if spatial == 1 else "bilinear"]))  # fmt: skip
    shape = [draw(st.integers(0, 2)), draw(st.integers(1, 3))]
    shape += [draw(st.integers(1, 8)) for _ in range(spatial)]
    kw = {}
    if draw(st.booleans()):
        sizes = [draw(st.integers(1, 12)) for _ in range(spatial)]
        kw["size"] = sizes[0] if draw(st.booleans()) else tuple(sizes)
    else:
        scales = [draw(st.sampled_from([0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5, 3.0]))
                  for _ in range(spatial)]  # fmt: skip
        kw["scale_factor"] = scales[0] if draw(st.booleans()) else tuple(scales)
        kw["recompute_scale_factor"] = draw(st.sampled_from([None, False, True]))
    if mode in ("linear", "bilinear"):
        kw["align_corners"] = draw(st.sampled_from([None, False, True]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    transposed = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return shape, mode, kw, dtype, transposed, seed


@SETTINGS
@given(c=case())
def test_interpolate_matches_torch(c):
    shape, mode, kw, dtype, transposed, seed = c
    arr = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    lg, g = _inputs(gs, arr, transposed)
    lt, t = _inputs(torch, arr, transposed)
    try:
        ot = TF.interpolate(t, mode=mode, **kw)
    except (RuntimeError, ValueError, TypeError, NotImplementedError) as e:
        with pytest.raises(type(e)):
            F.interpolate(g, mode=mode, **kw)
        return
    og = F.interpolate(g, mode=mode, **kw)
    tol = _tol(dtype, terms=16 if mode == "area" else 4)
    assert_close(og, ot, **tol)
    if ot.numel():
        w = np.random.default_rng(1).standard_normal(tuple(ot.shape)).astype(dtype)
        og.backward(gs.tensor(w))
        ot.backward(torch.tensor(w))
        assert_close(lg.grad, lt.grad, **_tol(dtype, terms=64))


@pytest.mark.parametrize(
    "call",
    [
        lambda F, x: F.interpolate(x, size=4, scale_factor=2),
        lambda F, x: F.interpolate(x),
        lambda F, x: F.interpolate(x, size=4, align_corners=True),
        lambda F, x: F.interpolate(x, size=(4,)),
        lambda F, x: F.interpolate(x, scale_factor=(2, 2, 2)),
        lambda F, x: F.interpolate(x, size=(4.0, 4)),
        lambda F, x: F.interpolate(x, size=4, recompute_scale_factor=True),
        lambda F, x: F.interpolate(x, size=4, mode="linear"),
        lambda F, x: F.interpolate(x[0], size=4, mode="bilinear"),
        lambda F, x: F.interpolate(x[0], size=4, mode="linear", antialias=True),
        lambda F, x: F.interpolate(x, size=0),
    ],
)
def test_bad_arguments_raise_torchs_exception(call):
    arr = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    with pytest.raises(Exception) as expected:
        call(TF, torch.tensor(arr))
    with pytest.raises(expected.type):
        call(F, gs.tensor(arr))


@pytest.mark.parametrize("kw", [
    dict(scale_factor=2, mode="nearest"),
    dict(size=(7, 3), mode="nearest-exact"),
    dict(scale_factor=1.7, mode="bilinear"),
    dict(size=(3, 8), mode="bilinear", align_corners=True),
    dict(size=(3, 2), mode="area"),
])  # fmt: skip
def test_float64_gradcheck_and_gradgradcheck(kw):
    x = gs.tensor(np.random.default_rng(2).standard_normal((1, 2, 4, 5))).requires_grad_(True)
    assert gradcheck(lambda x: F.interpolate(x, **kw), (x,))
    assert gradgradcheck(lambda x: F.interpolate(x, **kw), (x,))


@pytest.mark.parametrize("kw", [
    dict(scale_factor=2, mode="nearest"),
    dict(scale_factor=2, mode="bilinear", align_corners=False),
    dict(size=(5, 9), mode="bilinear", align_corners=True),
])  # fmt: skip
def test_backward_saves_nothing(kw):
    x = gs.randn(2, 4, 16, 16).requires_grad_(True)
    gc.collect()
    before = memory.memory_by_category()["activation"]
    y = F.interpolate(x, **kw)
    assert memory.memory_by_category()["activation"] == before
    y.sum().backward()
    assert x.grad is not None


def test_upsample_modules_match_torch():
    arr = np.random.default_rng(6).standard_normal((2, 3, 5, 4)).astype(np.float32)
    pairs = [
        (gs.nn.Upsample(scale_factor=2), torch.nn.Upsample(scale_factor=2)),
        (gs.nn.Upsample(size=(7, 9), mode="bilinear"),
         torch.nn.Upsample(size=(7, 9), mode="bilinear")),
        (gs.nn.Upsample(scale_factor=(1.5, 2.5), mode="nearest-exact"),
         torch.nn.Upsample(scale_factor=(1.5, 2.5), mode="nearest-exact")),
        (gs.nn.UpsamplingNearest2d(scale_factor=3), torch.nn.UpsamplingNearest2d(scale_factor=3)),
        (gs.nn.UpsamplingBilinear2d(size=(6, 6)), torch.nn.UpsamplingBilinear2d(size=(6, 6))),
    ]  # fmt: skip
    for m, mt in pairs:
        assert repr(m) == repr(mt)
        assert_close(m(gs.tensor(arr)), mt(torch.tensor(arr)), rtol=1e-5, atol=1e-5)
    lin = (gs.nn.Upsample(scale_factor=2.5, mode="linear", align_corners=True),
           torch.nn.Upsample(scale_factor=2.5, mode="linear", align_corners=True))  # fmt: skip
    flat = arr.reshape(2, 3, -1)
    assert_close(lin[0](gs.tensor(flat)), lin[1](torch.tensor(flat)), rtol=1e-5, atol=1e-5)
