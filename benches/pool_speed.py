"""Forward + backward time of max_pool2d(2), batch_norm (training) and bilinear
interpolate x2 against PyTorch on the FCN benchmark's shapes (batch 8, 32 to 128
channels, 128x128 down to 16x16), both on 2 threads, median of 5:

    python benches/pool_speed.py

Prints each op's median in ms for both and gradstream's time as a multiple of PyTorch's.
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


def main() -> None:
    rng = np.random.default_rng(0)
    rows = []
    for shape in SHAPES:
        arr = rng.standard_normal(shape).astype(np.float32)
        c = shape[1]
        for name in ops(gs, F):
            t = {}
            for lib, fn in ((gs, F), (torch, torch.nn.functional)):
                op, extra = ops(lib, fn)[name]
                if extra == "bn":
                    extra = (lib.zeros(c), lib.ones(c), lib.ones(c).requires_grad_(True),
                             lib.zeros(c).requires_grad_(True))  # fmt: skip
                x = lib.tensor(arr).requires_grad_(True)
                g = lib.ones_like(op(x, *extra)).detach()
                t[lib.__name__] = median_ms(lambda x=x, op=op, e=extra, g=g: step(x, op, e, g))
            rows.append((name, shape, t["gradstream"], t["torch"]))
    print(f"{'op':18} {'shape':20} {'gradstream ms':>14} {'torch ms':>10} {'ratio':>7}")
    for name, shape, a, b in rows:
        print(f"{name:18} {str(shape):20} {a:14.2f} {b:10.2f} {a / b:7.2f}")
    total_g = sum(r[2] for r in rows)
    total_t = sum(r[3] for r in rows)
    print(f"{'all':18} {'':20} {total_g:14.2f} {total_t:10.2f} {total_g / total_t:7.2f}")


if __name__ == "__main__":
    main()
