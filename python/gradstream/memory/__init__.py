"""`gradstream.memory`: exact bytes held by tensors, shaped like `torch.cuda`'s memory API.

On the CPU every figure is exact: a counting allocator in the extension sees the moment a
tensor buffer is really freed. Views add nothing; a buffer shared by several tensors
counts once. Bytes are split by what they are for: ``parameter``, ``gradient``,
``optimizer_state``, ``activation`` (saved for backward) and ``other``.

Accounting is always on and costs well under 2% of a training step
(``benches/memory_overhead.py``). Recording a history (``record_history``) costs more:
one locked append per buffer event.
"""

# Imported under private names: `dir(gradstream.memory)` is its API (no `annotations` from
# `from __future__` either; Python 3.10 evaluates these annotations as they are).
import contextlib as _contextlib
from collections.abc import Iterator as _Iterator
from dataclasses import dataclass as _dataclass
from dataclasses import field as _field

from .. import _core
from .budget import (
    OutOfMemoryError,
    budget,
    budget_stats,
    get_budget,
    parse_bytes,
    reset_budget_stats,
    set_budget,
)
from .snapshot import _dump_snapshot, _snapshot, dump_snapshot, snapshot
from .timeline import plot_timeline, timeline

CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "other")


def _is_host(device) -> bool:
    """Whether `device` (the default device when None) is the CPU, where the block cache is."""
    d = _core.get_default_device() if device is None else _core.device(device)
    return d.type == "cpu"


def memory_allocated(device=None) -> int:
    """Bytes of tensor storage alive now on `device` (the default device when None): exact,
    views count nothing, shared buffers once."""
    return _core._memory_allocated(device)


def max_memory_allocated(device=None) -> int:
    """The peak of `memory_allocated()` since start or the last `reset_peak_memory_stats()`."""
    return _core._max_memory_allocated(device)


def memory_reserved(device=None) -> int:
    """`memory_allocated()` plus what the cache of freed large blocks holds.

    Buffers of 64 KiB and more are not given back to the system when freed: a later request
    of the same size (or of at least half of it) reuses one, so its pages do not fault in
    again. Held: the cached free blocks, and the unused tail of blocks serving smaller
    requests (address space only: its pages are handed back to the system). The cache keeps
    what it holds under the high-water mark of the bytes live large blocks hold: before it
    maps a new block or faults in pages of a cached one, it gives back its oldest blocks until
    live + cached fits under that mark, so it does not raise the peak, and the blocks one
    step frees serve the next. `empty_cache()` gives the free blocks back and resets the mark;
    ``GRADSTREAM_BLOCK_CACHE=0`` turns the cache off. The cache holds host memory only: on
    another device this is `memory_allocated(device)`.
    """
    if not _is_host(device):
        return memory_allocated(device)
    cached, slack = _core._block_cache_stats()[:2]
    return memory_allocated(device) + cached + slack


def max_memory_reserved(device=None) -> int:
    """The peak of `memory_allocated()`: the cache keeps live + cached under the high-water
    mark of live blocks, so what it holds never adds to the peak (see `memory_reserved`)."""
    return max_memory_allocated(device)


def reset_peak_memory_stats(device=None) -> None:
    """Reset every peak (total, by category, buffer count) to its current value."""
    _core._reset_peak_memory_stats(device)


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def empty_cache() -> None:
    """Give every freed block the cache holds back to the system, and lower the mark it keeps
    live + cached under to what is live now."""
    _core._empty_cache()


def memory_by_category(device=None) -> dict[str, int]:
    """Bytes now by what they are for: parameter, gradient, optimizer_state, activation, other."""
    return {c: b for c, b in _core._memory_by_category(device).items()}


def max_memory_by_category(device=None) -> dict[str, int]:
    """Peak bytes of each category since start or the last reset (each its own peak)."""
    return {c: b for c, b in _core._memory_peak_by_category(device).items()}


def memory_stats(device=None) -> dict[str, int]:
    """Counters in `torch.cuda.memory_stats()`'s key style.

    ``allocated_bytes.all.{current,peak,allocated,freed}``, ``allocation.all.*`` (buffer
    counts), ``allocated_bytes.<category>.{current,peak}``, ``num_allocs``, ``num_frees``;
    ``active_bytes`` equals ``allocated_bytes``; ``reserved_bytes.all.current`` adds what
    the block cache holds (`memory_reserved`), and
    ``block_cache.{cached_bytes,slack_bytes,hits,misses,moved_bytes}`` count its work
    (``moved_bytes``: pages of given-back blocks moved into new ones instead of faulted in).
    """
    allocs, frees, bytes_alloc, bytes_freed, live, live_peak = _core._memory_counts(device)
    current, peak = memory_allocated(device), max_memory_allocated(device)
    stats: dict[str, int] = {}
    for prefix in ("allocated_bytes", "active_bytes", "reserved_bytes"):
        stats[f"{prefix}.all.current"] = current
        stats[f"{prefix}.all.peak"] = peak
        stats[f"{prefix}.all.allocated"] = bytes_alloc
        stats[f"{prefix}.all.freed"] = bytes_freed
    stats["allocation.all.current"] = live
    stats["allocation.all.peak"] = live_peak
    stats["allocation.all.allocated"] = allocs
    stats["allocation.all.freed"] = frees
    peaks = max_memory_by_category(device)
    for cat, b in memory_by_category(device).items():
        stats[f"allocated_bytes.{cat}.current"] = b
        stats[f"allocated_bytes.{cat}.peak"] = peaks[cat]
    cached, slack, hits, misses, _on, _resident, moved = _core._block_cache_stats()
    if not _is_host(device):
        cached = slack = hits = misses = moved = 0
    stats["reserved_bytes.all.current"] = current + cached + slack
    stats["block_cache.cached_bytes"] = cached
    stats["block_cache.slack_bytes"] = slack
    stats["block_cache.hits"] = hits
    stats["block_cache.misses"] = misses
    stats["block_cache.moved_bytes"] = moved
    stats["num_allocs"] = allocs
    stats["num_frees"] = frees
    stats["num_ooms"] = 0
    return dict(sorted(stats.items()))


