"""What the cache of freed large blocks saves: page faults and time, cache on against off.

    python benches/block_cache.py              # ~2 minutes
    python benches/block_cache.py --steps 5

Each configuration runs in its own process (``GRADSTREAM_BLOCK_CACHE=1`` / ``0``, read
when the extension starts), with the bench's allocator setting (``MALLOC_MMAP_THRESHOLD_=
65536``, so every system maps large buffers afresh) and ``RAYON_NUM_THREADS=2``:

- ``op``: ``y = x * 2`` on a 64 MiB tensor, repeated: the cost of one fresh large buffer.
- ``nerf``, ``cnn``, ``mlp``, ``lora``: the bench's step of that workload (gradstream,
  in-backward optimizer), default sizes.
- ``lora@55`` (any workload, any percentage): that step inside a memory budget of 55% of its
  exact unconstrained peak (the budget sweep's ``standard`` step), where nearly every miss
  gives cached blocks back.

For each: minor page faults per iteration (``getrusage``, deterministic) and seconds per
iteration (median; a shared machine's times drift, the faults do not), and the process's
peak RSS (``VmHWM``), which the cache must not raise.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time


def _faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _hwm_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _step_fn(case: str):
    import gradstream as gs

    if case == "op":
        x = gs.randn(4096, 4096)

        def op():
            y = x * 2.0
            del y

        return op
    from gradstream.bench import workloads
    from gradstream.bench.systems import gradstream_impl

    name, _, percent = case.partition("@")
    wl = workloads.make(name)
    gradstream_impl.setup(2)
    # A budget runs the budget sweep's variant, so lora@55 is the sweep's 55% point.
    variant = "standard" if percent else "in_backward"
    state = gradstream_impl.build(wl, wl.tensors(0), variant)
    if not percent:
        return state.step
    gs.memory.reset_peak_memory_stats()
    state.step()
    budget = int(gs.memory.max_memory_allocated() * float(percent) / 100)
    gs.memory.empty_cache()  # the cache's mark falls to what is live, under the budget

    def step():
        with gs.memory.budget(budget):
            state.step()

    return step


def child(case: str, steps: int) -> dict:
    step = _step_fn(case)
    step()  # warm-up: the cache fills here
    times, faults = [], []
    for _ in range(steps):
        f0, t0 = _faults(), time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
        faults.append(_faults() - f0)
    return {
        "seconds": statistics.median(times),
        "faults": statistics.median(faults),
        "peak_rss_mib": _hwm_mib(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--cases", default="op,nerf", help="op and bench workloads, e.g. op,nerf,cnn")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return
    steps = {"op": max(a.steps, 20)}
    print(f"{'case':<9}{'cache':<7}{'faults/iter':>13}{'s/iter':>10}{'peak RSS MiB':>14}")
    for case in a.cases.split(","):
        rows = {}
        for on in ("1", "0"):
            env = dict(
                os.environ,
                GRADSTREAM_BLOCK_CACHE=on,
                MALLOC_MMAP_THRESHOLD_="65536",
                RAYON_NUM_THREADS="2",
            )
            out = subprocess.run(
                [sys.executable, __file__, "--child", case, str(steps.get(case, a.steps))],
                env=env,
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(out.stdout.strip().splitlines()[-1])
            rows[on] = r
            label = "on" if on == "1" else "off"
            print(
                f"{case:<9}{label:<7}{r['faults']:>13.0f}{r['seconds']:>10.4f}"
                f"{r['peak_rss_mib']:>14.1f}"
            )
        ratio = rows["1"]["seconds"] / rows["0"]["seconds"]
        print(f"{case:<9}on/off time {ratio:.2f}×")


if __name__ == "__main__":
    main()
