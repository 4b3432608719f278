"""`nn.utils.parametrize` against PyTorch.

A minLoRA-style parametrization (``W + B @ A * scale``) on Linear and Embedding, registered
with `register_parametrization`: the same state_dict keys, outputs and gradients (of
``original``, A and B) as PyTorch's on the same weights; `cached()`; chaining; a tuple
``right_inverse``; removal and transfer; PyTorch's exception classes for bad input; the
original streaming its gradient into an in-backward optimizer; a minLoRA-style script under
the alias printing what it prints under PyTorch.
"""

from __future__ import annotations

import copy
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_close
from hypothesis import given, settings
from hypothesis import strategies as st
from parametrize_helpers import assert_same_grads, grads, load, random_state, twin

import gradstream as gs
import gradstream.nn.utils.parametrize as P

torch = pytest.importorskip("torch")
TP = torch.nn.utils.parametrize

LIBS = {"gs": gs, "torch": torch}


def lora_class(lib):
    """minLoRA's LoRAParametrization, written against `lib` (gradstream or torch)."""

    class LoRA(lib.nn.Module):
        def __init__(self, fan_out, fan_in, rank=2, alpha=1.0):
            super().__init__()
            self.lora_A = lib.nn.Parameter(lib.zeros(rank, fan_in))
            self.lora_B = lib.nn.Parameter(lib.zeros(fan_out, rank))
            self.scale = alpha / rank

        def forward(self, W):
            return W + self.lora_B @ self.lora_A * self.scale

    return LoRA


def register_lora(rank):
    def register(lib, m):
        fan_out, fan_in = m.weight.shape
        parametrize = P if lib is gs else TP
        parametrize.register_parametrization(m, "weight", lora_class(lib)(fan_out, fan_in, rank))

    return register


# ---------------------------------------------------- LoRA through register_parametrization


