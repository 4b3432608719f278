"""Activation checkpointing: identical gradients, activations not kept, clear errors."""

import numpy as np
import pytest
from helpers import assert_close

import gradstream as gs
from gradstream.utils.checkpoint import checkpoint, checkpoint_chunks, checkpoint_sequential


def mlp(dtype, width=64):
    ws = [gs.randn(width, width, dtype=dtype) * (1.0 / width**0.5) for _ in range(4)]
    for w in ws:
        w.requires_grad_(True)

    def f(x):
        for w in ws:
            x = (x @ w).tanh()
        return x

    return f, ws


def grads_of(loss_fn, tensors):
    for t in tensors:
        t.grad = None
    loss_fn().backward()
    return [t.grad.numpy().copy() for t in tensors]


@pytest.mark.parametrize("dtype, tol", [(gs.float64, 1e-10), (gs.float32, 1e-6)])
def test_checkpoint_gradients_equal_plain_run(dtype, tol):
    f, ws = mlp(dtype)
    x = gs.randn(16, 64, dtype=dtype, requires_grad=True)
    plain = grads_of(lambda: (f(x) * f(x)).sum(), [x, *ws])
    ck = grads_of(lambda: (checkpoint(f, x) * checkpoint(f, x)).sum(), [x, *ws])
    for a, b in zip(plain, ck, strict=True):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol)


def test_checkpoint_keeps_no_activations():
    f, ws = mlp(gs.float32, width=256)
    x = gs.randn(512, 256)
    gs.memory.reset_peak_memory_stats()
    base = gs.memory.memory_allocated()
    y = f(x)
    plain_kept = gs.memory.memory_allocated() - base
    del y
    base = gs.memory.memory_allocated()
    y = checkpoint(f, x)
    ck_kept = gs.memory.memory_allocated() - base
    assert tuple(y.shape) == (512, 256)
    # Only the output (512x256 float32) and the saved RNG state (a small uint8 tensor, as in
    # PyTorch) stay; the plain run keeps every layer's output.
    assert ck_kept == 512 * 256 * 4 + gs.get_rng_state().numel()
    assert plain_kept >= 4 * 512 * 256 * 4


def test_nested_checkpoints_and_non_tensor_arguments():
    f, ws = mlp(gs.float64)
    x = gs.randn(8, 64, dtype=gs.float64, requires_grad=True)

    def outer(t, scale, *, shift):
        return checkpoint(f, t * scale) + shift

    plain = grads_of(lambda: (f(x * 2.0) + 1.0).sum(), [x, *ws])
    ck = grads_of(lambda: checkpoint(outer, x, 2.0, shift=1.0).sum(), [x, *ws])
    for a, b in zip(plain, ck, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


def test_rng_state_is_restored_for_the_recompute():
    w = gs.randn(32, 32, dtype=gs.float64, requires_grad=True)

    def noisy(t):
        keep = (gs.rand(*t.shape) > 0.5).to(gs.float64)
        return (t @ w) * keep

    x = gs.randn(4, 32, dtype=gs.float64)
    gs.manual_seed(7)
    noisy(x).sum().backward()
    plain = w.grad.numpy().copy()
    w.grad = None
    gs.manual_seed(7)
    checkpoint(noisy, x).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), plain, rtol=1e-12)


def test_streaming_hooks_see_each_parameter_once_with_full_gradient():
    f, ws = mlp(gs.float64)
    x = gs.randn(8, 64, dtype=gs.float64)
    plain = grads_of(lambda: (f(x) + f(x * 0.5)).sum(), ws)
    seen = {}
    handles = [
        w.register_post_accumulate_grad_hook(
            lambda p, i=i: seen.setdefault(i, []).append(p.grad.numpy().copy())
        )
        for i, w in enumerate(ws)
    ]
    for w in ws:
        w.grad = None
    (checkpoint(f, x) + checkpoint(f, x * 0.5)).sum().backward()
    for h in handles:
        h.remove()
    assert sorted(seen) == [0, 1, 2, 3]
    for i, g in enumerate(plain):
        assert len(seen[i]) == 1
        np.testing.assert_allclose(seen[i][0], g, rtol=1e-10)


def test_checkpoint_sequential_matches():
    f_layers = [lambda t, k=k: (t * (1.0 + 0.1 * k)).tanh() for k in range(6)]
    x = gs.randn(5, 7, dtype=gs.float64, requires_grad=True)

    def plain():
        t = x
        for fn in f_layers:
            t = fn(t)
        return t.sum()

    a = grads_of(plain, [x])
    b = grads_of(lambda: checkpoint_sequential(f_layers, 3, x).sum(), [x])
    np.testing.assert_allclose(b[0], a[0], rtol=1e-12)


