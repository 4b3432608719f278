"""autograd.functional against torch.autograd.functional (float64)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs
from gradstream.autograd import functional as F
from tests.helpers import assert_close

torch = pytest.importorskip("torch")
TF = torch.autograd.functional


def funcs(lib):
    """Functions of one and of two inputs, with one and with two outputs."""
    return {
        "one_to_one": lambda x: (x.sin() * x).sum(-1) + x.exp()[..., 0],
        "one_to_two": lambda x: (x**3, x.tanh().sum()),
        "two_to_one": lambda x, y: (x * y.cos()).sum() + (x**2).sum(),
        "two_to_two": lambda x, y: (x * y, (x - y).exp()),
    }


def scalar_funcs(lib):
    return {
        "one": lambda x: (x.sin() * x**2).sum(),
        "two": lambda x, y: (x * y.exp()).sum() + (x**3).sum(),
    }


def arrays(n, shape, seed):
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, shape) for _ in range(n)]


def both(arrs):
    return tuple(gs.tensor(a) for a in arrs), tuple(torch.tensor(a) for a in arrs)


def flat(x):
    if isinstance(x, tuple | list):
        return [y for item in x for y in flat(item)]
    return [x]


def same(a, b):
    fa, fb = flat(a), flat(b)
    assert len(fa) == len(fb)
    for x, y in zip(fa, fb, strict=True):
        assert_close(x, y, rtol=1e-10, atol=1e-12)


@settings(max_examples=25, deadline=None)
@given(
    name=st.sampled_from(list(funcs(None))),
    shape=st.sampled_from([(3,), (2, 2), (1,)]),
    seed=st.integers(0, 99),
)
def test_jacobian_vjp_jvp_match_torch(name, shape, seed):
    g_f, t_f = funcs(gs)[name], funcs(torch)[name]
    n = 2 if name.startswith("two") else 1
    g_in, t_in = both(arrays(n, shape, seed))
    g_arg = g_in if n == 2 else g_in[0]
    t_arg = t_in if n == 2 else t_in[0]
    same(F.jacobian(g_f, g_arg), TF.jacobian(t_f, t_arg))
    t_out = t_f(*t_in)
    v = tuple(np.ones(tuple(o.shape)) * 0.5 for o in flat(t_out))
    gv, tv = both(v)
    one_out = not isinstance(t_out, tuple)
    same(F.vjp(g_f, g_arg, gv[0] if one_out else gv), TF.vjp(t_f, t_arg, tv[0] if one_out else tv))
    u = arrays(n, shape, seed + 1)
    gu, tu = both(u)
    same(F.jvp(g_f, g_arg, gu if n == 2 else gu[0]), TF.jvp(t_f, t_arg, tu if n == 2 else tu[0]))


@pytest.mark.parametrize("name", ["one", "two"])
@pytest.mark.parametrize("create_graph", [False, True])
def test_hessian_hvp_vhp_match_torch(name, create_graph):
    g_f, t_f = scalar_funcs(gs)[name], scalar_funcs(torch)[name]
    n = 2 if name == "two" else 1
    g_in, t_in = both(arrays(n, (3,), 7))
    g_arg = g_in if n == 2 else g_in[0]
    t_arg = t_in if n == 2 else t_in[0]
    same(F.hessian(g_f, g_arg, create_graph), TF.hessian(t_f, t_arg, create_graph))
    gv, tv = both(arrays(n, (3,), 8))
    g_v, t_v = (gv, tv) if n == 2 else (gv[0], tv[0])
    same(F.hvp(g_f, g_arg, g_v), TF.hvp(t_f, t_arg, t_v))
    same(F.vhp(g_f, g_arg, g_v), TF.vhp(t_f, t_arg, t_v))


def test_create_graph_allows_a_second_derivative():
    x = gs.tensor([0.3, -0.7], dtype=gs.float64, requires_grad=True)
    (_, g) = F.vjp(lambda t: (t**3).sum(), x, create_graph=True)
    (h,) = gs.autograd.grad(g.sum(), x)
    assert_close(h, 6 * x.detach(), rtol=1e-12)


def test_unused_inputs_and_errors_match_torch():
    g_in, t_in = both(arrays(2, (2,), 3))
    same(F.jacobian(lambda x, y: x * 2, g_in), TF.jacobian(lambda x, y: x * 2, t_in))
    with pytest.raises(RuntimeError):
        TF.jacobian(lambda x, y: x * 2, t_in, strict=True)
    with pytest.raises(RuntimeError):
        F.jacobian(lambda x, y: x * 2, g_in, strict=True)
    for fn, tfn in [(F.vjp, TF.vjp), (F.hessian, TF.hessian)]:
        with pytest.raises(RuntimeError):
            tfn(lambda x: x * 2, t_in[0])
        with pytest.raises(RuntimeError):
            fn(lambda x: x * 2, g_in[0])
    with pytest.raises(TypeError):
        F.jacobian(lambda x: x, 3.0)


def test_gradgradcheck_passes_and_catches_a_wrong_double_backward():
    x = gs.tensor([0.4, -1.1, 0.7], dtype=gs.float64, requires_grad=True)
    assert gs.autograd.gradgradcheck(lambda t: (t.sin() * t**2).sum(), (x,))
    assert gs.autograd.gradgradcheck(lambda t: t.exp() * t, x)

    class WrongSecond(gs.autograd.Function):
        """d/dx x^2 = 2x, computed so that its own derivative is wrong (3 instead of 2)."""

        @staticmethod
        def forward(ctx, t):
            ctx.save_for_backward(t)
            return t * t

        @staticmethod
        def backward(ctx, g):
            (t,) = ctx.saved_tensors
            return g * (3 * t - t.detach())

    assert gs.autograd.gradcheck(WrongSecond.apply, (x,))
    assert not gs.autograd.gradgradcheck(WrongSecond.apply, (x,), raise_exception=False)
    with pytest.raises(RuntimeError):
        gs.autograd.gradgradcheck(WrongSecond.apply, (x,))


def test_variable_is_a_tensor_alias(torch_ref):
    t = gs.ones(2)
    v = gs.autograd.Variable(t, requires_grad=True)
    tv = torch_ref.autograd.Variable(torch_ref.ones(2), requires_grad=True)
    assert isinstance(v, gs.Tensor) and v.requires_grad == tv.requires_grad and v.is_leaf
    assert isinstance(t, gs.autograd.Variable) and isinstance(v, gs.autograd.Variable)
    assert not isinstance(3.0, gs.autograd.Variable)
    with pytest.raises(TypeError):
        gs.autograd.Variable([1.0])


def test_set_multithreading_enabled_restores_the_mode():
    from gradstream.autograd.grad_mode import set_multithreading_enabled as mt

    x = gs.ones(2, requires_grad=True)
    with mt(False):
        assert mt._enabled is False
        (x * 3).sum().backward()
    assert mt._enabled is True
    assert x.grad.tolist() == [3.0, 3.0]
