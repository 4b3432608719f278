"""Inverse trigonometric and hyperbolic functions, atan2 and hypot: values, gradients,
dtypes, in-place forms and error classes against PyTorch, on hypothesis-drawn inputs
(0-d, empty, broadcast, non-contiguous)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradstream as gs
from tests.helpers import assert_close

torch = pytest.importorskip("torch")

# name: the interval the inputs are drawn from (inside the domain, away from the poles)
UNARY = {
    "asin": (-0.95, 0.95),
    "acos": (-0.95, 0.95),
    "atan": (-5, 5),
    "sinh": (-5, 5),
    "cosh": (-5, 5),
    "asinh": (-5, 5),
    "acosh": (1.05, 6),
    "atanh": (-0.95, 0.95),
}
ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh"}
ALIASES |= {"arccosh": "acosh", "arctanh": "atanh", "arctan2": "atan2"}


def arrays(lo, hi, dtype, shape=None):
    if shape is None:
        shape = hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4)
    lo, hi = float(np.float32(lo)), float(np.float32(hi))
    el = st.floats(lo, hi, width=32) if dtype != np.int64 else st.integers(int(lo), int(hi))
    return hnp.arrays(dtype, shape, elements=el)


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(sorted(UNARY)),
    dtype=st.sampled_from([np.float32, np.float64]),
    transposed=st.booleans(),
)
def test_unary_values_and_gradients(data, name, dtype, transposed):
    a = data.draw(arrays(*UNARY[name], dtype))
    x, tx = gs.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    xs, txs = (x.mT, tx.mT) if transposed and a.ndim >= 2 else (x, tx)
    y, ty = getattr(gs, name)(xs), getattr(torch, name)(txs)
    assert_close(y, ty, **tol(dtype))
    assert_close(getattr(xs, name)(), ty, **tol(dtype))
    g = np.random.default_rng(0).uniform(-1, 1, tuple(ty.shape)).astype(dtype)
    y.backward(gs.tensor(g))
    ty.backward(torch.tensor(g))
    assert_close(x.grad, tx.grad, **tol(dtype))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_int_input_promotes_and_in_place(name):
    lo, hi = UNARY[name]
    ints = np.array([int(np.ceil(lo)), int(np.floor(hi))])
    assert_close(getattr(gs, name)(gs.tensor(ints)), getattr(torch, name)(torch.tensor(ints)))
    v = np.linspace(lo, hi, 5)
    x, tx = gs.tensor(v), torch.tensor(v)
    out = getattr(x, name + "_")()
    getattr(tx, name + "_")()
    assert out is x
    assert_close(x, tx, rtol=1e-12)
    # in place on a graph: the backward still sees the old value
    leaf, tleaf = gs.tensor(v, requires_grad=True), torch.tensor(v, requires_grad=True)
    h, th = leaf * 1.0, tleaf * 1.0
    getattr(h, name + "_")()
    getattr(th, name + "_")()
    h.sum().backward()
    try:
        th.sum().backward()
    except NotImplementedError:  # PyTorch has none for acosh_/asinh_/atanh_: by hand
        d = {"acosh": 1 / np.sqrt(v**2 - 1), "asinh": 1 / np.sqrt(v**2 + 1)}
        d["atanh"] = 1 / (1 - v**2)
        d = d[name]
        assert_close(leaf.grad, d, rtol=1e-12)
        return
    assert_close(leaf.grad, tleaf.grad, rtol=1e-12)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases(alias):
    v = np.linspace(0.1, 0.9, 4)
    args = (gs.tensor(v),) * (2 if alias == "arctan2" else 1)
    targs = (torch.tensor(v),) * len(args)
    assert_close(getattr(gs, alias)(*args), getattr(torch, alias)(*targs))


@settings(max_examples=60, deadline=None)
@given(
    data=st.data(),
    name=st.sampled_from(["atan2", "hypot"]),
    dtype=st.sampled_from([np.float32, np.float64]),
)
def test_binary_values_and_gradients(data, name, dtype):
    s1, s2 = data.draw(
        hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, min_side=0, max_side=3)
    ).input_shapes
    a = data.draw(arrays(-4, 4, dtype, s1))
    b = data.draw(arrays(-4, 4, dtype, s2))
    # away from the origin, where both gradients are singular
    a = np.where(np.abs(a) < 0.1, 0.5, a).astype(dtype)
    x, y = gs.tensor(a, requires_grad=True), gs.tensor(b, requires_grad=True)
    tx, ty = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    out, tout = getattr(gs, name)(x, y), getattr(torch, name)(tx, ty)
    assert_close(out, tout, **tol(dtype))
    g = np.random.default_rng(1).uniform(-1, 1, tuple(tout.shape)).astype(dtype)
    out.backward(gs.tensor(g))
    tout.backward(torch.tensor(g))
    assert_close(x.grad, tx.grad, **tol(dtype))
    assert_close(y.grad, ty.grad, **tol(dtype))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.atan2(m.tensor([1, 2]), m.tensor([3, 4])),
        lambda m: m.atan2(m.tensor([1.0]), m.tensor([3.0], dtype=m.float64)),
        lambda m: m.hypot(m.tensor([3, 4]), m.tensor([4, 3])),
        lambda m: m.atan2(m.ones(2), m.ones(3)),
        lambda m: m.asin(m.tensor([True, False])),
        lambda m: m.atan2(m.ones(2), 1.0),
    ],
)
def test_dtypes_and_errors_match_torch(call):
    try:
        want = call(torch)
    except Exception as e:  # noqa: BLE001  (the class is what is compared)
        with pytest.raises(type(e)):
            call(gs)
        return
    assert_close(call(gs), want)