@settings(max_examples=25, deadline=None)
@given(
    fan_in=st.integers(1, 7),
    fan_out=st.integers(1, 7),
    rank=st.integers(1, 4),
    batch=st.integers(1, 5),
    bias=st.booleans(),
)
def test_lora_linear_matches_torch(fan_in, fan_out, rank, batch, bias):
    g, t = twin(lambda lib: lib.nn.Linear(fan_in, fan_out, bias=bias), register_lora(rank))
    assert type(g).__name__ == type(t).__name__ == "ParametrizedLinear"
    assert P.type_before_parametrizations(g) is gs.nn.Linear
    x = np.random.default_rng(1).standard_normal((batch, fan_in)).astype(np.float32)
    yg, yt = g(gs.tensor(x)), t(torch.tensor(x))
    assert_close(yg, yt, terms=fan_in + rank)
    w = np.random.default_rng(2).standard_normal(tuple(yt.shape)).astype(np.float32)
    (yg * gs.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    assert_same_grads(g, t, rtol=1e-5, atol=1e-5, terms=batch * max(fan_out, rank))
    assert_close(g.weight, t.weight, terms=rank)


@settings(max_examples=25, deadline=None)
@given(num=st.integers(2, 9), dim=st.integers(1, 6), rank=st.integers(1, 3))
def test_lora_embedding_matches_torch(num, dim, rank):
    g, t = twin(lambda lib: lib.nn.Embedding(num, dim), register_lora(rank))
    idx = np.random.default_rng(3).integers(0, num, size=(2, 5))
    yg, yt = g(gs.tensor(idx)), t(torch.tensor(idx))
    assert_close(yg, yt, terms=rank)
    (yg * yg).sum().backward()
    (yt * yt).sum().backward()
    assert_same_grads(g, t, rtol=1e-5, atol=1e-5, terms=10 * rank)


def test_state_dict_keys_and_torch_checkpoint_round_trip():
    g, t = twin(lambda lib: lib.nn.Linear(4, 3), register_lora(2))
    assert list(g.state_dict()) == [
        "bias",
        "parametrizations.weight.original",
        "parametrizations.weight.0.lora_A",
        "parametrizations.weight.0.lora_B",
    ]
    # A checkpoint written by one loads strictly into the other.
    torch_ckpt = t.state_dict()
    fresh = gs.nn.Linear(4, 3)
    register_lora(2)(gs, fresh)
    assert not fresh.load_state_dict(torch_ckpt).missing_keys
    assert_close(fresh.weight, t.weight)
    back = torch.nn.Linear(4, 3)
    register_lora(2)(torch, back)
    back.load_state_dict({k: torch.tensor(v.numpy()) for k, v in g.state_dict().items()})
    assert_close(g.weight, back.weight)


def test_original_keeps_its_identity():
    m = gs.nn.Linear(3, 2)
    w = m.weight
    register_lora(1)(gs, m)
    assert m.parametrizations.weight.original is w
    assert isinstance(m.parametrizations["weight"], P.ParametrizationList)
    assert P.is_parametrized(m) and P.is_parametrized(m, "weight")
    assert not P.is_parametrized(m, "bias")
    assert not P.is_parametrized(gs.nn.Linear(1, 1))
    assert any(p is w for p in m.parameters())


# ---------------------------------------------------------------- cached, chaining, right_inverse


def counting(lib):
    class Double(lib.nn.Module):
        calls = 0

        def forward(self, X):
            type(self).calls += 1
            return X * 2

    return Double


def test_cached_computes_once_per_context_as_torch():
    counts = {}
    for name, lib in LIBS.items():
        parametrize = P if lib is gs else TP
        Double = counting(lib)
        m = lib.nn.Linear(3, 3)
        parametrize.register_parametrization(m, "weight", Double())
        Double.calls = 0
        with parametrize.cached():
            a, b = m.weight, m.weight
            with parametrize.cached():  # nested: the same cache
                c = m.weight
            assert a is b and b is c
            m(lib.ones(1, 3))
        inside = Double.calls
        d, e = m.weight, m.weight
        assert d is not e
        counts[name] = (inside, Double.calls)
    assert counts["gs"] == counts["torch"] == (1, 3)


def pieces(lib):
    class Symmetric(lib.nn.Module):
        def forward(self, X):
            return X.triu() + X.triu(1).transpose(-1, -2)

        def right_inverse(self, A):
            return A.triu()

    class Split(lib.nn.Module):
        """Parametrized by two tensors: right_inverse returns a tuple."""

        def forward(self, X0, X1):
            return X0 + 2 * X1

        def right_inverse(self, W):
            return W * 0.5, W * 0.25

    class Scale(lib.nn.Module):
        def forward(self, X):
            return X * 3

        def right_inverse(self, X):
            return X / 3

    return Symmetric, Split, Scale


@pytest.mark.parametrize("chain", [("Symmetric",), ("Symmetric", "Scale"), ("Split", "Scale")])
def test_chained_and_tuple_right_inverse_match_torch(chain):
    out = {}
    rng = np.random.default_rng(5)
    w0 = rng.standard_normal((4, 4)).astype(np.float32)
    new = rng.standard_normal((4, 4)).astype(np.float32)
    for name, lib in LIBS.items():
        parametrize = P if lib is gs else TP
        classes = dict(zip(("Symmetric", "Split", "Scale"), pieces(lib), strict=True))
        m = lib.nn.Linear(4, 4, bias=False)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w0))
        for c in chain:
            parametrize.register_parametrization(m, "weight", classes[c]())
        before = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
        m.weight = lib.tensor(new)  # through every right_inverse
        after = {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}
        m.weight.sum().backward()
        out[name] = (before, after, m.weight.detach().numpy(), grads(m))
    for i in range(2):
        assert list(out["gs"][i]) == list(out["torch"][i])
        for k in out["torch"][i]:
            assert_close(out["gs"][i][k], out["torch"][i][k], rtol=1e-6, atol=1e-6)
    assert_close(out["gs"][2], out["torch"][2], rtol=1e-6, atol=1e-6)
    for k, tg in out["torch"][3].items():
        assert_close(out["gs"][3][k], tg)


# ---------------------------------------------------------------- removal and transfer


@pytest.mark.parametrize("leave_parametrized", [True, False])
def test_remove_parametrizations_matches_torch(leave_parametrized):
    g, t = twin(lambda lib: lib.nn.Linear(4, 3), register_lora(2))
    original = g.parametrizations.weight.original
    assert P.remove_parametrizations(g, "weight", leave_parametrized) is g
    TP.remove_parametrizations(t, "weight", leave_parametrized)
    assert type(g) is gs.nn.Linear and not hasattr(g, "parametrizations")
    assert g.weight is original and isinstance(g.weight, gs.nn.Parameter)
    assert list(g.state_dict()) == list(t.state_dict()) == ["bias", "weight"]
    assert_close(g.weight, t.weight, terms=2)
    assert "weight" in g._parameters


def test_remove_one_of_two_keeps_the_class():
    m = gs.nn.Linear(3, 3)
    register_lora(1)(gs, m)
    P.register_parametrization(m, "bias", counting(gs)())
    P.remove_parametrizations(m, "weight")
    assert type(m).__name__ == "ParametrizedLinear" and P.is_parametrized(m, "bias")
    P.remove_parametrizations(m, "bias", leave_parametrized=False)
    assert type(m) is gs.nn.Linear


