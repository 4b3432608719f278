"""`set_default_dtype` / `get_default_dtype`: the dtype of Python floats, float factories and
int-to-float promotion follows the default, as in PyTorch."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import gradstream as gs

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@pytest.fixture(autouse=True)
def _restore_default_dtype():
    try:
        yield
    finally:
        gs.set_default_dtype(gs.float32)


@contextlib.contextmanager
def default_dtype(torch, name):
    """Both libraries' default dtype set to `name` for the block (torch may be None)."""
    old = torch.get_default_dtype() if torch is not None else None
    try:
        gs.set_default_dtype(getattr(gs, name))
        if torch is not None:
            torch.set_default_dtype(getattr(torch, name))
        yield
    finally:
        gs.set_default_dtype(gs.float32)
        if torch is not None:
            torch.set_default_dtype(old)


def name(dt) -> str:
    return str(dt).split(".")[-1]


CALLS = {
    "tensor(float)": lambda lib: lib.tensor(1.5),
    "tensor([float])": lambda lib: lib.tensor([1.0, 2.0]),
    "tensor([[int, float]])": lambda lib: lib.tensor([[1, 2.5]]),
    "tensor(int)": lambda lib: lib.tensor(3),
    "tensor(bool)": lambda lib: lib.tensor(True),
    "tensor(np.float32)": lambda lib: lib.tensor(np.ones(2, dtype=np.float32)),
    "tensor(np.float64)": lambda lib: lib.tensor(np.ones(2)),
    "as_tensor([float])": lambda lib: lib.as_tensor([0.5]),
    "Tensor(2, 3)": lambda lib: lib.Tensor(2, 3),
    "Tensor([float])": lambda lib: lib.Tensor([1.0]),
    "zeros": lambda lib: lib.zeros(2),
    "ones": lambda lib: lib.ones(2, 3),
    "empty": lambda lib: lib.empty(2),
    "rand": lambda lib: lib.rand(2),
    "randn": lambda lib: lib.randn(2),
    "zeros_like(int)": lambda lib: lib.zeros_like(lib.tensor([1, 2])),
    "rand_like(float32)": lambda lib: lib.rand_like(lib.zeros(2, dtype=lib.float32)),
    "full(float)": lambda lib: lib.full((2,), 1.5),
    "full(int)": lambda lib: lib.full((2,), 1),
    "arange(int)": lambda lib: lib.arange(3),
    "arange(float)": lambda lib: lib.arange(0.0, 3),
    "arange(float step)": lambda lib: lib.arange(0, 3, 0.5),
    "linspace": lambda lib: lib.linspace(0, 1, 5),
    "eye": lambda lib: lib.eye(2),
    "randint": lambda lib: lib.randint(0, 3, (2,)),
    "exp(int)": lambda lib: lib.exp(lib.tensor([1, 2])),
    "sqrt(bool)": lambda lib: lib.sqrt(lib.tensor([True])),
    "sigmoid(int)": lambda lib: lib.sigmoid(lib.tensor([1])),
    "int / int": lambda lib: lib.tensor([1, 2]) / lib.tensor([2, 2]),
    "int / 2": lambda lib: lib.tensor([1, 2]) / 2,
    "int * float": lambda lib: lib.tensor([1, 2]) * 1.5,
    "int + 0-d float32": lambda lib: lib.tensor([1, 2]) + lib.tensor(1.0, dtype=lib.float32),
    "float32 * float": lambda lib: lib.ones(2, dtype=lib.float32) * 1.5,
    "float16 + float": lambda lib: lib.ones(2, dtype=lib.float16) + 0.5,
    "float + float64 0-d": lambda lib: lib.tensor(2.0) + lib.tensor(1.0, dtype=lib.float64),
    "logsumexp(int)": lambda lib: lib.logsumexp(lib.tensor([1, 2]), 0),
    "where(bool, float, float)": lambda lib: lib.where(lib.tensor([True]), 1.0, 0.0),
    "bernoulli(float)": lambda lib: lib.bernoulli(lib.full((2,), 0.5)),
    "nn.Linear.weight": lambda lib: lib.nn.Linear(2, 3).weight,
    "nn.Linear.bias": lambda lib: lib.nn.Linear(2, 3).bias,
    "nn.LayerNorm.weight": lambda lib: lib.nn.LayerNorm(3).weight,
    "nn.Embedding.weight": lambda lib: lib.nn.Embedding(4, 3).weight,
    "Linear(float input)": lambda lib: lib.nn.Linear(2, 3)(lib.ones(1, 2)),
    "Tensor.float()": lambda lib: lib.ones(2, dtype=lib.float64).float(),
}


