"""isclose / allclose / equal and Tensor.new_*: against PyTorch."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import gradstream as gs
from tests.helpers import assert_close

torch = pytest.importorskip("torch")

SPECIAL = [0.0, -0.0, 1.0, 1.0 + 1e-6, 1.0 + 1e-4, np.inf, -np.inf, np.nan, 1e30, -1e-30]


def pairs():
    """Two broadcastable arrays of one dtype, rich in near-equal values, infs and NaNs."""
    dtype = st.sampled_from([np.float32, np.float64, np.int64, np.bool_])

    def build(args):
        (s1, s2), dt = args
        if dt in (np.float32, np.float64):
            el = st.one_of(st.sampled_from(SPECIAL), st.floats(-10, 10, width=32))
        elif dt == np.int64:
            el = st.integers(-5, 5)
        else:
            el = st.booleans()
        return st.tuples(hnp.arrays(dt, s1, elements=el), hnp.arrays(dt, s2, elements=el))

    shapes = hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=3, min_side=0, max_side=4)
    return st.tuples(shapes.map(lambda b: b.input_shapes), dtype).flatmap(build)


@settings(max_examples=150, deadline=None)
@given(
    ab=pairs(),
    rtol=st.sampled_from([0.0, 1e-5, 1e-2, 1.0]),
    atol=st.sampled_from([0.0, 1e-8, 1e-3]),
    equal_nan=st.booleans(),
)
def test_isclose_allclose_match_torch(ab, rtol, atol, equal_nan):
    a, b = ab
    expected = torch.isclose(torch.tensor(a), torch.tensor(b), rtol, atol, equal_nan)
    got = gs.isclose(gs.tensor(a), gs.tensor(b), rtol, atol, equal_nan)
    assert_close(got, expected)
    assert_close(gs.tensor(a).isclose(gs.tensor(b), rtol, atol, equal_nan), expected)
    assert gs.allclose(gs.tensor(a), gs.tensor(b), rtol, atol, equal_nan) == bool(expected.all())
    assert gs.equal(gs.tensor(a), gs.tensor(b)) == torch.equal(torch.tensor(a), torch.tensor(b))


def test_isclose_equal_nan_without_tolerances(torch_ref):
    nan = float("nan")
    got = gs.isclose(gs.tensor([nan, 1.0]), gs.tensor([nan, 1.0]), rtol=0, atol=0, equal_nan=True)
    want = torch.isclose(
        torch.tensor([nan, 1.0]), torch.tensor([nan, 1.0]), rtol=0, atol=0, equal_nan=True
    )
    assert_close(got, want)


def test_isclose_noncontiguous(torch_ref):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    g, t = gs.tensor(x).t(), torch_ref.tensor(x).t()
    assert_close(gs.isclose(g, g + 1e-7), torch_ref.isclose(t, t + 1e-7))


@pytest.mark.parametrize(
    "call",
    [
        lambda m: m.isclose(m.ones(2), m.ones(2, dtype=m.float64)),
        lambda m: m.isclose(m.ones(2), m.ones(2), rtol=-1.0),
        lambda m: m.isclose(m.ones(2), m.ones(2), atol=-1.0),
        lambda m: m.isclose(m.ones(3), m.ones(2)),
        lambda m: m.allclose(m.ones(3), m.ones(2)),
    ],
)
def test_isclose_errors_match_torch(torch_ref, call):
    with pytest.raises(Exception) as expected:
        call(torch_ref)
    with pytest.raises(expected.type):
        call(gs)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_new_factories_follow_self(torch_ref, dtype):
    g = gs.ones(2, dtype=getattr(gs, dtype))
    t = torch_ref.ones(2, dtype=getattr(torch_ref, dtype))
    for name, args in [
        ("new_zeros", (3, 2)),
        ("new_ones", ((2, 3),)),
        ("new_empty", (0,)),
        ("new_full", ((2,), 1)),
        ("new_tensor", ([[1, 0], [0, 1]],)),
    ]:
        got, want = getattr(g, name)(*args), getattr(t, name)(*args)
        assert got.shape == tuple(want.shape) and str(got.dtype)[11:] == str(want.dtype)[6:]
        if name != "new_empty":
            assert_close(got, want)
    f = g.new_zeros(2, dtype=gs.float64, requires_grad=True)
    assert f.dtype is gs.float64 and f.requires_grad and f.is_leaf
