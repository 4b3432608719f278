"""`nn.functional.layer_norm` against PyTorch: one fused op with its affine weight and bias.

Hypothesis draws the shapes (0-d rows excluded by PyTorch's rule, empty leading dims, one
normalised dim or several), the affine parts, float32/float64 and non-contiguous inputs;
values and the gradients of input, weight and bias must match PyTorch's CPU op. float64 is
also checked by finite differences (and double backward, through `create_graph`). The op
saves exactly what PyTorch's does: the input and one mean and one rstd per row.
"""

from __future__ import annotations

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
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
NP = {"float32": np.float32, "float64": np.float64}


def _leaf(lib, arr, grad=True):
    t = lib.tensor(arr) if lib is gs else torch.from_numpy(arr.copy())
    return t.requires_grad_(grad)


@st.composite
def problems(draw):
    ndim = draw(st.integers(1, 4))
    dims = draw(st.lists(st.integers(0, 9), min_size=ndim, max_size=ndim))
    k = draw(st.integers(1, ndim))
    # The normalised dims hold at least one element (PyTorch normalises nothing otherwise).
    dims[ndim - k :] = [max(d, 1) for d in dims[ndim - k :]]
    if draw(st.booleans()):
        dims[-1] = draw(st.integers(60, 300))  # rows long enough for the vector loops' tails
    return (
        dims,
        k,
        draw(st.booleans()),  # weight
        draw(st.booleans()),  # bias
        draw(st.booleans()),  # non-contiguous input
        draw(st.sampled_from(["float32", "float64"])),
        draw(st.integers(0, 2**31 - 1)),
    )


@SETTINGS
@given(problems())
def test_values_and_gradients_match_torch(problem):
    dims, k, has_w, has_b, strided, dtype, seed = problem
    rng = np.random.default_rng(seed)
    dt = NP[dtype]
    x = (rng.normal(size=dims) * rng.uniform(0.1, 10) + rng.normal()).astype(dt)
    norm = tuple(dims[len(dims) - k :])
    w = rng.normal(size=norm).astype(dt) if has_w else None
    b = rng.normal(size=norm).astype(dt) if has_b else None
    g = rng.normal(size=dims).astype(dt)
    outs = {}
    for lib, f in [(gs, F.layer_norm), (torch, TF.layer_norm)]:
        if strided and len(dims) >= 2:
            xt = _leaf(lib, np.ascontiguousarray(np.swapaxes(x, 0, 1)))
            xin = xt.transpose(0, 1)
        else:
            xt = xin = _leaf(lib, x)
        wt = _leaf(lib, w) if has_w else None
        bt = _leaf(lib, b) if has_b else None
        y = f(xin, norm, wt, bt, 1e-5)
        y.backward(lib.tensor(g) if lib is gs else torch.from_numpy(g))
        outs[lib] = (y, xt.grad, wt.grad if has_w else None, bt.grad if has_b else None)
    n = int(np.prod(norm))
    rows = int(np.prod(dims)) // max(n, 1)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "float32" else dict(rtol=1e-10, atol=1e-10)
    (y, gx, gw, gb), (ty, tgx, tgw, tgb) = outs[gs], outs[torch]
    assert_close(y, ty, **tol, terms=n)
    assert_close(gx, tgx, **tol, terms=n)
    if has_w:
        assert_close(gw, tgw, **tol, terms=rows)
    if has_b:
        assert_close(gb, tgb, **tol, terms=rows)


def test_float64_gradients_by_finite_differences():
    rng = np.random.default_rng(0)
    x = gs.tensor(rng.normal(size=(3, 2, 5)), requires_grad=True)
    w = gs.tensor(rng.normal(size=(2, 5)), requires_grad=True)
    b = gs.tensor(rng.normal(size=(2, 5)), requires_grad=True)
    assert gradcheck(lambda x, w, b: F.layer_norm(x, (2, 5), w, b), (x, w, b))
    assert gradgradcheck(lambda x, w, b: F.layer_norm(x, (2, 5), w, b), (x, w, b))
    assert gradgradcheck(lambda x, w: F.layer_norm(x, (5,), None, None) * w[0], (x, w))


def test_double_backward_with_affine_matches_torch():
    rng = np.random.default_rng(1)
    x, w, b = rng.normal(size=(4, 6)), rng.normal(size=6), rng.normal(size=6)
    grads = {}
    for lib, f in [(gs, F.layer_norm), (torch, TF.layer_norm)]:
        xt, wt, bt = _leaf(lib, x), _leaf(lib, w), _leaf(lib, b)
        y = f(xt, (6,), wt, bt)
        gx, gw = lib.autograd.grad((y * y * y).sum(), (xt, wt), create_graph=True)
        ((gx * gx).sum() + (gw * gw).sum()).backward()
        grads[lib] = (xt.grad, wt.grad, bt.grad)
    for a, e in zip(grads[gs], grads[torch], strict=True):
        assert_close(a, e, rtol=1e-9, atol=1e-9)


def test_half_input_takes_float32_parameters_and_keeps_its_dtype():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(3, 8)).astype(np.float32)
    w, b = rng.normal(size=8).astype(np.float32), rng.normal(size=8).astype(np.float32)
    for gdt, tdt in [(gs.float16, torch.float16), (gs.bfloat16, torch.bfloat16)]:
        gw, tw = _leaf(gs, w), _leaf(torch, w)
        y = F.layer_norm(gs.tensor(x).to(gdt), (8,), gw, gs.tensor(b))
        ty = TF.layer_norm(torch.tensor(x).to(tdt), (8,), tw, torch.tensor(b))
        assert y.dtype == gdt
        assert_close(y.float(), ty.float(), rtol=1e-2, atol=1e-2, check_dtype=False)
        y.float().sum().backward()
        ty.float().sum().backward()
        assert gw.grad.dtype == gs.float32
        assert_close(gw.grad, tw.grad, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("which", ["weight", "bias"])
def test_parameter_of_another_dtype_is_a_runtime_error(which):
    x = torch.randn(2, 4)
    p = {which: torch.ones(4, dtype=torch.float64)}
    with pytest.raises(RuntimeError):
        TF.layer_norm(x, (4,), **p)
    with pytest.raises(RuntimeError, match=rf"layer_norm: expected {which} .*float32.*float64"):
        F.layer_norm(gs.randn(2, 4), (4,), **{which: gs.ones(4, dtype=gs.float64)})


@pytest.mark.parametrize(
    "shape,norm,wshape",
    [((2, 3), (4,), None), ((2, 3), (3,), (4,)), ((3,), (2, 3), None)],
)
def test_shape_errors_name_the_op_and_shapes(shape, norm, wshape):
    w_t = torch.ones(wshape) if wshape else None
    with pytest.raises(RuntimeError):
        TF.layer_norm(torch.zeros(shape), norm, w_t)
    w = gs.ones(wshape) if wshape else None
    with pytest.raises(RuntimeError, match="normalized_shape"):
        F.layer_norm(gs.zeros(shape), norm, w)


def test_trainable_layer_norm_saves_its_input_and_row_statistics_only():
    # PyTorch's LayerNorm saves input, mean and rstd; a normalised copy, or the output of a
    # separate affine multiply, would be another input-sized activation.
    x = gs.randn(64, 256, requires_grad=True)
    ln = gs.nn.LayerNorm(256)
    before = memory.memory_allocated()
    y = ln(x)
    held = memory.memory_allocated() - before
    assert held == y.numel() * 4 + 2 * 64 * 4
    del y
    assert memory.memory_allocated() == before
