"""The outputs: a table on the terminal, results.json, results.md and bar charts (PNG)."""

from __future__ import annotations

import json
from pathlib import Path

from .systems import BY_NAME

MIB = 2**20

COLUMNS = [
    ("workload", "the workload (sizes and lower bound below)"),
    ("system", "the system (below)"),
    ("peak MiB", "peak RSS above the idle baseline during the measured steps, MiB"),
    ("× bound", "peak as a multiple of the analytic lower bound (below)"),
    ("× torch", "peak relative to `torch` on the same workload"),
    ("× torch-hook", "peak relative to `torch-hook` on the same workload"),
    ("step s", "median wall time of one training step (forward, backward, optimizer)"),
    ("min s", "the fastest measured step"),
    ("max s", "the slowest measured step"),
    ("× torch time", "step time relative to `torch`"),
    ("exact MiB", "gradstream's own exact peak of tensor bytes (`memory.max_memory_allocated`)"),
    ("loss", "loss of the first step, on the shared initial weights and inputs"),
    ("final loss", "loss of the last measured step (after the Adam updates)"),
]


def _fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


def _time_spec(seconds: float) -> str:
    """Three significant digits down to a step of about a millisecond, more below it."""
    return ".3f" if seconds >= 0.1 else ".4f" if seconds >= 0.01 else ".5f"


def rows(result: dict) -> list[list[str]]:
    out = []
    for r in result["records"]:
        if r.get("status") != "ok":
            reason = f"{r.get('status')}: {r.get('reason', '')}"
            out.append([r["workload"], r["system"], reason] + [""] * (len(COLUMNS) - 3))
            continue
        loss_mark = "" if r.get("loss_ok", True) else " (!)"
        out.append(
            [
                r["workload"],
                r["system"],
                _fmt(r["peak_bytes"] / MIB, ".1f"),
                _fmt(r.get("peak_vs_bound"), ".2f"),
                _fmt(r.get("ratio_to_torch", {}).get("peak"), ".2f"),
                _fmt(r.get("ratio_to_torch_hook", {}).get("peak"), ".2f"),
                _fmt(r["step_seconds"], _time_spec(r["step_seconds"])),
                _fmt(r.get("step_min_seconds"), _time_spec(r["step_seconds"])),
                _fmt(r.get("step_max_seconds"), _time_spec(r["step_seconds"])),
                _fmt(r.get("ratio_to_torch", {}).get("time"), ".2f"),
                _fmt(r["exact_peak_bytes"] / MIB, ".1f") if "exact_peak_bytes" in r else "",
                _fmt(r.get("loss"), ".6g") + loss_mark,
                _fmt(r.get("final_loss"), ".6g") + loss_mark,
            ]
        )
    return out


def process_spread(result: dict) -> list[str]:
    """With --repeat: per configuration, the min/median/max of its processes' median step
    times, the spread a ratio between systems has to clear."""
    out = []
    for r in result["records"]:
        medians = r.get("process_step_seconds")
        if r.get("status") != "ok" or not medians:
            continue
        spec = _time_spec(r["step_seconds"])
        lo, mid, hi = min(medians), r["step_seconds"], max(medians)
        out.append(
            f"{r['workload']} / {r['system']}: {len(medians)} processes, median step "
            f"{lo:{spec}} / {mid:{spec}} / {hi:{spec}} s (min / median / max)"
        )
    return out


def text_table(result: dict) -> str:
    head = [c for c, _ in COLUMNS]
    body = rows(result)
    skipped = [r.get("status") != "ok" for r in result["records"]]
    widths = [len(h) for h in head]
    for row, skip in zip(body, skipped, strict=True):
        cells = row[:2] if skip else row  # a reason spans the numeric columns
        for i, cell in enumerate(cells):
            widths[i] = max(widths[i], len(cell))

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=False))
        )

    lines = [line(head), "  ".join("-" * w for w in widths)]
    for row, skip in zip(body, skipped, strict=True):
        lines.append(line(row[:2]) + "  " + row[2] if skip else line(row))
    return "\n".join(lines)


