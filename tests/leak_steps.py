"""Training steps that mix everything a graph can hold on to, for the leak checks
(tests/test_leaks.py runs a few hundred, benches/leak_check.py ten thousand).

Each step builds its model's graph with one of: tensor hooks and post-accumulate hooks,
`retain_graph`, `create_graph` (a gradient penalty), checkpointing, saved-tensor hooks,
an exception raised inside a hook (caught), an in-backward optimizer whose pass fails
midway,
and Python hooks that close over the tensors they are registered on (reference cycles
through the engine). The step's tensors and hooks are dropped when it returns.
"""

from __future__ import annotations

import weakref

import numpy as np

import gradstream as gs
from gradstream.utils.checkpoint import checkpoint


class HookFailed(Exception):
    pass


class Trainer:
    """A small MLP, its optimizers, and the step variants."""

    def __init__(self, seed: int = 0, width: int = 32):
        gs.manual_seed(seed)
        self.layers = [gs.nn.Linear(16, width), gs.nn.Linear(width, width), gs.nn.Linear(width, 4)]
        self.params = [p for layer in self.layers for p in layer.parameters()]
        self.opt = gs.optim.SGD(self.params, lr=1e-3, momentum=0.9)
        self.extra = gs.nn.Linear(16, 4)
        self.extra_opt = gs.optim.SGD(
            self.extra.parameters(), lr=1e-3, momentum=0.9, in_backward=True
        )
        rng = np.random.default_rng(seed)
        self.x = gs.tensor(rng.standard_normal((8, 16)).astype(np.float32))
        self.y = gs.tensor(rng.standard_normal((8, 4)).astype(np.float32))
        #: Weak references to objects each step made (tensors, hooks, cycles): all dead
        #: once the step has returned and gc has run.
        self.watch: list[weakref.ref] = []
        self.variants = [
            self.hooks,
            self.retained,
            self.penalty,
            self.checkpointed,
            self.saved_hooks,
            self.hook_raises,
            self.unpack_raises,
            self.cycle_through_hooks,
            self.in_backward_fails,
        ]

    def warm_up(self) -> None:
        """Each variant once: the optimizers' state exists from here on."""
        for i in range(len(self.variants)):
            self.step(i)
        self.watch.clear()

    def step(self, i: int) -> None:
        self.variants[i % len(self.variants)]()
        self.opt.step()
        self.opt.zero_grad()

    def forward(self, hidden_hook=None, middle=None):
        h = self.layers[0](self.x).tanh()
        if hidden_hook is not None:
            h.register_hook(hidden_hook)
        h = middle(h) if middle is not None else self.layers[1](h).tanh()
        self.watch.append(weakref.ref(h))
        return gs.nn.functional.mse_loss(self.layers[2](h), self.y)

    # ---- the variants ----

    def hooks(self):
        counted = []
        handles = [
            p.register_post_accumulate_grad_hook(lambda p: counted.append(p.shape))
            for p in self.params
        ]
        self.forward(hidden_hook=lambda g: g * 1.0).backward()
        assert len(counted) == len(self.params)
        for h in handles:
            h.remove()

    def retained(self):
        loss = self.forward()
        loss.backward(retain_graph=True)
        loss.backward()

    def penalty(self):
        loss = self.forward()
        grads = gs.autograd.grad(loss, self.params, create_graph=True)
        (loss + sum((g * g).sum() for g in grads)).backward()

    def checkpointed(self):
        middle = self.layers[1]
        self.forward(middle=lambda h: checkpoint(lambda t: middle(t).tanh(), h)).backward()

    def saved_hooks(self):
        packed = []

        def pack(t):
            packed.append(1)
            return t.detach().clone()

        with gs.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = self.forward()
        loss.backward()
        assert packed

    def hook_raises(self):
        def fail(g):
            raise HookFailed

        loss = self.forward(hidden_hook=fail)
        try:
            loss.backward()
        except HookFailed:
            pass
        else:
            raise AssertionError("the hook's exception did not propagate")

    def unpack_raises(self):
        calls = []

        def unpack(t):
            calls.append(1)
            if len(calls) == 2:
                raise HookFailed
            return t

        with gs.autograd.graph.saved_tensors_hooks(lambda t: t, unpack):
            loss = self.forward()
        try:
            loss.backward()
        except HookFailed:
            pass
        else:
            raise AssertionError("the unpack hook's exception did not propagate")

    def cycle_through_hooks(self):
        """Hooks that reach the tensors they are registered on: Python -> engine -> Python."""
        holder = type("Holder", (), {})()
        h = self.layers[0](self.x).tanh()
        holder.h = h
        h.register_hook(lambda g: g if holder.h is not None else g)
        leaf = gs.ones(4, 4, requires_grad=True)
        leaf.register_hook(lambda g: g + 0.0 * leaf.detach())
        leaf.register_post_accumulate_grad_hook(lambda t: (leaf, holder))
        holder.leaf = leaf
        self.watch += [weakref.ref(holder), weakref.ref(h), weakref.ref(leaf)]
        h = self.layers[1](h).tanh()
        loss = gs.nn.functional.mse_loss(self.layers[2](h), self.y) + leaf.sum()
        loss.backward()

    def in_backward_fails(self):
        """A hook after the in-backward step raises: the weight is stepped, the bias not."""

        def fail(p):
            raise HookFailed

        handle = self.extra.weight.register_post_accumulate_grad_hook(fail)
        loss = self.extra(self.x).pow(2).mean()
        try:
            loss.backward()
        except HookFailed:
            pass
        else:
            raise AssertionError("the post-accumulate hook's exception did not propagate")
        handle.remove()
        stepped = {hash(p) for p in self.extra_opt.stepped_in_backward()}
        assert hash(self.extra.weight) in stepped
        self.extra.bias.grad = None
