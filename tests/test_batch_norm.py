"""`batch_norm` and `BatchNorm1d/2d/3d` against PyTorch.

Hypothesis draws the input rank (2 to 5 dims), the sizes (batch 0 and size-1 included),
training or eval, affine or not, the momentum, the dtype and the layout; the output, the
running statistics after the step and the gradients of input, weight and bias must match
PyTorch's. float64 gradients are checked by finite differences, twice. The backward keeps
the input and two floats per channel, never a normalised copy.
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


def _tol(dtype, terms) -> dict:
    if dtype == np.float32:
        return dict(rtol=1e-4, atol=2e-5 * np.sqrt(terms))
    return dict(rtol=1e-9, atol=1e-10 * np.sqrt(terms))


@st.composite
def case(draw):
    rank = draw(st.integers(2, 5))
    shape = [draw(st.integers(0, 4)), draw(st.integers(1, 4))]
    shape += [draw(st.integers(1, 4)) for _ in range(rank - 2)]
    training = draw(st.booleans())
    affine = draw(st.booleans())
    running = draw(st.booleans()) or not training
    momentum = draw(st.sampled_from([0.1, 0.5, 1.0, 0.0]))
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    transposed = draw(st.booleans()) and rank >= 3
    seed = draw(st.integers(0, 2**16))
    return shape, training, affine, running, momentum, dtype, transposed, seed


def _make(lib, arrs, transposed):
    x_arr, w_arr, b_arr, rm_arr, rv_arr = arrs
    if transposed:
        leaf = lib.tensor(np.ascontiguousarray(np.swapaxes(x_arr, -1, -2))).requires_grad_(True)
        x = leaf.transpose(-1, -2)
    else:
        leaf = x = lib.tensor(x_arr).requires_grad_(True)
    w = lib.tensor(w_arr).requires_grad_(True) if w_arr is not None else None
    b = lib.tensor(b_arr).requires_grad_(True) if b_arr is not None else None
    rm = lib.tensor(rm_arr) if rm_arr is not None else None
    rv = lib.tensor(rv_arr) if rv_arr is not None else None
    return leaf, x, w, b, rm, rv


@SETTINGS
@given(c=case())
def test_batch_norm_matches_torch(c):
    shape, training, affine, running, momentum, dtype, transposed, seed = c
    rng = np.random.default_rng(seed)
    ch = shape[1]
    x_arr = (rng.standard_normal(shape) * 3 + 1).astype(dtype)
    arrs = (
        x_arr,
        rng.standard_normal(ch).astype(dtype) if affine else None,
        rng.standard_normal(ch).astype(dtype) if affine else None,
        rng.standard_normal(ch).astype(dtype) if running else None,
        rng.uniform(0.5, 2, ch).astype(dtype) if running else None,
    )
    lg, xg, wg, bg, rmg, rvg = _make(gs, arrs, transposed)
    lt, xt, wt, bt, rmt, rvt = _make(torch, arrs, transposed)
    args_t = (rmt, rvt, wt, bt, training, momentum, 1e-5)
    try:
        ot = TF.batch_norm(xt, *args_t)
    except (RuntimeError, ValueError) as e:
        with pytest.raises(type(e)):
            F.batch_norm(xg, rmg, rvg, wg, bg, training, momentum, 1e-5)
        return
    og = F.batch_norm(xg, rmg, rvg, wg, bg, training, momentum, 1e-5)
    m = max(x_arr.size // ch, 1)
    tol = _tol(dtype, m)
    assert_close(og, ot, **tol)
    if running:
        assert_close(rmg, rmt, **tol)
        assert_close(rvg, rvt, **tol)
    if ot.numel():
        w = rng.standard_normal(tuple(ot.shape)).astype(dtype)
        og.backward(gs.tensor(w))
        ot.backward(torch.tensor(w))
        gtol = _tol(dtype, m * m)
        assert_close(lg.grad, lt.grad, **gtol)
        if affine:
            assert_close(wg.grad, wt.grad, **gtol)
            assert_close(bg.grad, bt.grad, **gtol)


@pytest.mark.parametrize("training", [True, False])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape", [(4, 3), (3, 2, 5), (2, 2, 3, 3)])
def test_float64_gradcheck_and_gradgradcheck(training, affine, shape):
    rng = np.random.default_rng(7)
    x = gs.tensor(rng.standard_normal(shape)).requires_grad_(True)
    c = shape[1]
    rm, rv = gs.tensor(rng.standard_normal(c)), gs.tensor(rng.uniform(0.5, 2, c))
    inputs = [x]
    if affine:
        inputs += [gs.tensor(rng.standard_normal(c)).requires_grad_(True),
                   gs.tensor(rng.standard_normal(c)).requires_grad_(True)]  # fmt: skip

    def f(x, *wb):
        w, b = wb if wb else (None, None)
        return F.batch_norm(x, None if training else rm, None if training else rv, w, b,
                            training)  # fmt: skip

    assert gradcheck(f, tuple(inputs))
    assert gradgradcheck(f, tuple(inputs))


@pytest.mark.parametrize(
    "call",
    [
        lambda F, lib: F.batch_norm(lib.ones(1, 3), None, None, training=True),
        lambda F, lib: F.batch_norm(lib.ones(1, 3, 1), None, None, training=True),
        lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(4), lib.ones(4)),
        lambda F, lib: F.batch_norm(lib.ones(4, 3), lib.zeros(3), lib.ones(3), lib.ones(2)),
    ],
)
def test_bad_arguments_raise_torchs_exception(call):
    with pytest.raises(Exception) as expected:
        call(TF, torch)
    with pytest.raises(expected.type):
        call(F, gs)


def test_saves_the_input_and_two_floats_per_channel():
    x = gs.randn(8, 16, 32, 32).requires_grad_(True)
    rm, rv = gs.zeros(16), gs.ones(16)
    gc.collect()
    before = memory.memory_by_category()["activation"]
    y = F.batch_norm(x, rm, rv, training=True)
    assert memory.memory_by_category()["activation"] - before == x.nbytes + 2 * 16 * 4
    y.sum().backward()
    del y
    gc.collect()
    assert memory.memory_by_category()["activation"] == before
    # With an affine weight the weight is kept too (it scales the input's gradient).
    w, b = gs.ones(16).requires_grad_(True), gs.zeros(16).requires_grad_(True)
    y = F.batch_norm(x, None, None, w, b, training=True)
    assert y.requires_grad
    assert memory.memory_by_category()["activation"] - before == x.nbytes + 3 * 16 * 4


@pytest.mark.parametrize("momentum", [0.1, None])
@pytest.mark.parametrize(
    ("name", "shape"), [("BatchNorm1d", (6, 4)), ("BatchNorm1d", (5, 4, 7)),
                        ("BatchNorm2d", (3, 4, 5, 5)), ("BatchNorm3d", (2, 4, 3, 3, 3))],
)  # fmt: skip
def test_modules_track_running_stats_like_torch(name, shape, momentum):
    m, mt = (
        getattr(gs.nn, name)(4, momentum=momentum),
        getattr(torch.nn, name)(4, momentum=momentum),
    )
    assert repr(m) == repr(mt)
    assert set(m.state_dict()) == set(mt.state_dict())
    rng = np.random.default_rng(8)
    for _ in range(3):
        arr = (rng.standard_normal(shape) * 2 + 0.5).astype(np.float32)
        x, xt = gs.tensor(arr).requires_grad_(True), torch.tensor(arr).requires_grad_(True)
        y, yt = m(x), mt(xt)
        assert_close(y, yt, rtol=1e-4, atol=1e-4)
        (y * y).sum().backward()
        (yt * yt).sum().backward()
        assert_close(x.grad, xt.grad, rtol=1e-3, atol=1e-3)
    for k, v in mt.state_dict().items():
        assert_close(m.state_dict()[k], v, rtol=1e-5, atol=1e-5)
    assert_close(m.weight.grad, mt.weight.grad, rtol=1e-3, atol=1e-3)
    m.eval()
    mt.eval()
    arr = rng.standard_normal(shape).astype(np.float32)
    assert_close(m(gs.tensor(arr)), mt(torch.tensor(arr)), rtol=1e-5, atol=1e-5)


def test_module_without_running_stats_and_load_state_dict():
    m = gs.nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    mt = torch.nn.BatchNorm2d(3, affine=False, track_running_stats=False)
    assert repr(m) == repr(mt)
    assert list(m.state_dict()) == list(mt.state_dict()) == []
    arr = np.random.default_rng(9).standard_normal((2, 3, 4, 4)).astype(np.float32)
    m.eval()
    mt.eval()
    assert_close(m(gs.tensor(arr)), mt(torch.tensor(arr)), rtol=1e-5, atol=1e-5)
    a, b = gs.nn.BatchNorm1d(3), gs.nn.BatchNorm1d(3)
    a(gs.randn(5, 3))
    b.load_state_dict(a.state_dict())
    assert int(b.num_batches_tracked) == 1
    assert_close(b.running_mean, a.running_mean)


@pytest.mark.parametrize(
    ("name", "shape"),
    [("BatchNorm1d", (2, 3, 4, 5)), ("BatchNorm1d", (3,)), ("BatchNorm2d", (2, 3, 4)),
     ("BatchNorm3d", (2, 3, 4, 4))],
)  # fmt: skip
def test_module_dim_checks(name, shape):
    with pytest.raises(ValueError) as expected:
        getattr(torch.nn, name)(3)(torch.ones(shape))
    with pytest.raises(ValueError) as got:
        getattr(gs.nn, name)(3)(gs.ones(*shape))
    assert str(got.value) == str(expected.value)


def test_training_with_one_value_per_channel_raises():
    with pytest.raises(ValueError, match="Expected more than 1 value per channel when training"):
        gs.nn.BatchNorm1d(3)(gs.ones(1, 3))
