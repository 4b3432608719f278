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


NO_MATPLOTLIB = (
    "charts skipped: matplotlib is not installed (pip install 'gradstream[plot]', or '.[plot]' "
    "in the checkout; then `python -m gradstream.bench --plot RESULTS.json` draws them)"
)
# Systems drawn in a panel of their own, on their own scale: candle's figures are several
# times everyone else's and would flatten the differences between PyTorch and gradstream.
APART = ("candle",)


def system_colors() -> dict[str, str]:
    """One colour per system, the same in every chart: tab20's, in the order of SYSTEMS,
    PyTorch's in its blues and oranges, gradstream's in its greens and reds."""
    palette = {
        "torch": "#1f77b4",
        "torch-hook": "#aec7e8",
        "torch-checkpoint": "#17becf",
        "torch-autocast": "#9edae5",
        "candle": "#8c564b",
        "gradstream": "#2ca02c",
        "gradstream-in-backward": "#d62728",
        "gradstream-checkpoint": "#ff7f0e",
        "gradstream-autocast": "#98df8a",
    }
    spare = iter(["#9467bd", "#e377c2", "#bcbd22", "#7f7f7f", "#c5b0d5", "#f7b6d2"] * 4)
    return {name: palette.get(name) or next(spare) for name in BY_NAME}


def sig3(x: float) -> str:
    """A figure to about 3 significant digits, never in exponent form: 8.73, 74.1, 2100."""
    if x is None:
        return ""
    return f"{x:.0f}" if abs(x) >= 100 else f"{x:.3g}" if abs(x) >= 1e-3 else f"{x:.2e}"


def charts(result: dict, out: Path) -> list[str]:
    """Draw peak_memory.png and step_time.png into `out`; notes on what was not drawn."""
    return draw_charts(result, out)[1]


