"""Element-wise ops: values, dtypes, broadcasting and gradients against PyTorch,
finite-difference gradchecks, type promotion, in-place ops and bad input."""

from __future__ import annotations

import math
import operator

import numpy as np
import pytest
from helpers import assert_close, to_torch

import gradstream as gs
from gradstream.autograd import gradcheck

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"]
FLOATS = ["float32", "float64", "float16", "bfloat16"]


def tol(dtype: str) -> dict:
    if dtype == "bfloat16":
        return {"rtol": 2e-2, "atol": 2e-2}
    if dtype == "float16":
        return {"rtol": 5e-3, "atol": 5e-3}
    if dtype == "float32":
        return {"rtol": 1e-5, "atol": 1e-6}
    return {"rtol": 1e-7, "atol": 1e-9}


def sample(shape, dtype: str, low=-3.0, high=3.0, rng=None) -> np.ndarray:
    rng = rng or np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(bool)
    if dtype == "uint8":
        return rng.integers(0, 10, size=shape).astype(np.uint8)
    if dtype in ("int32", "int64"):
        return rng.integers(-5, 6, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape)


def make(arr: np.ndarray, dtype: str):
    """A gradstream tensor and the matching torch tensor holding `arr` in `dtype`."""
    import torch

    if dtype in ("float16", "bfloat16", "float32"):
        g = gs.tensor(np.asarray(arr, dtype=np.float64)).to(getattr(gs, dtype))
    else:
        g = gs.tensor(np.asarray(arr, dtype=dtype))
    t = to_torch(g)
    assert t.dtype == getattr(torch, dtype)
    return g, t


def check_same(g_fn, t_fn, g_args, t_args, dtype):
    """Run both; if torch raises, gradstream must raise too; else values and dtype agree."""
    try:
        expected = t_fn(*t_args)
    except Exception:
        with pytest.raises(Exception):  # noqa: B017 - whichever error torch gives
            g_fn(*g_args)
        return None
    actual = g_fn(*g_args)
    out_dtype = str(expected.dtype).replace("torch.", "")
    loosest = max(tol(dtype)["rtol"], tol(out_dtype)["rtol"])
    assert_close(actual, expected, rtol=loosest, atol=loosest)
    return actual


# ---------------------------------------------------------------- unary

# name -> (gradstream fn, torch fn, input range)
UNARY = {
    "neg": (gs.neg, "neg", (-3, 3)),
    "abs": (gs.abs, "abs", (-3, 3)),
    "sign": (gs.sign, "sign", (-3, 3)),
    "square": (gs.square, "square", (-3, 3)),
    "reciprocal": (gs.reciprocal, "reciprocal", (0.5, 3)),
    "exp": (gs.exp, "exp", (-3, 3)),
    "log": (gs.log, "log", (0.1, 5)),
    "log2": (gs.log2, "log2", (0.1, 5)),
    "log10": (gs.log10, "log10", (0.1, 5)),
    "log1p": (gs.log1p, "log1p", (-0.5, 3)),
    "expm1": (gs.expm1, "expm1", (-3, 3)),
    "sqrt": (gs.sqrt, "sqrt", (0.1, 5)),
    "rsqrt": (gs.rsqrt, "rsqrt", (0.1, 5)),
    "sin": (gs.sin, "sin", (-3, 3)),
    "cos": (gs.cos, "cos", (-3, 3)),
    "tan": (gs.tan, "tan", (-1.2, 1.2)),
    "tanh": (gs.tanh, "tanh", (-3, 3)),
    "sigmoid": (gs.sigmoid, "sigmoid", (-6, 6)),
    "relu": (gs.relu, "relu", (-3, 3)),
    "erf": (gs.erf, "erf", (-3, 3)),
    "floor": (gs.floor, "floor", (-3, 3)),
    "ceil": (gs.ceil, "ceil", (-3, 3)),
    "round": (gs.round, "round", (-3, 3)),
    "trunc": (gs.trunc, "trunc", (-3, 3)),
    "frac": (gs.frac, "frac", (-3, 3)),
    "silu": (gs.silu, "nn.functional.silu", (-4, 4)),
    "gelu": (gs.gelu, "nn.functional.gelu", (-4, 4)),
    "gelu_tanh": (
        lambda x: gs.gelu(x, approximate="tanh"),
        "gelu_tanh",
        (-4, 4),
    ),
    "softplus": (gs.softplus, "nn.functional.softplus", (-4, 4)),
    "softplus_beta": (
        lambda x: gs.softplus(x, beta=2.0, threshold=3.0),
        "softplus_beta",
        (-4, 4),
    ),
}
NO_GRAD_UNARY = {"sign", "floor", "ceil", "round", "trunc"}
# Round-half-even and rounding near integers are sensitive to half-precision input rounding.
ROUNDING = {"floor", "ceil", "round", "trunc", "frac", "sign"}


