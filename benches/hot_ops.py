"""Median time of the hot ops through the public API, for before/after comparisons of a
kernel change: `python benches/hot_ops.py` (the extension built with --profile dev-release).

Own kernels against candle's ops are compared in Rust: `cargo run --profile dev-release
--example kernels` (benches/kernels.rs).
"""

from __future__ import annotations

import statistics
import time

import gradstream as gs
import gradstream.nn.functional as F


def median_ms(f, repeat: int = 7) -> float:
    f()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        f()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def main() -> None:
    gs.manual_seed(0)
    rows = []
    for n in (1 << 20, 1 << 24):
        x = gs.randn(n)
        y = gs.randn(n)
        tag = f"{n >> 20}M"
        rows += [
            (f"relu {tag}", lambda x=x: gs.relu(x)),
            (f"sigmoid {tag}", lambda x=x: gs.sigmoid(x)),
            (f"F.silu {tag}", lambda x=x: F.silu(x)),
            (f"F.gelu {tag}", lambda x=x: F.gelu(x)),
            (f"F.gelu tanh {tag}", lambda x=x: F.gelu(x, approximate="tanh")),
            (f"F.softplus {tag}", lambda x=x: F.softplus(x)),
            (f"exp {tag}", lambda x=x: gs.exp(x)),
            (f"add {tag}", lambda x=x, y=y: x + y),
            (f"add_ {tag}", lambda x=x, y=y: x.add_(y)),
            (f"sum {tag}", lambda x=x: x.sum()),
            (f"cumsum {tag}", lambda x=x: gs.cumsum(x, 0)),
        ]
        p = gs.randn(n, requires_grad=True)
        p.grad = gs.randn(n)
        adam = gs.optim.Adam([p], lr=1e-3)
        sgd = gs.optim.SGD([p], lr=1e-3, momentum=0.9)
        rows += [(f"Adam.step {tag}", adam.step), (f"SGD.step {tag}", sgd.step)]
    m = gs.randn(65536, 256)
    w, b = gs.ones(256), gs.zeros(256)
    rows += [
        ("softmax 65536x256", lambda: F.softmax(m, dim=-1)),
        ("log_softmax 65536x256", lambda: F.log_softmax(m, dim=-1)),
        ("layer_norm 65536x256", lambda: F.layer_norm(m, (256,), w, b)),
    ]
    print(f"{'op':<24}{'median ms':>10}")
    for name, f in rows:
        print(f"{name:<24}{median_ms(f):>10.2f}")


if __name__ == "__main__":
    main()
