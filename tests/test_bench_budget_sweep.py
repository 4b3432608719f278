"""`python -m gradstream.bench --budget-sweep` end to end on the tiny sizes."""

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.cpu_backend(
    "runs programs in child processes, where an op with no kernel on the path cannot be "
    "told from a bug"
)


def run_sweep(out, workload):
    """The sweep's budget_sweep.json for `workload` at the tiny sizes, and gradstream's
    budgeted runs, each checked within its budget and with the unconstrained losses."""
    cmd = [
        sys.executable, "-m", "gradstream.bench", "--budget-sweep",
        "--preset", "tiny", "--steps", "1", "--threads", "1",
        "--workloads", workload, "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "budget_sweep.json").read_text())
    mine = [r for r in result["records"] if r["system"] == "gradstream"]
    budgeted = [r for r in mine[1:] if r["status"] == "ok"]
    assert budgeted, mine
    for r in budgeted:
        assert r["exact_peak_bytes"] <= r["budget"]
        assert r["same_losses"], r
    return result, budgeted


def test_budget_sweep_smoke(tmp_path, torch_ref):
    out = tmp_path / "out"
    result, _ = run_sweep(out, "nerf")
    records = result["records"]
    mine = [r for r in records if r["system"] == "gradstream"]
    assert mine[0]["budget"] is None and mine[0]["status"] == "ok"
    # The sweep stops at the first budget that cannot be met, or runs every fraction.
    last = mine[-1]
    assert last["status"] == "ok" or last["infeasible"], last
    seq = [r for r in records if r["system"] == "torch-checkpoint_sequential"]
    depth = result["meta"]["sizes"]["nerf"]["depth"]
    assert [r["segments"] for r in seq] == list(range(1, depth + 2))
    torch_loss = next(r for r in records if r["system"] == "torch")["losses"][0]
    for r in seq:
        assert r["status"] == "ok", r
        assert r["losses"][0] == pytest.approx(torch_loss, rel=1e-5)
    assert mine[0]["losses"][0] == pytest.approx(torch_loss, rel=1e-4)
    findings = result["findings"]["nerf"]
    assert len(findings["at_equal_peak"]) == depth + 1
    assert "| workload | system | budget MiB |" in (out / "budget_sweep.md").read_text()


def test_budget_sweep_lora_and_cnn_stages(tmp_path, torch_ref):
    """lora in the sweep: budgets bit-identical and within budget, PyTorch's
    checkpoint_sequential at every block count; cnn's stages are its modules."""
    from gradstream.bench import budget_sweep, workloads

    assert budget_sweep.stages(workloads.make("cnn", "tiny")) == len(
        workloads.make("cnn", "tiny").layers()
    )
    result, budgeted = run_sweep(tmp_path / "out", "lora")
    records = result["records"]
    for r in budgeted:
        assert r["budget_stats"]["evictions"] > 0
    seq = [r for r in records if r["system"] == "torch-checkpoint_sequential"]
    layers = workloads.make("lora", "tiny").layers
    assert [r["segments"] for r in seq] == list(range(1, layers + 1))
    torch_loss = next(r for r in records if r["system"] == "torch")["losses"][0]
    for r in seq:
        assert r["status"] == "ok", r
        assert r["losses"][0] == pytest.approx(torch_loss, rel=1e-5)


def _records(overhead_at_half):
    """lora's records: unconstrained, 60% and 50% (or, with None, 50% infeasible)."""
    mib = 2**20
    base = {"workload": "lora", "system": "gradstream", "status": "ok", "budget": None}
    recs = [
        {**base, "peak_bytes": 100 * mib, "exact_peak_bytes": 90 * mib, "step_seconds": 1.0},
        {**base, "budget": 54 * mib, "fraction": 0.6, "peak_bytes": 60 * mib,
         "exact_peak_bytes": 53 * mib, "step_seconds": 1.2},
    ]  # fmt: skip
    half = {**base, "budget": 45 * mib, "fraction": 0.5}
    if overhead_at_half is None:
        half.update(status="failed", reason="OutOfMemoryError: ...", infeasible=True)
    else:
        half.update(peak_bytes=50 * mib, exact_peak_bytes=44 * mib, step_seconds=overhead_at_half)
    return [*recs, half]


@pytest.mark.parametrize(
    ("overhead", "met", "cell"),
    [(1.5, True, "≤ 1.60×: met"), (3.2, False, "≤ 1.60×: missed"), (None, False, "infeasible")],
)
def test_target_in_findings_table_and_plot(tmp_path, overhead, met, cell):
    from gradstream.bench import budget_sweep

    records = _records(overhead)
    budget_sweep._relate(records)
    findings = budget_sweep._findings(records)
    target = findings["lora"]["target"]
    assert (target["fraction"], target["most_overhead"]) == budget_sweep.TARGETS["lora"]
    assert target["met"] is met
    assert target["overhead"] == (pytest.approx(overhead) if overhead else None)
    result = {"meta": {"command": "x", "date": "d"}, "records": records, "findings": findings}
    rows = [line for line in budget_sweep.table(result).splitlines() if "| 45.00 |" in line]
    assert len(rows) == 1 and cell in rows[0]
    pytest.importorskip("matplotlib")
    assert budget_sweep.plot(result, tmp_path / "sweep.png")
    assert (tmp_path / "sweep.png").stat().st_size > 0
