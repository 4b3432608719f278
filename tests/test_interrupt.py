"""Ctrl-C during backward: the engine sees SIGINT through a flag its handler sets, then
lets Python raise KeyboardInterrupt; the graph is released and the next backward works."""

import collections
import ctypes
import functools
import gc
import os
import signal
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import gradstream as gs
from gradstream import memory

pytestmark = pytest.mark.skipif(os.name != "posix", reason="SIGINT as on Unix")

LIBC = ctypes.CDLL(None, use_errno=True)


def backward_calls():
    return gs._core._backward_calls()


def silent_sigint_hook():
    """A post-accumulate hook that sends SIGINT and runs no Python bytecode.

    `os.kill` and `signal.raise_signal` run Python's handler before they return, so the
    KeyboardInterrupt would come from the hook. Here the handler has not run when the hook
    returns: only the engine, between nodes, can notice the signal. (A `defaultdict` calls
    its factory, libc's `kill` bound by `functools.partial`, from C.)"""
    kill = functools.partial(LIBC.kill, os.getpid(), int(signal.SIGINT))
    return collections.defaultdict(kill).__getitem__


def chain_with_a_leaf_midway(n=100, at=50):
    """`n` tanh nodes; the leaf `w` joins at node `at`, so its sink runs mid-backward."""
    x = gs.randn(64, 64, requires_grad=True)
    w = gs.randn(64, 64, requires_grad=True)
    z = x
    for i in range(n):
        z = z.tanh()
        if i == at:
            z = z * w
    return x, w, z.sum()


def test_engine_sees_sigint_between_nodes_and_stays_usable():
    gc.collect()
    start = memory.memory_allocated()
    x, w, loss = chain_with_a_leaf_midway()
    w.register_post_accumulate_grad_hook(silent_sigint_hook())
    before = backward_calls()
    with pytest.raises(KeyboardInterrupt):
        loss.backward()
    # Sum, 49 tanh, then Mul: w's sink runs next, and the node after it is not run.
    assert backward_calls() - before == 51
    assert x.grad is None and w.grad is not None
    del loss
    gc.collect()
    assert memory.memory_allocated() - start == x.nbytes + 2 * w.nbytes
    assert memory.memory_by_category()["activation"] == 0
    # The next backward runs to the end (the flag was consumed with the signal).
    x2, w2, loss2 = chain_with_a_leaf_midway()
    loss2.backward()
    assert x2.grad is not None and w2.grad is not None


def test_interrupted_retained_graph_gives_the_full_gradient_next_time():
    x, w, loss = chain_with_a_leaf_midway()
    handle = w.register_post_accumulate_grad_hook(silent_sigint_hook())
    with pytest.raises(KeyboardInterrupt):
        loss.backward(retain_graph=True)
    handle.remove()
    w.grad = None
    loss.backward()
    x2 = x.detach().requires_grad_()
    w2 = w.detach().requires_grad_()
    z = x2
    for i in range(100):
        z = z.tanh()
        if i == 50:
            z = z * w2
    z.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), x2.grad.numpy())
    np.testing.assert_array_equal(w.grad.numpy(), w2.grad.numpy())


# `signal.signal` puts Python's own handler back in front of ours for the rest of the
# process (the engine then asks Python at every node), so these run in a child process.
HANDLER_SCRIPT = """
import signal, sys
sys.path.insert(0, {tests!r})
import test_interrupt as t

calls = []
x, w, loss = t.chain_with_a_leaf_midway()
w.register_post_accumulate_grad_hook(t.silent_sigint_hook())
signal.signal(signal.SIGINT, lambda *a: calls.append(a[0]))
loss.backward()
assert calls == [signal.SIGINT] and x.grad is not None, calls

class Stop(Exception):
    pass

def stop(*_):
    raise Stop

x, w, loss = t.chain_with_a_leaf_midway()
w.register_post_accumulate_grad_hook(t.silent_sigint_hook())
signal.signal(signal.SIGINT, stop)
before = t.backward_calls()
try:
    loss.backward()
    raise AssertionError("backward was not stopped")
except Stop:
    pass
assert t.backward_calls() - before == 51
print("ok")
"""


def test_python_handlers_installed_over_ours_still_run():
    """A handler that returns lets backward finish; one that raises stops it, as before."""
    script = HANDLER_SCRIPT.format(tests=os.path.dirname(__file__))
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_ctrl_c_still_interrupts_a_blocking_read():
    """Our handler keeps Python's flags: without SA_RESTART a blocked read returns EINTR,
    so Ctrl-C at `input()` or `os.read` is not held up until the read completes."""
    gs.ones(1, requires_grad=True).sum().backward()  # our handler is in place by now
    r, wfd = os.pipe()
    main = threading.main_thread().ident
    done = threading.Event()
    unblocked = []

    def sigint_then_unblock():
        time.sleep(0.2)  # let the main thread block in read (if not, the test proves less)
        signal.pthread_kill(main, signal.SIGINT)
        if not done.wait(10):  # only if the read was restarted instead of interrupted
            unblocked.append(True)
            os.write(wfd, b"x")

    t = threading.Thread(target=sigint_then_unblock)
    t.start()
    try:
        with pytest.raises(KeyboardInterrupt):
            os.read(r, 1)
    finally:
        done.set()
        t.join()
        os.close(r)
        os.close(wfd)
    assert not unblocked
