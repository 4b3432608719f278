"""Record a few training steps of a small MLP and draw its memory timeline.

    python benches/memory_timeline.py                          # docs/memory_timeline.png
    python benches/memory_timeline.py --steps 4 --snapshot /tmp/snap.pickle
    python benches/memory_timeline.py --step mymodule:my_step  # another step function

The PNG is a stacked area chart of bytes by category (parameter, optimizer state,
gradient, saved activation, other) over time, with the forward / backward / optimizer
phases shaded. The snapshot pickle opens in https://pytorch.org/memory_viz.

A step function is ``step(params, x, y, lr) -> loss``: it runs one training step on the
MLP's parameters (a list of tensors ``[w1, b1, w2, b2, ...]``; `forward` computes the
loss) and labels its phases with ``gradstream.memory.phase(...)``. The default,
`manual_sgd_step`, runs forward, backward, then ``p.copy_(p - lr * p.grad)`` under
``no_grad``. Another step (e.g. an optimizer fused into the backward pass) can be passed
with ``--step module:function`` or by calling `record_timeline` from Python.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Callable

import gradstream as gs
from gradstream import memory

Step = Callable[[list, "gs.Tensor", "gs.Tensor", float], "gs.Tensor"]


def make_mlp(sizes=(256, 1024, 1024, 16)) -> list:
    """Parameters of an MLP with these layer widths: ``[w1, b1, w2, b2, ...]``."""
    params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:], strict=True):
        w = (gs.randn(fan_in, fan_out) * (2.0 / fan_in) ** 0.5).detach().requires_grad_()
        b = gs.zeros(fan_out, requires_grad=True)
        for p in (w, b):
            p._mark_parameter()
        params += [w, b]
    return params


def forward(params, x, y):
    """Mean squared error of the MLP (ReLU between layers) on one batch."""
    h = x
    pairs = list(zip(params[0::2], params[1::2], strict=True))
    for i, (w, b) in enumerate(pairs):
        h = h.matmul(w) + b
        if i < len(pairs) - 1:
            h = gs.relu(h)
    d = h - y
    return (d * d).mean()


def manual_sgd_step(params, x, y, lr):
    """Forward, backward, then plain SGD written with tensor ops under no_grad."""
    with memory.phase("forward"):
        loss = forward(params, x, y)
    with memory.phase("backward"):
        loss.backward()
    with memory.phase("optimizer"), gs.no_grad():
        for p in params:
            p.copy_(p - lr * p.grad)
            p.grad = None
    return loss


def record_timeline(
    step: Step = manual_sgd_step,
    *,
    steps: int = 3,
    batch: int = 512,
    sizes=(256, 1024, 1024, 16),
    lr: float = 1e-2,
    out_png: str | None = "docs/memory_timeline.png",
    snapshot_path: str | None = None,
    title: str | None = None,
):
    """Run `steps` steps of `step` with history recorded; write the PNG (and snapshot)."""
    gs.manual_seed(0)
    params = make_mlp(sizes)
    x = gs.randn(batch, sizes[0])
    y = gs.randn(batch, sizes[-1])
    memory.record_history("all")
    try:
        losses = [float(step(params, x, y, lr).item()) for _ in range(steps)]
        snap = memory.snapshot()
    finally:
        memory.record_history(None)
    if snapshot_path:
        memory.dump_snapshot(snapshot_path)
    if title is None:
        widths = "-".join(str(s) for s in sizes)
        title = f"MLP {widths}, batch {batch}: {steps} steps of {step.__name__}"
    if out_png is None:
        return memory.timeline(snap), losses
    return memory.plot_timeline(snap, out_png, title=title), losses


def _load_step(spec: str) -> Step:
    module, _, name = spec.partition(":")
    sys.path.insert(0, os.getcwd())
    return getattr(importlib.import_module(module), name)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out", default="docs/memory_timeline.png", help="PNG to write")
    ap.add_argument("--snapshot", default=None, help="also write the snapshot pickle here")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--step", default=None, help="module:function of another step function")
    args = ap.parse_args(argv)
    step = _load_step(args.step) if args.step else manual_sgd_step
    tl, losses = record_timeline(
        step, steps=args.steps, batch=args.batch, out_png=args.out, snapshot_path=args.snapshot
    )
    mib = 1024 * 1024
    peak = max(tl.total)
    print(f"wrote {args.out}: {len(tl.time_s) - 1} events, peak {peak / mib:.2f} MiB")
    at_peak = {c: v[tl.total.index(peak)] / mib for c, v in tl.bytes.items()}
    print("at the peak: " + ", ".join(f"{c} {b:.2f} MiB" for c, b in at_peak.items()))
    print("losses: " + ", ".join(f"{v:.4f}" for v in losses))


if __name__ == "__main__":
    main()