def markdown(result: dict) -> str:
    meta = result["meta"]
    steps = meta["steps"]
    if isinstance(steps, dict):  # each workload's default
        steps = ", ".join(f"{n} {k}" for k, n in steps.items())
    head = [c for c, _ in COLUMNS]
    repeat = meta.get("repeat", 1)
    processes = f", each configuration in {repeat} processes" if repeat > 1 else ""
    lines = [
        "# gradstream benchmark",
        "",
        f"`{meta['command']}` — {meta['date']}, {meta['threads']} threads, "
        f"{steps} measured steps after one warm-up step, preset `{meta['preset']}`{processes}.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "|".join("---" if i < 2 else "---:" for i in range(len(head))) + "|",
    ]
    for row in rows(result):
        lines.append("| " + " | ".join(row) + " |")
    spread = process_spread(result)
    if spread:
        lines += ["", "## Step time over processes", ""]
        lines += [f"- {line}" for line in spread]
    lines += ["", "## Systems", ""]
    for name in dict.fromkeys(r["system"] for r in result["records"]):
        lines.append(f"- **{name}**: {BY_NAME[name].note}.")
    lines += ["", "## Columns", ""]
    lines += [f"- **{c}**: {meaning}." for c, meaning in COLUMNS]
    lines += ["", "## Memory", "", meta["memory_method"] + ".", "", "## Lower bounds", ""]
    for name, b in result["lower_bounds"].items():
        lines.append(
            f"- **{name}** ({_sizes(meta['sizes'][name])}): "
            f"{b['total'] / MIB:.1f} MiB = parameters {b['parameters'] / MIB:.1f} + "
            f"optimizer state {b['optimizer_state'] / MIB:.1f} + saved activations "
            f"{b['saved_activations'] / MIB:.1f} + largest gradient "
            f"{b['largest_gradient'] / MIB:.1f} MiB. {b['how']}."
        )
    lines += [
        "",
        "The bound is for a step without recomputation: a checkpointing system recomputes "
        "activations instead of saving them and can go below it.",
    ]
    mismatches = [r for r in result["records"] if r.get("loss_mismatch")]
    lines += ["", "## Loss agreement", ""]
    if mismatches:
        for r in mismatches:
            lines.append(f"- (!) {r['workload']} / {r['system']}: {r['loss_mismatch']}")
    else:
        lines.append(
            "Every system that ran agrees with the reference (torch) on the first and the "
            "last loss, within float32 tolerance: same weights, same inputs, same work."
        )
    skipped = [r for r in result["records"] if r.get("status") != "ok"]
    if skipped:
        lines += ["", "## Not run", ""]
        lines += [
            f"- {r['workload']} / {r['system']}: {r['status']}: {r.get('reason')}" for r in skipped
        ]
    notes = result.get("notes") or []
    if notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def _sizes(sizes: dict) -> str:
    return ", ".join(f"{k} {v}" for k, v in sizes.items())


def charts(result: dict, out: Path) -> list[str]:
    """peak_memory.png and step_time.png; the notes say what was skipped and why."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["charts skipped: matplotlib is not installed (pip install matplotlib)"]
    ok = [r for r in result["records"] if r.get("status") == "ok"]
    names = list(dict.fromkeys(r["workload"] for r in ok))
    if not names:
        return ["charts skipped: no configuration ran"]
    for fname, key, scale, label in (
        ("peak_memory.png", "peak_bytes", MIB, "peak RSS above idle (MiB)"),
        ("step_time.png", "step_seconds", 1.0, "median step time (s)"),
    ):
        fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
        for ax, w in zip(axes[0], names, strict=True):
            recs = [r for r in ok if r["workload"] == w]
            values = [r[key] / scale for r in recs]
            bars = ax.bar([r["system"] for r in recs], values, color="tab:blue")
            ax.bar_label(bars, fmt="%.3g" if key == "step_seconds" else "%.0f", fontsize=8)
            if key == "peak_bytes":
                bound = result["lower_bounds"][w]["total"] / MIB
                ax.axhline(bound, color="tab:red", linestyle="--", label="lower bound")
                ax.legend(fontsize=8)
            ax.set_title(w)
            ax.set_ylabel(label)
            ax.tick_params(axis="x", rotation=30, labelsize=8)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=120)
        plt.close(fig)
    return []


def write(result: dict, out: Path) -> list[str]:
    """Write results.json, results.md and the charts into `out`; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    result.setdefault("notes", []).extend(charts(result, out))
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(markdown(result))
    return sorted(p.name for p in out.iterdir() if p.suffix in (".json", ".md", ".png"))
