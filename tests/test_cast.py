"""Casts between every pair of dtypes against PyTorch's CPU casts, bit for bit: NaN, ±inf
and floats beyond an integer type's range included, on any shape and layout."""

import numpy as np
import pytest

import gradstream as gs
from tests.helpers import to_torch

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")
st = hypothesis.strategies

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

# Values a cast must get right: specials, rounding ties of the 16-bit floats, the edges of
# each integer type and what lies beyond them.
EDGES = [
    float("nan"),
    float("inf"),
    -float("inf"),
    0.0,
    -0.0,
    0.5,
    -0.5,
    -1.5,
    2.5,
    255.0,
    256.0,
    300.7,
    -129.7,
    65504.0,
    65520.0,
    1.0 + 2**-11 + 2**-40,
    1.0 + 2**-8 + 2**-40,
    2147483647.0,
    2147483648.0,
    -2147483649.0,
    3e9,
    9.3e18,
    -(2.0**63),
    16777217.0,
    1e300,
]

values = st.one_of(
    st.sampled_from(EDGES),
    st.floats(-1e4, 1e4),
    st.integers(-(2**62), 2**62).map(float),
)


def layouts(base, how):
    """`base` (2-d) seen as a contiguous, transposed, strided or broadcast view."""
    if how == "transposed":
        return base.t()
    if how == "strided":
        return base[::2, 1:]
    if how == "broadcast" and base.shape[0] > 0:
        return base[:1].expand(3, base.shape[1])
    return base


@hypothesis.settings(max_examples=300, derandomize=True, deadline=None)
@hypothesis.given(
    data=st.data(),
    src=st.sampled_from(DTYPES),
    dst=st.sampled_from(DTYPES),
    rows=st.integers(0, 4),
    cols=st.integers(0, 5),
    how=st.sampled_from(["contiguous", "transposed", "strided", "broadcast"]),
)
def test_every_pair_matches_torch(data, src, dst, rows, cols, how):
    v = data.draw(st.lists(values, min_size=rows * cols, max_size=rows * cols))
    arr = np.array(v, dtype=np.float64).reshape(rows, cols)
    t = layouts(torch.from_numpy(arr).to(getattr(torch, src)), how)
    g = layouts(gs.tensor(arr, dtype=gs.float64).to(getattr(gs, src)), how)
    assert g.shape == t.shape
    torch.testing.assert_close(to_torch(g), t, rtol=0, atol=0, equal_nan=True)
    got, want = g.to(getattr(gs, dst)), t.to(getattr(torch, dst))
    assert got.dtype == getattr(gs, dst) and got.shape == want.shape
    torch.testing.assert_close(to_torch(got), want, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("src", DTYPES)
@pytest.mark.parametrize("dst", DTYPES)
def test_0d_and_empty(src, dst):
    for shape in [(), (0,), (2, 0, 3)]:
        t = torch.full(shape, 3.0).to(getattr(torch, src))
        g = gs.full(shape, 3.0).to(getattr(gs, src))
        got = g.to(getattr(gs, dst))
        assert got.dtype == getattr(gs, dst) and got.shape == shape
        torch.testing.assert_close(to_torch(got), t.to(getattr(torch, dst)), rtol=0, atol=0)


def test_float_to_uint8_takes_the_low_byte_like_torch():
    v = [-1.5, 300.0, -129.7, 3e9, float("nan")]
    assert gs.tensor(v).to(gs.uint8).tolist() == torch.tensor(v).to(torch.uint8).tolist()
    assert gs.tensor(v).to(gs.uint8).tolist() == [255, 44, 127, 0, 0]


def test_float_out_of_range_is_the_integer_minimum_like_torch():
    v = [3e9, float("inf"), float("nan"), -3e9]
    for dt in ["int32", "int64"]:
        want = torch.tensor(v, dtype=torch.float64).to(getattr(torch, dt)).tolist()
        assert gs.tensor(v, dtype=gs.float64).to(getattr(gs, dt)).tolist() == want


def test_cast_gradient_flows_between_float_types():
    x = gs.tensor([1.5, -2.0], requires_grad=True)
    y = x.to(gs.float64) * 3
    y.sum().backward()
    assert x.grad.dtype == gs.float32 and x.grad.tolist() == [3.0, 3.0]
