"""Python numbers becoming tensor elements: int64 values past 2**53 stay exact (a float64
would round them), and a number a dtype cannot hold is refused as PyTorch refuses it, in
`tensor`, `full`, `fill_` and scalar arithmetic. Checked against PyTorch with hypothesis."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]

INT64 = st.integers(-(2**63), 2**63 - 1)
NUMBERS = st.one_of(
    INT64,
    st.integers(2**53 - 4, 2**53 + 4),
    st.integers(-(2**8), 2**8),
    st.integers(2**31 - 2, 2**31 + 2),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([1e30, -1e30, 1e300, 70000.0, 3.7, -0.5, 255.5, -0.0, -(2.0**63)]),
    st.booleans(),
).filter(lambda v: v != 2.0**63)  # PyTorch makes it an int64 by undefined behaviour


def outcome(make):
    """The value made (as a Python number), or the exception class raised."""
    try:
        return make().item()
    except Exception as e:  # noqa: BLE001  (compared between the libraries)
        return type(e)


def same(a, b) -> bool:
    if isinstance(a, type) or isinstance(b, type):
        return isinstance(a, type) and isinstance(b, type) and (a == b or issubclass(a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return a == b


@settings(max_examples=300, deadline=None)
@given(v=NUMBERS, dtype=st.sampled_from(DTYPES))
def test_full_as_torch(v, dtype):
    ours = outcome(lambda: gs.full((), v, dtype=getattr(gs, dtype)))
    theirs = outcome(lambda: torch.full((), v, dtype=getattr(torch, dtype)))
    assert same(ours, theirs), (v, dtype, ours, theirs)


@settings(max_examples=300, deadline=None)
@given(v=NUMBERS, dtype=st.sampled_from(DTYPES))
def test_fill_as_torch(v, dtype):
    ours = outcome(lambda: gs.zeros((), dtype=getattr(gs, dtype)).fill_(v))
    theirs = outcome(lambda: torch.zeros((), dtype=getattr(torch, dtype)).fill_(v))
    assert same(ours, theirs), (v, dtype, ours, theirs)


INTEGRAL = ["bool", "uint8", "int32", "int64"]


@settings(max_examples=300, deadline=None)
@given(v=NUMBERS, dtype=st.sampled_from([*INTEGRAL, None]))
def test_tensor_of_a_number_as_torch(v, dtype):
    # Float dtypes round a float64 the same way in both; integer ones are where values are
    # refused or kept exact.
    ours = outcome(lambda: gs.tensor(v, dtype=dtype and getattr(gs, dtype)))
    theirs = outcome(lambda: torch.tensor(v, dtype=dtype and getattr(torch, dtype)))
    assert same(ours, theirs), (v, dtype, ours, theirs)


@settings(max_examples=100, deadline=None)
@given(v=st.lists(st.one_of(INT64, st.floats(-1e20, 1e20)), min_size=1, max_size=4),
       dtype=st.sampled_from(INTEGRAL[1:]))  # fmt: skip
def test_tensor_of_a_list_into_an_integer_dtype_as_torch(v, dtype):
    def values(mod):
        try:
            return mod.tensor(v, dtype=getattr(mod, dtype)).tolist()
        except Exception as e:  # noqa: BLE001
            return type(e)

    ours, theirs = values(gs), values(torch)
    assert same(ours, theirs), (v, dtype, ours, theirs)


@settings(max_examples=200, deadline=None)
@given(v=INT64, op=st.sampled_from(["add", "sub", "mul", "where", "masked_fill", "eq", "max"]))
def test_int64_arithmetic_with_a_large_number_is_exact(v, op):
    def run(mod):
        x = mod.tensor([0, 1, -3], dtype=mod.int64)
        try:
            if op == "add":
                return (x + v).tolist()
            if op == "sub":
                return (v - x).tolist()
            if op == "mul":
                return (x * v).tolist()
            if op == "where":
                return mod.where(x == 0, v, x).tolist()
            if op == "masked_fill":
                return x.masked_fill(x == 1, v).tolist()
            if op == "eq":
                return (mod.tensor([v]) == v).tolist()
            return mod.clamp(x, min=v).tolist()
        except Exception as e:  # noqa: BLE001
            return type(e)

    ours, theirs = run(gs), run(torch)
    assert same(ours, theirs), (v, op, ours, theirs)


def test_past_int64_is_refused_as_torch():
    with pytest.raises((ValueError, RuntimeError), match="Overflow"):
        gs.tensor(2**63)
    with pytest.raises((ValueError, RuntimeError), match="Overflow"):
        gs.tensor([2**63])
    with pytest.raises(RuntimeError, match="int64_t without overflow"):
        gs.full((2,), 1e30, dtype=gs.int64)
    with pytest.raises(RuntimeError, match="int32_t without overflow"):
        gs.zeros(2, dtype=gs.int32).fill_(2**40)
    assert gs.tensor(2**53 + 1).item() == 2**53 + 1
    assert gs.full((3,), -(2**63), dtype=gs.int64).tolist() == [-(2**63)] * 3
