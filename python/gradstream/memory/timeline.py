"""Bytes by category over time, from a snapshot's recorded events, and its plot."""

from __future__ import annotations

import os
import pickle
from dataclasses import dataclass, field
from typing import Any

# Bottom to top of the stacked chart. "recomputed": buffers a checkpoint's backward
# allocated while recomputing its forward (events in the "recompute" phase), whatever
# their category, so the chart shows what recomputation costs apart from what was saved.
STACK_ORDER = ("parameter", "optimizer_state", "gradient", "activation", "recomputed", "other")
RECOMPUTE_PHASE = "recompute"
# Frees in this phase are a memory budget evicting saved activations (`memory.budget`).
EVICT_PHASE = "evict"
EVICT_COLOR = "#7b1f1f"
COLORS = {
    "parameter": "#4e79a7",
    "optimizer_state": "#af7aa1",
    "gradient": "#f28e2c",
    "activation": "#59a14f",
    "recomputed": "#e15759",
    "other": "#bab0ab",
}
PHASE_COLORS = {
    "forward": "#dbe9f6",
    "backward": "#fde2cc",
    "optimizer": "#e6dcef",
    RECOMPUTE_PHASE: "#f9d3d3",
    EVICT_PHASE: "#e9b8b8",
}
_FALLBACK_PHASE_COLORS = ("#e8e8e8", "#f6f0c9", "#d9efe9")


@dataclass(repr=False)
class Timeline:
    """Replayed history: ``bytes[c][i]`` is category c's bytes after event i.

    Categories are those of `STACK_ORDER`: the recorded ones, and ``recomputed`` for the
    buffers allocated in a checkpoint's recompute (counted there, not under their own).

    ``time_s[i]`` is seconds since the first event; ``phases`` are
    ``(name, start_s, end_s)`` spans of consecutive events in one phase. ``evictions`` are
    ``(time_s, bytes)`` of the buffers a memory budget evicted; their recomputation is the
    ``recomputed`` band (allocations in the ``recompute`` phase).
    """

    time_s: list[float]
    bytes: dict[str, list[int]]
    phases: list[tuple[str, float, float]]
    evictions: list[tuple[float, int]] = field(default_factory=list)

    @property
    def total(self) -> list[int]:
        return [sum(v) for v in zip(*self.bytes.values(), strict=True)]

    def __repr__(self) -> str:
        # A history holds an entry per buffer event, thousands: its size and peak, not them.
        peak = max(self.total, default=0)
        shown = [c for c, v in self.bytes.items() if any(v)]
        return (
            f"Timeline({len(self.time_s)} events, peak {peak / 2**20:.2f} MiB, "
            f"categories {shown}, {len(self.phases)} phases, {len(self.evictions)} evictions)"
        )


class _SnapshotUnpickler(pickle.Unpickler):
    """A snapshot is plain dicts, lists, strings and numbers: no global is ever loaded, so
    a hostile file cannot run code."""

    def find_class(self, module: str, name: str):
        raise pickle.UnpicklingError(
            f"memory snapshot: refusing the global {module}.{name}; a snapshot written by "
            "dump_snapshot holds only dicts, lists, strings and numbers"
        )

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("memory snapshot: refusing a persistent id")


def load_snapshot(path: str | os.PathLike) -> dict[str, Any]:
    """Read a `dump_snapshot()` file without running any code from it."""
    with open(path, "rb") as f:
        try:
            snap = _SnapshotUnpickler(f).load()
        except pickle.UnpicklingError as e:
            if str(e).startswith("memory snapshot"):
                raise
            raise pickle.UnpicklingError(_unreadable(path, str(e))) from e
        except EOFError as e:
            raise pickle.UnpicklingError(_unreadable(path, "it ends too early")) from e
        except (ValueError, TypeError, KeyError, IndexError, MemoryError, OverflowError) as e:
            raise pickle.UnpicklingError(_unreadable(path, f"{type(e).__name__}: {e}")) from e
    if not isinstance(snap, dict):
        raise pickle.UnpicklingError(_unreadable(path, f"it holds a {type(snap).__name__}"))
    return snap


def _unreadable(path, why: str) -> str:
    return f"memory snapshot: cannot read {os.fspath(path)!r} as a dump_snapshot file: {why}"


def _load(snapshot_or_path) -> dict[str, Any]:
    if isinstance(snapshot_or_path, (str, os.PathLike)):
        return load_snapshot(snapshot_or_path)
    return snapshot_or_path


