"""`python -m gradstream.bench --device cuda --max-batch 8GiB`: the largest tiny-NeRF batch each
system trains within a cap on GPU memory.

For each system, the number of rays per step is doubled from the workload's (`nerf.rays`,
1024 by default) until a probe fails, then bisected between the largest that fit and the
smallest that did not, down to `rtol` of the former (1/64; 1/8 with `--quick`). Each probe is
its own process: the system's runtime starts, the cap is applied, the model and a batch of
that many rays are loaded, and a warm-up step and one more step run (the second step is the
first that holds the optimizer state from its start). A probe fits if both steps complete.

The cap (`--cap-rule`): `ballast` (the default) allocates, straight from the driver and after
the process's runtime has started, all of the GPU's free memory but the cap, in every system
alike, so that whatever each one allocates from then on (its allocator's cache or pool, its
libraries' workspaces, fragmentation) has the cap; `fraction` uses PyTorch's and gradstream's
own `set_per_process_memory_fraction` (PyTorch's counts what its caching allocator reserves,
gradstream's the bytes of its tensors) and keeps the ballast for candle, which has no cap.

Writes max_batch.json, max_batch.md and max_batch.png into --out; the ratios are each
gradstream system's largest batch over PyTorch's and candle's.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from . import runner, tensorfile, workloads
from .report import system_colors
from .systems import BY_NAME

MIB = 2**20
SYSTEMS = ["gradstream-in-backward", "gradstream", "torch", "torch-hook", "candle"]
QUICK_SYSTEMS = ["gradstream-in-backward", "torch", "candle"]
MIN_RAYS = 16
MAX_RAYS = 1 << 22
PROBE_TIMEOUT = 300.0
# How each library says it ran out of memory, with spaces and underscores taken out:
# "CUDA out of memory", OutOfMemoryError, CUDA_ERROR_OUT_OF_MEMORY, CUBLAS_STATUS_ALLOC_FAILED.
OOM_WORDS = ("outofmemory", "allocfailed")


def _is_oom(reason: str) -> bool:
    text = reason.lower().replace(" ", "").replace("_", "")
    return any(w in text for w in OOM_WORDS)


def search(fits, start: int, rtol: float, grain: int = MIN_RAYS, out_of_time=lambda: False):
    """The largest n (a multiple of `grain`) with `fits(n)`, assuming fits is monotone: double
    (or halve) from `start` to a change, then bisect until the gap is within `rtol` of the
    largest that fit (or `grain`). Returns (largest that fit or None, smallest that did not or
    None, cut short by `out_of_time`)."""
    ok: int | None = None
    bad: int | None = None
    n = start
    while True:
        if out_of_time():
            return ok, bad, True
        if fits(n):
            ok = n
            if n >= MAX_RAYS or bad is not None:
                break
            n *= 2
        else:
            bad = n
            if ok is not None or n // 2 < grain:
                break
            n //= 2
    while ok is not None and bad is not None and bad - ok > max(grain, int(ok * rtol)):
        if out_of_time():
            return ok, bad, True
        mid = (ok + bad) // 2 // grain * grain
        if mid <= ok:
            break
        if fits(mid):
            ok = mid
        else:
            bad = mid
    return ok, bad, False


def _search_system(cfg, system, base, cap: int, rule: str, rtol: float, until, tmp: Path, log):
    """One system's record: its probes and the largest batch that fit (`until`: the
    monotonic time its share of --time-limit ends, or None)."""
    rec: dict = {"system": system.name, "probes": []}
    # A probe that fails for another reason than memory (an error, a timeout) ends the search:
    # a smaller batch says nothing about the cap then.
    broken: list[str] = []

    def left() -> float:
        return PROBE_TIMEOUT if until is None else until - time.monotonic()

    def fits(rays: int) -> bool:
        sizes = {**cfg.overrides.get("nerf", {}), "rays": str(rays)}
        wl = workloads.make("nerf", cfg.preset, sizes)
        data = tmp / f"nerf-{rays}.safetensors"
        tensorfile.save(data, wl.tensors(runner.SEED))
        capspec = {"rule": rule if system.kind != "candle" else "ballast", "bytes": cap}
        cmd = runner.child_command(cfg, system, wl, data, 1, cap=capspec)
        timeout = min(cfg.timeout, PROBE_TIMEOUT, max(left(), 1.0))
        probe = runner.run_one(cmd, runner.child_env_for(cfg, system), timeout)
        data.unlink()
        keep = ("status", "reason", "wall_seconds", "peak_bytes", "step_seconds")
        rec["probes"].append({"rays": rays, **{k: probe[k] for k in keep if k in probe}})
        ok = probe.get("status") == "ok"
        if not ok and not _is_oom(str(probe.get("reason", ""))):
            broken.append(str(probe.get("reason")))
        why = f"does not fit: {str(probe.get('reason'))[:160]}"
        log(f"{system.name} / {rays} rays: " + ("fits" if ok else why))
        return ok

    ok, bad, cut = search(fits, base.rays, rtol, out_of_time=lambda: bool(broken) or left() < 1.0)
    rec.update(status="ok" if ok is not None else "none", max_rays=ok, first_failing=bad)
    rec["cut_short"] = cut and not broken
    if broken:
        rec["stopped_by"] = f"a probe failed for another reason than memory: {broken[0][:300]}"
    if ok is not None:
        rec["max_points"] = ok * base.samples
    failing = [p for p in rec["probes"] if p["status"] != "ok" and p["rays"] == bad]
    if failing:
        why = str(failing[0].get("reason", ""))
        rec["limited_by"] = "out of memory" if _is_oom(why) else f"an error: {why[:300]}"
    return rec


def run(cfg: runner.Config, systems: list[str], cap: int, rule: str, rtol: float, log) -> dict:
    base = workloads.make("nerf", cfg.preset, cfg.overrides.get("nerf"))
    reasons = runner.prepare(cfg, [BY_NAME[s] for s in systems], log)
    deadline = None if cfg.time_limit is None else time.monotonic() + cfg.time_limit
    records = []
    with tempfile.TemporaryDirectory(prefix="gradstream-maxbatch-") as tmp:
        for i, name in enumerate(systems):
            reason = reasons.get(name) or runner.unavailable_reason(BY_NAME[name], "nerf")
            if reason:
                records.append(
                    {"system": name, "probes": [], "status": "skipped", "reason": reason}
                )
                log(f"{name}: skipped: {reason}")
                continue
            # Each system gets an equal share of the time that is left.
            until = None
            if deadline is not None:
                until = time.monotonic() + (deadline - time.monotonic()) / (len(systems) - i)
            records.append(
                _search_system(cfg, BY_NAME[name], base, cap, rule, rtol, until, Path(tmp), log)
            )
    return {
        "meta": {
            "command": "python -m gradstream.bench " + " ".join(sys.argv[1:]),
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "cap_bytes": cap,
            "cap_rule": rule,
            "rtol": rtol,
            "sizes": {k: v for k, v in workloads.sizes(base).items() if k != "rays"},
            "start_rays": base.rays,
            "probe_steps": "a warm-up step and one more step",
            "threads": cfg.threads,
        },
        "records": records,
        "ratios": ratios(records),
    }


def ratios(records: list[dict]) -> list[dict]:
    """Each gradstream system's largest batch over each other system's."""
    best = {r["system"]: r.get("max_rays") for r in records if r.get("max_rays")}
    out = []
    for name, rays in best.items():
        if not name.startswith("gradstream"):
            continue
        for other, other_rays in best.items():
            if not other.startswith("gradstream"):
                out.append({"system": name, "versus": other, "ratio": rays / other_rays})
    return out


def _rule_text(meta: dict) -> str:
    cap = meta["cap_bytes"] / 2**30
    if meta["cap_rule"] == "ballast":
        return (
            f"every system: after its runtime has started, a ballast allocated from the driver "
            f"(cuMemAlloc) leaves {cap:g} GiB of the GPU free for the rest of the process"
        )
    return (
        f"PyTorch: torch.cuda.set_per_process_memory_fraction at {cap:g} GiB of the GPU (its "
        f"caching allocator's reserved bytes); gradstream: gradstream.cuda."
        f"set_per_process_memory_fraction at {cap:g} GiB (its tensors' bytes); candle (no cap "
        f"of its own): a ballast from the driver that leaves {cap:g} GiB free"
    )


def table(result: dict) -> list[str]:
    lines = [
        "| system | largest batch (rays) | points | first failing (rays) | probes | limited by |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in result["records"]:
        if r["status"] == "skipped":
            lines.append(f"| {r['system']} | skipped: {r['reason']} | | | | |")
            continue
        cut = " (cut short by --time-limit)" if r.get("cut_short") else ""
        lines.append(
            f"| {r['system']} | {r.get('max_rays') or 'none'} | {r.get('max_points') or ''} | "
            f"{r.get('first_failing') or ''} | {len(r['probes'])} | "
            f"{r.get('limited_by', '')}{cut} |"
        )
    return lines


def ratio_lines(result: dict) -> list[str]:
    return [
        f"{x['system']} / {x['versus']}: ×{x['ratio']:.2f} the rays per step"
        for x in result["ratios"]
    ]


def markdown(result: dict) -> str:
    meta = result["meta"]
    sizes = ", ".join(f"{k} {v}" for k, v in meta["sizes"].items())
    lines = [
        f"# The largest tiny-NeRF batch within {meta['cap_bytes'] / 2**30:g} GiB of GPU memory",
        "",
        f"`{meta['command']}` — {meta['date']}. NeRF ({sizes}); rays per step doubled from "
        f"{meta['start_rays']}, then bisected to {meta['rtol']:.3g} of the largest that fit; "
        f"each probe in its own process, {meta['probe_steps']}.",
        "",
        f"Cap (`--cap-rule {meta['cap_rule']}`): {_rule_text(meta)}.",
        "",
        *table(result),
        "",
        "## Ratios",
        "",
        *([f"- {line}" for line in ratio_lines(result)] or ["- none: too few systems fit"]),
        "",
        "## Probes",
        "",
    ]
    for r in result["records"]:
        for p in r["probes"]:
            what = "fits" if p["status"] == "ok" else f"{p['status']}: {p.get('reason', '')}"
            lines.append(f"- {r['system']}, {p['rays']} rays: {what[:300]}")
    return "\n".join(lines) + "\n"


def chart(result: dict, out: Path) -> list[str]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["chart skipped: matplotlib is not installed (pip install matplotlib)"]
    recs = [r for r in result["records"] if r.get("max_rays")]
    if not recs:
        return ["chart skipped: no system fit a batch"]
    colors = system_colors()
    fig, ax = plt.subplots(figsize=(1.6 * len(recs) + 2, 4))
    bars = ax.bar(
        [r["system"] for r in recs],
        [r["max_rays"] for r in recs],
        color=[colors[r["system"]] for r in recs],
    )
    ax.bar_label(bars, fmt="%d", fontsize=8)
    ax.set_ylabel("largest batch (rays per step)")
    ax.set_title(f"tiny NeRF within {result['meta']['cap_bytes'] / 2**30:g} GiB")
    ax.tick_params(axis="x", rotation=20, labelsize=8)
    fig.tight_layout()
    fig.savefig(out / "max_batch.png", dpi=120)
    plt.close(fig)
    return []


def main(cfg: runner.Config, args) -> int:
    from ..memory.budget import parse_bytes

    cap = parse_bytes(args.max_batch)
    given = args.systems != ",".join(runner.all_systems())
    systems = [s for s in args.systems.split(",") if s] if given else None
    systems = systems or (QUICK_SYSTEMS if args.quick else SYSTEMS)
    rtol = 1 / 8 if args.quick else 1 / 64

    def log(s: str) -> None:
        print(s, file=sys.stderr, flush=True)

    result = run(cfg, systems, cap, args.cap_rule, rtol, log)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    result["notes"] = chart(result, out)
    (out / "max_batch.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "max_batch.md").write_text(markdown(result))
    print("\n".join(table(result)))
    for line in ratio_lines(result) + result["notes"]:
        print(line)
    print(f"wrote max_batch.json, max_batch.md, max_batch.png to {out}")
    return 0
