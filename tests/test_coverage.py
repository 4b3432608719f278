"""`python -m gradstream.coverage`: PyTorch's public names per namespace, and how many
gradstream has."""

import subprocess
import sys

import pytest

import gradstream as gs
from gradstream import coverage


def test_counts_are_consistent(torch_ref):
    rows = coverage.coverage(torch_ref)
    assert [r.namespace for r in rows] == coverage.NAMESPACES
    for row in rows:
        names = coverage.public_names(torch_ref, row.namespace)
        assert row.total == len(names) > 0
        assert sorted(row.present + row.missing) == names
        ours = gs.Tensor if row.namespace == "Tensor" else coverage._resolve(gs, row.namespace)
        assert all(hasattr(ours, n) for n in row.present), row.namespace
        assert not any(hasattr(ours, n) for n in row.missing), row.namespace
    by_name = {r.namespace: r for r in rows}
    assert len(by_name["utils.data"].present) > 0
    assert "DataLoader" in by_name["utils.data"].present
    assert set(by_name["optim"].present) >= {"SGD", "Adam", "AdamW"}


def test_public_names_follow_all_or_leave_out_imports(torch_ref):
    assert coverage.public_names(torch_ref, "optim") == sorted(torch_ref.optim.__all__)
    functional = coverage.public_names(torch_ref, "nn.functional")
    assert "relu" in functional and "math" not in functional and "Optional" not in functional
    assert "functional" in coverage.public_names(torch_ref, "nn")  # a submodule stays


def test_table_and_missing(torch_ref, capsys):
    assert coverage.main([]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0] == "| namespace | gradstream has |"
    rows = coverage.coverage(torch_ref)
    assert table[2:] == [f"| {r.namespace} | {r.summary()} |" for r in rows]
    assert coverage.main(["--missing", "utils.data"]) == 0
    listed = capsys.readouterr().out.splitlines()[1:]
    assert listed == next(r for r in rows if r.namespace == "utils.data").missing


def test_without_torch_it_says_so_and_fails(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)
    assert coverage.main([]) == 1
    assert "PyTorch" in capsys.readouterr().err


def test_runs_as_a_module(torch_ref):
    done = subprocess.run(
        [sys.executable, "-m", "gradstream.coverage", "--missing", "linalg"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("linalg: ")


def test_unknown_namespace_is_a_usage_error():
    with pytest.raises(SystemExit):
        coverage.main(["--missing", "nope"])
