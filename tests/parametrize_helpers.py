"""Shared by the parametrization tests: the same module in gradstream and PyTorch with the
same values, and comparisons of their outputs and gradients."""

from __future__ import annotations

import numpy as np
from helpers import assert_close

import gradstream as gs


def libs():
    import torch

    return {"gs": gs, "torch": torch}


def random_state(ref, seed):
    """`ref`'s state_dict with every floating tensor redrawn (so LoRA's zero-initialized
    B and A take part), as NumPy arrays."""
    rng = np.random.default_rng(seed)
    out = {}
    for k, v in ref.state_dict().items():
        arr = v.detach().numpy()
        if arr.dtype.kind == "f":
            arr = rng.standard_normal(arr.shape).astype(arr.dtype)
        out[k] = arr
    return out


def load(module, lib, state):
    module.load_state_dict({k: lib.tensor(v) for k, v in state.items()})


def grads(module):
    return {k: p.grad for k, p in module.named_parameters()}


def assert_same_grads(g, t, **tol):
    gg, tg = grads(g), grads(t)
    assert list(gg) == list(tg)
    for k in tg:
        if tg[k] is None:
            assert gg[k] is None, k
        else:
            assert_close(gg[k], tg[k], **tol)


def twin(make, register=None, seed=0):
    """The same module in both libraries (`make(lib)`), parametrized by `register(lib, m)`,
    holding the same random values."""
    pair = {}
    for name, lib in libs().items():
        m = make(lib)
        if register is not None:
            register(lib, m)
        pair[name] = m
    assert list(pair["gs"].state_dict()) == list(pair["torch"].state_dict())
    state = random_state(pair["torch"], seed)
    for name, lib in libs().items():
        load(pair[name], lib, state)
    return pair["gs"], pair["torch"]


def conv_or_linear(kind):
    if kind == "linear":
        return lambda lib: lib.nn.Linear(5, 4)
    return lambda lib: lib.nn.Conv2d(3, 4, 2)


def input_for(kind, rng):
    shape = (2, 5) if kind == "linear" else (2, 3, 4, 4)
    return rng.standard_normal(shape).astype(np.float32)


def compare_forward_backward(g, t, x, terms):
    torch = libs()["torch"]
    yg, yt = g(gs.tensor(x)), t(torch.tensor(x))
    assert_close(yg, yt, rtol=1e-5, atol=1e-5, terms=terms)
    (yg * yg).sum().backward()
    (yt * yt).sum().backward()
    assert_same_grads(g, t, rtol=1e-4, atol=1e-4, terms=4 * terms)
