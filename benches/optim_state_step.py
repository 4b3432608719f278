"""Time one Adam step (`optimizer.step()`) on a 1024 x 8192 parameter, per state format.

    python benches/optim_state_step.py [--threads 2] [--repeat 30]

Prints the median step and nanoseconds per element for float32, bfloat16, int8, fp8 and
int4 state; each format in its own process, so one's caches and threads do not touch the
next's.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

FORMATS = ["none", "bfloat16", "int8", "fp8", "int4"]


def run_one(fmt: str, threads: int, repeat: int) -> None:
    import gradstream as gs

    gs.set_num_threads(threads)
    p = gs.nn.Parameter(gs.randn(1024, 8192))
    opt = gs.optim.Adam([p], state_dtype=None if fmt == "none" else fmt)
    g = gs.randn(1024, 8192)
    times = []
    for _ in range(repeat + 2):
        p.grad = g
        t = time.perf_counter()
        opt.step()
        times.append(time.perf_counter() - t)
    mid = sorted(times[2:])[repeat // 2]
    name = "float32" if fmt == "none" else fmt
    print(f"{name:9s} {mid * 1e3:7.1f} ms  {mid / p.numel() * 1e9:5.2f} ns per element")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=30)
    ap.add_argument("--format", choices=FORMATS, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.format:
        return run_one(args.format, args.threads, args.repeat)
    for fmt in FORMATS:
        cmd = [sys.executable, __file__, "--format", fmt, "--threads", str(args.threads)]
        subprocess.run(cmd + ["--repeat", str(args.repeat)], check=True)


if __name__ == "__main__":
    main()