def torch_fn(torch, name):
    if name == "gelu_tanh":
        return lambda x: torch.nn.functional.gelu(x, approximate="tanh")
    if name == "softplus_beta":
        return lambda x: torch.nn.functional.softplus(x, beta=2.0, threshold=3.0)
    obj = torch
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_values_and_dtypes(torch_ref, name, dtype):
    g_fn, t_name, (lo, hi) = UNARY[name]
    arr = sample((3, 4), dtype, lo, hi)
    if dtype in ("int32", "int64"):
        arr = np.clip(arr, max(int(math.ceil(lo)), -5), 5)
        if name in ("log", "log2", "log10", "sqrt", "rsqrt", "reciprocal"):
            arr = np.abs(arr) + 1
    g, t = make(arr, dtype)
    check_same(g_fn, torch_fn(torch_ref, t_name), [g], [t], dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_shapes_and_layouts(torch_ref, name):
    g_fn, t_name, (lo, hi) = UNARY[name]
    t_fn = torch_fn(torch_ref, t_name)
    arr = sample((4, 3), "float64", lo, hi)
    # non-contiguous: a transposed view
    g = gs.tensor(np.ascontiguousarray(arr.T)).transpose(0, 1)
    assert not g.is_contiguous()
    assert_close(g_fn(g), t_fn(torch_ref.from_numpy(arr)), **tol("float64"))
    # broadcast view (stride 0)
    row = sample((5,), "float64", lo, hi)
    gb = gs.tensor(row).expand(3, 5)
    assert_close(g_fn(gb), t_fn(torch_ref.from_numpy(row).expand(3, 5)), **tol("float64"))
    # 0-d and empty
    g0, t0 = make(np.array((lo + hi) / 2 + 0.1), "float32")
    assert_close(g_fn(g0), t_fn(t0))
    ge, te = make(np.zeros((0, 3)), "float32")
    assert_close(g_fn(ge), t_fn(te))


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_large_parallel_path(torch_ref, name):
    g_fn, t_name, (lo, hi) = UNARY[name]
    arr = sample((300, 200), "float32", lo, hi)
    g, t = make(arr, "float32")
    assert_close(g_fn(g), torch_fn(torch_ref, t_name)(t), rtol=1e-5, atol=1e-5)
    # strided and large: the row-wise parallel path
    gt = g.transpose(0, 1)
    assert_close(g_fn(gt), torch_fn(torch_ref, t_name)(t.transpose(0, 1)), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", sorted(set(UNARY) - NO_GRAD_UNARY))
def test_unary_grad_matches_torch(torch_ref, name):
    g_fn, t_name, (lo, hi) = UNARY[name]
    arr = sample((3, 4), "float64", lo, hi)
    if name == "relu":
        arr[0, 0] = 0.0  # PyTorch's relu gradient at 0 is 0
    x = gs.tensor(arr, requires_grad=True)
    tx = torch_ref.tensor(arr, requires_grad=True)
    w = sample((3, 4), "float64", rng=np.random.default_rng(1))
    (g_fn(x) * gs.tensor(w)).sum().backward()
    (torch_fn(torch_ref, t_name)(tx) * torch_ref.from_numpy(w)).sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(set(UNARY) - NO_GRAD_UNARY - {"relu", "abs", "frac"}))
def test_unary_gradcheck(name):
    g_fn, _, (lo, hi) = UNARY[name]
    x = gs.tensor(sample((5,), "float64", lo, hi), requires_grad=True)
    assert gradcheck(g_fn, (x,))


@pytest.mark.parametrize("name", sorted(NO_GRAD_UNARY))
def test_rounding_ops_have_zero_gradient(name):
    g_fn = UNARY[name][0]
    x = gs.tensor([0.3, -1.7, 2.5], dtype=gs.float64, requires_grad=True)
    y = g_fn(x)
    assert y.requires_grad
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("name", ["sigmoid", "tanh", "exp", "gelu", "silu", "softplus"])
def test_unary_double_backward(torch_ref, name):
    g_fn, t_name, (lo, hi) = UNARY[name]
    arr = sample((6,), "float64", lo, hi)
    x = gs.tensor(arr, requires_grad=True)
    tx = torch_ref.tensor(arr, requires_grad=True)
    (gx,) = gs.autograd.grad([g_fn(x).sum()], [x], create_graph=True)
    gx.sum().backward()
    (tgx,) = torch_ref.autograd.grad(torch_fn(torch_ref, t_name)(tx).sum(), tx, create_graph=True)
    tgx.sum().backward()
    assert_close(gx.detach(), tgx.detach(), rtol=1e-6, atol=1e-8)
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-8)


