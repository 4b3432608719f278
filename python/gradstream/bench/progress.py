"""A progress bar: tqdm when it is installed, else one line per configuration; both with an
estimate of the time left, from how long the configurations done took."""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Hashable, Sequence

clock = time.perf_counter  # seconds, for the estimate (a test sets its own)


def time_left(done: Sequence[tuple[Hashable, float]], left: Sequence[Hashable]) -> float | None:
    """Seconds the configurations `left` will take, from the `(key, seconds)` of those done.

    A key is `(workload, system)`. Each configuration left is estimated by the same
    configuration's mean duration (an earlier `--repeat` round), else the mean of its
    workload's (a workload's sizes set the time more than its system), else the mean of
    them all. None before any is done: nothing to go on.
    """
    if not done:
        return None
    by_key: dict[Hashable, list[float]] = {}
    by_workload: dict[Hashable, list[float]] = {}
    for key, seconds in done:
        by_key.setdefault(key, []).append(seconds)
        by_workload.setdefault(_workload(key), []).append(seconds)
    overall = statistics.fmean(s for _, s in done)
    total = 0.0
    for key in left:
        same = by_key.get(key) or by_workload.get(_workload(key))
        total += statistics.fmean(same) if same else overall
    return total


def _workload(key: Hashable) -> Hashable:
    return key[0] if isinstance(key, tuple) and key else key


def duration(seconds: float) -> str:
    """Rounded for a person: "40 s", "7 min", "1 h 05 min"."""
    if seconds < 90:
        return f"{seconds:.0f} s"
    minutes = round(seconds / 60)
    return f"{minutes} min" if minutes < 60 else f"{minutes // 60} h {minutes % 60:02d} min"


class _Estimate:
    """The configurations' keys in run order and how long those done took."""

    def __init__(self, total: int, keys: Sequence[Hashable] | None):
        self.keys = list(keys) if keys is not None else [None] * total
        self.done: list[tuple[Hashable, float]] = []
        self.started = clock()

    def start(self) -> None:
        self.started = clock()

    def finish(self, n: int) -> None:
        now = clock()
        for _ in range(n):
            key = self.keys[len(self.done)] if len(self.done) < len(self.keys) else None
            self.done.append((key, now - self.started))
            self.started = now

    def text(self) -> str:
        left = time_left(self.done, self.keys[len(self.done) :])
        return "" if left is None else f"about {duration(left)} left"


class _Lines:
    def __init__(self, total: int, keys: Sequence[Hashable] | None = None):
        self.total = total
        self.n = 0
        self.t0 = time.perf_counter()
        self.label = ""
        self.estimate = _Estimate(total, keys)

    def set_description(self, label: str) -> None:
        self.label = label
        self.estimate.start()
        left = self.estimate.text()
        left = f" ({left})" if left else ""
        print(f"[{self.n + 1}/{self.total}] {label} ...{left}", file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n
        self.estimate.finish(n)

    def write(self, text: str) -> None:
        print(f"    {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        took = time.perf_counter() - self.t0
        print(f"[{self.n}/{self.total}] done in {took:.0f} s", file=sys.stderr, flush=True)


class _Tqdm:
    def __init__(self, total: int, keys: Sequence[Hashable] | None = None):
        from tqdm import tqdm

        # Its own remaining time assumes every configuration takes as long: ours instead.
        self._bar = tqdm(
            total=total,
            unit="config",
            file=sys.stderr,
            bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]",
        )
        self._tqdm = tqdm
        self.estimate = _Estimate(total, keys)

    def set_description(self, label: str) -> None:
        self.estimate.start()
        self._bar.set_description(label, refresh=False)
        self._bar.set_postfix_str(self.estimate.text())

    def update(self, n: int = 1) -> None:
        self.estimate.finish(n)
        self._bar.update(n)

    def write(self, text: str) -> None:
        self._tqdm.write(f"    {text}", file=sys.stderr)

    def close(self) -> None:
        self._bar.close()


def bar(total: int, plain: bool = False, keys: Sequence[Hashable] | None = None):
    """A bar over `total` configurations; `keys` (each one's `(workload, system)`, in run
    order) make the estimate of the time left per configuration."""
    if not plain:
        try:
            return _Tqdm(total, keys)
        except ImportError:
            pass
    return _Lines(total, keys)
