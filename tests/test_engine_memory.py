"""What the engine holds, in exact bytes: pruning, eager release, streaming, no leaks.

All numbers come from `gradstream.memory` (exact bytes of live tensor storage) and
`gradstream._core._backward_calls()` (backward rules run in this process).
"""

import gc
import os
import signal

import numpy as np
import pytest
from helpers import assert_close

import gradstream as gs
from gradstream import memory

N = 1024
MB4 = N * N * 4  # one 1024 x 1024 float32 tensor


def backward_calls():
    return gs._core._backward_calls()


def measure(fn):
    """(peak above the start, net change, backward rules run) of `fn()`."""
    gc.collect()
    calls = backward_calls()
    with memory.track() as m:
        fn()
    return m.peak_increase, m.net, backward_calls() - calls


# ---------------------------------------------------------------- pruning


@pytest.mark.parametrize(("v_shape", "v_grad_bytes"), [((N, N), MB4), ((N,), N * 4), ((1,), 4)])
def test_no_gradient_for_constants(v_shape, v_grad_bytes):
    """T1 + (T2 + (T3 + v)): only v's gradient path is computed, nothing for T1..T3."""
    gc.collect()
    start = memory.memory_allocated()
    t1, t2, t3 = gs.randn(N, N), gs.randn(N, N), gs.randn(N, N)
    v = gs.randn(*v_shape, requires_grad=True)
    loss = (t1 + (t2 + (t3 + v))).sum()  # adds save nothing: only inputs and loss are alive
    assert memory.memory_allocated() - start == 3 * MB4 + v.nbytes + loss.nbytes

    peak, net, calls = measure(loss.backward)
    assert calls == 4  # SumBackward0 + three AddBackward0, nothing else
    assert net == v_grad_bytes  # v.grad, and nothing kept for T1..T3
    assert v.grad.nbytes == v_grad_bytes
    # The root's 4-byte gradient and v's gradient path: not one byte for T1..T3.
    assert peak <= v_grad_bytes + 4 + 2 * 4 * N
    assert peak < MB4 or v_grad_bytes == MB4


def test_autograd_grad_prunes_a_whole_branch():
    x = gs.randn(N, N, requires_grad=True)
    w = gs.randn(N, requires_grad=True)
    big = x.exp().sin()  # a branch that leads only to x, saving 2 large tensors
    loss = (big * w).sum()
    calls = backward_calls()
    with memory.track() as m:
        (gw,) = gs.autograd.grad(loss, w)
    assert backward_calls() - calls == 2  # sum, mul; not sin, not exp
    assert m.net == gw.nbytes == N * 4
    assert m.peak_increase <= MB4 + 3 * N * 4  # g * big, summed to w's shape
    assert x.grad is None


# ---------------------------------------------------------------- eager release


def _two_layer():
    x = gs.randn(64, 256)
    w1 = gs.randn(256, 256, requires_grad=True)
    w2 = gs.randn(256, 32, requires_grad=True)
    loss = ((x @ w1).tanh() @ w2).sum()
    return x, w1, w2, loss


def test_saved_tensors_released_after_backward():
    gc.collect()
    start = memory.memory_allocated()
    x, w1, w2, loss = _two_layer()
    held = x.nbytes + w1.nbytes + w2.nbytes + loss.nbytes
    saved = 64 * 256 * 4  # tanh's output, saved once for tanh and for the second matmul
    assert memory.memory_allocated() - start == held + saved
    # saved: x (for w1's gradient), w2 (for h's), tanh's output (for both)
    assert memory.memory_by_category()["activation"] == saved + x.nbytes + w2.nbytes
    loss.backward()
    # Exactly the leaves, their .grad and the user's own tensors: every saved tensor is gone.
    assert memory.memory_allocated() - start == held + w1.grad.nbytes + w2.grad.nbytes
    assert memory.memory_by_category()["activation"] == 0
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second time"):
        loss.backward()


