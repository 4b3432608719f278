"""The outputs: a table on the terminal, results.json, results.md and bar charts (PNG).

A GPU run (`meta["device"]` "cuda") has its own columns (`CUDA_COLUMNS`: the library's
counter and the driver's view side by side, times in milliseconds) and a list of headline
figures (`headlines`); the CPU run's outputs are those of `COLUMNS`.
"""

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


CUDA_COLUMNS = [
    ("workload", "the workload (sizes and lower bound below)"),
    ("system", "the system (below)"),
    (
        "peak MiB",
        "the library's own peak of the bytes its tensors hold on the GPU during the measured "
        "steps (`torch.cuda.max_memory_allocated`, `gradstream.cuda.max_memory_allocated`), "
        "above its value before the workload was loaded; candle has no such counter",
    ),
    ("× bound", "peak as a multiple of the analytic lower bound (below)"),
    ("× torch", "peak relative to `torch` on the same workload"),
    ("× torch-hook", "peak relative to `torch-hook` on the same workload"),
    (
        "driver MiB",
        "the GPU's used memory as the driver (NVML) reports it, sampled by the harness: the "
        "highest sample during the measured steps above the level once the process's runtime "
        "had started (caches and pools count, the CUDA context does not)",
    ),
    ("driver × torch", "driver MiB relative to `torch`'s"),
    (
        "grad MiB",
        "gradstream's exact peak of the bytes of `.grad`s alive at once "
        "(`memory.max_memory_by_category(device)['gradient']`)",
    ),
    (
        "step ms",
        "median time of one training step, from a synchronisation of the GPU before the timer "
        "starts to one before it stops",
    ),
    ("min ms", "the fastest measured step"),
    ("max ms", "the slowest measured step"),
    ("× torch time", "step time relative to `torch`"),
    ("loss", "loss of the first step, on the shared initial weights and inputs"),
    ("final loss", "loss of the last measured step (after the Adam updates)"),
]


def on_gpu(result: dict) -> bool:
    return result.get("meta", {}).get("device", "cpu") != "cpu"


def columns(result: dict) -> list[tuple[str, str]]:
    return CUDA_COLUMNS if on_gpu(result) else COLUMNS


def _fmt(x, spec: str) -> str:
    return "" if x is None else format(x, spec)


def _time_spec(seconds: float) -> str:
    """Three significant digits down to a step of about a millisecond, more below it."""
    return ".3f" if seconds >= 0.1 else ".4f" if seconds >= 0.01 else ".5f"


def _mib(x) -> str:
    return "" if x is None else format(x / MIB, ".1f")


def _gpu_row(r: dict, loss_mark: str) -> list[str]:
    ms = r["step_seconds"] * 1e3
    spec = ".2f" if ms >= 1 else ".3f"
    grad = r.get("peak_by_category", {}).get("gradient")
    return [
        r["workload"],
        r["system"],
        _mib(r.get("peak_bytes")),
        _fmt(r.get("peak_vs_bound"), ".2f"),
        _fmt(r.get("ratio_to_torch", {}).get("peak"), ".2f"),
        _fmt(r.get("ratio_to_torch_hook", {}).get("peak"), ".2f"),
        _mib(r.get("driver_peak_bytes")),
        _fmt(r.get("ratio_to_torch", {}).get("driver_peak"), ".2f"),
        _mib(grad),
        _fmt(ms, spec),
        _fmt(r.get("step_min_seconds", 0) * 1e3, spec),
        _fmt(r.get("step_max_seconds", 0) * 1e3, spec),
        _fmt(r.get("ratio_to_torch", {}).get("time"), ".2f"),
        _fmt(r.get("loss"), ".6g") + loss_mark,
        _fmt(r.get("final_loss"), ".6g") + loss_mark,
    ]


def rows(result: dict) -> list[list[str]]:
    out = []
    cols = columns(result)
    for r in result["records"]:
        if r.get("status") != "ok":
            reason = f"{r.get('status')}: {r.get('reason', '')}"
            out.append([r["workload"], r["system"], reason] + [""] * (len(cols) - 3))
            continue
        loss_mark = "" if r.get("loss_ok", True) else " (!)"
        if on_gpu(result):
            out.append(_gpu_row(r, loss_mark))
            continue
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


def _x(a, b) -> str:
    return f"×{a / b:.2f}" if a is not None and b else "×?"


