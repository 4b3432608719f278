"""Where the time of a training step goes: per phase, per Python function, per native symbol.

    python benches/profile_step.py --workload small            # phases, torch beside gradstream
    python benches/profile_step.py --workload nerf --pyinstrument --perf --out prof-nerf

Each system runs in its own process (the bench's models, weights and optimizer, from
`gradstream.bench`), with the same thread settings as the bench.

- phases: the median over the measured steps of forward (model and loss), backward, optimizer
  (`step()` and `zero_grad(set_to_none=True)`; inside backward for gradstream-in-backward) and
  `loss.item()`, in milliseconds, and each system's step beside torch's.
- `--pyinstrument`: the Python call tree of gradstream's steps (pyinstrument), as text on the
  terminal and as HTML in --out.
- `--perf`: `perf record -e cpu-clock -g` of gradstream's steps; the hottest native symbols,
  and the samples grouped into interpreter, bindings and engine, kernels, allocation and the
  rest (`perf` from Debian's linux-perf; cpu-clock because a VM often has no hardware
  counters). Build with `--profile profiling` for line-level symbols; dev-release has the
  function names, which is what the grouping needs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from gradstream.bench import runner, workloads

SYSTEMS = {
    "torch": ("torch_impl", "standard"),
    "gradstream": ("gradstream_impl", "standard"),
    "gradstream-in-backward": ("gradstream_impl", "in_backward"),
}
PHASES = ["forward", "backward", "optimizer", "item"]
PERF_CTL = "PROFILE_STEP_PERF_CTL"

# perf symbol groups, first match wins: (group, substrings of the symbol or its object).
GROUPS = [
    (
        "allocation",
        (
            "malloc", "free", "calloc", "realloc", "memalign", "mmap", "munmap", "brk",
            "page_fault", "clear_page", "alloc::raw_vec", "__rust_alloc", "__rust_dealloc",
            "block_cache", "memset", "memcpy", "memmove",
        ),
    ),
    ("gemm", ("gemm", "sgemm", "mkl", "dnnl", "matmul")),
    (
        "kernels",
        (
            "backend::cpu", "candle_core::cpu_backend", "candle_core::cpu", "optim::",
            "elementwise", "unary_map", "binary_map", "pulp", "at::native", "at::vec",
            # A kernel's rayon body (the optimizer walk, an element-wise map) is a closure, or
            # inlined into rayon's fold.
            "FnMut<A> for &F>::call_mut", "Producer::fold_with",
        ),
    ),
    (
        "engine and bindings",
        (
            "gradstream::autograd", "gradstream::tensor", "gradstream::bindings",
            "gradstream::ops", "gradstream::memory", "pyo3", "gradstream", "_core",
            "candle_core", "torch::autograd", "c10::", "at::",
        ),
    ),
    ("interpreter", ("libpython", "_Py", "Py", "python3")),
    ("threads", ("rayon", "crossbeam", "futex", "sched_", "pthread", "omp", "gomp")),
]  # fmt: skip


def setup_system(name: str, workload_name: str, sizes: dict, threads: int):
    """The system's module, its (loss_fn, params) and optimizer, after one warm-up step."""
    import importlib

    impl_name, variant = SYSTEMS[name]
    impl = importlib.import_module(f"gradstream.bench.systems.{impl_name}")
    wl = workloads.WORKLOADS[workload_name](**sizes)
    impl.setup(threads)
    loss_fn, params = impl.loss_and_params(wl, wl.tensors(runner.SEED), variant)
    opt = impl.optimizer(wl, params, **({"in_backward": True} if variant == "in_backward" else {}))
    return impl, variant, loss_fn, opt


