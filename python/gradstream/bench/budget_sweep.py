"""`python -m gradstream.bench --budget-sweep`: peak and step time under memory budgets.

For each workload (nerf, mlp, cnn, lora): gradstream unconstrained, then within budgets from
its exact unconstrained peak down by `FRACTIONS` until a budget raises `OutOfMemoryError` (the
smallest feasible is the last that ran); beside it PyTorch unconstrained and with
`torch.utils.checkpoint.checkpoint_sequential` at every segment count. Each configuration runs
in its own process (`child.py`), as in the main benchmark. Writes budget_sweep.json,
budget_sweep.md and budget_sweep.png (time overhead against peak, like the DTR paper's
figures) into --out.

Peak is the RSS high-water mark above the idle baseline for both systems (the same method);
gradstream's exact tensor peak (`memory.max_memory_allocated`), which the budget bounds, is
listed beside it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

from . import runner, tensorfile, workloads
from .report import system_colors

# 1.25 % steps from 60 % to 50 %: where recomputation starts to cascade (the step time
# doubles within 5 %), and where PyTorch's many-segment checkpointing lands.
FRACTIONS = (0.95, 0.9, 0.8, 0.75, 0.7, 0.65)
FRACTIONS += (0.6, 0.5875, 0.575, 0.5625, 0.55, 0.5375, 0.525, 0.5125, 0.5)
FRACTIONS += (0.45, 0.4, 0.35, 0.3, 0.25, 0.2, 0.15, 0.1)
SWEPT = ("nerf", "mlp", "cnn", "lora")
MIB = 2**20
# The step each workload should take within a budget of a fraction of its exact
# unconstrained peak, over its own unconstrained step (DTR's paper and Checkmate put the
# optimum near these): (fraction, most overhead).
TARGETS = {"lora": (0.5, 1.6), "nerf": (0.4, 1.4)}


def stages(wl) -> int:
    """How many one-input stages `torch_impl` splits the workload's network into: nerf's
    layers and head, mlp's layers, cnn's modules, lora's blocks."""
    return {
        "nerf": lambda: wl.depth + 1,
        "mlp": lambda: wl.depth,
        "cnn": lambda: len(wl.layers()),
        "lora": lambda: wl.layers,
    }[wl.name]()


def run(cfg: runner.Config, log=lambda s: print(s, file=sys.stderr)) -> dict:
    names = [w for w in cfg.workloads if w in SWEPT] or list(SWEPT)
    records: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="gradstream-sweep-") as tmp:
        for name in names:
            wl = workloads.make(name, cfg.preset, cfg.overrides.get(name))
            data = Path(tmp) / f"{name}.safetensors"
            tensorfile.save(data, wl.tensors(runner.SEED))
            records += _sweep(cfg, wl, data, log)
    _relate(records)
    return {
        "meta": {
            "command": "python -m gradstream.bench " + " ".join(sys.argv[1:]),
            "preset": cfg.preset,
            "threads": cfg.threads,
            "date": time.strftime("%Y-%m-%d %H:%M:%S"),
            "sizes": {
                n: workloads.sizes(workloads.make(n, cfg.preset, cfg.overrides.get(n)))
                for n in names
            },
        },
        "records": records,
        "findings": _findings(records),
    }


def _sweep(cfg: runner.Config, wl, data: Path, log) -> list[dict]:
    """One workload: gradstream down the budgets, then PyTorch at every segment count."""
    records: list[dict] = []
    env = runner.child_env(cfg.threads)
    spec = {
        "workload": wl.name,
        "sizes": workloads.sizes(wl),
        "data": str(data),
        "steps": cfg.steps if cfg.steps is not None else 3,
        "threads": cfg.threads,
    }

    def child(impl: str, variant: str, system: str, **extra) -> dict:
        cmd = json.dumps({**spec, "impl": impl, "variant": variant})
        rec = {"workload": wl.name, "system": system, **extra}
        rec.update(
            runner.run_one([sys.executable, "-m", "gradstream.bench.child", cmd], env, cfg.timeout)
        )
        records.append(rec)
        log(_summary(rec))
        return rec

    base = child("gradstream_impl", "standard", "gradstream", budget=None)
    exact = base.get("exact_peak_bytes")
    for f in FRACTIONS if exact else ():
        b = int(f * exact)
        rec = child("gradstream_impl", f"budget:{b}", "gradstream", budget=b, fraction=f)
        if rec.get("status") != "ok":
            rec["infeasible"] = "OutOfMemoryError" in rec.get("reason", "")
            break
    child("torch_impl", "standard", "torch", segments=None)
    for k in range(1, stages(wl) + 1):
        child("torch_impl", f"sequential:{k}", "torch-checkpoint_sequential", segments=k)
    return records


