"""The pointwise activations (sigmoid, silu, gelu, softplus), defined once in
`ops::unary`: values, gradients, dtypes, error classes and double backward, against
PyTorch. `gradstream.X` and `gradstream.nn.functional.X` are the same op."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as TF
from helpers import assert_close

import gradstream as gs
import gradstream.nn.functional as F

# (name, gradstream function, torch function)
ACTIVATIONS = [
    ("sigmoid", F.sigmoid, torch.sigmoid),
    ("silu", F.silu, TF.silu),
    ("gelu", F.gelu, TF.gelu),
    (
        "gelu_tanh",
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: TF.gelu(x, approximate="tanh"),
    ),
    ("softplus", F.softplus, TF.softplus),
    (
        "softplus_beta",
        lambda x: F.softplus(x, beta=2.0, threshold=3.0),
        lambda x: TF.softplus(x, beta=2.0, threshold=3.0),
    ),
]
IDS = [a[0] for a in ACTIVATIONS]


def sample(dtype=np.float32, n=1000):
    # Wide enough to cross softplus' threshold and gelu's tails; exact zeros included.
    rng = np.random.default_rng(0)
    v = rng.normal(scale=4.0, size=n).astype(dtype)
    v[:3] = [0.0, 25.0, -25.0]
    return v


@pytest.mark.parametrize("name,f,tf", ACTIVATIONS, ids=IDS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_and_gradients(name, f, tf, dtype):
    v = sample(getattr(np, dtype))
    x = gs.tensor(v, requires_grad=True)
    tx = torch.tensor(v, requires_grad=True)
    y, ty = f(x), tf(tx)
    # Inputs reach |x| ~ 16: an absolute float32 error of a few |x| ulps near y = 0
    # (PyTorch's vectorised tanh saturates to exactly -1 sooner than libm's).
    tol = dict(rtol=1e-5, atol=2e-5) if dtype == "float32" else dict(rtol=1e-12, atol=1e-12)
    assert_close(y, ty, **tol)
    g = np.random.default_rng(1).normal(size=v.shape).astype(v.dtype)
    y.backward(gs.tensor(g))
    ty.backward(torch.tensor(g))
    assert_close(x.grad, tx.grad, **tol)


@pytest.mark.parametrize("name,f,tf", ACTIVATIONS, ids=IDS)
def test_noncontiguous_and_broadcast_gradient(name, f, tf):
    v = sample().reshape(20, 50)
    x = gs.tensor(v).transpose(0, 1).requires_grad_()
    tx = torch.tensor(v).transpose(0, 1).requires_grad_()
    y, ty = f(x), tf(tx)
    assert_close(y, ty, rtol=1e-5, atol=2e-5)
    # sum's backward hands a broadcast (stride-0) gradient to the fused backward kernel.
    y.sum().backward()
    ty.sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("name,f,tf", ACTIVATIONS, ids=IDS)
def test_half_types_keep_their_dtype(name, f, tf):
    v = sample(n=64)
    for gdt, tdt in [(gs.float16, torch.float16), (gs.bfloat16, torch.bfloat16)]:
        y = f(gs.tensor(v).to(gdt))
        ty = tf(torch.tensor(v).to(tdt))
        assert y.dtype == gdt
        assert_close(y.float(), ty.float(), rtol=1e-2, atol=1e-2, check_dtype=False)


def test_same_op_through_both_names():
    v = sample()
    x = gs.tensor(v)
    for a, b in [(gs.sigmoid(x), F.sigmoid(x)), (gs.nn.functional.silu(x), F.silu(x))]:
        assert_close(a, b, rtol=0, atol=0)
    assert F.sigmoid(gs.tensor(v, requires_grad=True)).grad_fn.name() == "SigmoidBackward0"


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8", "bool"])
def test_sigmoid_of_integers_promotes_to_float32(dtype):
    v = np.array([1, 0, 3, 1])
    tx = torch.tensor(v).to(getattr(torch, dtype))
    x = gs.tensor(v).to(getattr(gs, dtype))
    for f, tf in [(gs.sigmoid, torch.sigmoid), (F.sigmoid, TF.sigmoid)]:
        y, ty = f(x), tf(tx)
        assert ty.dtype == torch.float32
        assert_close(y, ty)


@pytest.mark.parametrize("name", ["silu", "gelu", "gelu_tanh", "softplus"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "bool"])
def test_integer_inputs_raise_like_torch(name, dtype):
    f = dict((a[0], a[1]) for a in ACTIVATIONS)[name]
    tf = dict((a[0], a[2]) for a in ACTIVATIONS)[name]
    v = np.array([1, 0, 2])
    with pytest.raises(NotImplementedError):
        tf(torch.tensor(v).to(getattr(torch, dtype)))
    with pytest.raises(NotImplementedError):
        f(gs.tensor(v).to(getattr(gs, dtype)))


def test_gelu_unknown_approximation_is_a_runtime_error():
    with pytest.raises(RuntimeError):
        TF.gelu(torch.zeros(2), approximate="fast")
    with pytest.raises(RuntimeError, match="approximate"):
        F.gelu(gs.zeros(2), approximate="fast")
    with pytest.raises(RuntimeError, match="approximate"):
        gs.nn.functional.gelu(gs.zeros(2), approximate="fast")


@pytest.mark.parametrize("name,f,tf", ACTIVATIONS, ids=IDS)
def test_double_backward_matches_torch(name, f, tf):
    v = sample(np.float64, n=200)
    x = gs.tensor(v, requires_grad=True)
    tx = torch.tensor(v, requires_grad=True)
    (g,) = gs.autograd.grad(f(x).sum(), x, create_graph=True)
    (tg,) = torch.autograd.grad(tf(tx).sum(), tx, create_graph=True)
    assert_close(g, tg, rtol=1e-10, atol=1e-12)
    (gg,) = gs.autograd.grad((g * g).sum(), x)
    (tgg,) = torch.autograd.grad((tg * tg).sum(), tx)
    assert_close(gg, tgg, rtol=1e-9, atol=1e-10)


@pytest.mark.parametrize("name,f,tf", ACTIVATIONS, ids=IDS)
def test_gradcheck_first_and_second_order(name, f, tf):
    from gradstream.autograd import gradcheck

    # Away from softplus' threshold, where the function has a kink.
    v = np.linspace(-2.5, 2.3, 12)
    assert gradcheck(f, (gs.tensor(v, requires_grad=True),))

    def first_derivative(t):
        # gradcheck's finite differences run without grad mode; the derivative needs it.
        with gs.autograd.enable_grad():
            t = t if t.requires_grad else t.detach().requires_grad_()
            (d,) = gs.autograd.grad(f(t).sum(), t, create_graph=True)
        return d

    assert gradcheck(first_derivative, (gs.tensor(v, requires_grad=True),))


def test_fused_backward_keeps_the_gradient_dtype():
    x = gs.tensor(sample(n=16)).to(gs.float16).requires_grad_()
    tx = torch.tensor(sample(n=16)).to(torch.float16).requires_grad_()
    F.gelu(x).sum().backward()
    TF.gelu(tx).sum().backward()
    assert x.grad.dtype == gs.float16
    assert_close(x.grad.float(), tx.grad.float(), rtol=1e-2, atol=1e-3, check_dtype=False)