def test_unary_methods_match_functions():
    x = gs.tensor([[0.5, 1.5], [2.0, 3.0]])
    for name in [
        "exp",
        "log",
        "sqrt",
        "rsqrt",
        "sigmoid",
        "tanh",
        "relu",
        "erf",
        "abs",
        "neg",
        "square",
        "reciprocal",
        "log1p",
        "expm1",
        "sin",
        "cos",
        "tan",
        "floor",
        "ceil",
        "round",
        "trunc",
        "frac",
        "sign",
        "log2",
        "log10",
    ]:
        assert_close(getattr(x, name)(), getattr(gs, name)(x), check_dtype=False)
    assert_close(-x, gs.neg(x), check_dtype=False)
    assert_close(abs(-x), x, check_dtype=False)


def test_round_decimals(torch_ref):
    arr = np.array([1.2345, -2.5551, 0.125])
    assert_close(
        gs.round(gs.tensor(arr), decimals=2), torch_ref.round(torch_ref.tensor(arr), decimals=2)
    )


def test_special_values(torch_ref):
    vals = [float("nan"), float("inf"), -float("inf"), 0.0, -0.0, 1e30, -1e30]
    g, t = make(np.array(vals), "float32")
    for name in ["relu", "sigmoid", "exp", "tanh", "abs", "sign", "softplus", "floor", "silu"]:
        g_fn, t_name, _ = UNARY[name]
        assert_close(g_fn(g), torch_fn(torch_ref, t_name)(t))
    for p in ["isnan", "isinf", "isfinite"]:
        assert_close(getattr(gs, p)(g), getattr(torch_ref, p)(t))
        assert_close(getattr(g, p)(), getattr(torch_ref, p)(t))


@pytest.mark.parametrize("dtype", DTYPES)
def test_predicates_all_dtypes(torch_ref, dtype):
    g, t = make(sample((2, 3), dtype), dtype)
    for p in ["isnan", "isinf", "isfinite", "logical_not"]:
        check_same(getattr(gs, p), getattr(torch_ref, p), [g], [t], dtype)
    check_same(operator.invert, operator.invert, [g], [t], dtype)


# ---------------------------------------------------------------- binary

BINARY = {
    "add": operator.add,
    "sub": operator.sub,
    "mul": operator.mul,
    "truediv": operator.truediv,
    "floordiv": operator.floordiv,
    "mod": operator.mod,
    "pow": operator.pow,
    "and": operator.and_,
    "or": operator.or_,
    "xor": operator.xor,
    "eq": operator.eq,
    "ne": operator.ne,
    "lt": operator.lt,
    "le": operator.le,
    "gt": operator.gt,
    "ge": operator.ge,
    "maximum": "maximum",
    "minimum": "minimum",
    "fmod": "fmod",
    "remainder": "remainder",
    "floor_divide": "floor_divide",
    "logical_and": "logical_and",
    "logical_or": "logical_or",
    "logical_xor": "logical_xor",
    "div_trunc": "div_trunc",
    "div_floor": "div_floor",
}
DIVISIONS = {
    "truediv",
    "floordiv",
    "mod",
    "fmod",
    "remainder",
    "floor_divide",
    "div_trunc",
    "div_floor",
}


def binary_fns(torch, name):
    op = BINARY[name]
    if callable(op):
        return op, op
    if name == "div_trunc":
        return (
            lambda a, b: gs.div(a, b, rounding_mode="trunc"),
            lambda a, b: torch.div(a, b, rounding_mode="trunc"),
        )
    if name == "div_floor":
        return (
            lambda a, b: gs.div(a, b, rounding_mode="floor"),
            lambda a, b: torch.div(a, b, rounding_mode="floor"),
        )
    return getattr(gs, op), getattr(torch, op)


