"""gradstream.bench's charts: `--plot` redraws them from a results file without running
anything; one colour per system, candle in a panel of its own, the lower bound as a line."""

import json

import pytest

from gradstream.bench import __main__ as bench_main
from gradstream.bench import replot, report, runner

MIB = 2**20


def _result() -> dict:
    """A results.json as the main run writes it, at two workloads, candle included."""

    def rec(w, s, peak_mib, seconds):
        peak = peak_mib * MIB
        figures = {"peak_bytes": peak, "step_seconds": seconds, "loss": 1.0, "final_loss": 0.5}
        return {"workload": w, "system": s, "status": "ok", "losses": [1.0, 0.5], **figures}

    records = [
        rec("mlp", "torch", 421.8, 0.146),
        rec("mlp", "candle", 622.9, 1.256),
        rec("mlp", "gradstream", 390.3, 0.0781),
        rec("small", "torch", 8.73, 0.00238),
        rec("small", "gradstream-in-backward", 7.41, 0.002),
        {"workload": "small", "system": "candle", "status": "skipped", "reason": "not built"},
    ]
    bounds = {"mlp": 308.3 * MIB, "small": 3.44 * MIB}
    return {
        "meta": {"command": "python -m gradstream.bench", "date": "now", "threads": 2},
        "lower_bounds": {w: {"total": b, "how": "sum"} for w, b in bounds.items()},
        "records": records,
    }


def _no_run(*args, **kwargs):
    raise AssertionError("--plot ran a configuration")


def test_plot_redraws_every_chart_from_results_json(tmp_path, monkeypatch, capsys):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(runner, "run", _no_run)
    monkeypatch.setattr(runner, "run_one", _no_run)
    results = tmp_path / "run" / "results.json"
    results.parent.mkdir()
    results.write_text(json.dumps(_result()))
    out = tmp_path / "charts"
    assert bench_main.main(["--plot", str(results), "--out", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["peak_memory.png", "step_time.png"]
    for png in out.iterdir():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "wrote peak_memory.png, step_time.png" in capsys.readouterr().out
    # Without --out: beside the results file.
    assert bench_main.main(["--plot", str(results)]) == 0
    assert (results.parent / "peak_memory.png").exists()
    assert (results.parent / "step_time.png").exists()


def test_plot_redraws_a_budget_sweep(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    monkeypatch.setattr(runner, "run_one", _no_run)
    rec = {"workload": "nerf", "status": "ok", "peak_bytes": 100 * MIB, "overhead": 1.0}
    sweep = {
        "meta": {"command": "x", "date": "now"},
        "findings": {},
        "records": [
            {**rec, "system": "gradstream"},
            {**rec, "system": "gradstream", "peak_bytes": 60 * MIB, "overhead": 1.3},
            {**rec, "system": "torch"},
        ],
    }
    path = tmp_path / "budget_sweep.json"
    path.write_text(json.dumps(sweep))
    assert bench_main.main(["--plot", str(path), "--out", str(tmp_path / "o")]) == 0
    assert (tmp_path / "o" / "budget_sweep.png").stat().st_size > 1000


def test_plot_rejects_a_file_that_is_not_a_results_file(tmp_path, capsys):
    path = tmp_path / "distributed.json"
    path.write_text(json.dumps([{"system": "ddp"}]))
    assert bench_main.main(["--plot", str(path)]) == 2
    assert "not a gradstream.bench results file" in capsys.readouterr().err
    assert bench_main.main(["--plot", str(tmp_path / "missing.json")]) == 2
    with pytest.raises(ValueError, match="not a gradstream.bench results file"):
        replot.kind({"records": []})


def test_figures_have_three_significant_digits():
    assert [report.sig3(x) for x in (8.73, 7.4, 421.8, 2099.9, 61.72, 0.002381, 0.0781)] == [
        "8.73", "7.4", "422", "2100", "61.7", "0.00238", "0.0781"
    ]  # fmt: skip


def test_one_colour_per_system():
    colors = report.system_colors()
    assert set(runner.all_systems()) <= set(colors)
    assert len(set(colors.values())) == len(colors)
    assert report.system_colors() == colors  # the same in every figure


def _bar_colors(ax) -> set[str]:
    from matplotlib.colors import to_hex

    return {to_hex(p.get_facecolor()) for p in ax.patches}


def test_candle_has_its_own_panel_and_the_bound_is_a_line():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    result = _result()
    ok = [r for r in result["records"] if r["status"] == "ok"]
    fig = report._bars(plt, ok, [("peak_bytes", MIB)], "MiB", result["lower_bounds"])
    try:
        colors = report.system_colors()
        panels = [ax for ax in fig.axes if ax.patches]
        candle = [ax for ax in panels if colors["candle"] in _bar_colors(ax)]
        assert len(candle) == 1 and _bar_colors(candle[0]) == {colors["candle"]}
        mlp = next(ax for ax in panels if ax.get_title(loc="left").startswith("mlp"))
        assert _bar_colors(mlp) == {colors["torch"], colors["gradstream"]}
        # candle's 623 MiB sets the scale of its own panel, not of PyTorch's and gradstream's
        assert mlp.get_xlim()[1] < 600 < candle[0].get_xlim()[1]
        bound = [line for line in mlp.lines if line.get_linestyle() == "--"]
        assert len(bound) == 1 and bound[0].get_xdata()[0] == pytest.approx(308.3)
        labels = [t.get_text() for ax in panels for t in ax.texts]
        assert {"422", "390", "623", "8.73", "7.41"} <= set(labels)
        legend = [t.get_text() for t in fig.legends[0].get_texts()]
        assert legend == ["torch", "candle", "gradstream", "gradstream-in-backward", "lower bound"]
    finally:
        plt.close(fig)
