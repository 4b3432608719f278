"""Train within a memory budget: `with gradstream.memory.budget("300MiB"): step()`.

Inside a budget, whenever a new tensor would take the live tensor bytes
(`memory_allocated()`) past it, the engine evicts saved activations that it can recompute,
lowest score first, and recomputes them from their recorded op and inputs (recursively)
when the backward needs them. It evicts before a large buffer (64 KiB or more) is allocated,
not only when the op's result is counted, so the process's footprint stays within the
budget too, not only the count. The score is Dynamic Tensor Rematerialization's (Kirisame
et al., ICLR 2021): the op's measured time, plus that of its inputs that are evicted too,
over the bytes freed times how long it would stay unused. In the forward that is the
staleness (how long since it was last used); in the backward, where the engine knows the
order the nodes run in, the square root of the number of nodes before the next one that
reads it (directly, or to recompute an evicted tensor made from it). So cheap, large
activations that are needed last go first.

Never evicted: parameters, gradients, optimizer state, and any tensor that something else
holds (a Python reference, a view the user keeps). Every deterministic op that records a
node leaves a recipe: products (matmul, mm, bmm, einsum, addmm, dot, linear, conv), norms,
pooling and interpolation, attention (with the same dropout seed), softmax and log_softmax,
the element-wise ops, the reductions and scans, indexing, gather and embedding, sort and
topk, where and clamp, casts, views, and the NeRF volume renderer; the losses are made of
these. Ops with random draws (dropout) recompute with the same draw. A whole write into a
tensor (``copy_``, ``relu_``, ``x += y``) gives it a recipe of its own: a copy of what was
written. A buffer and the saved views of it are evicted together. What cannot be recomputed
is kept and named in ``budget_stats()["kept"]`` with its bytes: tensors written in a region
(``x[i] = v``, or through a view) and what reads them, the small masks and indices some ops
save for their backward alone, and the outputs of the linear-algebra decompositions.
Checkpointed regions and custom ``autograd.Function``s run again, with the RNG state they
first ran with. A recomputed input that other ops read too (a fused qkv projection) is kept,
while there is room, until the backward node that needed it ends, so it is recomputed once
for all its readers.

When the budget cannot be met, `gradstream.OutOfMemoryError` (a RuntimeError) is raised
with the budget and the least the step needs at that point. When a leaf's gradient has
effects (an optimizer with ``in_backward=True``, a gradient consumer), the backward is run
once without them first, so the error comes before any parameter is stepped: it costs a
second backward, no memory.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from .. import _core

_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
}


def parse_bytes(size: int | float | str) -> int:
    """Bytes from a number or a string with a unit: ``"300MiB"``, ``"1.5 GB"``, ``"4096"``."""
    if isinstance(size, bool):
        raise TypeError(f"memory budget: expected bytes or a size string, got {size!r}")
    if isinstance(size, (int, float)):
        n = size
    elif isinstance(size, str):
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*", size)
        if m is None or m.group(2).lower() not in _UNITS:
            raise ValueError(
                f"memory budget: cannot read {size!r}; use bytes or a number with a unit "
                "(B, KB, MB, GB, KiB, MiB, GiB)"
            )
        n = float(m.group(1)) * _UNITS[m.group(2).lower()]
    else:
        raise TypeError(
            f"memory budget: expected bytes or a size string, got {type(size).__name__}"
        )
    if n <= 0:
        raise ValueError(f"memory budget must be positive, got {size!r}")
    return int(n)


def _fraction(size) -> float | None:
    """``"60%"`` -> 0.6; None for anything that is not a percentage."""
    if not isinstance(size, str) or not size.strip().endswith("%"):
        return None
    try:
        f = float(size.strip()[:-1]) / 100
    except ValueError:
        raise ValueError(f"memory budget: cannot read {size!r} as a percentage") from None
    if not 0 < f <= 1:
        raise ValueError(f"memory budget: a percentage must be in (0%, 100%], got {size!r}")
    return f


def set_budget(size: int | float | str | None, device=None) -> int | None:
    """Keep live tensor bytes on `device` (the default device when None) within `size`
    (bytes or ``"300MiB"``); None removes the budget.

    A percentage (``"60%"``) is a fraction of the first step's exact peak: the program runs
    unconstrained until its next backward pass ends, and the budget is set then (this is
    what ``python -m gradstream.alias --memory-budget 60% script.py`` does).

    Returns the previous budget in bytes (or None).
    """
    fraction = _fraction(size)
    _core._set_memory_budget_fraction(fraction, device)
    if fraction is not None:
        return get_budget()
    return _core._set_memory_budget(None if size is None else parse_bytes(size), device)


def get_budget() -> int | None:
    """The memory budget in bytes, or None."""
    return _core._memory_budget()


@contextlib.contextmanager
def budget(size: int | float | str | None, device=None) -> Iterator[None]:
    """Run the block within a memory budget (bytes or ``"300MiB"``) on `device` (the default
    device when None); restores the previous one."""
    if _fraction(size) is not None:
        raise ValueError(
            f"memory budget: {size!r} is a fraction of a step's peak, which a block cannot "
            "know before it runs; use set_budget for a whole program, or bytes here"
        )
    prev = set_budget(size, device)
    try:
        yield
    finally:
        _core._set_memory_budget(prev, device)


def budget_stats() -> dict[str, float]:
    """What budgets did since the last reset: ``evictions``, ``evicted_bytes``,
    ``recomputations``, ``recomputed_bytes``, ``recompute_seconds``, and ``kept``: the bytes
    of saved tensors that had no recipe, so no budget could evict them, by the op (node)
    that made them."""
    return dict(_core._memory_budget_stats())


def reset_budget_stats() -> None:
    """Zero the counters of `budget_stats()`."""
    _core._reset_memory_budget_stats()


OutOfMemoryError = _core.OutOfMemoryError
