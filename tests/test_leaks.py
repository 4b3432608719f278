"""No leak: a few hundred training steps mixing hooks, retain_graph, create_graph,
checkpointing, saved-tensor hooks, exceptions inside hooks and reference cycles through
Python hooks leave `memory.memory_allocated()` at its baseline, byte for byte, and every
Python object they made collectable. benches/leak_check.py runs the same for 10,000."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref

import pytest
from leak_steps import Trainer

import gradstream as gs
from gradstream import memory


def settled_allocated() -> int:
    gc.collect()
    return memory.memory_allocated()


def test_mixed_training_steps_return_to_the_baseline():
    trainer = Trainer()
    trainer.warm_up()
    baseline = settled_allocated()
    for i in range(1, 361):
        trainer.step(i)
        if i % len(trainer.variants) == 0:
            assert settled_allocated() == baseline, f"after step {i}"
    assert memory.memory_by_category()["activation"] == 0
    assert [r for r in trainer.watch if r() is not None] == []


@pytest.mark.parametrize("kind", ["tensor_hook", "post_accumulate_hook", "non_leaf_hook"])
def test_reference_cycle_through_a_hook_is_collected(kind):
    class Holder:
        pass

    def make():
        holder = Holder()
        x = gs.randn(64, 64, requires_grad=True)
        if kind == "tensor_hook":
            x.register_hook(lambda g: g if holder else g)
        elif kind == "post_accumulate_hook":
            x.register_post_accumulate_grad_hook(lambda t: holder)
        else:
            y = x.tanh()
            y.register_hook(lambda g: g if holder else g)
            holder.y = y
        holder.x = x
        return weakref.ref(holder), weakref.ref(x)

    start = settled_allocated()
    refs = make()
    gc.collect()
    assert [r() for r in refs] == [None, None]
    assert memory.memory_allocated() == start


def test_cycle_through_a_custom_function_ctx_is_collected():
    class Scale(gs.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.me = ctx  # a cycle through the node's Python side
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    start = settled_allocated()
    x = gs.randn(32, requires_grad=True)
    y = Scale.apply(x)
    r = weakref.ref(y)
    del y
    gc.collect()
    assert r() is None
    del x
    assert settled_allocated() == start


def test_collector_may_run_while_tensor_subclasses_are_made():
    """CPython 3.11-3.12 may collect while a `Parameter`'s `__dict__` is being created, before
    its tensor is written in: the traversal must skip such an object (in a subprocess, so a
    crash fails this test only)."""
    script = textwrap.dedent(
        """
        import gc
        import gradstream as gs
        gc.set_threshold(1, 1, 1)
        keep = []
        for i in range(300):
            p = gs.nn.Parameter(gs.ones(3))
            p.register_hook(lambda g, p=p: g)
            keep.append(p)
            if i % 3 == 0:
                keep.pop(0)
        print("ok")
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