def headlines(result: dict) -> list[str]:
    """The figures a GPU run is judged on, each as one line (none for a CPU run): per
    workload, each gradstream system's peak and step time against PyTorch's standard step;
    the mlp step's peak against its lower bound; candle's driver peak against gradstream's
    and PyTorch's; the `.grad` bytes alive at once with the optimizer in backward."""
    if not on_gpu(result):
        return []
    ok = {(r["workload"], r["system"]): r for r in result["records"] if r.get("status") == "ok"}
    ran = {r["workload"] for r in result["records"]}
    lines = []
    for w in dict.fromkeys(r["workload"] for r in result["records"]):
        torch = ok.get((w, "torch"))
        gs_names = [s for (w2, s) in ok if w2 == w and s.startswith("gradstream")]
        for name in gs_names:
            r = ok[(w, name)]
            peak = f"{w}: {name} peak {_mib(r.get('peak_bytes'))} MiB"
            ms = f"step {r['step_seconds'] * 1e3:.2f} ms"
            if torch:
                peak += f" vs torch {_mib(torch.get('peak_bytes'))} MiB "
                peak += _x(r.get("peak_bytes"), torch.get("peak_bytes"))
                ms += f" vs torch {torch['step_seconds'] * 1e3:.2f} ms "
                ms += _x(r["step_seconds"], torch["step_seconds"])
            bound = result["lower_bounds"][w]["total"]
            lines.append(
                f"{peak}; {_x(r.get('peak_bytes'), bound)} its lower bound "
                f"({bound / MIB:.1f} MiB); {ms}"
            )
        candle = ok.get((w, "candle"))
        if candle and candle.get("driver_peak_bytes") is not None:
            line = f"{w}: candle driver peak {_mib(candle['driver_peak_bytes'])} MiB"
            for name in [*gs_names, "torch"]:
                other = ok.get((w, name))
                if other and other.get("driver_peak_bytes") is not None:
                    line += (
                        f"; {name} {_mib(other['driver_peak_bytes'])} MiB "
                        f"(candle {_x(candle['driver_peak_bytes'], other['driver_peak_bytes'])})"
                    )
            lines.append(line)
        r = ok.get((w, "gradstream-in-backward"))
        grad = (r or {}).get("peak_by_category", {}).get("gradient")
        if grad is not None:
            largest, total = r.get("largest_param_bytes"), r.get("trained_param_bytes")
            lines.append(
                f"{w}: gradients alive at once with in_backward=True: {_mib(grad)} MiB "
                f"({_x(grad, largest)} the largest trained parameter, {_mib(largest)} MiB; "
                f"all trained parameters {_mib(total)} MiB)"
            )
    missing = [w for w in ("nerf", "mlp", "cnn", "lora") if w not in ran]
    if missing:
        lines.append(f"not run here: {', '.join(missing)}")
    return lines


def text_table(result: dict) -> str:
    head = [c for c, _ in columns(result)]
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
    cols = columns(result)
    head = [c for c, _ in cols]
    repeat = meta.get("repeat", 1)
    processes = f", each configuration in {repeat} processes" if repeat > 1 else ""
    where = ""
    if on_gpu(result):
        gpu = meta.get("gpu", "a GPU")
        driver = f", driver {meta['driver_version']}" if meta.get("driver_version") else ""
        where = f" On {meta['device']} ({gpu}{driver})."
    lines = [
        "# gradstream benchmark",
        "",
        f"`{meta['command']}` — {meta['date']}, {meta['threads']} threads, "
        f"{steps} measured steps after one warm-up step, preset `{meta['preset']}`{processes}."
        + where,
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
    heads = headlines(result)
    if heads:
        lines += ["", "## Headline figures", ""] + [f"- {h}" for h in heads]
    lines += ["", "## Systems", ""]
    for name in dict.fromkeys(r["system"] for r in result["records"]):
        lines.append(f"- **{name}**: {BY_NAME[name].note}.")
    lines += ["", "## Columns", ""]
    lines += [f"- **{c}**: {meaning}." for c, meaning in cols]
    lines += ["", "## Memory", "", meta["memory_method"] + "."]
    if meta.get("timing_method"):
        lines += ["", "## Time", "", meta["timing_method"] + "."]
    lines += ["", "## Lower bounds", ""]
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
    if on_gpu(result):
        _gpu_charts(result, ok, names, out, plt)
        return []
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


def _gpu_charts(result: dict, ok: list[dict], names: list[str], out: Path, plt) -> None:
    """peak_memory.png (the library's counter and the driver's view side by side, the lower
    bound as a line) and step_time.png (milliseconds) of a GPU run."""
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        recs = [r for r in ok if r["workload"] == w]
        xs = range(len(recs))
        for shift, key, label, color in (
            (-0.2, "peak_bytes", "library counter", "tab:blue"),
            (0.2, "driver_peak_bytes", "driver (NVML)", "tab:orange"),
        ):
            values = [(r.get(key) or 0) / MIB for r in recs]
            bars = ax.bar([x + shift for x in xs], values, 0.4, label=label, color=color)
            ax.bar_label(bars, fmt="%.0f", fontsize=7)
        ax.axhline(
            result["lower_bounds"][w]["total"] / MIB,
            color="tab:red",
            linestyle="--",
            label="lower bound",
        )
        ax.set_xticks(list(xs), [r["system"] for r in recs])
        ax.set_title(w)
        ax.set_ylabel("peak GPU memory above idle (MiB)")
        ax.tick_params(axis="x", rotation=30, labelsize=8)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "peak_memory.png", dpi=120)
    plt.close(fig)
    fig, axes = plt.subplots(1, len(names), figsize=(5 * len(names), 4), squeeze=False)
    for ax, w in zip(axes[0], names, strict=True):
        recs = [r for r in ok if r["workload"] == w]
        bars = ax.bar(
            [r["system"] for r in recs], [r["step_seconds"] * 1e3 for r in recs], color="tab:blue"
        )
        ax.bar_label(bars, fmt="%.3g", fontsize=8)
        ax.set_title(w)
        ax.set_ylabel("median step time, synchronised (ms)")
        ax.tick_params(axis="x", rotation=30, labelsize=8)
    fig.tight_layout()
    fig.savefig(out / "step_time.png", dpi=120)
    plt.close(fig)


def write(result: dict, out: Path) -> list[str]:
    """Write results.json, results.md and the charts into `out`; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    result.setdefault("notes", []).extend(charts(result, out))
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(markdown(result))
    return sorted(p.name for p in out.iterdir() if p.suffix in (".json", ".md", ".png"))
