"""Every spelling of an op behaves as PyTorch's same spelling: values, dtype and exception class.

An op may be reached as ``gradstream.X``, ``Tensor.X``, ``nn.functional.X``, an ``nn`` module
and the in-place ``Tensor.X_`` / ``gradstream.X_``. For each op in ``OPS`` and each spelling
both libraries have, the test calls gradstream's and PyTorch's spelling on the same data
(hypothesis draws the shape, the dtypes among float32, float64, int64 and bool, and the
layout among contiguous, transposed, sliced and expanded) and compares the outcomes.
"""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
hypothesis = pytest.importorskip("hypothesis")

from helpers import dtype_name, to_numpy  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from parity import LAYOUTS, Outcome, data, error_class, make_tensor  # noqa: E402

import gradstream as gs  # noqa: E402

F = torch.nn.functional

# "op" or "op(case)" -> how to call it after the input: "unary", "binary" (a tensor `other` of
# the input's shape), "scalar" (a Python number `other`), a tuple of further arguments or a
# dict of keyword arguments.
# The module spellings are found by name; `MODULES` lists the nn modules that wrap an op.
OPS: dict[str, object] = {
    **dict.fromkeys(
        "neg negative abs absolute sign square reciprocal exp log log2 log10 log1p expm1 sqrt "
        "rsqrt sin cos tan tanh sigmoid relu erf floor ceil trunc fix frac round isnan isinf "
        "isfinite logical_not bitwise_not silu gelu softplus sum mean prod amax amin argmax "
        "argmin all any count_nonzero norm var std ravel t".split(),
        "unary",
    ),
    **dict.fromkeys(
        "add sub subtract mul multiply div divide true_divide floor_divide remainder fmod pow "
        "maximum minimum bitwise_and bitwise_or bitwise_xor eq ne lt le gt ge logical_and "
        "logical_or logical_xor".split(),
        "binary",
    ),
    **{f"{name}(scalar)": "scalar" for name in "add sub mul div pow remainder eq lt".split()},
    "clamp": (-0.5, 0.5),
    "clamp_min": (0.0,),
    "clamp_max": (0.0,),
    "softmax": (-1,),
    "log_softmax": (-1,),
    "logsumexp": (-1,),
    "cumsum": (0,),
    "cumprod": (0,),
    "flatten": (),
    "transpose": (0, -1),
    "flip": ((0,),),
    "tril": (),
    "triu": (),
    "threshold": (0.1, 20.0),
    "gelu(tanh)": {"approximate": "tanh"},
    "gelu(fast)": {"approximate": "fast"},
    "softplus(beta)": (2.0, 1.0),
}

MODULES = {
    "relu": "ReLU",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "silu": "SiLU",
    "gelu": "GELU",
    "softplus": "Softplus",
    "softmax": "Softmax",
    "log_softmax": "LogSoftmax",
}

# Differences in the ops themselves (src/ops, not the bindings), one per (op, input dtype):
# such a case may differ from PyTorch until the op is fixed; every other case may not.
KNOWN_GAPS: dict[tuple[str, str], str] = {}

DTYPES = ["float32", "float64", "int64", "bool"]


def _compare(ours: Outcome, ref: Outcome, what: str) -> None:
    if ref.error is not None or ours.error is not None:
        got = "ok" if ours.error is None else f"{type(ours.error).__name__}: {ours.error}"
        exp = "ok" if ref.error is None else f"{type(ref.error).__name__}: {ref.error}"
        assert ours.error is not None and ref.error is not None, f"{what}: {got}, torch {exp}"
        assert error_class(ours.error) is error_class(ref.error), f"{what}: {got}, torch {exp}"
        return
    a, e = ours.value, ref.value
    if isinstance(e, tuple):
        assert isinstance(a, tuple) and len(a) == len(e), what
        for x, y in zip(a, e, strict=True):
            _compare(Outcome(lambda v: v, x), Outcome(lambda v: v, y), what)
        return
    assert isinstance(a, gs.Tensor), f"{what}: got {type(a).__name__}"
    assert dtype_name(a.dtype) == str(e.dtype).replace("torch.", ""), (
        f"{what}: dtype {a.dtype}, torch {e.dtype}"
    )
    x, y = to_numpy(a), to_numpy(e)
    assert x.shape == y.shape, f"{what}: shape {x.shape}, torch {y.shape}"
    if y.dtype.kind == "f":
        tol = 1e-5 if y.dtype == np.float32 else 1e-10
        scale = max(1.0, float(np.nanmax(np.abs(y), initial=0.0, where=np.isfinite(y))))
        np.testing.assert_allclose(x, y, rtol=tol, atol=tol * scale, equal_nan=True, err_msg=what)
    else:
        np.testing.assert_array_equal(x, y, err_msg=what)


def _both(label: str, ours_ns, ref_ns, name: str, inplace: bool = False):
    if hasattr(ours_ns, name) and hasattr(ref_ns, name):
        yield label, getattr(ours_ns, name), getattr(ref_ns, name), inplace


