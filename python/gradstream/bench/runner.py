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

from . import gpu, progress, tensorfile, workloads
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
    device: str = "cpu"  # where every system trains: "cpu" or "cuda"
    # The systems each workload runs on, where not every system (`--device cuda --quick`).
    only: dict[str, list[str]] | None = None
    candle_bin: Path | None = None  # a built candle program, instead of `cargo build`
    time_limit: float | None = None  # seconds for the whole run; what is left is skipped
    candle_exe: Path | None = field(default=None, repr=False)  # set by `prepare`


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


def run_one(
    cmd: list[str], env: dict[str, str], timeout: float, sampler: gpu.Sampler | None = None
) -> dict:
    """One configuration's process; its figures. With a `sampler` (`--device cuda`), the
    device's memory is sampled while it runs and the driver's figures are added."""
    t0 = time.perf_counter()
    driver: dict = {}
    if sampler is None:
        try:
            proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}
        returncode, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    else:
        returncode, stdout, stderr, driver = gpu.run_sampled(cmd, env, timeout, sampler)
        if returncode is None:
            return {"status": "error", "reason": f"timed out after {timeout:.0f} s"}
    result = _last_json(stdout)
    if result is None:
        tail = " | ".join(stderr.strip().splitlines()[-3:])
        result = {"status": "error", "reason": f"exit {returncode}: {tail}"}
    elif result.get("status") == "error" and stderr.strip():
        result["stderr_tail"] = stderr.strip().splitlines()[-5:]
    if result.get("status") == "ok":
        result.update(driver)
    result["wall_seconds"] = time.perf_counter() - t0
    return result


def child_command(
    cfg: Config, system: System, wl, data: Path, steps: int, cap: dict | None = None
) -> list[str]:
    """The command line of one configuration's process: the candle program's, or
    `gradstream.bench.child` with the spec of the Python system. `cap` (`--max-batch`):
    `{"rule": "ballast" or "fraction", "bytes": N}` (candle has only the ballast)."""
    if system.kind == "candle":
        leave = cap["bytes"] if cap else None
        return candle.command(cfg.candle_exe, wl, data, steps, cfg.threads, cfg.device, leave)
    spec = {
        "impl": system.impl,
        "variant": system.variant,
        "workload": wl.name,
        "sizes": workloads.sizes(wl),
        "data": str(data),
        "steps": steps,
        "threads": cfg.threads,
        "device": cfg.device,
    }
    if cap:
        spec["cap"] = cap
    return [sys.executable, "-m", "gradstream.bench.child", json.dumps(spec)]


def prepare(cfg: Config, systems: list[System], log) -> dict[str, str | None]:
    """Why each system cannot run on `cfg.device` here (None where it can); finds or builds
    the candle program (`cfg.candle_exe`)."""
    reasons = {s.name: unavailable_reason(s) for s in systems}
    on_gpu = cfg.device != "cpu"
    if on_gpu:
        torch_reason = gpu.torch_cuda_reason()
        for s in systems:
            if s.impl == "torch_impl" and not reasons[s.name]:
                reasons[s.name] = torch_reason
    cfg.candle_exe = None
    if any(s.kind == "candle" for s in systems):
        given = cfg.candle_bin or os.environ.get("GRADSTREAM_CANDLE_BIN")
        if given:
            if Path(given).is_file():
                cfg.candle_exe = Path(given)
            else:
                reasons["candle"] = f"--candle-bin {given}: no such file"
        elif on_gpu:
            reasons["candle"] = (
                "no candle program built with CUDA: build it with tools/build-candle-cuda.sh "
                "and pass --candle-bin (or set GRADSTREAM_CANDLE_BIN)"
            )
        elif cfg.build_candle:
            cfg.candle_exe, reasons["candle"] = candle.build(log=log)
        elif candle.binary().exists():
            cfg.candle_exe = candle.binary()
        else:
            reasons["candle"] = f"not built ({candle.binary()} missing) and --no-build-candle"
    return reasons


def child_env_for(cfg: Config, system: System) -> dict[str, str]:
    env = child_env(cfg.threads)
    if system.kind == "candle" and cfg.device != "cpu":
        env = gpu.candle_env(env)  # its cuBLAS and cuRAND from PyTorch's nvidia-* packages
    return env