# candle's CPU matmul has no bfloat16 kernel.
NO_BF16_MATMUL = {"Linear(float input)"}


@pytest.mark.parametrize("default", ["float64", "float32", "float16", "bfloat16"])
def test_result_dtypes_follow_the_default_like_pytorch(torch_ref, default):
    ours, theirs = {}, {}
    with default_dtype(torch_ref, default):
        assert gs.get_default_dtype() is getattr(gs, default)
        for k, f in CALLS.items():
            if default == "bfloat16" and k in NO_BF16_MATMUL:
                continue
            ours[k] = name(f(gs).dtype)
            theirs[k] = name(f(torch_ref).dtype)
    assert ours == theirs
    assert gs.get_default_dtype() is gs.float32


def test_get_default_dtype_starts_as_float32(torch_ref):
    assert gs.get_default_dtype() is gs.float32
    assert name(gs.get_default_dtype()) == name(torch_ref.get_default_dtype())


def test_float64_default_keeps_python_floats_exact():
    gs.set_default_dtype(gs.float64)
    assert gs.tensor([0.1]).numpy().tolist() == [0.1]
    assert gs.tensor(0.1).item() == 0.1
    gs.set_default_dtype(gs.float32)
    assert gs.tensor([0.1]).dtype == gs.float32


def test_explicit_float64_dtype_is_exact_under_any_default():
    assert gs.tensor([0.1], dtype=gs.float64).numpy().tolist() == [0.1]


@pytest.mark.parametrize(
    "make",
    [
        lambda lib: lib.int64,
        lambda lib: lib.int32,
        lambda lib: lib.uint8,
        lambda lib: lib.bool,
        lambda lib: float,
        lambda lib: "float64",
        lambda lib: None,
        lambda lib: 3,
    ],
)
def test_set_default_dtype_errors_match_pytorch(torch_ref, make):
    def run(lib):
        try:
            lib.set_default_dtype(make(lib))
        except Exception as e:  # noqa: BLE001 - the class is what is compared
            return type(e).__name__
        return None

    ours, theirs = run(gs), run(torch_ref)
    assert ours == theirs == "TypeError"
    assert gs.get_default_dtype() is gs.float32


def test_set_default_dtype_error_message():
    with pytest.raises(TypeError, match="only floating-point types are supported"):
        gs.set_default_dtype(gs.int64)


def test_repr_omits_only_the_default_dtype(torch_ref):
    with default_dtype(torch_ref, "float64"):
        assert "dtype" not in repr(gs.tensor([1.5]))
        assert "dtype=gradstream.float32" in repr(gs.tensor([1.5], dtype=gs.float32))
        assert "dtype=torch.float32" in repr(torch_ref.tensor([1.5], dtype=torch_ref.float32))
    assert "dtype=gradstream.float64" in repr(gs.tensor([1.5], dtype=gs.float64))


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    default=st.sampled_from(["float32", "float64"]),
    value=st.one_of(st.integers(-5, 5), st.floats(-5, 5), st.booleans()),
    dtype=st.sampled_from(["int64", "int32", "uint8", "bool", "float32", "float16"]),
)
def test_scalar_promotion_follows_the_default_like_pytorch(torch_ref, default, value, dtype):
    def run(lib):
        t = lib.ones(2, dtype=getattr(lib, dtype))
        return [name(r.dtype) for r in (t + value, t * value, lib.tensor(value), t / 2)]

    with default_dtype(torch_ref, default):
        ours, theirs = run(gs), run(torch_ref)
    assert ours == theirs


def test_default_applies_to_training(torch_ref):
    gs.set_default_dtype(gs.float64)
    model = gs.nn.Sequential(gs.nn.Linear(3, 4), gs.nn.ReLU(), gs.nn.Linear(4, 1))
    opt = gs.optim.Adam(model.parameters(), lr=0.1)
    x = gs.randn(5, 3)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    assert loss.dtype == gs.float64
    assert all(p.dtype == gs.float64 and p.grad.dtype == gs.float64 for p in model.parameters())