def test_retain_graph_keeps_saved_tensors_and_accumulates():
    x, w1, w2, loss = _two_layer()
    loss.backward(retain_graph=True)
    g1 = w1.grad.numpy().copy()
    kept = memory.memory_allocated()
    loss.backward()
    assert (abs(w1.grad.numpy() - 2 * g1) <= 1e-4 * (1 + abs(g1))).all()
    assert memory.memory_allocated() == kept - 64 * 256 * 4  # released after the last one


def test_intermediate_gradients_live_only_until_consumed():
    """A chain of 10 sin nodes on 4 MiB tensors: backward never holds more than a few."""
    x = gs.randn(N, N, requires_grad=True)
    h = x
    for _ in range(10):
        h = h.sin()
    loss = h.sum()
    del h
    gc.collect()
    saved = memory.memory_by_category()["activation"]
    assert saved == 10 * MB4  # x and 9 intermediates, each saved by the next sin
    peak, net, calls = measure(loss.backward)
    assert calls == 11
    assert peak <= 2 * MB4 + 4  # incoming gradient + cos(saved) at most, the rest is freed
    assert net == MB4 - 9 * MB4  # x.grad arrives, 9 saved intermediates leave
    assert memory.memory_by_category()["activation"] == 0


# A product whose saved input goes before the input's gradient is allocated: `h` is a
# fresh buffer (`a.clone()`) only the product holds, `w` a small operand.
PRODUCTS = {
    "x @ w": (lambda h, w: h @ w, (N, N), (N, 8)),
    "w @ x": (lambda h, w: w @ h, (N, N), (8, N)),
    "linear": (lambda h, w: gs.nn.functional.linear(h, w), (N, N), (8, N)),
    "conv2d": (lambda h, w: gs.nn.functional.conv2d(h, w), (1, 16, 128, 128), (4, 16, 3, 3)),
}


def _product_backward(kind, hold=False, retain=False):
    """(peak above the start of backward, a.grad, w.grad, h's bytes) of `product(a.clone(), w)`."""
    f, h_shape, w_shape = PRODUCTS[kind]
    gs.manual_seed(0)
    a = gs.randn(*h_shape, requires_grad=True)
    w = gs.randn(*w_shape, requires_grad=True)
    h = a.clone()
    loss = f(h, w).sum()
    h_bytes = h.nbytes
    kept = h if hold else None
    del h
    peak, _, _ = measure(lambda: loss.backward(retain_graph=retain))
    del kept
    return peak, a.grad.numpy(), w.grad.numpy(), h_bytes


@pytest.mark.parametrize("kind", sorted(PRODUCTS))
def test_a_product_frees_its_input_before_the_input_gradient_exists(kind):
    """The small operand's gradient is computed first, from the large input, which is then
    freed: its gradient takes its place instead of adding to the peak."""
    peak, ga, gw, h_bytes = _product_backward(kind)
    assert ga.nbytes == h_bytes
    assert peak < h_bytes // 2, (peak, h_bytes)
    # Held by the user, or by a retained graph, the input stays: its gradient comes on top.
    for hold, retain in [(True, False), (False, True)]:
        peak_kept, ga_kept, gw_kept, _ = _product_backward(kind, hold, retain)
        assert peak_kept >= h_bytes, (hold, retain, peak_kept)
        assert (ga_kept == ga).all() and (gw_kept == gw).all()


