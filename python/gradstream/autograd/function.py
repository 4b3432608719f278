"""Custom differentiable functions: subclass `Function`, define `forward` and `backward`.

    class Exp(Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    y = Exp.apply(x)

The forward runs without recording; `backward` runs inside the engine and returns one
gradient (or None) per argument of `forward`. Saved tensors are freed once the node has
run, unless the graph is retained.
"""

from __future__ import annotations

import time

from .. import _core
from .grad_mode import no_grad


class FunctionCtx:
    """What `forward` hands to `backward`."""

    def __init__(self, needs_input_grad: tuple[bool, ...]):
        self.needs_input_grad = needs_input_grad
        self._saved: tuple | None = ()
        self._versions: tuple[int, ...] = ()
        # Once a node is recorded: `_core._SavedTensor`s (version-checked, and packed by
        # the innermost `saved_tensors_hooks`), and the function's name for messages.
        self._stored: tuple | None = None
        self._name = ""
        self.materialize_grads = True

    def save_for_backward(self, *tensors) -> None:
        self._saved = tensors
        self._versions = tuple(t._version if t is not None else 0 for t in tensors)

    @property
    def saved_tensors(self) -> tuple:
        if self._saved is None:
            raise RuntimeError(
                "Trying to backward through the graph a second time (or directly access saved "
                "tensors after they have already been freed). Specify retain_graph=True if you "
                "need to backward through the graph a second time."
            )
        if self._stored is not None:
            return tuple(None if s is None else s.unpack(self._name) for s in self._stored)
        for i, (t, v) in enumerate(zip(self._saved, self._versions, strict=True)):
            if t is not None and t._version != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: saved tensor {i} of shape {list(t.shape)} is at "
                    f"version {t._version}; expected version {v} instead."
                )
        return self._saved

    def mark_non_differentiable(self, *tensors) -> None:
        """Accepted for compatibility: integer outputs never get a gradient."""

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value

    def _store(self, name: str) -> None:
        self._name = name
        self._stored = tuple(None if t is None else _core._SavedTensor(t) for t in self._saved)
        self._saved = ()

    def _release(self) -> None:
        self._saved = None
        if self._stored is not None:
            for s in self._stored:
                if s is not None:
                    s.release()
            self._stored = None


class Function:
    """Base class of custom autograd functions (PyTorch's `torch.autograd.Function`)."""

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("Function subclasses must implement forward")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("Function subclasses must implement backward")

    @classmethod
    def apply(cls, *args, **kwargs):
        positions = [i for i, a in enumerate(args) if isinstance(a, _core.Tensor)]
        tensors = [args[i] for i in positions]
        needs = tuple(isinstance(a, _core.Tensor) and a.requires_grad for a in args)
        ctx = FunctionCtx(needs)
        budgeted = _core._memory_budget() is not None
        rng = _core.get_rng_state() if budgeted else None
        started = time.perf_counter()
        with no_grad():
            out = cls.forward(ctx, *args, **kwargs)
        seconds = time.perf_counter() - started
        if not isinstance(out, _core.Tensor):
            raise TypeError(
                f"{cls.__name__}.forward must return a Tensor (got {type(out).__name__}); "
                "functions with several outputs are not supported yet"
            )
        if not (_core.is_grad_enabled() and any(needs)):
            return out
        if any(out is t for t in tensors):
            out = out.detach()  # never rewrite the history of an input
        if ctx._saved:
            # A saved output would own its own node (a cycle the GC cannot see): keep an
            # alias without history, sharing the buffer and the version counter.
            ctx._saved = tuple(t.detach() if t is out else t for t in ctx._saved)
            ctx._store(f"{cls.__name__}Backward")

        # The engine calls a node only with a gradient. This closure must not capture `out`
        # (`out` owns the node, and the node owns the closure), nor the inputs: what the
        # backward reads it saved, and a memory budget may evict that until it is unpacked.
        nargs = len(args)

        def backward(grad):
            grads = cls.backward(ctx, grad)
            if not isinstance(grads, tuple):
                grads = (grads,)
            if len(grads) != nargs:
                raise RuntimeError(
                    f"function {cls.__name__}Backward returned an incorrect number of gradients "
                    f"(expected {nargs}, got {len(grads)})"
                )
            return [grads[i] for i in positions]

        recompute = None
        if budgeted:
            # Under a memory budget the output is evictable: forward runs again on the
            # inputs' values, with the RNG state it first ran with.
            plain = [None if isinstance(a, _core.Tensor) else a for a in args]

            def recompute(values):
                values = iter(values)
                call = [next(values) if i in positions else a for i, a in enumerate(plain)]
                current = _core.get_rng_state()
                _core.set_rng_state(rng)
                try:
                    with no_grad():
                        return cls.forward(FunctionCtx(needs), *call, **kwargs)
                finally:
                    _core.set_rng_state(current)

        name = f"{cls.__name__}Backward"
        _core._function_node(out, tensors, backward, ctx._release, name, recompute, seconds)
        return out