def draw_charts(result: dict, out: Path) -> tuple[list[str], list[str]]:
    """peak_memory.png and step_time.png: the files drawn, and notes on what was not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], [NO_MATPLOTLIB]
    ok = [r for r in result["records"] if r.get("status") == "ok"]
    if not ok:
        return [], ["charts skipped: no configuration ran"]
    gpu = on_gpu(result)
    memory = [("peak_bytes", MIB)]
    if gpu:
        memory.append(("driver_peak_bytes", MIB))
    figures = [
        (
            "peak_memory.png",
            memory,
            "peak GPU memory above idle (MiB)" if gpu else "peak RSS above idle (MiB)",
            result.get("lower_bounds", {}),
        ),
        (
            "step_time.png",
            [("step_seconds", 1e-3 if gpu else 1.0)],
            "median step time, synchronised (ms)" if gpu else "median step time (s)",
            {},
        ),
    ]
    for fname, metrics, label, bounds in figures:
        fig = _bars(plt, ok, metrics, label, bounds)
        fig.savefig(out / fname, dpi=100)
        plt.close(fig)
    return [f for f, *_ in figures], []


def _bars(plt, ok: list[dict], metrics: list[tuple[str, float]], label: str, bounds: dict):
    """One row per workload: horizontal bars, one per system in its colour, the figure
    printed at the end of each; the lower bound (where known) as a dashed line; the systems
    of APART in a narrow panel of their own on the right. With two metrics (a GPU run's
    counter and driver), the second is the hatched bar below the first."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    colors = system_colors()
    order = list(BY_NAME)
    workloads_ = list(dict.fromkeys(r["workload"] for r in ok))
    by_w = {
        w: sorted((r for r in ok if r["workload"] == w), key=lambda r: order.index(r["system"]))
        for w in workloads_
    }
    apart = any(r["system"] in APART for r in ok)
    heights = [
        max(1, sum(r["system"] not in APART for r in by_w[w])) * len(metrics) for w in workloads_
    ]
    # Inches: a bar row, a gap between workloads (a title, the axis' figures), the legend.
    axes_h = [0.28 * h + 0.25 for h in heights]
    shown = [s for s in order if any(r["system"] == s for r in ok)]
    handles = [Patch(color=colors[s], label=s) for s in shown]
    if any(bounds.get(w, {}).get("total") is not None for w in workloads_):
        handles.append(Line2D([], [], color="black", linestyle="--", label="lower bound"))
    if len(metrics) > 1:
        handles.append(Patch(facecolor="grey", label="library counter"))
        handles.append(
            Patch(facecolor="grey", hatch="///", edgecolor="white", label="driver (NVML)")
        )
    gap, top, bottom = 0.7, 0.45 + 0.2 * -(-len(handles) // 4), 0.55
    fig = plt.figure(figsize=(9, sum(axes_h) + gap * (len(axes_h) - 1) + top + bottom))
    grid = fig.add_gridspec(
        len(workloads_), 2 if apart else 1, height_ratios=axes_h,
        width_ratios=[4, 1] if apart else [1], wspace=0.1,
        hspace=gap / (sum(axes_h) / len(axes_h)),
        left=0.2, right=0.96, top=1 - top / fig.get_figheight(),
        bottom=bottom / fig.get_figheight(),
    )  # fmt: skip
    for i, w in enumerate(workloads_):
        main = [r for r in by_w[w] if r["system"] not in APART]
        side = [r for r in by_w[w] if r["system"] in APART]
        panels = [(fig.add_subplot(grid[i, 0]), main)]
        if apart:
            panels.append((fig.add_subplot(grid[i, 1]), side))
        bound = bounds.get(w, {}).get("total")
        rows = max(1, len(main))
        for j, (ax, recs) in enumerate(panels):
            if not recs:
                ax.axis("off")
                continue
            n = len(metrics)
            height = 0.8 / n
            end = 0.0
            first = (rows - len(recs)) / 2  # the panel apart: its bars level with the middle
            for k, (key, scale) in enumerate(metrics):
                ys = [first + y + (k - (n - 1) / 2) * height for y in range(len(recs))]
                values = [r.get(key) for r in recs]
                bars = ax.barh(
                    ys,
                    [0 if v is None else v / scale for v in values],
                    height,
                    color=[colors[r["system"]] for r in recs],
                    hatch="///" if k else None,
                    edgecolor="white" if k else None,
                    linewidth=0,
                )
                texts = ["n/a" if v is None else sig3(v / scale) for v in values]
                ax.bar_label(bars, texts, padding=3, fontsize=8)
                end = max([end] + [v / scale for v in values if v is not None])
            if bound is not None:
                ax.axvline(bound / MIB, color="black", linestyle="--", linewidth=1)
                end = max(end, bound / MIB)
            ax.set_xlim(0, (end * (1.5 if j else 1.15)) or 1)
            ax.set_ylim(rows - 0.5, -0.5)
            if j:  # the panel apart is named in its title
                ax.set_yticks([])
                title = f"{', '.join(r['system'] for r in recs)} (own scale)"
            else:
                ax.set_yticks(range(len(recs)), [r["system"] for r in recs], fontsize=8)
                title = w if bound is None else f"{w} (lower bound {sig3(bound / MIB)} MiB)"
            ax.xaxis.set_major_locator(MaxNLocator(3 if j else 6))
            ax.tick_params(axis="x", labelsize=8)
            ax.grid(axis="x", alpha=0.3)
            ax.set_axisbelow(True)
            ax.set_title(title, fontsize=9, loc="left")
        panels[0][0].set_xlabel(label if i == len(workloads_) - 1 else "", fontsize=8)
    fig.legend(handles=handles, loc="upper center", ncol=4, fontsize=8, frameon=False)
    return fig


def write(result: dict, out: Path) -> list[str]:
    """Write results.json, results.md and the charts into `out`; the files written."""
    out.mkdir(parents=True, exist_ok=True)
    result.setdefault("notes", []).extend(charts(result, out))
    (out / "results.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "results.md").write_text(markdown(result))
    return sorted(p.name for p in out.iterdir() if p.suffix in (".json", ".md", ".png"))
