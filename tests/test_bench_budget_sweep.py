"""`python -m gradstream.bench --budget-sweep` end to end on the tiny sizes."""

import json
import subprocess
import sys

import pytest


def test_budget_sweep_smoke(tmp_path, torch_ref):
    out = tmp_path / "out"
    cmd = [
        sys.executable, "-m", "gradstream.bench", "--budget-sweep",
        "--preset", "tiny", "--steps", "1", "--threads", "1",
        "--workloads", "nerf", "--out", str(out),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "budget_sweep.json").read_text())
    records = result["records"]
    mine = [r for r in records if r["system"] == "gradstream"]
    assert mine[0]["budget"] is None and mine[0]["status"] == "ok"
    budgeted = [r for r in mine[1:] if r["status"] == "ok"]
    assert budgeted, mine
    for r in budgeted:
        assert r["exact_peak_bytes"] <= r["budget"]
        assert r["same_losses"], r
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
