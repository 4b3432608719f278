"""`python -m gradstream.bench` / `gradstream-bench`: peak memory and step time, side by side.

Runs workloads × systems, each configuration in its own process, prints a table and writes
results.json, results.md and bar charts (peak memory, step time) into --out.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import report, runner, workloads
from .systems import AUTOCAST, BY_NAME


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gradstream-bench",
        description="Peak memory and step time of a training step: gradstream, PyTorch, candle.",
    )
    p.add_argument(
        "--workloads",
        default=",".join(workloads.WORKLOADS),
        help="comma-separated: %(default)s",
    )
    p.add_argument("--workload", dest="workloads", help="one workload (same as --workloads)")
    p.add_argument(
        "--systems", default=",".join(runner.all_systems()), help="comma-separated: %(default)s"
    )
    p.add_argument(
        "--steps",
        type=int,
        help="measured steps after one warm-up step (default: 5; 3 for lora, whose default "
        "sizes take seconds a step; 300 for small, whose steps take a millisecond)",
    )
    p.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="processes per configuration, run round by round: the step time is the median of "
        "their medians, and the table's min/max span every step of every process",
    )
    p.add_argument(
        "--threads", type=int, default=os.cpu_count() or 1, help="threads for every system"
    )
    p.add_argument("--quick", action="store_true", help="small sizes: the whole matrix in minutes")
    p.add_argument("--preset", choices=sorted(workloads.PRESETS), help="size preset")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="WORKLOAD.SIZE=VALUE",
        help="override one size, e.g. --set nerf.rays=512 (repeatable)",
    )
    p.add_argument("--out", type=Path, default=Path("bench-out"), help="output folder")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per configuration")
    p.add_argument(
        "--no-build-candle",
        action="store_true",
        help="use the candle program only if already built",
    )
    p.add_argument(
        "--autocast",
        action="store_true",
        help="also run torch and gradstream with the forward under autocast (bfloat16)",
    )
    p.add_argument("--plain-progress", action="store_true", help="line progress, not tqdm")
    p.add_argument(
        "--world",
        type=int,
        default=1,
        help="ranks: above 1, data-parallel mlp training (DDP, in-backward DDP, ZeRO-1 and "
        "PyTorch DDP over gloo, one process per rank)",
    )
    p.add_argument(
        "--budget-sweep",
        action="store_true",
        help="gradstream within memory budgets from its unconstrained peak down, beside "
        "PyTorch's checkpoint_sequential at every segment count (nerf and mlp; 3 steps each)",
    )
    return p.parse_args(argv)


def config(args: argparse.Namespace) -> runner.Config:
    wls = [w for w in args.workloads.split(",") if w]
    systems = [s for s in args.systems.split(",") if s]
    if args.autocast:
        systems += [s for s in AUTOCAST if s not in systems]
    if args.repeat < 1:
        raise SystemExit(f"--repeat {args.repeat}: expected at least 1")
    for w in wls:
        if w not in workloads.WORKLOADS:
            raise SystemExit(f"unknown workload {w!r}; known: {', '.join(workloads.WORKLOADS)}")
    for s in systems:
        if s not in BY_NAME:
            raise SystemExit(f"unknown system {s!r}; known: {', '.join(BY_NAME)}")
    overrides: dict[str, dict[str, str]] = {}
    for item in args.set:
        key, _, value = item.partition("=")
        w, _, size = key.partition(".")
        if not value or not size:
            raise SystemExit(f"--set {item!r}: expected WORKLOAD.SIZE=VALUE")
        overrides.setdefault(w, {})[size] = value
    preset = args.preset or ("quick" if args.quick else "default")
    for w in wls:  # fail on a bad size now, not in the middle of the run
        try:
            workloads.make(w, preset, overrides.get(w))
        except (ValueError, TypeError) as e:
            raise SystemExit(str(e)) from e
    return runner.Config(
        workloads=wls,
        systems=systems,
        steps=args.steps,
        threads=args.threads,
        preset=preset,
        overrides=overrides,
        timeout=args.timeout,
        build_candle=not args.no_build_candle,
        plain_progress=args.plain_progress,
        repeat=args.repeat,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.world > 1:
        from . import distributed

        return distributed.main(args)
    cfg = config(args)
    if args.budget_sweep:
        from . import budget_sweep

        return budget_sweep.main(cfg, args.out)
    result = runner.run(cfg)
    files = report.write(result, args.out)
    print(report.text_table(result))
    for line in report.process_spread(result):
        print(line)
    for note in result.get("notes", []):
        print(note)
    print(f"wrote {', '.join(files)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
