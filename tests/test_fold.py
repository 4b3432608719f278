"""`unfold`/`fold` (and `nn.Unfold`/`nn.Fold`) against PyTorch: values and gradients over
drawn geometries (batched, unbatched, batch 0, non-contiguous input), float64 gradcheck,
and bad arguments raising PyTorch's exception class with its message."""

from __future__ import annotations

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
from gradstream.autograd import gradcheck  # noqa: E402

TF = torch.nn.functional
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def geometries(draw):
    pair = st.tuples(st.integers(1, 3), st.integers(1, 3))
    kernel, stride, dilation = draw(pair), draw(pair), draw(st.tuples(*[st.integers(1, 2)] * 2))
    padding = draw(st.tuples(st.integers(0, 2), st.integers(0, 2)))
    size = draw(st.tuples(st.integers(1, 7), st.integers(1, 7)))
    blocks = [(size[i] + 2 * padding[i] - dilation[i] * (kernel[i] - 1) - 1) // stride[i] + 1
              for i in range(2)]  # fmt: skip
    assume(min(blocks) >= 1)
    batch = draw(st.sampled_from([None, 0, 1, 3]))
    channels = draw(st.integers(1, 3))
    kw = dict(kernel_size=kernel, dilation=dilation, padding=padding, stride=stride)
    return batch, channels, size, blocks, kw, draw(st.booleans())


def _lead(batch):
    return () if batch is None else (batch,)


@SETTINGS
@given(geometries(), st.sampled_from([np.float32, np.float64]))
def test_unfold_and_fold_match_torch(geo, dtype):
    batch, c, size, blocks, kw, transposed = geo
    rng = np.random.default_rng(0)
    x = rng.standard_normal((*_lead(batch), c, *size)).astype(dtype)
    k = kw["kernel_size"][0] * kw["kernel_size"][1]
    cols = rng.standard_normal((*_lead(batch), c * k, blocks[0] * blocks[1])).astype(dtype)
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    for name, arr, args in (("unfold", x, ()), ("fold", cols, (size,))):
        out = []
        for lib, fn in ((gs, getattr(F, name)), (torch, getattr(TF, name))):
            t = lib.tensor(arr, requires_grad=True)
            v = t.transpose(-1, -2).contiguous().transpose(-1, -2) if transposed else t
            y = fn(v, *args, **kw)
            (y * y).sum().backward()
            out.append((y, t.grad))
        (y, g), (yt, gt) = out
        assert_close(y, yt, terms=k, **tol)
        assert_close(g, gt, terms=k, **tol)


def test_gradcheck():
    rng = np.random.default_rng(1)
    x = gs.tensor(rng.standard_normal((2, 2, 5, 4)), requires_grad=True)
    kw = dict(kernel_size=(2, 3), dilation=(2, 1), padding=1, stride=(1, 2))
    assert gradcheck(lambda t: F.unfold(t, **kw), (x,))
    cols = gs.tensor(rng.standard_normal((2, 12, 10)), requires_grad=True)
    assert gradcheck(lambda t: F.fold(t, (5, 4), **kw), (cols,))


def test_modules_match_torch():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    for ours, ref, arr in (
        (nn.Unfold(2, stride=2), torch.nn.Unfold(2, stride=2), x),
        (nn.Fold((6, 6), 2, stride=2), torch.nn.Fold((6, 6), 2, stride=2),
         rng.standard_normal((2, 12, 9)).astype(np.float32)),
    ):  # fmt: skip
        assert repr(ours) == repr(ref)
        assert_close(ours(gs.tensor(arr)), ref(torch.tensor(arr)))


BAD = [
    lambda lib, f: f.unfold(lib.zeros(2, 3), 2),
    lambda lib, f: f.unfold(lib.zeros(1, 1, 3, 3, 3), 2),
    lambda lib, f: f.unfold(lib.zeros(1, 3, 2, 2), 3),
    lambda lib, f: f.unfold(lib.zeros(1, 3, 5, 5), 2, stride=0),
    lambda lib, f: f.unfold(lib.zeros(1, 3, 5, 5), 2, padding=-1),
    lambda lib, f: f.fold(lib.zeros(1, 12, 10), (4, 4), 2),
    lambda lib, f: f.fold(lib.zeros(1, 7, 9), (4, 4), 2),
    lambda lib, f: f.fold(lib.zeros(2, 3, 12, 9), (4, 4), 2),
]


@pytest.mark.parametrize("call", BAD)
def test_bad_arguments_raise_like_torch(call):
    with pytest.raises(Exception) as ref:
        call(torch, TF)
    with pytest.raises(Exception) as ours:
        call(gs, F)
    assert type(ours.value) is type(ref.value)
    assert str(ours.value) == str(ref.value)
