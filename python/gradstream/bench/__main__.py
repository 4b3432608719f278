"""`python -m gradstream.bench` / `gradstream-bench`: peak memory and step time, side by side.

Runs workloads × systems, each configuration in its own process, prints a table and writes
results.json, results.md and bar charts (peak memory, step time) into --out. `--device cuda`
runs the same matrix on a GPU; `--max-batch 8GiB` finds the largest NeRF batch each system
trains within that much GPU memory (`max_batch.py`). `--plot RESULTS.json` redraws the charts
of a finished run from its results file, without running anything (`replot.py`).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .._cli import HelpFormatter
from . import report, runner, workloads
from .budget_sweep import SWEPT
from .systems import AUTOCAST, BY_NAME, LOW_BIT


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gradstream-bench",
        description="Peak memory and step time of a training step: gradstream, PyTorch, candle.",
        formatter_class=HelpFormatter,
    )
    p.add_argument(
        "--workloads",
        default=",".join(workloads.WORKLOADS),
        help="comma-separated (default: %(default)s)",
    )
    p.add_argument("--workload", dest="workloads", help="one workload (same as --workloads)")
    p.add_argument(
        "--systems",
        default=",".join(runner.all_systems()),
        help="comma-separated (default: %(default)s)",
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
        "--threads",
        type=int,
        default=os.cpu_count() or 1,
        help="threads for every system (default: the CPUs here, %(default)s)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes: the whole matrix in minutes (with --device cuda: the default sizes, "
        "10 configurations; with --max-batch: fewer systems, a coarser search)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        help="where every system trains (cuda: CUDA's device 0; fails at once without one)",
    )
    p.add_argument(
        "--candle-bin",
        type=Path,
        help="a built candle program to run instead of `cargo build` (needed for --device cuda: "
        "tools/build-candle-cuda.sh builds it); default $GRADSTREAM_CANDLE_BIN",
    )
    p.add_argument(
        "--time-limit",
        type=float,
        help="seconds for the whole run: a configuration is cut at the limit, and those left "
        "are reported as skipped (the results are still written); default: no limit",
    )
    p.add_argument(
        "--max-batch",
        metavar="SIZE",
        help="with --device cuda: the largest tiny-NeRF batch (rays per step) each system "
        "trains within SIZE of GPU memory (e.g. 8GiB), by doubling then bisection, each probe "
        "in its own process",
    )
    p.add_argument(
        "--cap-rule",
        choices=("ballast", "fraction"),
        default="ballast",
        help="--max-batch: how the memory is capped: a ballast allocated from the driver that "
        "leaves SIZE free, in every system; or PyTorch's and gradstream's own "
        "set_per_process_memory_fraction (candle, which has none, keeps the ballast)",
    )
    p.add_argument(
        "--preset",
        choices=sorted(workloads.PRESETS),
        help="size preset (default: quick with --quick on the CPU, else default)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="WORKLOAD.SIZE=VALUE",
        help="override one size, e.g. --set nerf.rays=512 (repeatable)",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("bench-out"),
        help="output folder (default: %(default)s; with --plot: the results file's folder)",
    )
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
    p.add_argument(
        "--low-bit",
        action="store_true",
        help="also run gradstream with 8-bit, 4-bit and fp8 optimizer state, in backward",
    )
    p.add_argument(
        "--plain-progress",
        action="store_true",
        help="a line per configuration even when tqdm is installed",
    )
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
        f"PyTorch's checkpoint_sequential at every segment count ({', '.join(SWEPT)}, or those "
        "of them in --workloads; 3 steps each)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="RESULTS.json",
        help="redraw the charts of a finished run from its results.json (or budget_sweep.json, "
        "max_batch.json) into --out, running nothing",
    )
    return p.parse_args(argv)


# `--device cuda --quick`: the configurations the GPU check's figures need, at the default
# sizes (each is its own process; a GPU takes milliseconds a step, so the processes' start is
# most of the time). Workloads in this order, so that a cut by --time-limit loses the last.
CUDA_QUICK = {
    "nerf": ["torch", "candle", "gradstream", "gradstream-in-backward"],
    "mlp": ["torch", "gradstream-in-backward"],
    "cnn": ["torch", "gradstream-in-backward"],
    "lora": ["torch", "gradstream-in-backward"],
}
# The workloads of `--device cuda` by default: small times per-op overhead on the host.
CUDA_WORKLOADS = ["mlp", "nerf", "cnn", "lora"]
CUDA_STEPS = 10  # measured steps on a GPU, where a step takes milliseconds


def _given(args: argparse.Namespace, name: str) -> bool:
    return getattr(args, name) != parse_args([]).__dict__[name]


def config(args: argparse.Namespace) -> runner.Config:
    on_gpu = args.device != "cpu"
    if on_gpu and not _given(args, "workloads"):
        args.workloads = ",".join(
            CUDA_QUICK if args.quick and not _given(args, "systems") else CUDA_WORKLOADS
        )
    wls = [w for w in args.workloads.split(",") if w]
    systems = [s for s in args.systems.split(",") if s]
    if args.autocast:
        systems += [s for s in AUTOCAST if s not in systems]
    if args.low_bit:
        systems += [s for s in LOW_BIT if s not in systems]
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
    preset = args.preset or ("quick" if args.quick and not on_gpu else "default")
    for w in wls:  # fail on a bad size now, not in the middle of the run
        try:
            workloads.make(w, preset, overrides.get(w))
        except (ValueError, TypeError) as e:
            raise SystemExit(str(e)) from e
    steps = args.steps
    if on_gpu and steps is None:
        steps = CUDA_STEPS
    only = None
    if on_gpu and args.quick and not _given(args, "systems"):
        only = {w: CUDA_QUICK[w] for w in wls if w in CUDA_QUICK}
    return runner.Config(
        workloads=wls,
        systems=systems,
        steps=steps,
        threads=args.threads,
        preset=preset,
        overrides=overrides,
        timeout=args.timeout,
        build_candle=not args.no_build_candle,
        plain_progress=args.plain_progress,
        repeat=args.repeat,
        device=args.device,
        only=only,
        candle_bin=args.candle_bin,
        time_limit=args.time_limit,
    )


def check_device(args: argparse.Namespace) -> None:
    """Fail at once where the run cannot happen: `--device cuda` without a GPU, and the modes
    that run on the CPU only."""
    if args.device == "cpu":
        if args.max_batch:
            raise SystemExit("--max-batch: needs --device cuda (it caps GPU memory)")
        return
    for flag, given in (("--world", args.world > 1), ("--budget-sweep", args.budget_sweep)):
        if given:
            raise SystemExit(f"{flag} runs on the CPU only; leave out --device {args.device}")
    from . import gpu

    reason = gpu.cuda_unavailable_reason()
    if reason:
        raise SystemExit(reason)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.plot:
        from . import replot

        out = args.out if _given(args, "out") else args.plot.parent
        return replot.main(args.plot, out)
    check_device(args)
    if args.world > 1:
        from . import distributed

        return distributed.main(args)
    cfg = config(args)
    if args.budget_sweep:
        from . import budget_sweep

        return budget_sweep.main(cfg, args.out)
    if args.max_batch:
        from . import max_batch

        return max_batch.main(cfg, args)
    result = runner.run(cfg)
    files = report.write(result, args.out)
    print(report.text_table(result))
    for line in report.process_spread(result):
        print(line)
    for line in report.headlines(result):
        print(line)
    for note in result.get("notes", []):
        print(note)
    print(f"wrote {', '.join(files)} to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