def test_remove_tuple_parametrized_needs_leave_parametrized():
    for lib in LIBS.values():
        parametrize = P if lib is gs else TP
        m = lib.nn.Linear(3, 2)
        parametrize.register_parametrization(m, "weight", pieces(lib)[1]())
        with pytest.raises(ValueError, match="leave_parametrized"):
            parametrize.remove_parametrizations(m, "weight", leave_parametrized=False)
        w = m.weight.detach().numpy().copy()
        parametrize.remove_parametrizations(m, "weight")
        np.testing.assert_allclose(m.weight.detach().numpy(), w)
        assert list(m.state_dict()) == ["bias", "weight"]


def test_transfer_parametrizations_and_params():
    a = gs.nn.Linear(3, 2)
    register_lora(1)(gs, a)
    b = gs.nn.Linear(3, 2)
    P.transfer_parametrizations_and_params(a, b)
    assert b.parametrizations.weight.original is a.parametrizations.weight.original
    assert b.parametrizations.weight[0] is a.parametrizations.weight[0]
    assert_close(b.weight, a.weight)
    assert P.transfer_parametrizations_and_params(gs.nn.Linear(1, 1), b) is b


def test_deepcopy_works_and_pickling_refuses():
    m = gs.nn.Linear(3, 2)
    register_lora(1)(gs, m)
    c = copy.deepcopy(m)
    assert type(c) is not gs.nn.Linear and c.parametrizations.weight.original is not (
        m.parametrizations.weight.original
    )
    assert_close(c.weight, m.weight)
    with pytest.raises(RuntimeError, match="state_dict"):
        pickle.dumps(m)


# ---------------------------------------------------------------- bad input, PyTorch's errors


def error_of(lib, action):
    try:
        action(lib, P if lib is gs else TP)
    except Exception as e:  # noqa: BLE001  (the class is what is compared)
        return type(e)
    return None


class ToFloat64:
    @staticmethod
    def make(lib):
        class Cast(lib.nn.Module):
            def forward(self, X):
                return X.double()

        return Cast()


def first_row(lib):
    class FirstRow(lib.nn.Module):
        def forward(self, X):
            return X[:1]

    return FirstRow()


def bad_right_inverse(lib):
    class ReturnsNumber(lib.nn.Module):
        def forward(self, X):
            return X

        def right_inverse(self, X):
            return 1.0

    return ReturnsNumber()