def test_checkpoint_chunks_matches_and_bounds_activations():
    f, ws = mlp(gs.float32, width=128)
    x = gs.randn(1024, 128)
    plain = grads_of(lambda: f(x).sum(), ws)
    ck = grads_of(lambda: checkpoint_chunks(f, x, chunks=8).sum(), ws)
    for a, b in zip(plain, ck, strict=True):
        # each weight gradient sums over the 1024 rows, in chunks on one side: the orders differ
        assert_close(b, a, rtol=1e-4, atol=1e-5, terms=1024)
    base = gs.memory.memory_allocated()
    gs.memory.reset_peak_memory_stats()
    y = checkpoint_chunks(f, x, chunks=8)
    # forward keeps the output and each chunk's RNG state only; its transient peak is about
    # one chunk's work
    assert gs.memory.memory_allocated() - base == 1024 * 128 * 4 + 8 * gs.get_rng_state().numel()
    y.sum().backward()
    peak = gs.memory.max_memory_allocated() - base
    gs.memory.reset_peak_memory_stats()
    base2 = gs.memory.memory_allocated()
    for w in ws:
        w.grad = None
    f(x).sum().backward()
    plain_peak = gs.memory.max_memory_allocated() - base2
    assert peak < plain_peak


def test_function_returning_no_tensor_is_an_error():
    x = gs.ones(3, requires_grad=True)
    with pytest.raises(TypeError, match="must return a Tensor or a tuple of Tensors"):
        checkpoint(lambda t: {"y": t * 2}, x)
    with pytest.raises(TypeError, match="must return a Tensor or a tuple of Tensors"):
        checkpoint(lambda t: None, x)


def test_tuple_outputs_as_pytorch_code_returns_them():
    f, ws = mlp(gs.float64)
    x = gs.randn(32, 64, dtype=gs.float64, requires_grad=True)

    def two_heads(t):
        h = f(t)
        return h[:, :1].relu(), h[:, 1:4].sigmoid()

    def loss(a, b):
        return (a * 3.0).sum() + (b * b).sum()

    plain = grads_of(lambda: loss(*two_heads(x)), [x, *ws])
    ck = grads_of(lambda: loss(*checkpoint(two_heads, x)), [x, *ws])
    chunked = grads_of(lambda: loss(*checkpoint_chunks(two_heads, x, chunks=4)), [x, *ws])
    for a, b, c in zip(plain, ck, chunked, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(c, a, rtol=1e-10, atol=1e-12)


def test_function_mutating_its_input_is_an_error():
    x = gs.ones(3)

    def bad(t):
        t.fill_(2.0)
        return t * gs.ones(3, requires_grad=True)

    with pytest.raises(RuntimeError, match="modified one of its inputs in place"):
        checkpoint(bad, x)


def test_chunks_must_be_positive():
    with pytest.raises(ValueError, match="chunks"):
        checkpoint_chunks(lambda t: t, gs.ones(4), chunks=0)


def test_recompute_phase_is_restored_after_backward_and_after_an_error():
    f, ws = mlp(gs.float64)
    x = gs.randn(8, 64, dtype=gs.float64)
    with gs.memory.phase("backward"):
        checkpoint(f, x).sum().backward()
        # The recompute ran in its own phase, and the outer one is back.
        assert gs._core._set_memory_phase("backward") == "backward"
    calls = []

    def fails_on_recompute(t):
        calls.append(1)
        if len(calls) > 1:
            raise ValueError("boom in the recompute")
        return f(t)

    y = checkpoint(fails_on_recompute, x)
    with pytest.raises(ValueError, match="boom in the recompute"):
        y.sum().backward()
    assert gs._core._set_memory_phase("") == ""


@pytest.mark.parametrize("n, chunks", [(10, 3), (12, 4), (5, 8), (7, 1)])
def test_chunks_of_uneven_sizes_match_and_check_every_result(n, chunks):
    f, ws = mlp(gs.float64, width=8)
    x = gs.randn(n, 8, dtype=gs.float64, requires_grad=True)
    plain = grads_of(lambda: (f(x) ** 2).sum(), [x, *ws])
    chunked = grads_of(lambda: (checkpoint_chunks(f, x, chunks=chunks) ** 2).sum(), [x, *ws])
    for a, b in zip(plain, chunked, strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    # Every chunk's result is checked, the last (shorter) one too.
    with pytest.raises(TypeError, match="must return a Tensor or a tuple of Tensors"):
        checkpoint_chunks(lambda t: {"y": t} if t.shape[0] < 4 else t * 2, gs.ones(7, 2), chunks=2)
