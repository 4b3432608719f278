"""What exact memory accounting costs a training step.

    python benches/memory_overhead.py                 # ~1 minute
    python benches/memory_overhead.py --rounds 2000 --models small   # tighter figures

A micro-benchmark of the registry's own operations (ns per register + free, per role
change, per filtered free) is a Rust test:

    cargo test --profile dev-release --lib time_register_free -- --ignored --nocapture

The same training step (an MLP: forward, backward, manual SGD) runs under each
configuration in turn, round after round, in one process:

- ``off``: nothing is registered (a switch for this measurement only; buffers
  allocated while it is off are never counted). The free path still loads one filter slot.
- ``on``: the default. Buffers are registered; a free passes a counting filter, and only
  a possible tensor buffer takes the registry lock.
- ``locked``: the filter is bypassed: every free in the extension takes the registry
  lock (what the registry cost before the filter, less its global atomic counters).
- ``on+history``: ``on`` with ``memory.record_history("all")``: one locked append per
  buffer event. History is a debugging aid and is allowed to cost more.

Why this design: the machines these run on are shared, and step times drift by tens of
percent with other load. Alternating configurations step by step and comparing each
step with the ``off`` step of the same round (a paired ratio) cancels the drift; the
median of those ratios is the overhead. Steps are timed in CPU seconds of the process
(time spent waiting for a core is not the step's cost), single-threaded
(``RAYON_NUM_THREADS=1``, set before the extension starts) to keep the noise down.

Two models: ``small`` (many small ops, where per-op costs show most) and ``mlp`` (the
model of ``benches/memory_timeline.py``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("RAYON_NUM_THREADS", "1")

import gradstream as gs  # noqa: E402  (after RAYON_NUM_THREADS)
from gradstream import _core, memory  # noqa: E402

CONFIGS = ("off", "on", "locked", "on+history")
MODELS = {
    # layer widths, batch
    "small": ((64, 128, 128, 128, 10), 32),
    "mlp": ((256, 1024, 1024, 16), 512),
}


def make_step(model: str):
    sizes, batch = MODELS[model]
    gs.manual_seed(0)
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        w = (gs.randn(fan_in, fan_out) * (2.0 / fan_in) ** 0.5).detach().requires_grad_()
        b = gs.zeros(fan_out, requires_grad=True)
        w._mark_parameter()
        b._mark_parameter()
        params += [w, b]
    x = gs.randn(batch, sizes[0])
    y = gs.randn(batch, sizes[-1])

    def step():
        h = x
        n = len(params) // 2
        for i in range(n):
            h = h.matmul(params[2 * i]) + params[2 * i + 1]
            if i < n - 1:
                h = gs.relu(h)
        d = h - y
        loss = (d * d).mean()
        loss.backward()
        with gs.no_grad():
            for p in params:
                p.copy_(p - 0.01 * p.grad)
                p.grad = None

    return step


def timed(step, config: str) -> float:
    _core._set_memory_accounting_mode("on" if config == "on+history" else config)
    if config == "on+history":
        memory.record_history("all", max_entries=100_000)
    t0 = time.process_time()
    step()
    t = time.process_time() - t0
    if config == "on+history":
        memory.record_history(None)
    _core._set_memory_accounting_mode("on")
    return t


def measure(model: str, rounds: int, repeat: int):
    """Per config: all step times, and the paired ratios to the same round's ``off``."""
    step = make_step(model)
    for c in CONFIGS:  # warm up every path
        for _ in range(3):
            timed(step, c)
    times = {c: [] for c in CONFIGS}
    ratios = {c: [] for c in CONFIGS}
    for r in range(rounds):
        # Rotate the order so no configuration always runs right after another.
        order = CONFIGS[r % len(CONFIGS) :] + CONFIGS[: r % len(CONFIGS)]
        got = {c: sum(timed(step, c) for _ in range(repeat)) / repeat for c in order}
        for c in CONFIGS:
            times[c].append(got[c])
            ratios[c].append(got[c] / got["off"])
    return times, ratios


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=0, help="default: 500 small, 40 mlp")
    ap.add_argument("--repeat", type=int, default=0, help="steps per config per round")
    ap.add_argument("--models", default="small,mlp")
    args = ap.parse_args(argv)

    threads = os.environ["RAYON_NUM_THREADS"]
    print(f"accounting is {memory.accounting_mode()}; RAYON_NUM_THREADS={threads}")
    print(f"{'model':<7}{'config':<12}{'median step':>14}{'overhead':>10}{'(IQR)':>20}")
    for model in args.models.split(","):
        rounds = args.rounds or (500 if model == "small" else 40)
        repeat = args.repeat or (5 if model == "small" else 1)
        times, ratios = measure(model, rounds, repeat)
        for c in CONFIGS:
            med = statistics.median(times[c])
            q = statistics.quantiles(ratios[c], n=4)
            over = (statistics.median(ratios[c]) - 1) * 100
            iqr = f"[{(q[0] - 1) * 100:+.1f}%, {(q[2] - 1) * 100:+.1f}%]"
            print(f"{model:<7}{c:<12}{med * 1e3:>11.3f} ms{over:>+9.2f}%{iqr:>20}")


if __name__ == "__main__":
    main()
