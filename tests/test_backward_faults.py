"""Faults during backward: an exception from a hook, a gradient consumer, a saved tensor
that cannot be read back, a `save_to_disk` that cannot write, or Ctrl-C, leaves the engine
consistent: the rest of the graph is released, the next backward works, and an in-backward
optimizer stepped each parameter once or not at all and says which."""

from __future__ import annotations

import collections
import ctypes
import errno
import functools
import gc
import os
import signal

import numpy as np
import pytest

import gradstream as gs
from gradstream import memory
from gradstream.autograd import graph as graph_module

SIZES = (6, 16, 16, 16, 4)
LR, MOMENTUM = 0.1, 0.9


class Boom(Exception):
    pass


def layers(seed=0):
    gs.manual_seed(seed)
    return [gs.nn.Linear(a, b) for a, b in zip(SIZES[:-1], SIZES[1:], strict=True)]


def parameters(ls):
    return [p for layer in ls for p in layer.parameters()]


def batch(seed=1):
    rng = np.random.default_rng(seed)
    x = gs.tensor(rng.standard_normal((8, SIZES[0])).astype(np.float32))
    y = gs.tensor(rng.standard_normal((8, SIZES[-1])).astype(np.float32))
    return x, y


def forward(ls, x, y, activation_hook=None):
    h = x
    for i, layer in enumerate(ls):
        h = layer(h)
        if i < len(ls) - 1:
            h = h.tanh()
            if i == 1 and activation_hook is not None:
                h.register_hook(activation_hook)
    return gs.nn.functional.mse_loss(h, y)


def values(ps):
    return [p.detach().numpy().copy() for p in ps]


def raise_on_call(n, exc=None):
    """A callable that raises on its n-th call (1-based) and returns its argument before."""
    calls = [0]

    def f(*args):
        calls[0] += 1
        if calls[0] == n:
            raise exc if exc is not None else Boom(f"call {n}")
        return args[0] if args else None

    return f


def silent_sigint_hook():
    """A post-accumulate hook that sends SIGINT and runs no Python bytecode afterwards, so
    only the engine, between nodes, can notice the signal (see tests/test_interrupt.py)."""
    kill = functools.partial(ctypes.CDLL(None).kill, os.getpid(), int(signal.SIGINT))
    return collections.defaultdict(kill).__getitem__


def allocated():
    gc.collect()
    return memory.memory_allocated()


def reference_stepped_values(x, y):
    """Each parameter after one SGD-with-momentum step on the full gradient."""
    ls = layers()
    opt = gs.optim.SGD(parameters(ls), lr=LR, momentum=MOMENTUM)
    forward(ls, x, y).backward()
    opt.step()
    return values(parameters(ls))


FAULTS = ["tensor_hook", "post_hook", "unpack", "disk_read", "interrupt"]


def run_faulty_backward(fault, ls, x, y, monkeypatch, tmp_path):
    """Forward and a backward that fails midway; returns (exception class, loss)."""
    hook = raise_on_call(1) if fault == "tensor_hook" else None
    if fault == "post_hook":
        ls[1].bias.register_post_accumulate_grad_hook(raise_on_call(1))
    if fault == "interrupt":
        if os.name != "posix":
            pytest.skip("SIGINT as on Unix")
        ls[1].bias.register_post_accumulate_grad_hook(silent_sigint_hook())
    if fault == "unpack":
        with gs.autograd.graph.saved_tensors_hooks(lambda t: t, raise_on_call(4)):
            loss = forward(ls, x, y, hook)
    elif fault == "disk_read":
        with gs.autograd.graph.save_to_disk(tmp_path):
            loss = forward(ls, x, y, hook)
        real_load = np.load
        calls = [0]

        def failing_load(*args, **kwargs):
            calls[0] += 1
            if calls[0] == 4:
                raise OSError(errno.EIO, "Input/output error (simulated)")
            return real_load(*args, **kwargs)

        monkeypatch.setattr(graph_module.np, "load", failing_load)
    else:
        loss = forward(ls, x, y, hook)
    expected = {"interrupt": KeyboardInterrupt, "disk_read": OSError}.get(fault, Boom)
    with pytest.raises(expected):
        loss.backward()
    monkeypatch.undo()
    return loss


@pytest.mark.parametrize("fault", FAULTS)
def test_in_backward_optimizer_steps_each_parameter_once_or_not_at_all(
    fault, monkeypatch, tmp_path
):
    x, y = batch()
    ls = layers()
    ps = parameters(ls)
    opt = gs.optim.SGD(ps, lr=LR, momentum=MOMENTUM, in_backward=True)
    before = values(ps)
    stepped_ref = reference_stepped_values(x, y)
    start = allocated()

    loss = run_faulty_backward(fault, ls, x, y, monkeypatch, tmp_path)

    stepped = {hash(p) for p in opt.stepped_in_backward()}
    assert 0 < len(stepped) < len(ps), "the fault should come midway"
    for p, b, r in zip(ps, before, stepped_ref, strict=True):
        if hash(p) in stepped:
            np.testing.assert_allclose(p.detach().numpy(), r, rtol=1e-5, atol=1e-6)
            assert p.grad is None
            assert "momentum_buffer" in opt.state[p]
        else:
            np.testing.assert_array_equal(p.detach().numpy(), b)
            assert p not in opt.state
    # Released: what is left is the loss the user holds, the momentum buffers of the
    # stepped parameters and the gradients the pass left in `.grad`.
    left_grads = sum(p.grad.nbytes for p in ps if p.grad is not None)
    momentum = sum(p.nbytes for p in ps if hash(p) in stepped)
    assert allocated() - start == loss.nbytes + momentum + left_grads
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()
    assert opt.stepped_in_backward() == []
    assert not list(tmp_path.iterdir())

    # The next backward steps every parameter, once.
    for p in ps:
        p.grad = None
    forward(ls, x, y).backward()
    assert [hash(p) for p in opt.stepped_in_backward()] == [hash(p) for p in ps]
    del loss
    assert allocated() - start == sum(p.nbytes for p in ps)


