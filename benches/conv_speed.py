"""Forward + backward time of `F.conv2d` against PyTorch at the FCN benchmark's shapes.

    RAYON_NUM_THREADS=2 python benches/conv_speed.py

Batch 8, 3x3 kernels, padding 1, 2 threads for both libraries; each case times x, w and
b requiring grad, `conv2d(x, w, b).backward(g)`, median of 5 runs after one warm-up.
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "2")

import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402

THREADS = int(os.environ["RAYON_NUM_THREADS"])
CASES = [(3, 32, 128), (32, 64, 128), (64, 64, 128), (3, 32, 64), (32, 64, 64), (64, 64, 64)]
RUNS = 5


def step(lib, fn, x, w, b, g):
    for t in (x, w, b):
        t.grad = None
    fn(x, w, b, padding=1).backward(g)


def median_time(lib, fn, arrays) -> float:
    x, w, b, g = (lib.tensor(a) for a in arrays)
    for t in (x, w, b):
        t.requires_grad_(True)
    step(lib, fn, x, w, b, g)
    times = []
    for _ in range(RUNS):
        t0 = time.perf_counter()
        step(lib, fn, x, w, b, g)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(THREADS)
    if hasattr(gs, "set_num_threads"):
        gs.set_num_threads(THREADS)
    rng = np.random.default_rng(0)
    print(f"conv2d forward+backward, batch 8, 3x3, padding 1, {THREADS} threads, median of {RUNS}")
    print(f"{'case':>18} {'gradstream ms':>14} {'torch ms':>9} {'ratio':>6}")
    for cin, cout, hw in CASES:
        arrays = [
            rng.standard_normal((8, cin, hw, hw)).astype(np.float32),
            rng.standard_normal((cout, cin, 3, 3)).astype(np.float32),
            rng.standard_normal(cout).astype(np.float32),
            rng.standard_normal((8, cout, hw, hw)).astype(np.float32),
        ]
        ours = median_time(gs, F.conv2d, arrays)
        ref = median_time(torch, torch.nn.functional.conv2d, arrays)
        case = f"{cin}->{cout} {hw}x{hw}"
        print(f"{case:>18} {ours * 1e3:14.2f} {ref * 1e3:9.2f} {ours / ref:6.2f}")


if __name__ == "__main__":
    main()