def phase_times(loss_fn, opt, in_backward: bool, steps: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {p: [] for p in PHASES}
    clock = time.perf_counter
    for _ in range(steps):
        t0 = clock()
        loss = loss_fn()
        t1 = clock()
        loss.backward()
        t2 = clock()
        if not in_backward:
            opt.step()
            opt.zero_grad(set_to_none=True)
        t3 = clock()
        loss.item()
        t4 = clock()
        for p, dt in zip(PHASES, (t1 - t0, t2 - t1, t3 - t2, t4 - t3), strict=True):
            times[p].append(dt)
    return times


@contextlib.contextmanager
def perf_enabled():
    """Under `--perf`, perf records only while this is open (its control fifos): the measured
    steps, not the imports and the model's construction."""
    fifos = os.environ.get(PERF_CTL)
    if not fifos:
        yield
        return
    ctl_path, ack_path = fifos.split(",")
    with open(ctl_path, "w") as ctl, open(ack_path) as ack:

        def command(c: str) -> None:
            ctl.write(c + "\n")
            ctl.flush()
            ack.readline()

        command("enable")
        try:
            yield
        finally:
            command("disable")


def child(args: argparse.Namespace) -> None:
    """One system in this process: phases, or the steps under pyinstrument, as JSON."""
    sizes = json.loads(args.sizes)
    _, variant, loss_fn, opt = setup_system(args.system, args.workload, sizes, args.threads)
    in_backward = variant == "in_backward"
    phase_times(loss_fn, opt, in_backward, max(1, args.steps // 10))  # warm-up
    if args.child == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0002)
        profiler.start()
        phase_times(loss_fn, opt, in_backward, args.steps)
        profiler.stop()
        out = Path(args.out)
        (out / f"pyinstrument-{args.system}.html").write_text(profiler.output_html())
        print(profiler.output_text(unicode=False, color=False, show_all=False))
        return
    with perf_enabled():
        times = phase_times(loss_fn, opt, in_backward, args.steps)
    steps = [sum(ts) for ts in zip(*times.values(), strict=True)]
    result = {p: statistics.median(ts) for p, ts in times.items()}
    result["step"] = statistics.median(steps)
    result["step_min"], result["step_max"] = min(steps), max(steps)
    print(json.dumps(result))


def child_cmd(args: argparse.Namespace, system: str, mode: str) -> list[str]:
    wl = workloads.make(args.workload, args.preset)
    return [
        sys.executable, __file__,
        "--child", mode,
        "--system", system,
        "--workload", args.workload,
        "--sizes", json.dumps(workloads.sizes(wl)),
        "--steps", str(args.steps),
        "--threads", str(args.threads),
        "--out", str(args.out),
    ]  # fmt: skip


def phases(args: argparse.Namespace, env: dict[str, str]) -> dict[str, dict]:
    results = {}
    for system in args.systems.split(","):
        proc = subprocess.run(
            child_cmd(args, system, "phases"), env=env, capture_output=True, text=True
        )
        if proc.returncode != 0:
            print(f"{system}: failed\n{proc.stderr[-2000:]}", file=sys.stderr)
            continue
        results[system] = json.loads(proc.stdout.strip().splitlines()[-1])
    ref = results.get("torch", {}).get("step")
    head = f"{'system':24}" + "".join(f"{p:>11}" for p in [*PHASES, "step"])
    print(f"\n{args.workload}: median ms over {args.steps} steps, {args.threads} threads")
    print(head + f"{'min':>9}{'max':>9}{'x torch':>9}")
    for system, r in results.items():
        cells = "".join(f"{1e3 * r[p]:11.3f}" for p in [*PHASES, "step"])
        ratio = f"{r['step'] / ref:9.2f}" if ref else ""
        print(f"{system:24}{cells}{1e3 * r['step_min']:9.3f}{1e3 * r['step_max']:9.3f}{ratio}")
    return results


def group_of(symbol: str, dso: str) -> str:
    for group, keys in GROUPS:
        if any(k in symbol for k in keys):
            return group
    for group, keys in GROUPS:
        if any(k in dso for k in keys):
            return group
    return "other"


def perf_profile(args: argparse.Namespace, env: dict[str, str], system: str) -> dict[str, float]:
    """Self time per native symbol under `perf record`, and per group; the groups' shares."""
    if shutil.which("perf") is None:
        print("perf is not installed (apt-get install linux-perf)", file=sys.stderr)
        return {}
    data = args.out / f"perf-{system}.data"
    ctl, ack = args.out / f"perf-{system}.ctl", args.out / f"perf-{system}.ack"
    for fifo in (ctl, ack):
        fifo.unlink(missing_ok=True)
        os.mkfifo(fifo)
    record = [
        "perf", "record", "-q", "-e", "cpu-clock", "-F", "4000", "-o", str(data),
        "-D", "-1", "--control", f"fifo:{ctl},{ack}", "--",
    ]  # fmt: skip
    env = {**env, PERF_CTL: f"{ctl},{ack}"}
    proc = subprocess.run(
        record + child_cmd(args, system, "phases"), env=env, capture_output=True, text=True
    )
    for fifo in (ctl, ack):
        fifo.unlink()
    if proc.returncode != 0:
        print(f"perf record failed: {proc.stderr[-1000:]}", file=sys.stderr)
        return {}
    report = subprocess.run(
        ["perf", "report", "-i", str(data), "--stdio", "--no-children", "-q",
         "--sort", "dso,symbol", "--percent-limit", "0.01"],
        capture_output=True, text=True,
    )  # fmt: skip
    totals: dict[str, float] = {}
    top = []
    for line in report.stdout.splitlines():
        parts = line.split(None, 2)
        if len(parts) < 3 or not parts[0].endswith("%"):
            continue
        share, dso, symbol = float(parts[0][:-1]), parts[1], parts[2].removeprefix("[.] ")
        symbol = symbol.removeprefix("[k] ")
        totals[group_of(symbol, dso)] = totals.get(group_of(symbol, dso), 0.0) + share
        top.append((share, dso, symbol))
    print(f"\n{system}: perf cpu-clock self time, by group (% of samples)")
    for group, share in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"  {group:22}{share:6.1f}")
    print(f"{system}: the hottest {args.top} symbols")
    for share, dso, symbol in top[: args.top]:
        print(f"  {share:6.2f}%  {dso[:28]:28}  {symbol[:110]}")
    return totals


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="small", choices=sorted(workloads.WORKLOADS))
    p.add_argument("--preset", default="default", choices=sorted(workloads.PRESETS))
    p.add_argument("--systems", default=",".join(SYSTEMS))
    p.add_argument("--steps", type=int, help="measured steps (default: the workload's)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--pyinstrument", action="store_true", help="gradstream's Python call tree")
    p.add_argument("--perf", action="store_true", help="native symbols under perf record")
    p.add_argument("--perf-systems", default="gradstream,torch")
    p.add_argument("--top", type=int, default=25)
    p.add_argument("--out", type=Path, default=Path("profile-out"))
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--system", help=argparse.SUPPRESS)
    p.add_argument("--sizes", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.steps is None:
        args.steps = workloads.WORKLOADS[args.workload].default_steps
    if args.child:
        child(args)
        return
    args.out.mkdir(parents=True, exist_ok=True)
    env = runner.child_env(args.threads)
    results = {"phases": phases(args, env)}
    if args.pyinstrument:
        proc = subprocess.run(
            child_cmd(args, "gradstream", "pyinstrument"), env=env, capture_output=True, text=True
        )
        print(proc.stdout if proc.returncode == 0 else proc.stderr[-2000:])
    if args.perf:
        results["perf"] = {s: perf_profile(args, env, s) for s in args.perf_systems.split(",")}
    (args.out / f"profile-{args.workload}.json").write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