def test_stepped_in_backward_after_a_clean_pass_and_in_standard_mode():
    x, y = batch()
    ls = layers()
    ps = parameters(ls)
    opt = gs.optim.Adam(ps, lr=0.01, in_backward=True)
    assert opt.stepped_in_backward() == []
    forward(ls, x, y).backward()
    assert len(opt.stepped_in_backward()) == len(ps)
    # Another backward on this thread that reaches none of them: nothing stepped in it.
    w = gs.ones(3, requires_grad=True)
    (w * 2).sum().backward()
    assert opt.stepped_in_backward() == []
    plain = gs.optim.SGD(parameters(layers()), lr=0.1)
    assert plain.stepped_in_backward() == []


def test_python_optimizer_in_backward_reports_what_it_stepped():
    class PlainSGD(gs.optim.Optimizer):
        def __init__(self, params, lr, in_backward=False):
            super().__init__(params, {"lr": lr}, in_backward=in_backward)

        def step(self, closure=None):
            with gs.no_grad():
                for g in self.param_groups:
                    for p in g["params"]:
                        if p.grad is not None:
                            p.add_(p.grad, alpha=-g["lr"])

    x, y = batch()
    ls = layers()
    ps = parameters(ls)
    opt = PlainSGD(ps, lr=0.1, in_backward=True)
    before = values(ps)
    with pytest.raises(Boom):
        forward(ls, x, y, raise_on_call(1)).backward()
    stepped = {hash(p) for p in opt.stepped_in_backward()}
    assert 0 < len(stepped) < len(ps)
    for p, b in zip(ps, before, strict=True):
        assert (hash(p) in stepped) == (not np.array_equal(p.detach().numpy(), b))


def test_accumulating_passes_step_nothing():
    x, y = batch()
    ls = layers()
    opt = gs.optim.SGD(parameters(ls), lr=0.1, in_backward=True).accumulate(2)
    forward(ls, x, y).backward()
    assert opt.stepped_in_backward() == []
    forward(ls, x, y).backward()
    assert len(opt.stepped_in_backward()) == len(parameters(ls))


def test_grad_consumer_exception_releases_the_graph():
    x, y = batch()
    ls = layers()
    ps = parameters(ls)
    start = allocated()
    loss = forward(ls, x, y)
    seen = []

    def consumer(p, g):
        seen.append(hash(p))
        if len(seen) == 3:
            raise Boom("consumer")

    with pytest.raises(Boom):
        loss.backward(grad_consumer=consumer)
    assert len(seen) == 3
    assert all(p.grad is None for p in ps)
    assert allocated() - start == loss.nbytes
    del loss
    # The next backward works and gives PyTorch-equal gradients to a clean run's.
    forward(ls, x, y).backward()
    got = [p.grad.numpy().copy() for p in ps]
    ref = layers()
    forward(ref, x, y).backward()
    for g, p in zip(got, parameters(ref), strict=True):
        np.testing.assert_allclose(g, p.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_retained_graph_survives_a_fault_and_gives_the_full_gradient():
    x, y = batch()
    ls = layers()
    ps = parameters(ls)
    loss = forward(ls, x, y)
    handle = ls[1].bias.register_post_accumulate_grad_hook(raise_on_call(1))
    with pytest.raises(Boom):
        loss.backward(retain_graph=True)
    handle.remove()
    for p in ps:
        p.grad = None
    loss.backward()
    ref = layers()
    forward(ref, x, y).backward()
    for p, q in zip(ps, parameters(ref), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-6, atol=1e-7)


def test_save_to_disk_that_cannot_write_fails_the_forward_and_leaves_no_file(monkeypatch, tmp_path):
    x, y = batch()
    ls = layers()
    start = allocated()
    real_save = np.save
    calls = [0]

    def disk_full(*args, **kwargs):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(errno.ENOSPC, "No space left on device (simulated)")
        return real_save(*args, **kwargs)

    monkeypatch.setattr(graph_module.np, "save", disk_full)
    with pytest.raises(OSError, match="No space left"):
        with gs.autograd.graph.save_to_disk(tmp_path):
            forward(ls, x, y)
    monkeypatch.undo()
    assert allocated() == start
    assert not list(tmp_path.iterdir())
    # The next forward and backward through the same directory work.
    with gs.autograd.graph.save_to_disk(tmp_path):
        loss = forward(ls, x, y)
    assert list(tmp_path.iterdir())
    loss.backward()
    assert not list(tmp_path.iterdir())
    assert all(p.grad is not None for p in parameters(ls))