def _fmt(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.2f} {unit}"
        n /= 1024
    return str(n)


def memory_summary(device=None, abbreviated: bool = False) -> str:
    """A table of current and peak bytes, overall and by category."""
    cur, peak = memory_by_category(), max_memory_by_category()
    rows = [("all", memory_allocated(), max_memory_allocated())]
    rows += [(c, cur[c], peak[c]) for c in CATEGORIES]
    lines = [f"{'category':<16}{'current':>14}{'peak':>14}"]
    lines += [f"{name:<16}{_fmt(c):>14}{_fmt(p):>14}" for name, c, p in rows]
    return "\n".join(lines)


@_dataclass
class TrackResult:
    """What `track()` saw: the block's peak above its start, and its net change."""

    start: int = 0
    peak: int = 0
    end: int = 0
    by_category: dict[str, int] = _field(default_factory=dict)

    @property
    def peak_increase(self) -> int:
        """Highest bytes above the start reached inside the block."""
        return self.peak - self.start

    @property
    def net(self) -> int:
        """Bytes still allocated at the end that were not at the start (negative: freed)."""
        return self.end - self.start


@_contextlib.contextmanager
def track() -> _Iterator[TrackResult]:
    """Measure a block: ``with memory.track() as m: ...`` then ``m.peak_increase``, ``m.net``.

    Resets the peak counters on entry (as `reset_peak_memory_stats()` does).
    ``m.by_category`` is the net change of each category.
    """
    before = memory_by_category()
    r = TrackResult(start=memory_allocated())
    reset_peak_memory_stats()
    try:
        yield r
    finally:
        r.peak = max(max_memory_allocated(), r.start)
        r.end = memory_allocated()
        after = memory_by_category()
        r.by_category = {c: after[c] - before[c] for c in CATEGORIES}


def record_history(
    enabled: str | None = "all",
    context=None,
    stacks=None,
    max_entries: int = 2**63 - 1,
) -> None:
    """Record allocation history for `snapshot()`, as `torch.cuda.memory._record_memory_history`.

    Args:
        enabled: ``"all"`` keeps every alloc/free/category event; ``"state"`` keeps only
            what allocated the live buffers; ``None`` stops recording. Starting clears
            the previous history.
        context, stacks: accepted for compatibility; events carry the phase and op
            running (forward op, backward node, optimizer step), not Python stacks.
        max_entries: keep the last this many events (a ring, as in PyTorch).

    Recording costs one locked append per buffer event: use it to look, not in production.
    """
    if enabled not in ("all", "state", None, True, False):
        raise ValueError(f"record_history: enabled must be 'all', 'state' or None, got {enabled!r}")
    if max_entries < 0:
        raise ValueError(f"record_history: max_entries must be >= 0, got {max_entries}")
    on = enabled not in (None, False)
    _core._record_memory_history(on, enabled != "state", min(max_entries, 2**63 - 1))


_record_memory_history = record_history


@_contextlib.contextmanager
def phase(name: str) -> _Iterator[None]:
    """Label what runs inside as a phase (``"forward"``, ``"backward"``, ``"optimizer"``...).

    Recorded events carry it; `plot_timeline` shades it. Phases nest: the outer one is
    restored on exit. Costs nothing measurable when history is off.
    """
    prev = _core._set_memory_phase(str(name))
    try:
        yield
    finally:
        _core._set_memory_phase(prev)


def set_context(label: str) -> None:
    """Name the op or step running on recorded events (the engine names backward nodes)."""
    _core._set_memory_context(str(label))


def accounting_mode() -> str:
    """``"on"``; ``"off"`` or ``"locked"`` only when ``GRADSTREAM_MEMORY_ACCOUNTING`` is set
    for an overhead measurement (``benches/memory_overhead.py``)."""
    return _core._memory_accounting_mode()


__all__ = [
    "CATEGORIES",
    "OutOfMemoryError",
    "budget",
    "budget_stats",
    "get_budget",
    "parse_bytes",
    "reset_budget_stats",
    "set_budget",
    "TrackResult",
    "accounting_mode",
    "dump_snapshot",
    "empty_cache",
    "max_memory_allocated",
    "max_memory_by_category",
    "max_memory_reserved",
    "memory_allocated",
    "memory_by_category",
    "memory_reserved",
    "memory_stats",
    "memory_summary",
    "phase",
    "plot_timeline",
    "record_history",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "set_context",
    "snapshot",
    "timeline",
    "track",
    "_dump_snapshot",
    "_record_memory_history",
    "_snapshot",
]
