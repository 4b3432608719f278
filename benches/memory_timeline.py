"""Memory timelines of three training steps: a parameter-heavy MLP two ways, and an
activation-heavy point-wise MLP with checkpointing.

    python benches/memory_timeline.py                    # writes the three PNGs below into docs/
    python benches/memory_timeline.py --which checkpoint # only the checkpointed one

- `docs/memory_timeline_standard.png`: `loss.backward(); opt.step(); opt.zero_grad()`.
  Every weight's gradient builds up during backward and lives until `zero_grad`.
- `docs/memory_timeline_in_backward.png`: `Adam(..., in_backward=True)`; `loss.backward()`
  is the whole update. Each gradient is consumed by its Adam step the moment it is final,
  so the block of gradients never appears.
- `docs/memory_timeline_checkpoint.png`: a point-wise MLP (NeRF-like: many points, width
  256) under `checkpoint_chunks` with in-backward Adam. The forward saves only each chunk's
  input; the backward recomputes one chunk at a time, and what the recompute allocates is
  drawn as its own band ("recomputed", phase "recompute"), one chunk's worth at a time.

Each PNG is a stacked area chart of bytes by category (parameter, optimizer state,
gradient, saved activation, other) over time, with the forward / backward / optimizer
phases shaded. `--snapshot DIR` also writes snapshot pickles that open in PyTorch's
memory visualizer (https://pytorch.org/memory_viz).
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable

import gradstream as gs
from gradstream import memory, nn

MIB = 1024 * 1024


def make_mlp(width: int = 1024, layers: int = 4) -> nn.Module:
    mods = []
    for i in range(layers):
        mods.append(nn.Linear(width, width))
        if i < layers - 1:
            mods.append(nn.ReLU())
    return nn.Sequential(*mods)


def standard_step(model: nn.Module, lr: float) -> Callable:
    opt = gs.optim.Adam(model.parameters(), lr=lr)

    def step(x, y):
        with memory.phase("forward"):
            loss = nn.functional.mse_loss(model(x), y)
        with memory.phase("backward"):
            loss.backward()
        with memory.phase("optimizer"):
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss

    return step


def in_backward_step(model: nn.Module, lr: float) -> Callable:
    opt = gs.optim.Adam(model.parameters(), lr=lr, in_backward=True)

    def step(x, y, opt=opt):  # the optimizer must outlive the steps: it owns the hooks
        with memory.phase("forward"):
            loss = nn.functional.mse_loss(model(x), y)
        with memory.phase("backward"):  # Adam steps each parameter inside this
            loss.backward()
        return loss

    return step


def checkpoint_step(model: nn.Module, lr: float, chunks: int = 8) -> Callable:
    from gradstream.utils.checkpoint import checkpoint_chunks

    opt = gs.optim.Adam(model.parameters(), lr=lr, in_backward=True)

    def step(x, y, opt=opt):
        with memory.phase("forward"):
            out = checkpoint_chunks(model, x, chunks=chunks)
            loss = nn.functional.mse_loss(out, y)
        with memory.phase("backward"):  # recomputes each chunk (phase "recompute") here
            loss.backward()
        return loss

    return step


def record_timeline(
    make_step: Callable,
    out_png: str | None,
    *,
    steps: int = 3,
    batch: int = 64,
    width: int = 1024,
    layers: int = 4,
    lr: float = 1e-3,
    title: str = "",
    snapshot_path: str | None = None,
):
    """Run `steps` steps with history recorded; write the PNG (and the snapshot)."""
    gs.manual_seed(0)
    model = make_mlp(width, layers)
    x, y = gs.randn(batch, width), gs.randn(batch, width)
    step = make_step(model, lr)
    memory.record_history("all")
    try:
        losses = [step(x, y).item() for _ in range(steps)]
        snap = memory.snapshot()
    finally:
        memory.record_history(None)
    if snapshot_path:
        memory.dump_snapshot(snapshot_path)
    tl = (
        memory.timeline(snap)
        if out_png is None
        else memory.plot_timeline(snap, out_png, title=title)
    )
    return tl, losses


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--out-dir", default="docs")
    ap.add_argument("--snapshot", default=None, help="directory for snapshot pickles")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--points", type=int, default=16384, help="rows of the checkpointed run")
    ap.add_argument(
        "--which",
        default="standard,in_backward,checkpoint",
        help="comma-separated: standard, in_backward, checkpoint",
    )
    args = ap.parse_args(argv)
    os.makedirs(args.out_dir, exist_ok=True)
    if args.snapshot:
        os.makedirs(args.snapshot, exist_ok=True)
    which = args.which.split(",")
    shape = f"{args.layers} x Linear({args.width}, {args.width}), batch {args.batch}, Adam"
    runs = [
        ("standard", standard_step, "backward(); step(); zero_grad()", {}),
        ("in_backward", in_backward_step, "Adam(in_backward=True)", {}),
    ]
    ck = {"batch": args.points, "width": 256, "layers": 6}
    runs.append(
        (
            "checkpoint",
            checkpoint_step,
            f"6 x Linear(256, 256) on {args.points} points, checkpoint_chunks(chunks=8), "
            "Adam(in_backward=True)",
            ck,
        )
    )
    for name, make_step, label, sizes in runs:
        if name not in which:
            continue
        out = os.path.join(args.out_dir, f"memory_timeline_{name}.png")
        snap = os.path.join(args.snapshot, f"{name}.pickle") if args.snapshot else None
        dims = {"batch": args.batch, "width": args.width, "layers": args.layers, **sizes}
        tl, losses = record_timeline(
            make_step,
            out,
            steps=args.steps,
            title=label if sizes else f"{shape}: {label}",
            snapshot_path=snap,
            **dims,
        )
        peak = max(tl.total)
        grads = max(tl.bytes["gradient"])
        rec = max(tl.bytes["recomputed"])
        print(
            f"{out}: peak {peak / MIB:.1f} MiB, gradients at most {grads / MIB:.1f} MiB, "
            f"recomputed at most {rec / MIB:.1f} MiB, "
            f"losses {', '.join(f'{v:.4f}' for v in losses)}"
        )


if __name__ == "__main__":
    main()