def _activation_backward(act, keep_grad):
    """(peak above the start of backward, a.grad, the kept gradients) of `act(a.clone()) @ w`;
    with `keep_grad` a hook keeps the gradient arriving at the activation's output."""
    gs.manual_seed(0)
    a = gs.randn(N, N, requires_grad=True)
    w = gs.randn(N, 8, requires_grad=True)
    y = act(a.clone())
    kept = []
    if keep_grad:
        y.register_hook(kept.append)
    loss = (y @ w).sum()
    del y
    peak, _, _ = measure(loss.backward)
    return peak, a.grad.numpy(), kept


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
def test_relu_backward_masks_the_incoming_gradient_in_place():
    """The gradient arriving at relu is the product's fresh buffer, held by nothing else:
    relu's backward zeroes it where its mask is clear instead of taking a second buffer."""
    peak, ga, _ = _activation_backward(gs.relu, keep_grad=False)
    assert peak < MB4 // 2, peak
    peak_kept, ga_kept, kept = _activation_backward(gs.relu, keep_grad=True)
    assert peak_kept >= MB4, peak_kept  # the hook holds it: relu's gradient is a new buffer
    assert (ga_kept == ga).all()
    g = kept[0].numpy()
    assert (ga == np.where(ga != 0, g, 0)).all() and (g != 0).sum() > (ga != 0).sum() > 0


FUSED = {
    "gelu": gs.nn.functional.gelu,
    "gelu_tanh": lambda t: gs.nn.functional.gelu(t, approximate="tanh"),
    "tanh": gs.tanh,
    "sigmoid": gs.sigmoid,
    "silu": gs.nn.functional.silu,
    "softplus": gs.nn.functional.softplus,
}


@pytest.mark.cpu_backend("the in-place fused gradient is the CPU kernel's")
@pytest.mark.parametrize("kind", sorted(FUSED))
def test_activation_backward_writes_over_the_incoming_gradient(kind):
    """The gradient arriving at gelu (tanh, sigmoid, silu, softplus) is the product's fresh
    buffer, held by nothing else: the fused backward `g * f'(s)` overwrites it instead of
    taking a second activation-sized buffer, with the same values as when it cannot."""
    peak, ga, _ = _activation_backward(FUSED[kind], keep_grad=False)
    # The product frees its input before the gradient exists, unless tanh or sigmoid saved
    # that output too: then the gradient is one buffer more, and nothing else is.
    saves_output = kind in ("tanh", "sigmoid")
    assert peak < (MB4 if saves_output else 0) + MB4 // 2, peak
    peak_kept, ga_kept, _ = _activation_backward(FUSED[kind], keep_grad=True)
    # The hook holds it: the input gradient is a new buffer (the scalars' bytes aside).
    assert peak_kept >= peak + MB4 - 16, (peak, peak_kept)
    assert (ga == ga_kept).all()


# ---------------------------------------------------------------- streaming


def _mlp(hook=None):
    gs.manual_seed(0)
    ws = []
    for _ in range(8):
        w = gs.randn(N, N)
        with gs.no_grad():
            w = w * (1.0 / 32)
        ws.append(w.requires_grad_())
    if hook is not None:
        for w in ws:
            w.register_post_accumulate_grad_hook(hook)
    h = gs.randn(16, N)
    for i, w in enumerate(ws):
        h = h @ w
        if i < len(ws) - 1:
            h = h.relu()
    return ws, h.sum()


def _drop(p):
    p.grad = None


def test_streaming_hooks_hold_one_weight_gradient_at_a_time():
    ws, loss = _mlp(_drop)
    peak, net, calls = measure(loss.backward)
    assert all(w.grad is None for w in ws)
    assert peak <= 2 * MB4 + 2**20  # ~one weight gradient (+ small activation gradients)
    assert net <= 0


def test_without_hooks_all_weight_gradients_are_kept():
    ws, loss = _mlp()
    peak, net, _ = measure(loss.backward)
    assert peak >= 8 * MB4 - 2**20  # (saved activations are freed as it goes)
    assert net >= 8 * MB4 - 2**20  # the gradients stay (saved activations are freed)


def test_grad_consumer_holds_one_weight_gradient_at_a_time():
    ws, loss = _mlp()
    seen = []
    peak, net, _ = measure(lambda: loss.backward(grad_consumer=lambda p, g: seen.append(g.nbytes)))
    assert seen == [MB4] * 8
    assert all(w.grad is None for w in ws)
    assert peak <= 2 * MB4 + 2**20
    assert net <= 0