BAD = {
    "unknown name": lambda lib, p: p.register_parametrization(
        lib.nn.Linear(2, 2), "nope", counting(lib)()
    ),
    "shape change": lambda lib, p: p.register_parametrization(
        lib.nn.Linear(2, 2), "weight", first_row(lib)
    ),
    "dtype change": lambda lib, p: p.register_parametrization(
        lib.nn.Linear(2, 2), "weight", ToFloat64.make(lib)
    ),
    "shape change, chained": lambda lib, p: p.register_parametrization(
        p.register_parametrization(lib.nn.Linear(2, 2), "weight", counting(lib)()),
        "weight",
        first_row(lib),
    ),
    "right_inverse returns a number": lambda lib, p: p.register_parametrization(
        lib.nn.Linear(2, 2), "weight", bad_right_inverse(lib)
    ),
    "remove unparametrized": lambda lib, p: p.remove_parametrizations(
        lib.nn.Linear(2, 2), "weight"
    ),
    "remove other name": lambda lib, p: p.remove_parametrizations(
        p.register_parametrization(lib.nn.Linear(2, 2), "weight", counting(lib)()), "bias"
    ),
    "assign without right_inverse": lambda lib, p: setattr(
        p.register_parametrization(lib.nn.Linear(2, 2), "weight", counting(lib)()),
        "weight",
        lib.zeros(2, 2),
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_input_raises_torchs_exception(case):
    expected = error_of(torch, BAD[case])
    assert expected is not None
    assert error_of(gs, BAD[case]) is expected


def test_unsafe_allows_shape_and_dtype_change():
    m = P.register_parametrization(gs.nn.Linear(2, 3), "weight", first_row(gs), unsafe=True)
    assert tuple(m.weight.shape) == (1, 2)
    P.register_parametrization(m, "weight", ToFloat64.make(gs), unsafe=True)
    assert m.weight.dtype == gs.float64


# ---------------------------------------------------------------- gradient streaming


def train(lib, state, opt_name, steps, in_backward=False):
    m = lib.nn.Linear(6, 4)
    register_lora(2)(lib, m)
    load(m, lib, state)
    kw = {"lr": 0.05, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.01}
    if in_backward:
        kw["in_backward"] = True
    opt = getattr(lib.optim, opt_name)(m.parameters(), **kw)
    rng = np.random.default_rng(21)
    for _ in range(steps):
        x = lib.tensor(rng.standard_normal((8, 6)).astype(np.float32))
        y = lib.tensor(rng.standard_normal((8, 4)).astype(np.float32))
        lib.nn.functional.mse_loss(m(x), y).backward()
        if in_backward:
            assert all(p.grad is None for p in m.parameters())  # consumed by the step
        opt.step()
        opt.zero_grad()
    return {k: v.detach().numpy().copy() for k, v in m.state_dict().items()}


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_lora_original_streams_into_in_backward_optimizer(opt_name):
    ref = torch.nn.Linear(6, 4)
    register_lora(2)(torch, ref)
    state = random_state(ref, 17)
    plain = train(gs, state, opt_name, 5)
    streamed = train(gs, state, opt_name, 5, in_backward=True)
    reference = train(torch, state, opt_name, 5)
    for k in reference:
        assert not np.array_equal(plain[k], state[k]), k  # every tensor trained
        np.testing.assert_allclose(streamed[k], plain[k], rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(plain[k], reference[k], rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------- under the alias


def test_torch_parametrize_imports_under_the_alias(tmp_path):
    script = Path(tmp_path) / "lora.py"
    script.write_text(
        "import torch\n"
        "import torch.nn.utils.parametrize as P\n"
        "from torch.nn.utils import parametrizations\n"
        "import gradstream\n"
        "assert P is gradstream.nn.utils.parametrize\n"
        "assert parametrizations is gradstream.nn.utils.parametrizations\n"
        "m = torch.nn.Linear(3, 2)\n"
        "P.register_parametrization(m, 'weight', parametrizations._WeightNorm(0), unsafe=True)\n"
        "parametrizations.orthogonal(torch.nn.Linear(3, 3))\n"
        "print(sorted(m.state_dict()))\n"
    )
    env = dict(os.environ)
    src = str(Path(gs.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    out = subprocess.run(
        [sys.executable, "-m", "gradstream.alias", str(script)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert "parametrizations.weight.original0" in out.stdout


MINLORA_STYLE = """
import math
from functools import partial

import torch
import torch.nn.utils.parametrize as parametrize
from torch import nn


class LoRA(nn.Module):
    def __init__(self, fan_in, fan_out, rank=2):
        super().__init__()
        self.lora_A = nn.Parameter(torch.zeros(rank, fan_in))
        self.lora_B = nn.Parameter(torch.zeros(fan_out, rank))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.register_buffer("mask", torch.ones(1, fan_in))
        self.scaling = 0.5

    def forward(self, X):
        return X + torch.mm(self.lora_B, self.lora_A * self.mask).view(X.shape) * self.scaling


def apply_lora(layer, register=True, merge=False):
    if register and type(layer) is nn.Linear:
        parametrize.register_parametrization(layer, "weight", LoRA(*layer.weight.shape[::-1]))
    elif not register and hasattr(layer, "parametrizations"):
        for name in list(layer.parametrizations.keys()):
            parametrize.remove_parametrizations(layer, name, leave_parametrized=merge)


model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
model.apply(apply_lora)
print(model)
print([n for n, _ in model.named_parameters()])
lora = [p for n, p in model.named_parameters() if "lora_" in n]
for p in model.parameters():
    p.requires_grad_(any(p is q for q in lora))
opt = torch.optim.AdamW(lora, lr=1e-2)
for _ in range(3):
    model(torch.randn(5, 3)).pow(2).mean().backward()
    opt.step()
    opt.zero_grad()
with parametrize.cached():
    w = model[0].weight
    assert w is model[0].weight
model.apply(partial(apply_lora, register=False, merge=True))
assert torch.equal(model[0].weight, w.detach())
print(model, list(model.state_dict()), type(model[0]).__name__)
"""


@pytest.mark.cpu_backend(
    "runs a script in a child process, where an op with no kernel on the path cannot be told "
    "from a bug"
)
def test_minlora_style_script_prints_the_same_under_the_alias(tmp_path):
    script = Path(tmp_path) / "minlora_style.py"
    script.write_text(MINLORA_STYLE)
    env = dict(os.environ)
    src = str(Path(gs.__file__).parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([src, env.get("PYTHONPATH", "")])
    runs = [
        subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
        for cmd in (
            [sys.executable, str(script)],
            [sys.executable, "-m", "gradstream.alias", str(script)],
        )
    ]
    for run in runs:
        assert run.returncode == 0, run.stderr
    assert runs[1].stdout == runs[0].stdout
    assert "0.parametrizations.weight.0.lora_A" in runs[1].stdout
