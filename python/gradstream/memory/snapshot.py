"""Memory snapshots in the layout PyTorch's memory visualizer reads.

`snapshot()` returns the dict `torch.cuda.memory._snapshot()` returns, so
`torch.cuda._memory_viz` (``trace_plot``, ``segment_plot``, ``segsum``, ``trace``) and the
web viewer at https://pytorch.org/memory_viz accept a gradstream snapshot:

- ``segments``: the live buffers. On the CPU each tensor buffer is its own allocation,
  so each is a segment holding one ``active_allocated`` block.
- ``device_traces``: one list (device 0) of trace entries in time order. A buffer's
  allocation is ``segment_alloc`` then ``alloc``; its free is ``free_requested``,
  ``free_completed``, ``segment_free``. Entries carry ``addr``, ``size``, ``stream``,
  ``time_us``, ``category`` (what the buffer was for: its first category other than
  ``other``) and ``frames``: one frame naming the phase (``filename``) and the op
  (``name``) that was running.
- ``gradstream``: what the visualizer does not read: the raw events, including category
  changes and phase changes, and the bytes by category before the first event.
  `plot_timeline` replays them to exact bytes by category over time.

The trace ends with a ``snapshot`` entry (PyTorch records one when a snapshot is taken);
it carries category ``unknown`` because the web viewer expects that category whenever
entries are categorized.
"""

from __future__ import annotations

import os
import pickle
from typing import Any

from .. import _core

# The web viewer's pickle reader understands protocols 2 to 4.
PICKLE_PROTOCOL = 4


def _frames(phase: str, op: str) -> list[dict[str, Any]]:
    if not phase and not op:
        return []
    filename = f"gradstream/{phase}" if phase else "gradstream"
    return [{"filename": filename, "line": 0, "name": op or phase}]


def _entry(action, addr, size, time_us, frames, category=None) -> dict[str, Any]:
    e = {
        "action": action,
        "addr": addr,
        "size": size,
        "stream": 0,
        "time_us": time_us,
        "frames": frames,
    }
    if category is not None:
        e["category"] = category
    return e


def snapshot(device=None) -> dict[str, Any]:
    """The live buffers and the recorded history (see `record_history`), as a dict.

    Without a recorded history, ``device_traces`` is ``[[]]`` and ``segments`` still
    lists every live buffer.
    """
    events, baseline = _core._memory_history(device)
    live = _core._memory_live_blocks(device)
    dev = _core.get_default_device() if device is None else _core.device(device)
    index = dev.index or 0

    trace: list[dict[str, Any]] = []
    open_allocs: dict[int, list[dict[str, Any]]] = {}  # addr -> entries to categorize
    raw: list[dict[str, Any]] = []
    last_time = 0
    for kind, addr, size, category, previous, time_us, phase, op in events:
        last_time = time_us
        raw.append(
            {
                "kind": kind,
                "addr": addr,
                "size": size,
                "category": category,
                "previous": previous,
                "time_us": time_us,
                "phase": phase,
                "op": op,
            }
        )
        frames = _frames(phase, op)
        if kind == "alloc":
            seg = _entry("segment_alloc", addr, size, time_us, frames)
            blk = _entry("alloc", addr, size, time_us, frames, "other")
            trace += [seg, blk]
            open_allocs[addr] = [blk]
        elif kind == "free":
            lifetime = previous
            for e in open_allocs.pop(addr, []):
                e["category"] = lifetime
            trace += [
                _entry("free_requested", addr, size, time_us, frames, lifetime),
                _entry("free_completed", addr, size, time_us, frames, lifetime),
                _entry("segment_free", addr, size, time_us, frames),
            ]

    segments = []
    for addr, size, _current, lifetime, phase, op in live:
        frames = _frames(phase, op)
        for e in open_allocs.pop(addr, []):
            e["category"] = lifetime
        block = {
            "address": addr,
            "size": size,
            "requested_size": size,
            "state": "active_allocated",
            "frames": frames,
            "category": lifetime,
        }
        segments.append(
            {
                "device": index,
                "address": addr,
                "total_size": size,
                "allocated_size": size,
                "active_size": size,
                "requested_size": size,
                "stream": 0,
                "segment_type": "large" if size > (1 << 20) else "small",
                "segment_pool_id": (0, 0),
                "is_expandable": False,
                "frames": frames,
                "blocks": [block],
            }
        )
    if trace:
        trace.append(_entry("snapshot", 0, 0, last_time, [], "unknown"))

    return {
        "segments": segments,
        "device_traces": [trace],
        "allocator_settings": {"backend": f"gradstream-{dev.type}"},
        "gradstream": {
            "version": 1,
            "device": str(dev),
            "baseline": dict(baseline),
            "events": raw,
            "current": dict(_core._memory_by_category(device)),
        },
    }


def dump_snapshot(path: str | os.PathLike = "snapshot.pickle", device=None) -> None:
    """Write `snapshot()` as a pickle that https://pytorch.org/memory_viz opens."""
    with open(path, "wb") as f:
        pickle.dump(snapshot(device), f, protocol=PICKLE_PROTOCOL)


_snapshot = snapshot
_dump_snapshot = dump_snapshot
