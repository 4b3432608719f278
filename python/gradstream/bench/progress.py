"""A progress bar: tqdm when it is installed, else one line per finished configuration."""

from __future__ import annotations

import sys
import time


class _Lines:
    def __init__(self, total: int):
        self.total = total
        self.n = 0
        self.t0 = time.perf_counter()
        self.label = ""

    def set_description(self, label: str) -> None:
        self.label = label
        print(f"[{self.n + 1}/{self.total}] {label} ...", file=sys.stderr, flush=True)

    def update(self, n: int = 1) -> None:
        self.n += n

    def write(self, text: str) -> None:
        print(f"    {text}", file=sys.stderr, flush=True)

    def close(self) -> None:
        took = time.perf_counter() - self.t0
        print(f"[{self.n}/{self.total}] done in {took:.0f} s", file=sys.stderr, flush=True)


class _Tqdm:
    def __init__(self, total: int):
        from tqdm import tqdm

        self._bar = tqdm(total=total, unit="config", file=sys.stderr)
        self._tqdm = tqdm

    def set_description(self, label: str) -> None:
        self._bar.set_description(label)

    def update(self, n: int = 1) -> None:
        self._bar.update(n)

    def write(self, text: str) -> None:
        self._tqdm.write(f"    {text}", file=sys.stderr)

    def close(self) -> None:
        self._bar.close()


def bar(total: int, plain: bool = False):
    if not plain:
        try:
            return _Tqdm(total)
        except ImportError:
            pass
    return _Lines(total)
