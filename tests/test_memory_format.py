"""`memory_format=` as PyTorch's: channels-last layouts made by `contiguous`, `to`,
`clone`, the factories and `Module.to`, with `is_contiguous(memory_format=...)` and
`stride()` answering as PyTorch's do, and values and gradients unchanged."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs

torch = pytest.importorskip("torch")

FORMATS = ["contiguous_format", "channels_last", "channels_last_3d"]

shapes4 = st.lists(st.integers(1, 4), min_size=4, max_size=4)
shapes = st.lists(st.integers(0, 3), min_size=1, max_size=5)


def both(shape, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return gs.tensor(a), torch.tensor(a)


def outcome(f):
    try:
        return f()
    except RuntimeError as e:
        return RuntimeError, "format" in str(e)


def answers(mod, t):
    return {f: t.is_contiguous(memory_format=getattr(mod, f)) for f in FORMATS}


@settings(max_examples=60, deadline=None)
@given(shape=shapes, fmt=st.sampled_from(FORMATS), op=st.sampled_from(["contiguous", "to"]))
def test_layouts_as_torch(shape, fmt, op):
    g, t = both(shape)

    def run(mod, x):
        f = getattr(mod, fmt)
        y = x.contiguous(memory_format=f) if op == "contiguous" else x.to(memory_format=f)
        return answers(mod, y), tuple(y.stride()) if y.numel() else None, y

    ours = outcome(lambda: run(gs, g))
    theirs = outcome(lambda: run(torch, t))
    if isinstance(theirs, tuple) and theirs[0] is RuntimeError:
        assert ours == theirs
        return
    assert ours[:2] == theirs[:2], (shape, fmt, ours[:2], theirs[:2])
    np.testing.assert_array_equal(ours[2].numpy(), theirs[2].numpy())


@settings(max_examples=40, deadline=None)
@given(shape=shapes4, perm=st.permutations([0, 1, 2, 3]))
def test_is_contiguous_of_any_permutation_as_torch(shape, perm):
    g, t = both(shape)
    # a dense tensor in some order, seen through a permutation
    gp = g.permute(*perm).contiguous().permute(*np.argsort(perm).tolist())
    tp = t.permute(*perm).contiguous().permute(*np.argsort(perm).tolist())
    assert tuple(gp.stride()) == tuple(tp.stride())
    assert answers(gs, gp) == answers(torch, tp)
    # clone and *_like keep a channels-last layout (preserve_format)
    assert answers(gs, gp.clone()) == answers(torch, tp.clone())
    assert answers(gs, gs.empty_like(gp)) == answers(torch, torch.empty_like(tp))
    assert answers(gs, gs.zeros_like(gp)) == answers(torch, torch.zeros_like(tp))


def test_factories_take_a_memory_format():
    g = gs.empty(2, 3, 4, 5, memory_format=gs.channels_last)
    t = torch.empty(2, 3, 4, 5, memory_format=torch.channels_last)
    assert g.stride() == t.stride()
    assert g.is_contiguous(memory_format=gs.channels_last)
    assert not g.is_contiguous()


def test_gradients_pass_through_a_layout_change():
    g, t = both((2, 3, 4, 5), seed=1)
    g.requires_grad_(True)
    t.requires_grad_(True)
    w = np.random.default_rng(2).standard_normal((2, 3, 4, 5)).astype(np.float32)
    (g.contiguous(memory_format=gs.channels_last) * gs.tensor(w)).sum().backward()
    (t.contiguous(memory_format=torch.channels_last) * torch.tensor(w)).sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), t.grad.numpy())


def test_a_channels_last_conv_net_matches_torch():
    torch.manual_seed(0)
    tm = torch.nn.Conv2d(3, 4, 3, padding=1)
    gm = gs.nn.Conv2d(3, 4, 3, padding=1)
    gm.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    tm = tm.to(memory_format=torch.channels_last)
    gm = gm.to(memory_format=gs.channels_last)
    assert gm.weight.is_contiguous(memory_format=gs.channels_last)
    assert isinstance(gm.weight, gs.nn.Parameter)
    x = np.random.default_rng(3).standard_normal((2, 3, 8, 8)).astype(np.float32)
    gx = gs.tensor(x).to(memory_format=gs.channels_last)
    tx = torch.tensor(x).to(memory_format=torch.channels_last)
    gy, ty = gm(gx), tm(tx)
    np.testing.assert_allclose(gy.detach().numpy(), ty.detach().numpy(), rtol=1e-5, atol=1e-5)
    gy.square().sum().backward()
    ty.square().sum().backward()
    np.testing.assert_allclose(gm.weight.grad.numpy(), tm.weight.grad.numpy(), rtol=1e-4, atol=1e-4)


def test_bad_memory_formats():
    x = gs.ones(2, 3)
    with pytest.raises(RuntimeError, match="rank 4"):
        x.contiguous(memory_format=gs.channels_last)
    with pytest.raises(RuntimeError, match="preserve"):
        x.contiguous(memory_format=gs.preserve_format)
    with pytest.raises(TypeError, match="memory_format"):
        x.contiguous(memory_format="channels_last")
    assert not x.is_contiguous(memory_format=gs.channels_last)
    assert repr(gs.channels_last) == "gradstream.channels_last"
    import pickle

    assert pickle.loads(pickle.dumps(gs.channels_last)) is gs.channels_last


@pytest.mark.parametrize("in_backward", [False, True])
@pytest.mark.parametrize("opt", ["Adam", "SGD"])
def test_optimizers_step_channels_last_parameters_as_torch(opt, in_backward):
    kw = {"lr": 0.01} if opt == "Adam" else {"lr": 0.1, "momentum": 0.9}
    torch.manual_seed(1)
    tm = torch.nn.Conv2d(3, 4, 3).to(memory_format=torch.channels_last)
    gm = gs.nn.Conv2d(3, 4, 3)
    gm.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    gm = gm.to(memory_format=gs.channels_last)
    to = getattr(torch.optim, opt)(tm.parameters(), **kw)
    go = getattr(gs.optim, opt)(gm.parameters(), in_backward=in_backward, **kw)
    x = np.random.default_rng(4).standard_normal((2, 3, 6, 6)).astype(np.float32)
    for _ in range(3):
        tm(torch.tensor(x)).square().mean().backward()
        to.step()
        to.zero_grad()
        gm(gs.tensor(x)).square().mean().backward()
        if not in_backward:
            go.step()
            go.zero_grad()
    assert gm.weight.is_contiguous(memory_format=gs.channels_last)
    np.testing.assert_allclose(
        gm.weight.detach().numpy(), tm.weight.detach().numpy(), rtol=1e-4, atol=1e-5
    )
