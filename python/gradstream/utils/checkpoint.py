"""Activation checkpointing: keep a function's inputs, recompute its activations in backward.

`checkpoint(fn, *args)` runs `fn` saving no activations; backward recomputes `fn` with
recording on and backpropagates through it. The parameters `fn` uses get their gradients
through the outer backward, so streaming hooks and in-backward optimizers see each
parameter once, with its full gradient. `checkpoint_chunks(fn, x, chunks=k)` does this per
chunk of `x` along dim 0, so only one chunk's activations are ever alive: the lever for
point-wise networks such as NeRF's MLP.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence

from .. import _core
from ..autograd.backward import grad as autograd_grad
from ..autograd.grad_mode import enable_grad, no_grad

__all__ = ["checkpoint", "checkpoint_sequential", "checkpoint_chunks"]


@contextlib.contextmanager
def _structure_only():
    prev = _core._set_structure_only(True)
    try:
        yield
    finally:
        _core._set_structure_only(prev)


@contextlib.contextmanager
def _recompute_phase():
    """Label the recompute in the memory history: its buffers are `recompute:<op>`."""
    prev = _core._set_memory_phase("recompute")
    try:
        yield
    finally:
        _core._set_memory_phase(prev)


@contextlib.contextmanager
def _rng_state(state):
    if state is None:
        yield
        return
    current = _core.get_rng_state()
    _core.set_rng_state(state)
    try:
        yield
    finally:
        _core.set_rng_state(current)


def _versions(tensors):
    return [t._version for t in tensors]


def _pack(out):
    """One tensor for the engine from a function's result: a Tensor as is, a tuple of
    tensors flattened into one buffer (unpacked again with views)."""
    if _check_result(out):
        return out, None
    shapes = [tuple(o.shape) for o in out]
    return _core.cat([o.reshape(-1) for o in out]), (type(out), shapes)


def _check_result(out) -> bool:
    """True for a Tensor, False for a tuple of same-dtype Tensors, else a TypeError."""
    if isinstance(out, _core.Tensor):
        return True
    if isinstance(out, (tuple, list)) and out and all(isinstance(o, _core.Tensor) for o in out):
        dtypes = {o.dtype for o in out}
        if len(dtypes) != 1:
            raise TypeError(f"checkpoint: tuple outputs must share one dtype, got {dtypes}")
        return False
    raise TypeError(
        "checkpoint: the checkpointed function must return a Tensor or a tuple of Tensors, got "
        f"{type(out).__name__}"
    )


def _unpack(packed, layout):
    if layout is None:
        return packed
    kind, shapes = layout
    parts, start = [], 0
    for shape in shapes:
        n = 1
        for d in shape:
            n *= d
        parts.append(packed.narrow(0, start, n).reshape(shape))
        start += n
    return kind(parts)


def checkpoint(
    function: Callable,
    *args,
    use_reentrant: bool | None = None,
    preserve_rng_state: bool = True,
    **kwargs,
):
    """Run `function(*args, **kwargs)` without saving its activations.

    Gradients equal the uncheckpointed run. The RNG state is restored for the recompute
    so dropout draws the same mask. `use_reentrant` is accepted for compatibility; there
    is one implementation.
    """
    del use_reentrant
    if not _core.is_grad_enabled():
        return function(*args, **kwargs)
    tensors = [a for a in args if isinstance(a, _core.Tensor)]
    rng = _core.get_rng_state() if preserve_rng_state else None
    before = _versions(tensors)
    started = time.perf_counter()
    with _structure_only():
        out, layout = _pack(function(*args, **kwargs))
    seconds = time.perf_counter() - started
    if _versions(tensors) != before:
        raise RuntimeError(
            "checkpoint: the checkpointed function modified one of its inputs in place; the "
            "recompute in backward would see different inputs. Clone the input inside the "
            "function instead."
        )
    if out.grad_fn is None:
        return _unpack(out, layout)
    ids = {id(t) for t in tensors}
    leaves = [p for p in _core._graph_leaves(out) if id(p) not in ids]
    grad_args = [t for t in tensors if t.requires_grad]
    out = out.detach()
    # The inputs are held as an op's saved tensors are: version-checked, and under a memory
    # budget evictable (remade from their recipes) until the backward needs them.
    saved = {"args": [_core._SavedTensor(a) if isinstance(a, _core.Tensor) else a for a in args]}
    requires = [isinstance(a, _core.Tensor) and a.requires_grad for a in args]
    # What the recompute does not get from the engine: the arguments that need no grad.
    plain = [None if req else a for a, req in zip(args, requires, strict=True)]
    name = "CheckpointBackward"

    def backward(grad):
        if "args" not in saved:
            raise RuntimeError("checkpoint: backward through the graph a second time")
        detached = []
        for a, req in zip(saved["args"], requires, strict=True):
            if isinstance(a, _core._SavedTensor):
                d = a.unpack(name).detach()
                d.requires_grad_(req)
                detached.append(d)
            else:
                detached.append(a)
        with _rng_state(rng), enable_grad(), _recompute_phase():
            recomputed, _ = _pack(function(*detached, **kwargs))
        targets = [d for d, req in zip(detached, requires, strict=True) if req]
        grads = autograd_grad(
            [recomputed], targets + leaves, grad_outputs=[grad], allow_unused=True
        )
        return list(grads)

    def release():
        for a in saved.get("args", ()):
            if isinstance(a, _core._SavedTensor):
                a.release()
        saved.clear()

    def recompute(values):
        # Under a memory budget the region's output is evictable: remade from the values
        # of its inputs (the arguments that require grad, then the leaves it reads).
        values = iter(values)
        call = [next(values) if req else a for a, req in zip(plain, requires, strict=True)]
        with _rng_state(rng), no_grad():
            remade, _ = _pack(function(*call, **kwargs))
        return remade

    _core._function_node(out, grad_args + leaves, backward, release, name, recompute, seconds)
    return _unpack(out, layout)


def checkpoint_sequential(
    functions: Sequence[Callable] | object,
    segments: int,
    input,
    use_reentrant: bool | None = None,
    **kwargs,
):
    """Run `functions` (a sequence, or an `nn.Sequential`) in `segments` checkpointed runs."""
    del use_reentrant
    fns = list(functions.children()) if hasattr(functions, "children") else list(functions)
    if segments < 1:
        raise ValueError(f"checkpoint_sequential: segments must be >= 1, got {segments}")
    size = max(1, -(-len(fns) // segments))

    def run(fs):
        def f(x):
            for fn in fs:
                x = fn(x)
            return x

        return f

    x = input
    for start in range(0, len(fns), size):
        part = fns[start : start + size]
        last = start + size >= len(fns)
        x = run(part)(x) if last else checkpoint(run(part), x, **kwargs)
    return x


def checkpoint_chunks(function: Callable, x, chunks: int, **kwargs):
    """`function(x)` for a point-wise `function`, in `chunks` checkpointed pieces of `x`
    along dim 0: only one chunk's activations are ever alive, in forward and in backward.
    `function` may return a Tensor or a tuple of Tensors (each concatenated over chunks)."""
    if not isinstance(chunks, int) or chunks < 1:
        raise ValueError(f"checkpoint_chunks: chunks must be a positive int, got {chunks!r}")
    n = x.shape[0]
    size = -(-n // chunks) if n else 1
    starts = list(range(0, n, size))
    if not starts:
        return function(x)
    outs = [checkpoint(function, x.narrow(0, s, min(size, n - s)), **kwargs) for s in starts]
    if len(outs) == 1:
        return outs[0]
    if isinstance(outs[0], _core.Tensor):
        return _core.cat(outs, 0)
    return type(outs[0])(_core.cat(list(parts), 0) for parts in zip(*outs, strict=True))