def binary_inputs(name, dtype, shape_a=(3, 4), shape_b=(3, 4)):
    rng = np.random.default_rng(2)
    a = sample(shape_a, dtype, rng=rng)
    b = sample(shape_b, dtype, rng=rng)
    if name in DIVISIONS and dtype != "bool":
        b = np.where(b == 0, 1, b).astype(b.dtype)
        if dtype in FLOATS:
            b = np.where(np.abs(b) < 0.3, 0.7, b)
    if name == "pow":
        if dtype in FLOATS:
            a = np.abs(a) + 0.2
        elif dtype in ("int32", "int64"):
            b = np.abs(b) % 4
        elif dtype == "uint8":
            b = b % 3
    return a, b


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_values_and_dtypes(torch_ref, name, dtype):
    g_fn, t_fn = binary_fns(torch_ref, name)
    a, b = binary_inputs(name, dtype)
    ga, ta = make(a, dtype)
    gb, tb = make(b, dtype)
    check_same(g_fn, t_fn, [ga, gb], [ta, tb], dtype)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_broadcasting_and_layouts(torch_ref, name):
    g_fn, t_fn = binary_fns(torch_ref, name)
    a, b = binary_inputs(name, "float64", (2, 1, 4), (3, 1))
    ga, ta = make(a, "float64")
    gb, tb = make(b, "float64")
    check_same(g_fn, t_fn, [ga, gb], [ta, tb], "float64")
    # transposed operands
    a2, b2 = binary_inputs(name, "float64", (4, 3), (4, 3))
    ga2 = gs.tensor(np.ascontiguousarray(a2.T)).transpose(0, 1)
    gb2 = gs.tensor(np.ascontiguousarray(b2.T)).transpose(0, 1)
    check_same(
        g_fn, t_fn, [ga2, gb2], [torch_ref.from_numpy(a2), torch_ref.from_numpy(b2)], "float64"
    )
    # large, with a broadcast row (bias-add shape) and a transposed operand
    a3, b3 = binary_inputs(name, "float32", (256, 160), (160,))
    ga3, ta3 = make(a3, "float32")
    gb3, tb3 = make(b3, "float32")
    check_same(g_fn, t_fn, [ga3, gb3], [ta3, tb3], "float32")
    check_same(
        g_fn,
        t_fn,
        [ga3.transpose(0, 1), gb3.expand(256, 160).transpose(0, 1)],
        [ta3.transpose(0, 1), tb3.expand(256, 160).transpose(0, 1)],
        "float32",
    )
    # 0-d with 0-d, and empty with a broadcast operand
    g0a, t0a = make(a[0, 0, 0], "float64")
    g0b, t0b = make(b[0, 0], "float64")
    check_same(g_fn, t_fn, [g0a, g0b], [t0a, t0b], "float64")
    gea, tea = make(np.zeros((0, 4)), "float64")
    geb, teb = make(b[:, 0][:1], "float64")
    check_same(g_fn, t_fn, [gea, geb], [tea, teb], "float64")


SCALARS = [2, -3, 2.5, -0.5, True]


@pytest.mark.parametrize("scalar", SCALARS, ids=repr)
@pytest.mark.parametrize("dtype", ["float32", "float16", "int64", "int32", "uint8", "bool"])
@pytest.mark.parametrize(
    "name", ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "eq", "lt", "maximum"]
)
def test_binary_with_python_scalars(torch_ref, name, dtype, scalar):
    g_fn, t_fn = binary_fns(torch_ref, name)
    a = sample((2, 3), dtype)
    if name == "pow" and dtype in FLOATS:
        a = np.abs(a) + 0.5
    if name in DIVISIONS and dtype != "bool":
        a = np.where(a == 0, 1, a).astype(a.dtype)
    g, t = make(a, dtype)
    if name == "maximum":  # takes tensors only: the scalar becomes a 0-d tensor

        def g_fn(x, y):
            return gs.maximum(*(v if isinstance(v, gs.Tensor) else gs.tensor(v) for v in (x, y)))

        def t_fn(x, y):
            return torch_ref.maximum(
                *(v if isinstance(v, torch_ref.Tensor) else torch_ref.tensor(v) for v in (x, y))
            )

    check_same(g_fn, t_fn, [g, scalar], [t, scalar], dtype)  # tensor op scalar
    check_same(g_fn, t_fn, [scalar, g], [scalar, t], dtype)  # reflected


PROMOTION = [
    # (a dtype, b dtype or python scalar, op)
    ("int64", 2.5, "mul"),
    ("int32", 2, "add"),
    ("uint8", 300, "add"),
    ("int64", "int64", "truediv"),
    ("int32", "int32", "truediv"),
    ("bool", "bool", "truediv"),
    ("float16", 2.5, "mul"),
    ("float16", "float32", "add"),
    ("float16", "bfloat16", "add"),
    ("int32", "float16", "mul"),
    ("uint8", "int32", "add"),
    ("bool", "uint8", "add"),
    ("bool", 1.5, "mul"),
    ("int64", 0.5, "pow"),
    ("int32", "int32", "floordiv"),
    ("int64", "int64", "mod"),
]


@pytest.mark.parametrize("a_dt,b,name", PROMOTION, ids=str)
def test_type_promotion(torch_ref, a_dt, b, name):
    g_fn, t_fn = binary_fns(torch_ref, name)
    a = np.array([[1, 2, 3], [4, 5, 6]])
    ga, ta = make(a.astype(bool) if a_dt == "bool" else a, a_dt)
    if isinstance(b, str):
        bb = np.array([[2, 1, 3], [1, 2, 4]])
        gb, tb = make(np.ones_like(bb, dtype=bool) if b == "bool" else bb, b)
    else:
        gb, tb = b, b
    check_same(g_fn, t_fn, [ga, gb], [ta, tb], "float16")