def timeline(snapshot_or_path) -> Timeline:
    """Replay a snapshot's (or snapshot file's) events into bytes by category over time."""
    snap = _load(snapshot_or_path)
    extra = snap.get("gradstream")
    if extra is None:
        raise ValueError(
            "timeline: this snapshot has no gradstream history (key 'gradstream'); "
            "take it with gradstream.memory.snapshot() after record_history()"
        )
    events = extra["events"]
    level = {c: int(extra["baseline"].get(c, 0)) for c in STACK_ORDER}
    t0 = events[0]["time_us"] if events else 0
    time_s: list[float] = []
    series: dict[str, list[int]] = {c: [] for c in STACK_ORDER}
    phases: list[tuple[str, float, float]] = []
    cur_phase, cur_start = "", 0.0

    def sample(t: float) -> None:
        time_s.append(t)
        for c in STACK_ORDER:
            series[c].append(level[c])

    if events:
        sample(0.0)
    recomputed: set[int] = set()  # addresses of live buffers a recompute allocated
    evictions: list[tuple[float, int]] = []

    def cat(name: str, addr: int) -> str:
        return "recomputed" if addr in recomputed else name

    for e in events:
        t = (e["time_us"] - t0) / 1e6
        kind, size, addr = e["kind"], e["size"], e["addr"]
        if kind == "alloc":
            if e["phase"] == RECOMPUTE_PHASE:
                recomputed.add(addr)
            level[cat(e["category"], addr)] += size
        elif kind == "free":
            level[cat(e["category"], addr)] -= size
            recomputed.discard(addr)
            if e["phase"] == EVICT_PHASE:
                evictions.append((t, size))
        elif kind == "category":
            level[cat(e["previous"], addr)] -= size
            level[cat(e["category"], addr)] += size
        if e["phase"] != cur_phase:
            if cur_phase:
                phases.append((cur_phase, cur_start, t))
            cur_phase, cur_start = e["phase"], t
        sample(t)
    if cur_phase and time_s:
        phases.append((cur_phase, cur_start, time_s[-1]))
    return Timeline(time_s, series, phases, evictions)


def plot_timeline(snapshot_or_path, out_png, *, title: str | None = None, dpi: int = 120):
    """Draw bytes by category over time as a stacked area chart (MiB), phases shaded.

    Args:
        snapshot_or_path: a `snapshot()` dict or the path of a `dump_snapshot()` file,
            taken with history recorded (`record_history("all")`).
        out_png: where to write the PNG.
        title: the chart's title (default: the peak).

    Needs matplotlib (``pip install gradstream[plot]``). Returns the `Timeline` drawn (its
    repr is a one-line summary; its fields hold the history).
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.patches import Patch
    except ImportError as e:  # pragma: no cover - exercised only without matplotlib
        raise ImportError("plot_timeline needs matplotlib: pip install 'gradstream[plot]'") from e

    tl = timeline(snapshot_or_path)
    mib = 1024.0 * 1024.0
    t_ms = [t * 1e3 for t in tl.time_s]
    fig, ax = plt.subplots(figsize=(11, 5))

    phase_handles = {}
    fallback = iter(_FALLBACK_PHASE_COLORS * 100)
    span = (t_ms[-1] - t_ms[0]) if len(t_ms) > 1 else 1.0
    for name, start, end in tl.phases:
        color = PHASE_COLORS.get(name)
        if color is None:
            color = PHASE_COLORS[name] = next(fallback)
        ax.axvspan(start * 1e3, end * 1e3, color=color, alpha=0.9, lw=0, zorder=0)
        phase_handles.setdefault(name, Patch(facecolor=color, label=f"{name} (phase)"))

    # Only the categories that held bytes: a legend entry for an empty band is noise.
    present = [c for c in STACK_ORDER if any(tl.bytes[c])]
    ys = [[b / mib for b in tl.bytes[c]] for c in present]
    labels = [c.replace("_", " ") for c in present]
    if t_ms and present:
        ax.stackplot(
            t_ms,
            *ys,
            labels=labels,
            colors=[COLORS[c] for c in present],
            step="post",
            alpha=0.95,
            zorder=2,
        )
        total = tl.total
        # The outline shows short spikes that are narrower than a pixel of area.
        ax.step(t_ms, [b / mib for b in total], where="post", color="black", lw=0.6, zorder=3)
        peak = max(total)
        i_peak = total.index(peak)
        ax.axhline(peak / mib, color="black", lw=0.8, ls="--", zorder=3)
        ax.annotate(
            f"peak {peak / mib:.2f} MiB",
            xy=(t_ms[i_peak], peak / mib),
            xytext=(4, 4),
            textcoords="offset points",
            fontsize=9,
        )
        if tl.evictions:
            # Each eviction is a thin band of its own across the chart.
            ev_t = [t * 1e3 for t, _ in tl.evictions]
            ax.vlines(ev_t, 0, peak / mib * 1.1, color=EVICT_COLOR, lw=0.7, alpha=0.6, zorder=4)
            freed = sum(b for _, b in tl.evictions) / mib
            phase_handles["evicted"] = Patch(
                facecolor=EVICT_COLOR, label=f"evicted ({len(ev_t)}, {freed:.1f} MiB)"
            )
        ax.set_xlim(t_ms[0], t_ms[0] + span)
        ax.set_ylim(0, peak / mib * 1.15 if peak > 0 else 1)
    ax.set_xlabel("time (ms)")
    ax.set_ylabel("allocated (MiB)")
    ax.set_title(title or "gradstream memory by category")
    ax.grid(axis="y", alpha=0.3, zorder=1)
    handles, lbls = ax.get_legend_handles_labels()
    # Legend top to bottom in the order the areas stack.
    handles, lbls = handles[::-1], lbls[::-1]
    handles += list(phase_handles.values())
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=9)
    fig.tight_layout()
    fig.savefig(out_png, dpi=dpi)
    plt.close(fig)
    return tl
