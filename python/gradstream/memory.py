"""`gradstream.memory`: exact bytes held by tensors, shaped like `torch.cuda`'s memory API."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from . import _core

CATEGORIES = ("parameter", "gradient", "optimizer_state", "activation", "other")


def memory_allocated(device=None) -> int:
    """Bytes of tensor storage alive now: exact, views count nothing, shared buffers once."""
    return _core.memory_allocated()


def max_memory_allocated(device=None) -> int:
    """The peak of `memory_allocated()` since start or the last `reset_peak_memory_stats()`."""
    return _core.max_memory_allocated()


def reset_peak_memory_stats(device=None) -> None:
    _core.reset_peak_memory_stats()


def memory_by_category(device=None) -> dict[str, int]:
    """Bytes by what they are for: parameter, gradient, optimizer_state, activation, other."""
    return dict(_core.memory_by_category())


def memory_stats(device=None) -> dict[str, int]:
    allocs, frees = _core.memory_counts()
    stats = {
        "allocated_bytes.all.current": memory_allocated(),
        "allocated_bytes.all.peak": max_memory_allocated(),
        "num_allocs": allocs,
        "num_frees": frees,
    }
    for cat, b in memory_by_category().items():
        stats[f"allocated_bytes.{cat}.current"] = b
    return stats


@dataclass
class TrackResult:
    """What `track()` saw: the block's peak above its start, and its net change."""

    start: int = 0
    peak: int = 0
    end: int = 0

    @property
    def peak_increase(self) -> int:
        return self.peak - self.start

    @property
    def net(self) -> int:
        return self.end - self.start


@contextlib.contextmanager
def track():
    """Measure a block: `with memory.track() as m: ...; m.peak_increase, m.net`.

    Resets the peak counter on entry.
    """
    r = TrackResult(start=memory_allocated())
    reset_peak_memory_stats()
    try:
        yield r
    finally:
        r.peak = max_memory_allocated()
        r.end = memory_allocated()
