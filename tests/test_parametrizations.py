"""`nn.utils.parametrizations` (`weight_norm`, `spectral_norm`, `orthogonal`) and the older
hook-based `nn.utils.weight_norm` / `spectral_norm`, against PyTorch: state_dict keys, the
originals that ``right_inverse`` computes, outputs and gradients on the same values, the power
iteration's buffers in training and eval mode, old checkpoints, and bad arguments.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from helpers import assert_close
from parametrize_helpers import compare_forward_backward, conv_or_linear, input_for, twin

import gradstream as gs
from gradstream.nn.utils import parametrizations

torch = pytest.importorskip("torch")
LIBS = {"gs": gs, "torch": torch}


# ---------------------------------------------------------------- weight_norm


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("dim", [0, 1, None, -1])
def test_weight_norm_matches_torch(kind, dim):
    def register(lib, m):
        (parametrizations if lib is gs else torch.nn.utils.parametrizations).weight_norm(m, dim=dim)

    g, t = twin(conv_or_linear(kind), register, seed=7)
    assert "parametrizations.weight.original0" in g.state_dict()
    compare_forward_backward(g, t, input_for(kind, np.random.default_rng(8)), terms=12)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_right_inverse_from_the_weight(dim):
    g, t = gs.nn.Linear(5, 4), torch.nn.Linear(5, 4)
    t.load_state_dict({k: torch.tensor(v.numpy()) for k, v in g.state_dict().items()})
    parametrizations.weight_norm(g, dim=dim)
    torch.nn.utils.parametrizations.weight_norm(t, dim=dim)
    for k, v in t.state_dict().items():
        assert_close(g.state_dict()[k], v)
    assert_close(g.weight, t.weight)


@pytest.mark.parametrize("dim", [0, 1, None])
def test_old_weight_norm_matches_torch_and_loads_into_the_new(dim):
    def register(lib, m):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            (gs.nn.utils if lib is gs else torch.nn.utils).weight_norm(m, dim=dim)

    g, t = twin(conv_or_linear("linear"), register, seed=9)
    assert list(g.state_dict()) == ["bias", "weight_g", "weight_v"]
    compare_forward_backward(g, t, input_for("linear", np.random.default_rng(4)), terms=12)
    # An old-style checkpoint loads into the parametrization (keys renamed by its hook).
    new = parametrizations.weight_norm(gs.nn.Linear(5, 4), dim=dim)
    new.load_state_dict(g.state_dict())
    assert_close(new.weight, t.weight, rtol=1e-5, atol=1e-6)
    assert gs.nn.utils.remove_weight_norm(g) is g
    torch.nn.utils.remove_weight_norm(t)
    assert list(g.state_dict()) == list(t.state_dict())
    assert_close(g.weight, t.weight, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        gs.nn.utils.remove_weight_norm(g)


def test_old_weight_norm_warns_and_refuses_twice():
    m = gs.nn.Linear(2, 2)
    with pytest.warns(FutureWarning, match="parametrizations.weight_norm"):
        gs.nn.utils.weight_norm(m)
    with pytest.raises(RuntimeError), warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        gs.nn.utils.weight_norm(m)


# ---------------------------------------------------------------- spectral_norm


@pytest.mark.parametrize("kind", ["linear", "conv"])
@pytest.mark.parametrize("n_power_iterations", [1, 3])
def test_spectral_norm_matches_torch(kind, n_power_iterations):
    def register(lib, m):
        (parametrizations if lib is gs else torch.nn.utils.parametrizations).spectral_norm(
            m, n_power_iterations=n_power_iterations
        )

    g, t = twin(conv_or_linear(kind), register, seed=11)  # _u, _v copied from torch's
    rng = np.random.default_rng(12)
    for mode in ("train", "train", "eval"):  # a training forward runs the power iteration
        g.train(mode == "train")
        t.train(mode == "train")
        before = g.parametrizations.weight[0]._u.numpy().copy()
        compare_forward_backward(g, t, input_for(kind, rng), terms=12)
        g.zero_grad()
        t.zero_grad()
        for k in ("_u", "_v"):
            assert_close(
                getattr(g.parametrizations.weight[0], k),
                getattr(t.parametrizations.weight[0], k),
                rtol=1e-4,
                atol=1e-5,
            )
        changed = not np.array_equal(g.parametrizations.weight[0]._u.numpy(), before)
        assert changed == (mode == "train")


def test_spectral_norm_eval_mode_keeps_the_vectors():
    m = parametrizations.spectral_norm(gs.nn.Linear(4, 6))
    m.eval()
    u = m.parametrizations.weight[0]._u.numpy().copy()
    w1 = m.weight.detach().numpy().copy()
    w2 = m.weight.detach().numpy()
    np.testing.assert_array_equal(m.parametrizations.weight[0]._u.numpy(), u)
    np.testing.assert_array_equal(w1, w2)
    # After its construction's 15 power iterations, the largest singular value is ~1.
    s = np.linalg.svd(w2, compute_uv=False)
    assert abs(s[0] - 1.0) < 1e-2


def test_spectral_norm_bad_arguments_as_torch():
    for lib, pz in ((gs, parametrizations), (torch, torch.nn.utils.parametrizations)):
        with pytest.raises(ValueError):
            pz.spectral_norm(lib.nn.Linear(2, 2), n_power_iterations=0)
        with pytest.raises(IndexError):
            pz.spectral_norm(lib.nn.Linear(2, 2), dim=2)
        with pytest.raises(ValueError):
            pz.spectral_norm(lib.nn.Linear(2, 2), name="nope")


@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_old_spectral_norm_matches_torch(kind):
    def register(lib, m):
        (gs.nn.utils if lib is gs else torch.nn.utils).spectral_norm(m, n_power_iterations=2)

    g, t = twin(conv_or_linear(kind), register, seed=14)
    assert list(g.state_dict()) == ["bias", "weight_orig", "weight_u", "weight_v"]
    rng = np.random.default_rng(15)
    for _ in range(2):
        compare_forward_backward(g, t, input_for(kind, rng), terms=12)
        g.zero_grad()
        t.zero_grad()
    for k in ("weight_u", "weight_v"):
        assert_close(getattr(g, k), getattr(t, k), rtol=1e-4, atol=1e-5)
    g.eval()
    t.eval()
    compare_forward_backward(g, t, input_for(kind, rng), terms=12)
    assert gs.nn.utils.remove_spectral_norm(g) is g
    torch.nn.utils.remove_spectral_norm(t)
    assert list(g.state_dict()) == list(t.state_dict())
    assert_close(g.weight, t.weight, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError):
        gs.nn.utils.remove_spectral_norm(g)


def test_old_spectral_norm_loads_a_checkpoint_without_v_as_torch():
    # Before PyTorch 1.0 a checkpoint held weight, weight_orig and weight_u but no weight_v.
    def register(lib, m):
        (gs.nn.utils if lib is gs else torch.nn.utils).spectral_norm(m)

    g, t = twin(lambda lib: lib.nn.Linear(4, 6), register, seed=16)  # WᵀW invertible
    t(torch.zeros(1, 4))
    old = {k: v for k, v in t.state_dict().items() if k != "weight_v"}
    old["weight"] = t.weight.detach().clone()
    t.load_state_dict(old)
    g.load_state_dict(old)
    assert_close(g.weight_v, t.weight_v, rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError):
        gs.nn.utils.spectral_norm(g)


# ---------------------------------------------------------------- orthogonal


@pytest.mark.parametrize("orthogonal_map", [None, "matrix_exp", "cayley", "householder"])
@pytest.mark.parametrize("shape", [(4, 4), (5, 3), (3, 5)])
@pytest.mark.parametrize("use_trivialization", [True, False])
def test_orthogonal_matches_torch(orthogonal_map, shape, use_trivialization):
    rng = np.random.default_rng(13)
    w = rng.standard_normal(shape).astype(np.float32)
    pair = {}
    for name, lib in LIBS.items():
        m = lib.nn.Linear(shape[1], shape[0], bias=False)
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w))
        pz = parametrizations if lib is gs else torch.nn.utils.parametrizations
        pair[name] = pz.orthogonal(
            m, orthogonal_map=orthogonal_map, use_trivialization=use_trivialization
        )
    g, t = pair["gs"], pair["torch"]
    assert list(g.state_dict()) == list(t.state_dict())
    if use_trivialization and shape[0] != shape[1]:
        # The base is completed with random columns: take torch's.
        g.load_state_dict({k: torch.tensor(v.numpy()) for k, v in t.state_dict().items()})
    else:  # right_inverse (LAPACK's geqrf for householder) gives torch's originals
        for k, v in t.state_dict().items():
            assert_close(g.state_dict()[k], v, rtol=1e-4, atol=1e-5)
    q = g.weight.detach().numpy()
    small = min(shape)
    gram = q.T @ q if shape[0] >= shape[1] else q @ q.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)
    compare_forward_backward(g, t, rng.standard_normal((2, shape[1])).astype(np.float32), 12)


def test_orthogonal_bad_arguments_as_torch():
    for lib, pz in ((gs, parametrizations), (torch, torch.nn.utils.parametrizations)):
        with pytest.raises(ValueError, match="orthogonal_map"):
            pz.orthogonal(lib.nn.Linear(2, 2), orthogonal_map="qr")
        with pytest.raises(ValueError, match="dimensions"):
            pz.orthogonal(lib.nn.Linear(2, 2), "bias")
        m = pz.orthogonal(lib.nn.Linear(3, 3))
        with pytest.raises(ValueError, match="shape"):
            m.parametrizations.weight[0].right_inverse(lib.zeros(2, 2))