def run(cfg: Config, log=lambda s: print(s, file=sys.stderr)) -> dict:
    wls = {w: workloads.make(w, cfg.preset, cfg.overrides.get(w)) for w in cfg.workloads}
    systems = [BY_NAME[s] for s in cfg.systems]
    matrix: list[tuple[object, System]] = [
        (wl, s)
        for wl in wls.values()
        for s in systems
        if s.applies_to(wl.name) and s.name in (cfg.only or {}).get(wl.name, [s.name])
    ]

    reasons = prepare(cfg, systems, log)
    notes: list[str] = []
    sampler = None
    if cfg.device != "cpu":
        sampler, why = gpu.Sampler.open()
        if sampler is None:
            notes.append(f"driver memory not measured: {why}")
    deadline = None if cfg.time_limit is None else time.monotonic() + cfg.time_limit

    runs: dict[tuple[str, str], list[dict]] = {}
    with tempfile.TemporaryDirectory(prefix="gradstream-bench-") as tmp:
        data: dict[str, Path] = {}
        keys = [(wl.name, system.name) for wl, system in matrix] * cfg.repeat
        bar = progress.bar(len(keys), plain=cfg.plain_progress, keys=keys)
        try:
            # Round by round: a load on the machine that comes and goes falls on every system.
            for _ in range(cfg.repeat):
                for wl, system in matrix:
                    bar.set_description(f"{wl.name} / {system.name}")
                    rec = {"workload": wl.name, "system": system.name}
                    reason = reasons.get(system.name) or unavailable_reason(system, wl.name)
                    steps = steps_for(cfg, wl)
                    left = None if deadline is None else deadline - time.monotonic()
                    if reason:
                        rec.update(status="skipped", reason=reason)
                    elif left is not None and left < 1.0:
                        rec.update(status="skipped", reason=f"--time-limit {cfg.time_limit:g} s")
                    else:
                        if wl.name not in data:
                            data[wl.name] = Path(tmp) / f"{wl.name}.safetensors"
                            tensorfile.save(data[wl.name], wl.tensors(SEED))
                        cmd = child_command(cfg, system, wl, data[wl.name], steps)
                        timeout = cfg.timeout if left is None else min(cfg.timeout, left)
                        rec.update(run_one(cmd, child_env_for(cfg, system), timeout, sampler))
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
    result = {
        "meta": _meta(cfg, wls, sampler),
        "lower_bounds": {
            name: {**bounds[name], "how": wl.bound_text()} for name, wl in wls.items()
        },
        "records": records,
    }
    if notes:
        result["notes"] = notes
    return result


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
    for key in ("peak_bytes", "driver_peak_bytes"):
        values = [r[key] for r in recs if r.get(key) is not None]
        if values:
            rec[key] = max(values)
    return rec


def _summary(rec: dict) -> str:
    head = f"{rec['workload']} / {rec['system']}: "
    if rec.get("status") != "ok":
        return head + f"{rec.get('status')}: {rec.get('reason')}"
    if rec.get("device", "cpu") == "cpu":
        return head + f"{rec['peak_bytes'] / 2**20:.1f} MiB, {rec['step_seconds']:.3f} s/step"
    figures = []
    if rec.get("peak_bytes") is not None:
        figures.append(f"peak {rec['peak_bytes'] / 2**20:.1f} MiB")
    if rec.get("driver_peak_bytes") is not None:
        figures.append(f"driver {rec['driver_peak_bytes'] / 2**20:.1f} MiB")
    return head + ", ".join(figures + [f"{rec['step_seconds'] * 1e3:.2f} ms/step"])


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
    if rec.get("peak_bytes") is not None:  # the candle program has no counter on a GPU
        rec["peak_vs_bound"] = rec["peak_bytes"] / bound
    if rec.get("driver_peak_bytes") is not None:
        rec["driver_peak_vs_bound"] = rec["driver_peak_bytes"] / bound
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
            if ref and ref["step_seconds"] > 0:
                ratios = {"peak": _ratio(rec.get("peak_bytes"), ref.get("peak_bytes"))}
                if "driver_peak_bytes" in rec or "driver_peak_bytes" in ref:
                    ratios["driver_peak"] = _ratio(
                        rec.get("driver_peak_bytes"), ref.get("driver_peak_bytes")
                    )
                ratios["time"] = rec["step_seconds"] / ref["step_seconds"]
                rec[key] = ratios
        ref, rtols = loss_refs[w], LOSS_RTOL
        if BY_NAME[rec["system"]].variant == "autocast":
            # bfloat16 products: compared with PyTorch's autocast run, to about 2 digits
            # (torch-autocast itself with PyTorch's float32 run).
            other = "torch" if rec["system"] == "torch-autocast" else "torch-autocast"
            ref = by_key.get((w, other), ref)
            rtols = dict.fromkeys(LOSS_RTOL, AUTOCAST_LOSS_RTOL)
        elif BY_NAME[rec["system"]].variant.startswith("low_bit:"):
            # The moments coded in 8 or 4 bits: the updates, and so the losses after them,
            # agree with float32 Adam's to about 2 digits.
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


def _ratio(a, b) -> float | None:
    return a / b if a is not None and b else None


def _meta(cfg: Config, wls: dict, sampler: gpu.Sampler | None = None) -> dict:
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
    if cfg.device != "cpu":
        meta["device"] = cfg.device
        meta["memory_method"] = gpu.MEMORY_METHOD
        meta["timing_method"] = (
            "wall time of one step between two synchronisations of the device (one before the "
            "timer starts, one before it stops); PyTorch in float32 without TensorFloat-32 "
            "(torch.backends.cudnn.allow_tf32 and torch.backends.cuda.matmul.allow_tf32 "
            "False), as gradstream and candle compute"
        )
        if sampler is not None:
            meta.update(sampler.describe())
        if cfg.only is not None:
            meta["only"] = cfg.only
    try:
        import torch

        meta["torch"] = torch.__version__
    except ImportError:
        pass
    return meta


def all_systems() -> list[str]:
    """The systems a run has by default: all but the mixed-precision ones (`--autocast`) and
    the low-bit optimizer state ones (`--low-bit`)."""
    return [
        s.name for s in SYSTEMS if s.variant != "autocast" and not s.variant.startswith("low_bit:")
    ]
