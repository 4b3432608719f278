"""Run the matrix: every (workload, system) configuration in its own process, then compare."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import progress, tensorfile, workloads
from .systems import BY_NAME, SYSTEMS, System, candle, unavailable_reason

SEED = 0
# Loss agreement: the first loss is on the shared initial weights (only summation order may
# differ); the last comes after `steps` Adam updates, where float32 rounding compounds a little.
LOSS_RTOL = {"loss": 1e-4, "final_loss": 1e-3}
AUTOCAST_LOSS_RTOL = 2e-2


@dataclass
class Config:
    workloads: list[str]
    systems: list[str]
    steps: int | None = None  # None: each workload's default_steps
    threads: int = 2
    preset: str = "default"
    overrides: dict[str, dict[str, str]] = field(default_factory=dict)
    timeout: float = 1800.0
    build_candle: bool = True
    plain_progress: bool = False
    repeat: int = 1  # processes per configuration, run in turn with the other configurations


def child_env(threads: int) -> dict[str, str]:
    """The same allocator and thread settings for every system."""
    env = dict(os.environ)
    env["MALLOC_MMAP_THRESHOLD_"] = "65536"
    for var in (
        "OMP_NUM_THREADS",
        "MKL_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "RAYON_NUM_THREADS",
        "NUMEXPR_NUM_THREADS",
    ):
        env[var] = str(threads)
    return env


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.strip().splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                return json.loads(line)
            except json.JSONDecodeError:
                return None
    return None


def run_one(cmd: list[str], env: dict[str, str], timeout: float) -> dict:
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}
    result = _last_json(proc.stdout)
    if result is None:
        tail = " | ".join(proc.stderr.strip().splitlines()[-3:])
        result = {"status": "error", "reason": f"exit {proc.returncode}: {tail}"}
    elif result.get("status") == "error" and proc.stderr.strip():
        result["stderr_tail"] = proc.stderr.strip().splitlines()[-5:]
    result["wall_seconds"] = time.perf_counter() - t0
    return result


def run(cfg: Config, log=lambda s: print(s, file=sys.stderr)) -> dict:
    wls = {w: workloads.make(w, cfg.preset, cfg.overrides.get(w)) for w in cfg.workloads}
    systems = [BY_NAME[s] for s in cfg.systems]
    matrix: list[tuple[object, System]] = [
        (wl, s) for wl in wls.values() for s in systems if s.applies_to(wl.name)
    ]

    reasons = {s.name: unavailable_reason(s) for s in systems}
    exe = None
    if any(s.kind == "candle" for s in systems):
        if cfg.build_candle:
            exe, reasons["candle"] = candle.build(log=log)
        elif candle.binary().exists():
            exe = candle.binary()
        else:
            reasons["candle"] = f"not built ({candle.binary()} missing) and --no-build-candle"

    env = child_env(cfg.threads)
    runs: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="gradstream-bench-") as tmp:
        data: dict[str, Path] = {}
        bar = progress.bar(len(matrix) * cfg.repeat, plain=cfg.plain_progress)
        try:
            # Round by round: a load on the machine that comes and goes falls on every system.
            for _ in range(cfg.repeat):
                for wl, system in matrix:
                    bar.set_description(f"{wl.name} / {system.name}")
                    rec = {"workload": wl.name, "system": system.name}
                    reason = reasons.get(system.name) or unavailable_reason(system, wl.name)
                    steps = steps_for(cfg, wl)
                    if reason:
                        rec.update(status="skipped", reason=reason)
                    else:
                        if wl.name not in data:
                            data[wl.name] = Path(tmp) / f"{wl.name}.safetensors"
                            tensorfile.save(data[wl.name], wl.tensors(SEED))
                        if system.kind == "candle":
                            cmd = candle.command(exe, wl, data[wl.name], steps, cfg.threads)
                        else:
                            spec = {
                                "impl": system.impl,
                                "variant": system.variant,
                                "workload": wl.name,
                                "sizes": workloads.sizes(wl),
                                "data": str(data[wl.name]),
                                "steps": steps,
                                "threads": cfg.threads,
                            }
                            cmd = [sys.executable, "-m", "gradstream.bench.child", json.dumps(spec)]
                        rec.update(run_one(cmd, env, cfg.timeout))
                    runs.setdefault((wl.name, system.name), []).append(rec)
                    bar.write(_summary(rec))
                    bar.update()
        finally:
            bar.close()
    records = [merge_repeats(recs) for recs in runs.values()]

    bounds = {name: wl.lower_bound() for name, wl in wls.items()}
    for rec in records:
        _complete(rec, bounds[rec["workload"]]["total"], steps_for(cfg, wls[rec["workload"]]))
    _compare(records)
    return {
        "meta": _meta(cfg, wls),
        "lower_bounds": {
            name: {**bounds[name], "how": wl.bound_text()} for name, wl in wls.items()
        },
        "records": records,
    }


def merge_repeats(recs: list[dict]) -> dict:
    """One record from the processes of one configuration: the first process's figures, with
    the step time the median of the processes' medians; `process_step_seconds` lists those
    medians and `step_times` holds every measured step of every process. A failed process
    makes the record that failure."""
    failed = [r for r in recs if r.get("status") != "ok"]
    if failed or len(recs) == 1:
        return failed[0] if failed else recs[0]
    rec = dict(recs[0])
    rec["process_step_seconds"] = [r["step_seconds"] for r in recs]
    rec["step_seconds"] = statistics.median(rec["process_step_seconds"])
    rec["step_times"] = [t for r in recs for t in r.get("step_times", [])]
    rec["peak_bytes"] = max(r["peak_bytes"] for r in recs)
    return rec


def _summary(rec: dict) -> str:
    head = f"{rec['workload']} / {rec['system']}: "
    if rec.get("status") != "ok":
        return head + f"{rec.get('status')}: {rec.get('reason')}"
    return head + f"{rec['peak_bytes'] / 2**20:.1f} MiB, {rec['step_seconds']:.3f} s/step"


def steps_for(cfg: Config, workload) -> int:
    """The measured steps of `workload`: --steps, else the workload's own default."""
    return cfg.steps if cfg.steps is not None else workload.default_steps