@pytest.mark.parametrize(
    "a_dt,b_dt",
    [
        ("float32", "float64"),
        ("int32", "int64"),
        ("int64", "float64"),
        ("float16", "float64"),
        ("uint8", "int64"),
    ],
)
def test_zero_dim_tensor_does_not_upcast_same_category(torch_ref, a_dt, b_dt):
    ga, ta = make(np.array([1, 2, 3]), a_dt)
    gb, tb = make(np.array(2), b_dt)
    for op in (operator.add, operator.mul, operator.truediv):
        check_same(op, op, [ga, gb], [ta, tb], "float16")
        check_same(op, op, [gb, ga], [tb, ta], "float16")


def test_pow_negative_base_and_scalar_base(torch_ref):
    a = np.array([-2.0, -1.5, 0.0, 3.0])
    g, t = make(a, "float32")
    for e in [2, 3, -1, 2.0, 0.5, 0]:
        assert_close(g**e, t**e)
    assert_close(2**g, 2**t)
    assert_close(2.5**g, 2.5**t)
    gi, ti = make(np.array([1, 2, 3]), "int64")
    assert_close(2**gi, 2**ti)
    assert_close(gs.pow(2, gi), torch_ref.pow(2, ti))
    assert_close(gi.pow(gi), ti.pow(ti))
    assert_close(
        gs.tensor([-3, -1, 1, 2]) ** gs.tensor([-1, -3, -2, -1]),
        torch_ref.tensor([-3, -1, 1, 2]) ** torch_ref.tensor([-1, -3, -2, -1]),
    )
    with pytest.raises(RuntimeError, match="negative integer powers"):
        gi**-1