def _spellings(name: str):
    """(label, gradstream callable, torch callable, in place) per spelling both libraries have."""
    yield from _both(f"gradstream.{name}", gs, torch, name)
    yield from _both(f"Tensor.{name}", gs.Tensor, torch.Tensor, name)
    yield from _both(f"F.{name}", gs.nn.functional, F, name)
    if name in MODULES:
        ours, ref = getattr(gs.nn, MODULES[name]), getattr(torch.nn, MODULES[name])
        yield f"nn.{MODULES[name]}", _module_call(ours), _module_call(ref), False
    yield from _both(f"Tensor.{name}_", gs.Tensor, torch.Tensor, name + "_", inplace=True)
    yield from _both(f"gradstream.{name}_", gs, torch, name + "_", inplace=True)


def _module_call(module):
    """`module(*args, **kwargs)(x)` as a function of `x, *args, **kwargs`."""
    return lambda x, *args, **kwargs: module(*args, **kwargs)(x)


def _args(kind, lib, other_arr, seed: int) -> tuple[tuple, dict]:
    """The positional and keyword arguments after the input."""
    if kind == "unary":
        return (), {}
    if kind == "binary":
        return (make_tensor(lib, other_arr, "contiguous"),), {}
    if kind == "scalar":
        return ((1, 2.5, True, -2)[seed % 4],), {}
    return (kind, {}) if isinstance(kind, tuple) else ((), kind)


cases = st.tuples(
    st.lists(st.integers(1, 4), min_size=2, max_size=3),
    st.sampled_from(DTYPES),
    st.sampled_from(DTYPES),
    st.sampled_from(LAYOUTS),
    st.integers(0, 2**16),
)


@pytest.mark.parametrize("op", list(OPS))
@settings(max_examples=20, derandomize=True, deadline=None, database=None)
@given(case=cases)
def test_every_spelling_matches_pytorch(op, case):
    shape, dtype, other_dtype, layout, seed = case
    name, kind = op.split("(")[0], OPS[op]
    if name == "t":
        shape = shape[:2]
    arr = data(tuple(shape), dtype, seed)
    other_arr = data(tuple(shape), other_dtype, seed + 1)
    ref_x, ours_x = make_tensor(torch, arr, layout), make_tensor(gs, arr, layout)
    (ref_args, kwargs), (our_args, _) = (
        _args(kind, torch, other_arr, seed),
        _args(kind, gs, other_arr, seed),
    )
    for label, ours, ref, inplace in _spellings(name):
        # In place on a copy: the input itself stays the same for the other spellings.
        ref_in, ours_in = (ref_x.clone(), ours_x.clone()) if inplace else (ref_x, ours_x)
        o, r = (
            Outcome(ours, ours_in, *our_args, **kwargs),
            Outcome(ref, ref_in, *ref_args, **kwargs),
        )
        try:
            _compare(o, r, f"{label}{(dtype, layout, tuple(shape))}")
        except AssertionError:
            if (name, dtype) not in KNOWN_GAPS:
                raise
            continue
        if inplace and o.error is None:
            assert o.value is ours_in, f"{label} returned a new tensor"


@pytest.mark.parametrize("op", [op for op in OPS if hasattr(gs, op) and hasattr(torch, op)])
def test_function_rejects_a_non_tensor_input_like_pytorch(op):
    other = np.ones((2, 2), np.float32)
    (our_args, kwargs), (ref_args, _) = (
        _args(OPS[op], gs, other, 0),
        _args(OPS[op], torch, other, 0),
    )
    ours = Outcome(getattr(gs, op), "x", *our_args, **kwargs)
    ref = Outcome(getattr(torch, op), "x", *ref_args, **kwargs)
    if not isinstance(ref.error, TypeError):
        pytest.skip(f"torch.{op} is Python code: {type(ref.error).__name__}")
    assert isinstance(ours.error, TypeError), op
    message = f"{op}(): argument 'input' (position 1) must be Tensor, not str"
    if message in str(ref.error):
        assert message in str(ours.error)


def test_functional_activations_are_the_module_level_functions():
    for name in ("sigmoid", "tanh", "silu", "gelu", "softplus"):
        assert getattr(gs.nn.functional, name) is getattr(gs, name), name


@pytest.mark.parametrize("name", ["add", "sum", "clamp", "gelu", "relu_", "cumsum", "matmul"])
def test_functions_take_input_by_keyword_show_their_signature_and_pickle(name):
    import inspect
    import pickle

    fn = getattr(gs, name)
    params = list(inspect.signature(fn).parameters)
    assert params[0] == "input"
    method = getattr(gs.Tensor, name, None)
    if method is not None:  # the method is the same op: the signature after `self`
        assert list(inspect.signature(method).parameters)[1:] == params[1:]
        assert method.__doc__ == fn.__doc__
    assert pickle.loads(pickle.dumps(fn)) is fn
    x = gs.tensor([[0.5, -1.0], [2.0, 3.0]])
    args = {
        "add": {"other": x},
        "clamp": {"min": 0.0},
        "cumsum": {"dim": 0},
        "matmul": {"other": x},
    }
    args = args.get(name, {})
    by_position = fn(x.clone(), *args.values())
    by_keyword = fn(input=x.clone(), **args)
    np.testing.assert_array_equal(to_numpy(by_keyword), to_numpy(by_position))