def _summary(rec: dict) -> str:
    what = f"{rec['workload']} / {rec['system']}"
    if rec.get("budget"):
        what += f" budget {rec['budget'] / MIB:.1f} MiB"
    if rec.get("segments"):
        what += f" segments {rec['segments']}"
    if rec.get("status") != "ok":
        return f"{what}: {rec.get('status')}: {str(rec.get('reason'))[:160]}"
    return f"{what}: peak {rec['peak_bytes'] / MIB:.1f} MiB, {rec['step_seconds']:.3f} s/step"


def _ok(r: dict) -> bool:
    return r.get("status") == "ok"


def _relate(records: list[dict]) -> None:
    """Each configuration's step time over its own system's unconstrained step."""
    for r in filter(_ok, records):
        family = "torch" if r["system"].startswith("torch") else "gradstream"
        ref = next(
            (
                b
                for b in records
                if _ok(b)
                and b["workload"] == r["workload"]
                and b["system"] == family
                and b.get("budget") is None
                and b.get("segments") is None
            ),
            None,
        )
        if ref and ref["step_seconds"] > 0:
            r["overhead"] = r["step_seconds"] / ref["step_seconds"]
        if ref:
            # gradstream's recompute is exact: every loss equals the unconstrained run's.
            r["same_losses"] = r.get("losses") == ref.get("losses")


def _findings(records: list[dict]) -> dict:
    """Each workload at half its unconstrained peak: time against unconstrained; its target
    (`TARGETS`), met or not; and at each checkpoint_sequential setting, gradstream's fastest
    run with no larger peak."""
    out: dict = {}
    for w in {r["workload"] for r in records}:
        mine = [r for r in records if _ok(r) and r["workload"] == w and r["system"] == "gradstream"]
        seq = [
            r
            for r in records
            if _ok(r) and r["workload"] == w and r["system"] == "torch-checkpoint_sequential"
        ]
        f: dict = {}
        half = [r for r in mine if r.get("fraction") == 0.5]
        if half:
            f["half_budget_time_vs_unconstrained"] = half[0].get("overhead")
            f["half_budget_exact_peak_mib"] = half[0]["exact_peak_bytes"] / MIB
        feasible = [r for r in mine if r.get("budget")]
        if feasible:
            f["smallest_feasible_budget_mib"] = min(r["budget"] for r in feasible) / MIB
        pairs = []
        for s in seq:
            fits = [r for r in mine if r["peak_bytes"] <= s["peak_bytes"]]
            best = min(fits, key=lambda r: r["step_seconds"]) if fits else None
            pairs.append(
                {
                    "segments": s["segments"],
                    "torch_peak_mib": s["peak_bytes"] / MIB,
                    "torch_step_s": s["step_seconds"],
                    "gradstream_step_s": best["step_seconds"] if best else None,
                    "gradstream_peak_mib": best["peak_bytes"] / MIB if best else None,
                    "time_ratio": best["step_seconds"] / s["step_seconds"] if best else None,
                }
            )
        f["at_equal_peak"] = pairs
        if w in TARGETS:
            f["target"] = _target(w, records)
        out[w] = f
    return out


def _target(workload: str, records: list[dict]) -> dict:
    """The workload's target and how its run at the target fraction did: met, missed, or
    infeasible (the budget raised OutOfMemoryError, or the sweep stopped before it)."""
    fraction, most = TARGETS[workload]
    run = next(
        (
            r
            for r in records
            if r["workload"] == workload
            and r["system"] == "gradstream"
            and r.get("fraction") == fraction
        ),
        None,
    )
    overhead = run.get("overhead") if run and _ok(run) else None
    return {
        "fraction": fraction,
        "most_overhead": most,
        "overhead": overhead,
        "met": overhead is not None and overhead <= most,
    }


def _target_cell(r: dict) -> str:
    target = TARGETS.get(r["workload"])
    if r["system"] != "gradstream" or not target or r.get("fraction") != target[0]:
        return ""
    if "overhead" not in r:
        return f"≤ {target[1]:.2f}×: infeasible"
    return f"≤ {target[1]:.2f}×: {'met' if r['overhead'] <= target[1] else 'missed'}"


