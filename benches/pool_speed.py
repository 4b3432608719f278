"""Forward + backward time of max_pool2d(2), batch_norm (training) and bilinear
interpolate x2 against PyTorch on the FCN benchmark's shapes (batch 8, 32 to 128
channels, 128x128 down to 16x16), both on 2 threads, median of 5:

    python benches/pool_speed.py

Prints each op's median in ms for both and gradstream's time as a multiple of PyTorch's.
Each library runs in its own process (rayon's and OpenMP's idle threads would otherwise
spin against each other).
"""

from __future__ import annotations

import os

os.environ.setdefault("RAYON_NUM_THREADS", "2")

import json  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402

torch.set_num_threads(2)
SHAPES = [(8, 32, 128, 128), (8, 64, 64, 64), (8, 128, 32, 32), (8, 128, 16, 16)]


def median_ms(f, repeat: int = 5) -> float:
    f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def step(x, op, extra, g):
    x.grad = None
    op(x, *extra).backward(g)


def ops(lib, fn):
    return {
        "max_pool2d(2)": (lambda x: fn.max_pool2d(x, 2), ()),
        "batch_norm train": (
            lambda x, rm, rv, w, b: fn.batch_norm(x, rm, rv, w, b, True),
            "bn",
        ),
        "bilinear x2": (
            lambda x: fn.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False),
            (),
        ),
    }


def measure(lib_name: str) -> list[float]:
    """Median ms of every (shape, op) for one library, in a fixed order."""
    lib, fn = (gs, F) if lib_name == "gradstream" else (torch, torch.nn.functional)
    rng = np.random.default_rng(0)
    times = []
    for shape in SHAPES:
        arr = rng.standard_normal(shape).astype(np.float32)
        c = shape[1]
        for op, extra in ops(lib, fn).values():
            if extra == "bn":
                extra = (lib.zeros(c), lib.ones(c), lib.ones(c).requires_grad_(True),
                         lib.zeros(c).requires_grad_(True))  # fmt: skip
            x = lib.tensor(arr).requires_grad_(True)
            g = lib.ones_like(op(x, *extra)).detach()
            times.append(median_ms(lambda x=x, op=op, e=extra, g=g: step(x, op, e, g)))
    return times


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--only":
        print(json.dumps(measure(sys.argv[2])))
        return
    run = [sys.executable, __file__, "--only"]
    mine = json.loads(subprocess.check_output([*run, "gradstream"]))
    ref = json.loads(subprocess.check_output([*run, "torch"]))
    names = [(name, shape) for shape in SHAPES for name in ops(gs, F)]
    print(f"{'op':18} {'shape':20} {'gradstream ms':>14} {'torch ms':>10} {'ratio':>7}")
    for (name, shape), a, b in zip(names, mine, ref, strict=True):
        print(f"{name:18} {str(shape):20} {a:14.2f} {b:10.2f} {a / b:7.2f}")
    print(f"{'all':18} {'':20} {sum(mine):14.2f} {sum(ref):10.2f} {sum(mine) / sum(ref):7.2f}")


if __name__ == "__main__":
    main()
