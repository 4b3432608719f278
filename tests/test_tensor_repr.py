"""`repr(tensor)` as PyTorch's, character for character (with `gradstream.` for `torch.`):
every element padded to one width, fixed, integral or scientific notation chosen from the
nonzero finite values, lines wrapped at 80 columns, summaries past 1000 elements, blank lines
between the blocks of a 3-d tensor, and the dtype/requires_grad suffixes."""

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradstream as gs

FLOATS = ["float32", "float64", "float16", "bfloat16"]
INTS = ["int64", "int32", "uint8"]


def twin(torch, values, dtype, requires_grad=False):
    """The same tensor in both libraries, from a NumPy array of `dtype`'s values."""
    t = torch.tensor(values, dtype=getattr(torch, dtype))
    # half values are exact in float32: gradstream gets them without a second rounding
    exact = t.float() if dtype in ("float16", "bfloat16") else t
    g = gs.tensor(exact.tolist(), dtype=getattr(gs, dtype)).reshape(tuple(t.shape))
    if requires_grad:
        t.requires_grad_(True)
        g.requires_grad_(True)
    return g, t


# Where a suffix (", dtype=torch.bfloat16") goes on a line of its own depends on its length,
# and "gradstream." is 5 characters longer than "torch.": reprs are compared with the
# suffixes joined to the last line.
SUFFIX_BREAK = re.compile(r",\n\s+(?=(dtype|requires_grad|grad_fn|size)=)")


def assert_same_repr(g, t):
    ours = SUFFIX_BREAK.sub(", ", repr(g))
    theirs = SUFFIX_BREAK.sub(", ", repr(t).replace("torch.", "gradstream."))
    assert ours == theirs, f"\n{g!r}\n{t!r}"


def float_values(scale):
    return st.one_of(
        st.floats(-scale, scale, allow_nan=False),
        st.sampled_from([0.0, -0.0, 1.0, -3.0, float("inf"), float("-inf"), float("nan")]),
        st.integers(-1000, 1000).map(float),
    )


@settings(
    max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    dtype=st.sampled_from([*FLOATS, *INTS, "bool"]),
    shape=st.lists(st.integers(1, 5), min_size=0, max_size=4),
    scale=st.sampled_from([1e-6, 1.0, 100.0, 1e5, 1e10]),
    requires_grad=st.booleans(),
    data=st.data(),
)
def test_repr_like_torch(torch_ref, dtype, shape, scale, requires_grad, data):
    n = int(np.prod(shape))
    if dtype in FLOATS:
        values = data.draw(st.lists(float_values(scale), min_size=n, max_size=n))
    elif dtype == "bool":
        values = data.draw(st.lists(st.booleans(), min_size=n, max_size=n))
    else:
        info = np.iinfo(getattr(np, dtype))
        values = data.draw(
            st.lists(st.integers(int(info.min), int(info.max)), min_size=n, max_size=n)
        )
    values = np.array(values, dtype=object).reshape(shape).tolist()
    g, t = twin(torch_ref, values, dtype, requires_grad and dtype in FLOATS)
    assert_same_repr(g, t)


@pytest.mark.parametrize(
    "shape", [(1001,), (2000,), (40, 50), (10, 10, 30), (7, 200), (3, 400), (2, 3, 4, 50)]
)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_summarized_repr_like_torch(torch_ref, shape, dtype):
    rng = np.random.default_rng(len(shape) * 1000 + shape[0])
    n = int(np.prod(shape))
    if dtype == "bool":
        values = rng.random(n) < 0.5
    elif dtype == "int64":
        values = rng.integers(-(10**6), 10**6, n)
    else:
        values = rng.normal(0, 100, n)
    g, t = twin(torch_ref, values.reshape(shape).tolist(), dtype)
    assert_same_repr(g, t)


@pytest.mark.parametrize(
    "values, dtype",
    [
        ([[1.0, -1.0], [10.5, 2.0]], "float32"),  # padded to the widest, sign included
        ([0.001, 5.0], "float32"),  # a ratio past 1000: scientific
        ([1e9, -2.0], "float64"),
        ([float("inf"), -1.5, float("nan")], "float32"),
        ([0.0, 0.0], "float32"),
        ([float("nan")], "float16"),
        ([True, False], "bool"),
        ([[1, -10], [100, 2]], "int32"),
        (3.5, "float32"),
        (-7, "int64"),
        ([[[0.5, -1.25]], [[2.0, 3.0]]], "float64"),
        # a full last line: the dtype goes on a line of its own
        ([1234.5678 * (i + 1) for i in range(7)], "float64"),
    ],
)
def test_repr_cases_like_torch(torch_ref, values, dtype):
    g, t = twin(torch_ref, values, dtype)
    assert_same_repr(g, t)


@pytest.mark.parametrize("shape", [(0,), (0, 3), (2, 0, 1)])
@pytest.mark.parametrize("dtype", ["float32", "float64", "int64", "bool"])
def test_empty_repr_like_torch(torch_ref, shape, dtype):
    t = torch_ref.zeros(shape, dtype=getattr(torch_ref, dtype))
    g = gs.zeros(shape, dtype=getattr(gs, dtype))
    assert_same_repr(g, t)