def table(result: dict) -> str:
    head = ["workload", "system", "budget MiB", "segments", "peak MiB", "exact MiB", "step s"]
    head += ["× own unconstrained", "target", "evictions/step", "same losses", "status"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in result["records"]:
        ok = _ok(r)
        stats = r.get("budget_stats") or {}
        steps = len(r.get("step_times") or []) + 1  # the warm-up step counts in the stats too
        cells = [
            r["workload"],
            r["system"],
            f"{r['budget'] / MIB:.2f}" if r.get("budget") else "",
            str(r.get("segments") or ""),
            f"{r['peak_bytes'] / MIB:.1f}" if ok else "",
            f"{r['exact_peak_bytes'] / MIB:.1f}" if ok and "exact_peak_bytes" in r else "",
            f"{r['step_seconds']:.3f}" if ok else "",
            f"{r['overhead']:.2f}" if "overhead" in r else "",
            _target_cell(r),
            f"{stats.get('evictions', 0) / steps:.0f}" if stats else "",
            {True: "yes", False: "no"}.get(r.get("same_losses"), ""),
            "ok" if ok else ("OutOfMemoryError" if r.get("infeasible") else str(r.get("reason"))),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(result: dict, png: Path) -> bool:
    """Step time over each system's unconstrained step against peak RSS, per workload."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    colors = system_colors()
    names = sorted({r["workload"] for r in result["records"]})
    fig, axes = plt.subplots(1, len(names), figsize=(6 * len(names), 4.5), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        for system, style, label, color in (
            ("gradstream", "o-", "gradstream within a budget", colors["gradstream"]),
            (
                "torch-checkpoint_sequential",
                "s--",
                "PyTorch checkpoint_sequential",
                colors["torch-checkpoint"],
            ),
        ):
            pts = sorted(
                (r["peak_bytes"] / MIB, r["overhead"])
                for r in result["records"]
                if _ok(r) and r["workload"] == w and r["system"] == system and "overhead" in r
            )
            if pts:
                ax.plot([p for p, _ in pts], [o for _, o in pts], style, label=label, color=color)
        for r in result["records"]:
            if _ok(r) and r["workload"] == w and r["system"] == "torch" and "overhead" in r:
                ax.plot(
                    [r["peak_bytes"] / MIB],
                    [1.0],
                    "^",
                    color=colors["torch"],
                    label="PyTorch unconstrained",
                )
        target = result.get("findings", {}).get(w, {}).get("target")
        exact = next(
            (
                r["exact_peak_bytes"]
                for r in result["records"]
                if _ok(r) and r["workload"] == w and r["system"] == "gradstream"
                and r.get("budget") is None and "exact_peak_bytes" in r
            ),
            None,
        )  # fmt: skip
        if target and exact:
            # The target: at most this overhead within the target fraction of the peak.
            x = target["fraction"] * exact / MIB
            ax.plot([x], [target["most_overhead"]], "*", ms=14, color="black", zorder=5,
                    label=f"target: ≤ {target['most_overhead']}× at "
                          f"{target['fraction']:.0%} of the exact peak")  # fmt: skip
            ax.vlines(x, 1.0, target["most_overhead"], colors="black", lw=0.8, ls=":")
        ax.axhline(1.0, color="grey", lw=0.6)
        ax.set_title(f"{w}: time overhead against peak memory")
        ax.set_xlabel("peak RSS above baseline (MiB)")
        ax.set_ylabel("step time / own unconstrained step")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return True


def write(result: dict, out: Path) -> list[str]:
    out.mkdir(parents=True, exist_ok=True)
    (out / "budget_sweep.json").write_text(json.dumps(result, indent=1))
    md = [f"`{result['meta']['command']}` ({result['meta']['date']})", "", table(result), ""]
    md += ["```", json.dumps(result["findings"], indent=1), "```", ""]
    (out / "budget_sweep.md").write_text("\n".join(md))
    files = ["budget_sweep.json", "budget_sweep.md"]
    if plot(result, out / "budget_sweep.png"):
        files.append("budget_sweep.png")
    return files


def main(cfg: runner.Config, out: Path) -> int:
    result = run(cfg)
    files = write(result, out)
    print(table(result))
    print(json.dumps(result["findings"], indent=1))
    print(f"wrote {', '.join(files)} to {out}")
    return 0