def _complete(rec: dict, bound: int, steps: int) -> None:
    rec["lower_bound_bytes"] = bound
    rec["steps"] = steps
    if rec.get("status") != "ok":
        return
    losses = rec.get("losses") or []
    rec["loss"] = losses[0] if losses else None
    rec["final_loss"] = losses[-1] if losses else None
    rec["peak_vs_bound"] = rec["peak_bytes"] / bound
    times = rec.get("step_times") or [rec["step_seconds"]]
    rec["step_min_seconds"], rec["step_max_seconds"] = min(times), max(times)
    if "exact_peak_bytes" in rec:
        rec["exact_peak_vs_bound"] = rec["exact_peak_bytes"] / bound


def _close(a: float, b: float, rtol: float) -> bool:
    return abs(a - b) <= rtol * max(abs(a), abs(b)) + 1e-7


def _compare(records: list[dict]) -> None:
    """Ratios to torch and torch-hook; flag any loss that disagrees with the reference."""
    by_key = {(r["workload"], r["system"]): r for r in records if r.get("status") == "ok"}
    # The reference loss: torch's, else that of the first system that ran.
    loss_refs: dict[str, dict] = {}
    for (w, _), r in by_key.items():
        loss_refs.setdefault(w, r)
    for (w, name), r in by_key.items():
        if name == "torch":
            loss_refs[w] = r
    for rec in records:
        if rec.get("status") != "ok":
            continue
        w = rec["workload"]
        for ref_name in ("torch", "torch-hook"):
            ref = by_key.get((w, ref_name))
            key = "ratio_to_" + ref_name.replace("-", "_")
            if ref and ref["peak_bytes"] > 0 and ref["step_seconds"] > 0:
                rec[key] = {
                    "peak": rec["peak_bytes"] / ref["peak_bytes"],
                    "time": rec["step_seconds"] / ref["step_seconds"],
                }
        ref, rtols = loss_refs[w], LOSS_RTOL
        if BY_NAME[rec["system"]].variant == "autocast":
            # bfloat16 products: compared with PyTorch's autocast run, to about 2 digits
            # (torch-autocast itself with PyTorch's float32 run).
            other = "torch" if rec["system"] == "torch-autocast" else "torch-autocast"
            ref = by_key.get((w, other), ref)
            rtols = dict.fromkeys(LOSS_RTOL, AUTOCAST_LOSS_RTOL)
        rec["loss_reference"] = ref["system"]
        problems = []
        for field_, rtol in rtols.items():
            a, b = rec.get(field_), ref.get(field_)
            if a is None or b is None or not _close(a, b, rtol):
                problems.append(f"{field_} {a} vs {ref['system']} {b} (rtol {rtol:g})")
            if len(rec.get("losses", [])) != len(ref.get("losses", [])):
                problems.append("a different number of steps")
        rec["loss_ok"] = not problems
        if problems:
            rec["loss_mismatch"] = "; ".join(problems)


def _meta(cfg: Config, wls: dict) -> dict:
    import platform

    meta = {
        "command": "python -m gradstream.bench " + " ".join(sys.argv[1:]),
        "preset": cfg.preset,
        "steps": cfg.steps
        if cfg.steps is not None
        else {name: wl.default_steps for name, wl in wls.items()},
        "threads": cfg.threads,
        "repeat": cfg.repeat,
        "seed": SEED,
        "sizes": {name: workloads.sizes(wl) for name, wl in wls.items()},
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "memory_method": (
            "RSS high-water mark (VmHWM) above the idle baseline (VmRSS before the model is "
            "built), reset after one warm-up step via /proc/self/clear_refs; "
            "MALLOC_MMAP_THRESHOLD_=65536 in every child"
        ),
    }
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    return meta


def all_systems() -> list[str]:
    """The systems a run has by default: all but the mixed-precision ones (`--autocast`)."""
    return [s.name for s in SYSTEMS if s.variant != "autocast"]
