"""Threads: forward and backward on separate graphs in two Python threads give the
gradients of one run after the other; backward passes accumulating into one shared leaf
at once sum exactly; grad mode, saved-tensor hooks and autocast are per thread."""

from __future__ import annotations

import subprocess
import sys
import threading

import numpy as np
import pytest

import gradstream as gs

JOIN_TIMEOUT = 120


def run_threads(targets):
    """Start one thread per callable at once (behind a barrier); re-raise the first error."""
    barrier = threading.Barrier(len(targets))
    errors: list[BaseException] = []

    def wrap(f):
        def run():
            try:
                barrier.wait(timeout=JOIN_TIMEOUT)
                f()
            except BaseException as e:  # noqa: BLE001  (reported in the main thread)
                errors.append(e)

        return run

    threads = [threading.Thread(target=wrap(f), daemon=True) for f in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_TIMEOUT)
        assert not t.is_alive(), "a thread did not finish"
    if errors:
        raise errors[0]


def model(seed):
    gs.manual_seed(seed)
    return gs.nn.Sequential(
        gs.nn.Linear(32, 64), gs.nn.Tanh(), gs.nn.Linear(64, 64), gs.nn.ReLU(), gs.nn.Linear(64, 8)
    )


def inputs(seed, n=64):
    rng = np.random.default_rng(seed)
    return gs.tensor(rng.standard_normal((n, 32)).astype(np.float32))


def train(m, x, steps=20):
    """A few steps of forward, backward, plain SGD; returns the last gradients."""
    grads = []
    for _ in range(steps):
        for p in m.parameters():
            p.grad = None
        loss = m(x).pow(2).mean()
        loss.backward()
        grads = [p.grad.numpy().copy() for p in m.parameters()]
        with gs.no_grad():
            for p in m.parameters():
                p.sub_(p.grad * 0.01)
    return grads


def test_two_threads_on_separate_graphs_match_one_after_the_other():
    xs = [inputs(10), inputs(11)]
    serial = [train(model(s), x) for s, x in zip((1, 2), xs, strict=True)]
    models = [model(1), model(2)]
    results: dict[int, list] = {}

    def job(i):
        return lambda: results.__setitem__(i, train(models[i], xs[i]))

    run_threads([job(0), job(1)])
    for i in (0, 1):
        for a, b in zip(results[i], serial[i], strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("create_graph", [False, True])
def test_concurrent_backwards_into_one_shared_leaf_sum_exactly(create_graph):
    """Integer-valued float64 gradients: any lost or doubled contribution shows exactly."""
    n_threads, passes, n = 4, 100, 1 << 14
    w = gs.zeros(n, dtype=gs.float64, requires_grad=True)

    def job(k):
        def run():
            for _ in range(passes):
                (w * float(k + 1)).sum().backward(create_graph=create_graph)

        return run

    run_threads([job(k) for k in range(n_threads)])
    expected = passes * sum(range(1, n_threads + 1))
    np.testing.assert_array_equal(w.grad.detach().numpy(), np.full(n, float(expected)))


def test_concurrent_backwards_through_a_shared_module():
    """Threads share the parameters, not the graphs: `.grad` is the sum of every pass."""
    m = model(3)
    xs = [inputs(20 + k, n=16) for k in range(4)]
    ref = model(3)
    for x in xs:
        ref(x).pow(2).sum().backward()

    run_threads([lambda x=x: m(x).pow(2).sum().backward() for x in xs])
    for p, q in zip(m.parameters(), ref.parameters(), strict=True):
        np.testing.assert_allclose(p.grad.numpy(), q.grad.numpy(), rtol=1e-5, atol=1e-5)


def test_grad_mode_saved_hooks_and_autocast_are_per_thread():
    seen: dict[str, object] = {}
    inside = threading.Event()
    checked = threading.Event()

    def holder():
        x = gs.ones(4, requires_grad=True)
        with gs.no_grad(), gs.autograd.graph.save_in_bfloat16():
            with gs.autocast("cpu", dtype=gs.bfloat16):
                inside.set()
                checked.wait(JOIN_TIMEOUT)
                seen["holder_requires_grad"] = (x * 2).requires_grad

    def other():
        inside.wait(JOIN_TIMEOUT)
        x = gs.ones(4, 4, requires_grad=True)
        seen["grad_enabled"] = gs.is_grad_enabled()
        seen["autocast"] = gs.is_autocast_enabled("cpu")
        y = (x @ x).tanh()
        seen["dtype"] = y.dtype
        seen["requires_grad"] = y.requires_grad
        before = gs.memory.memory_by_category()["activation"]
        z = x.tanh()  # saves its float32 output: not packed into bfloat16 on this thread
        seen["saved_bytes"] = gs.memory.memory_by_category()["activation"] - before
        del z
        checked.set()

    run_threads([holder, other])
    assert seen["grad_enabled"] is True
    assert seen["autocast"] is False
    assert seen["dtype"] == gs.float32
    assert seen["requires_grad"] is True
    assert seen["holder_requires_grad"] is False
    assert seen["saved_bytes"] == 4 * 4 * 4


THREAD_COUNT = """
import warnings
import gradstream as gs

assert gs.get_num_interop_threads() >= 1
gs.set_num_threads(1)
assert gs.get_num_threads() == 1
x = gs.randn(256, 256)
(x @ x).sum().item()
gs.set_num_threads(1)  # the size it has: no warning
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    gs.set_num_threads(3)
assert gs.get_num_threads() == 1
assert any("cannot be resized" in str(w.message) for w in caught), caught
gs.set_num_interop_threads(2)
assert gs.get_num_interop_threads() == 2
print("ok")
"""


def test_set_num_threads_before_the_first_op():
    out = subprocess.run(
        [sys.executable, "-c", THREAD_COUNT], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("f", ["set_num_threads", "set_num_interop_threads"])
@pytest.mark.parametrize("n", [0, -2])
def test_thread_counts_must_be_positive(f, n):
    with pytest.raises(RuntimeError, match=f"{f} expects a positive integer"):
        getattr(gs, f)(n)
    torch = pytest.importorskip("torch")
    with pytest.raises(RuntimeError, match=f"{f} expects a positive integer"):
        getattr(torch, f)(n)
