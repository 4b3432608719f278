"""Leak check: 10,000 training steps mixing hooks, retain_graph, create_graph,
checkpointing, saved-tensor hooks, exceptions inside hooks and reference cycles through
Python hooks (the steps of tests/leak_steps.py, which tests/test_leaks.py runs a few
hundred of), printing gradstream's allocated bytes and the process's RSS as it goes.

    python benches/leak_check.py                  # 10,000 steps, a report every 1,000
    python benches/leak_check.py --steps 2000 --every 200

Allocated bytes must equal the baseline at every report (the script exits 1 otherwise);
RSS should stay flat after the first reports (the allocator and Python's caches warm up).
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from leak_steps import Trainer  # noqa: E402

from gradstream import memory  # noqa: E402


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--every", type=int, default=1_000)
    args = ap.parse_args()

    trainer = Trainer()
    trainer.warm_up()
    gc.collect()
    baseline = memory.memory_allocated()
    print(f"{'step':>7} {'allocated':>10} {'vs baseline':>11} {'RSS MiB':>8} {'s':>6}")
    print(f"{0:>7} {baseline:>10} {0:>+11} {rss_bytes() / 2**20:>8.1f} {0:>6.1f}")
    start = time.perf_counter()
    rss = []
    ok = True
    for i in range(1, args.steps + 1):
        trainer.step(i)
        if i % args.every == 0:
            trainer.watch = [r for r in trainer.watch if r() is not None]
            gc.collect()
            alive = sum(r() is not None for r in trainer.watch)
            allocated = memory.memory_allocated()
            rss.append(rss_bytes())
            ok &= allocated == baseline and alive == 0
            note = f"  {alive} objects alive" if alive else ""
            print(
                f"{i:>7} {allocated:>10} {allocated - baseline:>+11} {rss[-1] / 2**20:>8.1f} "
                f"{time.perf_counter() - start:>6.1f}{note}"
            )
    if len(rss) >= 4:
        half = len(rss) // 2
        growth = (rss[-1] - rss[half]) / 2**20
        print(f"RSS growth over the second half: {growth:+.2f} MiB")
    print("allocated bytes back at baseline at every report" if ok else "LEAK")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