def test_python_division_semantics(torch_ref):
    a = np.array([-7, 7, -7, 7, 0])
    b = np.array([2, -2, -2, 2, 3])
    for dt in ("int64", "float64"):
        ga, ta = make(a, dt)
        gb, tb = make(b, dt)
        assert_close(ga // gb, ta // tb)
        assert_close(ga % gb, ta % tb)
        assert_close(gs.fmod(ga, gb), torch_ref.fmod(ta, tb))
        assert_close(gs.remainder(ga, gb), torch_ref.remainder(ta, tb))
        assert_close(gs.floor_divide(ga, gb), torch_ref.floor_divide(ta, tb))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        gs.tensor([1, 2]) // gs.tensor([0, 1])
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        gs.tensor([1, 2]) % 0
    assert_close(gs.tensor([1.0, -1.0, 0.0]) // 0, torch_ref.tensor([1.0, -1.0, 0.0]) // 0)


def test_bool_logic_operators(torch_ref):
    a, b = np.array([True, True, False, False]), np.array([True, False, True, False])
    ga, ta = make(a, "bool")
    gb, tb = make(b, "bool")
    for op in (operator.and_, operator.or_, operator.xor):
        assert_close(op(ga, gb), op(ta, tb))
    assert_close(~ga, ~ta)
    assert_close(ga + gb, ta + tb)
    assert_close(ga * gb, ta * tb)
    with pytest.raises(RuntimeError, match="Subtraction"):
        ga - gb
    with pytest.raises(RuntimeError, match="Subtraction"):
        gs.ones(2) - True
    with pytest.raises(RuntimeError, match="Negation"):
        gs.neg(ga)
    with pytest.raises(NotImplementedError):
        gs.tensor([1.0]) & gs.tensor([1.0])


BINARY_GRAD = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b,
    "pow": lambda a, b: a**b,
    "maximum": lambda a, b: a.maximum(b),
    "minimum": lambda a, b: a.minimum(b),
    "remainder": lambda a, b: a % b,
    "fmod": lambda a, b: a.fmod(b),
}


@pytest.mark.parametrize("name", sorted(BINARY_GRAD))
def test_binary_grad_matches_torch(torch_ref, name):
    f = BINARY_GRAD[name]
    rng = np.random.default_rng(3)
    a = rng.uniform(0.5, 3, size=(2, 3, 4))
    b = rng.uniform(0.5, 2, size=(3, 1)) * rng.choice([-1, 1], size=(3, 1))
    if name == "pow":
        b = np.abs(b)
    if name in ("maximum", "minimum"):
        b = np.round(b * 2) / 2
        a[0, 0, :2] = b[0, 0]  # ties split the gradient
    x, y = gs.tensor(a, requires_grad=True), gs.tensor(b, requires_grad=True)
    tx, ty = torch_ref.tensor(a, requires_grad=True), torch_ref.tensor(b, requires_grad=True)
    w = rng.normal(size=(2, 3, 4))
    (f(x, y) * gs.tensor(w)).sum().backward()
    (f(tx, ty) * torch_ref.from_numpy(w)).sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-6, atol=1e-8)
    assert_close(y.grad, ty.grad, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("name", sorted(set(BINARY_GRAD) - {"maximum", "minimum"}))
def test_binary_gradcheck(name):
    f = BINARY_GRAD[name]
    rng = np.random.default_rng(4)
    x = gs.tensor(rng.uniform(0.5, 2, size=(2, 3)), requires_grad=True)
    y = gs.tensor(rng.uniform(0.6, 1.7, size=(3,)), requires_grad=True)
    assert gradcheck(f, (x, y))


def test_binary_grad_only_where_needed(torch_ref):
    # a scalar operand and a tensor not requiring grad get no gradient
    x = gs.tensor([1.0, 2.0], dtype=gs.float64, requires_grad=True)
    c = gs.tensor([3.0, 4.0], dtype=gs.float64)
    (x * c + 2 * x - x / 4 + x**2).sum().backward()
    tx = torch_ref.tensor([1.0, 2.0], dtype=torch_ref.float64, requires_grad=True)
    tc = torch_ref.tensor([3.0, 4.0], dtype=torch_ref.float64)
    (tx * tc + 2 * tx - tx / 4 + tx**2).sum().backward()
    assert_close(x.grad, tx.grad)
    assert c.grad is None


def test_pow_grad_edge_cases(torch_ref):
    a = np.array([0.0, -2.0, 1.5, 0.0])
    b = np.array([0.0, 3.0, 2.0, 2.0])
    x, y = gs.tensor(a, requires_grad=True), gs.tensor(b, requires_grad=True)
    tx, ty = torch_ref.tensor(a, requires_grad=True), torch_ref.tensor(b, requires_grad=True)
    (x**y).sum().backward()
    (tx**ty).sum().backward()
    assert_close(x.grad, tx.grad)
    assert_close(y.grad, ty.grad)
    x2 = gs.tensor([-2.0, 0.0, 3.0], dtype=gs.float64, requires_grad=True)
    assert gradcheck(lambda t: t**3, (x2,))
    assert gradcheck(lambda t: 2.0**t, (x2,))


# ---------------------------------------------------------------- where, clamp


def test_where_values_dtypes_and_grad(torch_ref):
    rng = np.random.default_rng(5)
    c = rng.integers(0, 2, size=(3, 1)).astype(bool)
    a, b = rng.normal(size=(3, 4)), rng.normal(size=(4,))
    gc, tc = make(c, "bool")
    x, y = gs.tensor(a, requires_grad=True), gs.tensor(b, requires_grad=True)
    tx, ty = torch_ref.tensor(a, requires_grad=True), torch_ref.tensor(b, requires_grad=True)
    out, tout = gs.where(gc, x, y), torch_ref.where(tc, tx, ty)
    assert_close(out, tout)
    w = rng.normal(size=(3, 4))
    (out * gs.tensor(w)).sum().backward()
    (tout * torch_ref.from_numpy(w)).sum().backward()
    assert_close(x.grad, tx.grad)
    assert_close(y.grad, ty.grad)
    assert gradcheck(
        lambda p, q: gs.where(gc, p, q),
        (gs.tensor(a, requires_grad=True), gs.tensor(b, requires_grad=True)),
    )
    # scalars and promotion
    assert_close(gs.where(gc, 1, 2.5), torch_ref.where(tc, 1, 2.5))
    gi, ti = make(np.array([1, 2, 3, 4]), "int64")
    assert_close(gs.where(gc, gi, 2.5), torch_ref.where(tc, ti, 2.5))
    assert_close(gs.where(gc, gi, 0), torch_ref.where(tc, ti, 0))
    assert_close(gi.where(gc, -1), ti.where(tc, -1))
    with pytest.raises(RuntimeError, match="boolean"):
        gs.where(gs.tensor([1.0, 0.0]), 1.0, 2.0)


CLAMPS = [
    (-0.5, 0.5),
    (None, 0.5),
    (-0.5, None),
    (1, 2),
    ("tensor", "tensor"),
    ("tensor", None),
    (None, "tensor"),
]


@pytest.mark.parametrize("lo,hi", CLAMPS, ids=str)
def test_clamp(torch_ref, lo, hi):
    rng = np.random.default_rng(6)
    a = rng.normal(size=(3, 4))
    bounds = {"lo": rng.normal(size=(4,)) - 0.8, "hi": rng.normal(size=(3, 1)) + 0.8}

    def args(mod, grad):
        def one(v, key):
            if v == "tensor":
                return (gs if mod == "gs" else torch_ref).tensor(bounds[key], requires_grad=grad)
            return v

        return one(lo, "lo"), one(hi, "hi")

    x = gs.tensor(a, requires_grad=True)
    tx = torch_ref.tensor(a, requires_grad=True)
    glo, ghi = args("gs", True)
    tlo, thi = args("torch", True)
    out, tout = gs.clamp(x, glo, ghi), torch_ref.clamp(tx, tlo, thi)
    assert_close(out, tout)
    assert_close(x.clip(glo, ghi), tx.clip(tlo, thi))
    out.sum().backward()
    tout.sum().backward()
    assert_close(x.grad, tx.grad)
    for g, t in [(glo, tlo), (ghi, thi)]:
        if isinstance(g, gs.Tensor):
            assert_close(g.grad, t.grad)
    # integer input with a float bound promotes
    gi, ti = make(np.array([1, 2, 3]), "int64")
    assert_close(gs.clamp(gi, min=1.5), torch_ref.clamp(ti, min=1.5))
    assert_close(gi.clamp(max=2), ti.clamp(max=2))


def test_clamp_needs_a_bound():
    with pytest.raises(RuntimeError, match="min"):
        gs.clamp(gs.tensor([1.0]))


def test_clamp_gradcheck():
    x = gs.tensor([-1.3, 0.2, 0.9, 2.1], dtype=gs.float64, requires_grad=True)
    lo = gs.tensor([-1.0, -1.0, 1.0, 0.0], dtype=gs.float64, requires_grad=True)
    assert gradcheck(lambda a, b: gs.clamp(a, min=b, max=1.5), (x, lo))


def test_addcmul_addcdiv_lerp(torch_ref):
    rng = np.random.default_rng(7)
    a, b, c = (rng.uniform(0.5, 2, size=(2, 3)) for _ in range(3))
    ga, gb, gc = (gs.tensor(v) for v in (a, b, c))
    ta, tb, tc = (torch_ref.from_numpy(v) for v in (a, b, c))
    assert_close(gs.addcmul(ga, gb, gc, value=0.5), torch_ref.addcmul(ta, tb, tc, value=0.5))
    assert_close(ga.addcdiv(gb, gc, value=-2), ta.addcdiv(tb, tc, value=-2))
    assert_close(gs.lerp(ga, gb, 0.3), torch_ref.lerp(ta, tb, 0.3))
    assert_close(ga.lerp(gb, gc), ta.lerp(tb, tc))
    assert_close(gs.add(ga, gb, alpha=2), torch_ref.add(ta, tb, alpha=2))
    assert_close(ga.sub(gb, alpha=0.5), ta.sub(tb, alpha=0.5))
    gi, ti = make(np.array([1, 2]), "int64")
    assert_close(gi.add(gi, alpha=3), ti.add(ti, alpha=3))


# ---------------------------------------------------------------- in place

INPLACE = [
    ("add_", lambda t, o: t.add_(o, alpha=2)),
    ("sub_", lambda t, o: t.sub_(o)),
    ("mul_", lambda t, o: t.mul_(o)),
    ("div_", lambda t, o: t.div_(o)),
    ("pow_", lambda t, o: t.pow_(2)),
    ("clamp_", lambda t, o: t.clamp_(-0.5, 0.5)),
    ("clamp_t", lambda t, o: t.clamp_(min=o)),
    ("neg_", lambda t, o: t.neg_()),
    ("exp_", lambda t, o: t.exp_()),
    ("sqrt_", lambda t, o: t.abs_().sqrt_()),
    ("relu_", lambda t, o: t.relu_()),
    ("sigmoid_", lambda t, o: t.sigmoid_()),
    ("abs_", lambda t, o: t.abs_()),
    ("addcmul_", lambda t, o: t.addcmul_(o, o, value=0.5)),
    ("addcdiv_", lambda t, o: t.addcdiv_(o, o + 3, value=2)),
    ("lerp_", lambda t, o: t.lerp_(o, 0.25)),
    ("iadd", lambda t, o: operator.iadd(t, o)),
    ("imul", lambda t, o: operator.imul(t, 3)),
]


@pytest.mark.parametrize("name,f", INPLACE, ids=[n for n, _ in INPLACE])
def test_inplace_values_and_history(torch_ref, name, f):
    rng = np.random.default_rng(8)
    a, o = rng.normal(size=(3, 4)), rng.uniform(0.5, 1.5, size=(4,))
    # value, without autograd: the same object comes back, the buffer is written
    g = gs.tensor(a)
    t = torch_ref.tensor(a)
    r = f(g, gs.tensor(o))
    f(t, torch_ref.tensor(o))
    assert r is g or name in ("iadd", "imul")
    assert_close(g, t)
    # history: a non-leaf written in place keeps a correct gradient, for both operands
    x, y = gs.tensor(a, requires_grad=True), gs.tensor(o, requires_grad=True)
    tx, ty = torch_ref.tensor(a, requires_grad=True), torch_ref.tensor(o, requires_grad=True)
    h = x * 1.5
    th = tx * 1.5
    h2 = f(h, y)
    f(th, ty)
    assert_close(h2 if h2 is not None else h, th)
    w = rng.normal(size=(3, 4))
    (h * gs.tensor(w)).sum().backward()
    (th * torch_ref.from_numpy(w)).sum().backward()
    assert_close(x.grad, tx.grad)
    if ty.grad is not None:
        assert_close(y.grad, ty.grad)


def test_inplace_on_views_of_strided_and_non_recording():
    with gs.no_grad():
        p = gs.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        p.add_(gs.tensor([[1.0, 1.0], [1.0, 1.0]]), alpha=-0.5)
        p.mul_(2)
    assert p.tolist() == [[1.0, 3.0], [5.0, 7.0]]
    assert p.is_leaf and p.grad_fn is None
    t = gs.tensor([[1.0, 2.0], [3.0, 4.0]])
    v = t.transpose(0, 1)
    v.add_(gs.tensor([10.0, 20.0]))
    assert t.tolist() == [[11.0, 12.0], [23.0, 24.0]]


def test_inplace_dtype_rules():
    t = gs.tensor([1, 2, 3])
    t.add_(2)
    assert t.tolist() == [3, 4, 5] and t.dtype == gs.int64
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.add_(1.5)
    with pytest.raises(RuntimeError, match="can't be cast"):
        t.div_(2)
    f = gs.tensor([1.0, 2.0], dtype=gs.float16)
    f.mul_(gs.tensor([2.0, 3.0], dtype=gs.float32))
    assert f.dtype == gs.float16 and f.tolist() == [2.0, 6.0]


def test_inplace_on_leaf_requiring_grad_raises():
    x = gs.tensor([1.0, 2.0], requires_grad=True)
    for f in (
        lambda: x.add_(1),
        lambda: x.exp_(),
        lambda: x.clamp_(0, 1),
        lambda: x.mul_(x),
        lambda: x.relu_(),
        lambda: x.addcmul_(x, x),
    ):
        with pytest.raises(RuntimeError, match="leaf Variable that requires grad"):
            f()
    assert x.tolist() == [1.0, 2.0]


def test_inplace_invalidates_saved_tensor():
    x = gs.tensor([1.0, 2.0], requires_grad=True)
    y = x * 1
    z = y * y  # saves y
    y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_sigmoid_relu_functional_inplace():
    t = gs.tensor([-1.0, 0.0, 2.0])
    assert gs.relu_(t) is t
    assert t.tolist() == [0.0, 0.0, 2.0]
    gs.sigmoid_(t)
    assert_close(t, gs.sigmoid(gs.tensor([0.0, 0.0, 2.0])), check_dtype=False)


# ---------------------------------------------------------------- bad input


def test_shape_mismatch_names_both_shapes():
    a, b = gs.ones(3, 4), gs.ones(2, 4)
    for f in (
        operator.add,
        operator.mul,
        operator.truediv,
        operator.pow,
        gs.maximum,
        operator.lt,
        gs.fmod,
        gs.logical_and,
    ):
        with pytest.raises(RuntimeError, match=r"\[3, 4\].*\[2, 4\]"):
            f(a, b)
    with pytest.raises(RuntimeError, match=r"\[3, 4\].*\[2, 4\]"):
        gs.where(gs.ones(3, 4) > 0, a, b)
    with pytest.raises(RuntimeError, match=r"\[3, 4\]"):
        a.add_(gs.ones(5))
    with pytest.raises(RuntimeError, match=r"doesn't match the broadcast shape \[2, 3, 4\]"):
        a.add_(gs.ones(2, 3, 4))


def test_wrong_argument_types():
    t = gs.ones(2)
    with pytest.raises(TypeError):
        t + "a"
    with pytest.raises(TypeError):
        t * object()
    with pytest.raises(TypeError, match="add"):
        gs.add(t, "a")
    with pytest.raises(TypeError, match="exp"):
        gs.exp([1.0, 2.0])
    with pytest.raises(TypeError, match="sigmoid"):
        gs.sigmoid(1.0)
    with pytest.raises(TypeError, match="clamp"):
        gs.clamp(t, min="x")
    with pytest.raises(TypeError, match="where"):
        gs.where(t > 0, t, "b")
    assert (t == None) is False  # noqa: E711 - Python falls back to identity


def test_gelu_bad_approximate_and_int_inputs():
    with pytest.raises(RuntimeError, match="approximate"):
        gs.gelu(gs.ones(2), approximate="fast")
    with pytest.raises(NotImplementedError):
        gs.gelu(gs.tensor([1, 2]))
    with pytest.raises(NotImplementedError):
        gs.frac(gs.tensor([1, 2]))
