"""`python -m gradstream.bench --world N`: the table and its ratios (the two-process runs
themselves are exercised by test_distributed.py; a benchmark run takes minutes)."""

from gradstream.bench import __main__ as cli
from gradstream.bench import distributed, workloads


def rank(peak, step, comm=None, exposed=None):
    r = {"status": "ok", "peak_bytes": peak, "step_seconds": step}
    if comm is not None:
        r.update(comm_seconds=comm, exposed_comm_seconds=exposed)
    return r


def test_summary_takes_the_worst_rank_and_the_hidden_communication():
    ranks = [rank(10, 0.2, 0.05, 0.01), rank(12, 0.1, 0.04, 0.02)]
    s = distributed.summary("gradstream-ddp", ranks)
    assert s["peak_bytes"] == 12 and s["step_seconds"] == 0.2
    assert abs(s["hidden_comm_seconds"] - 0.03) < 1e-12
    bad = distributed.summary("torch-ddp", [rank(1, 1), {"status": "timeout"}])
    assert bad["status"] == "timeout"


def test_table_gives_ratios_to_torch_ddp():
    rows = [
        distributed.summary("torch-ddp", [rank(100 * 2**20, 0.1)] * 2),
        distributed.summary("gradstream-ddp-in-backward", [rank(50 * 2**20, 0.11, 0.02, 0.0)] * 2),
        {"system": "gradstream-zero1", "status": "RuntimeError: x"},
    ]
    text = distributed.table(rows, 2, workloads.make("mlp", "tiny"))
    line = next(ln for ln in text.splitlines() if ln.startswith("gradstream-ddp-in-backward"))
    assert line.split()[1:5] == ["50.0", "0.50", "110.0", "1.10"]
    assert "RuntimeError: x" in text


def test_cli_parses_world():
    assert cli.parse_args(["--world", "2"]).world == 2
    assert cli.parse_args([]).world == 1
