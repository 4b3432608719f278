"""Adafactor beyond the shared optimizer suite (tests/test_optimizers_more.py): drawn
shapes (0-d, size-1 sizes, batches of matrices, parameters large enough for the parallel
kernel) against torch.optim.Adafactor, float64, the factored state's exact bytes, and the
in-backward mode with clipping."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs
from gradstream import memory

torch = pytest.importorskip("torch")

shapes = st.one_of(
    st.just(()),
    st.lists(st.integers(1, 6), min_size=1, max_size=4).map(tuple),
    # Past the kernel's parallel threshold (2^15 elements).
    st.sampled_from([(300, 200), (3, 150, 90), (40000,)]),
)


def trajectory(lib, init, grads, dtype, **kw):
    p = lib.tensor(init, dtype=dtype, requires_grad=True)
    opt = lib.optim.Adafactor([p], **kw)
    out = []
    for g in grads:
        p.grad = lib.tensor(g, dtype=dtype)
        opt.step()
        out.append(p.detach().numpy().copy())
    return out, opt


@settings(max_examples=30, deadline=None)
@given(
    shape=shapes,
    lr=st.sampled_from([0.01, 0.5]),
    wd=st.sampled_from([0.0, 0.1]),
    d=st.sampled_from([1.0, 4.0]),
    seed=st.integers(0, 3),
)
def test_drawn_shapes_match_torch(shape, lr, wd, d, seed):
    rng = np.random.default_rng(seed)
    init = rng.standard_normal(shape).astype(np.float32)
    grads = [rng.standard_normal(shape).astype(np.float32) * 10.0**k for k in (0, -2, 1)]
    kw = dict(lr=lr, weight_decay=wd, d=d)
    a, gopt = trajectory(gs, init, grads, gs.float32, **kw)
    b, topt = trajectory(torch, init, grads, torch.float32, **kw)
    for x, y in zip(a, b, strict=True):
        # Sums over up to a few hundred thousand float32 values: PyTorch accumulates them
        # in float32, we in float64.
        atol = 1e-5 * max(1.0, float(np.abs(y).max(initial=0.0)))
        np.testing.assert_allclose(x, y, rtol=1e-4, atol=atol)
    sa = gopt.state_dict()["state"][0]
    sb = topt.state_dict()["state"][0]
    assert sa.keys() == sb.keys()
    for k in sb:
        assert tuple(sa[k].shape) == tuple(sb[k].shape), k
        ref = sb[k].numpy()
        np.testing.assert_allclose(
            sa[k].numpy(), ref, rtol=1e-4, atol=1e-6 * max(1.0, float(np.abs(ref).max()))
        )


def test_float64_matches_torch_closely():
    rng = np.random.default_rng(0)
    init = rng.standard_normal((2, 5, 7))
    grads = [rng.standard_normal((2, 5, 7)) for _ in range(4)]
    a, _ = trajectory(gs, init, grads, gs.float64, lr=0.3, eps=(1e-30, 1e-3))
    b, _ = trajectory(torch, init, grads, torch.float64, lr=0.3, eps=(1e-30, 1e-3))
    for x, y in zip(a, b, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize(
    ("shape", "state_elements"),
    [((64, 32), 64 + 32), ((3, 64, 32), 3 * (64 + 32)), ((100,), 100), ((), 1)],
)
def test_factored_state_bytes_are_exact(shape, state_elements):
    """A matrix keeps R + C floats of state (Adam keeps 2·R·C); a vector keeps one each."""
    p = gs.zeros(shape, requires_grad=True)
    opt = gs.optim.Adafactor([p])
    before = memory.memory_by_category()["optimizer_state"]
    p.grad = gs.ones(shape)
    opt.step()
    assert memory.memory_by_category()["optimizer_state"] - before == 4 * state_elements


def test_in_backward_with_clipping_matches_step():
    """Stepped inside backward (with exact global-norm clipping), as after it."""
    rng = np.random.default_rng(2)
    w0 = rng.standard_normal((8, 6)).astype(np.float32)
    b0 = rng.standard_normal(6).astype(np.float32)
    xs = [rng.standard_normal((5, 8)).astype(np.float32) for _ in range(4)]
    runs = []
    for in_backward in (False, True):
        w = gs.tensor(w0, requires_grad=True)
        b = gs.tensor(b0, requires_grad=True)
        opt = gs.optim.Adafactor([w, b], lr=0.1, in_backward=in_backward)
        if in_backward:
            opt.clip_grad(max_norm=0.5, global_norm=True)
        for x in xs:
            loss = ((gs.tensor(x) @ w + b) ** 2).sum()
            if in_backward:
                opt.backward(loss)
            else:
                loss.backward()
                gs.nn.utils.clip_grad_norm_([w, b], 0.5)
                opt.step()
                opt.zero_grad()
        runs.append((w.detach().numpy(), b.detach().numpy()))
    for x, y in zip(*runs, strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-6, atol=1e-7)