def test_streamed_gradients_equal_stored_ones():
    ws, loss = _mlp()
    loss.backward()
    stored = [w.grad.numpy().copy() for w in ws]
    ws2, loss2 = _mlp()
    streamed = {}
    for i, w in enumerate(ws2):
        w.register_post_accumulate_grad_hook(
            lambda p, i=i: streamed.__setitem__(i, p.grad.numpy().copy())
        )
    loss2.backward()
    assert sorted(streamed) == list(range(8))
    for i in range(8):
        assert (streamed[i] == stored[i]).all()


# ---------------------------------------------------------------- no leaks


def test_thousand_graphs_leave_nothing_behind():
    x = gs.randn(32, 32, requires_grad=True)
    w = gs.randn(32, 32, requires_grad=True)

    def step(i):
        hx = x.register_hook(lambda g: g * 1.0)
        hw = w.register_post_accumulate_grad_hook(lambda p: None)
        h = (x @ w).tanh()
        h.register_hook(lambda g: g)
        loss = (h * x + h.exp()).sum()
        if i % 3 == 0:
            loss.backward()
        elif i % 3 == 1:
            gs.autograd.grad(loss, (x, w))
        # else: the graph is dropped without any backward
        hx.remove()
        hw.remove()

    step(0)  # x.grad and w.grad exist from here on
    gc.collect()
    start = memory.memory_allocated()
    for i in range(1000):
        step(i)
    gc.collect()
    assert memory.memory_allocated() == start
    assert memory.memory_by_category()["activation"] == 0


def test_exception_in_hook_leaves_memory_at_baseline():
    gc.collect()
    start = memory.memory_allocated()
    x = gs.randn(N, N, requires_grad=True)
    h = x.exp().sin()
    h.register_hook(lambda g: 1 / 0)
    loss = h.sum()
    with pytest.raises(ZeroDivisionError):
        loss.backward()
    assert x.grad is None
    del h, loss
    gc.collect()
    assert memory.memory_allocated() - start == x.nbytes
    assert memory.memory_by_category()["activation"] == 0


def test_keyboard_interrupt_leaves_memory_at_baseline():
    gc.collect()
    start = memory.memory_allocated()
    x = gs.randn(256, 256, requires_grad=True)
    calls = {"n": 0}

    def interrupt(g):
        calls["n"] += 1
        os.kill(os.getpid(), signal.SIGINT)

    # A hook on the gradient of the 50th of 100 nodes: SIGINT arrives mid-backward.
    z = x
    for i in range(100):
        z = z.tanh()
        if i == 49:
            z.register_hook(interrupt)
    loss = z.sum()
    del z
    before = backward_calls()
    with pytest.raises(KeyboardInterrupt):
        loss.backward()
    assert calls["n"] == 1
    assert 51 <= backward_calls() - before <= 52  # stopped at the hook, not at the end
    assert x.grad is None
    del loss
    gc.collect()
    assert memory.memory_allocated() - start == x.nbytes
    assert memory.memory_by_category()["activation"] == 0


def test_linear_weight_gradient_reaches_grad_without_a_copy():
    """`x @ w.t()` (how Linear computes): w's gradient is produced in w's layout, so the
    leaf keeps the buffer backward made instead of copying a transposed view."""
    w = gs.randn(256, 512, requires_grad=True)
    x = gs.randn(64, 512)
    loss = (x @ w.t()).sum()
    grad_bytes = 256 * 512 * 4
    base = gs.memory.memory_allocated()
    gs.memory.reset_peak_memory_stats()
    loss.backward()
    peak = gs.memory.max_memory_allocated() - base
    assert w.grad.is_contiguous()
    assert gs.memory.memory_allocated() - base == grad_bytes
    assert peak < 1.5 * grad_bytes, peak  # a copy would make it at least 2x
    ref = x.sum(0, keepdim=True).expand(256, 512)
    # float32 sums of 64 terms; entries near zero differ by rounding only
    assert_close(w.grad, ref, rtol=1e-4, atol=1e-5, terms=64)
