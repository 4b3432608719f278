"""`python -m gradstream.alias --memory-budget SIZE script.py`: a PyTorch script runs within
a memory budget, given in bytes or as a fraction of its first step's exact peak, and
computes what it computes without one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gradstream as gs

pytestmark = pytest.mark.cpu_backend("runs a program in a child process")

SCRIPT = """
import json
import torch

torch.manual_seed(0)
layers = [torch.nn.Linear(64, 256)]
for _ in range(6):
    layers += [torch.nn.Tanh(), torch.nn.Linear(256, 256)]
model = torch.nn.Sequential(*layers, torch.nn.ReLU(), torch.nn.Linear(256, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
x, y = torch.randn(2048, 64), torch.randn(2048, 1)
steps = []
for _ in range(3):
    torch.memory.reset_peak_memory_stats()
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    steps.append({"loss": loss.item(), "peak": torch.memory.max_memory_allocated(),
                  "budget": torch.memory.get_budget()})
print(json.dumps(steps))
"""


def _run(tmp_path: Path, *options: str) -> subprocess.CompletedProcess:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gs.__file__).parent.parent), env.get("PYTHONPATH", "")]
    )
    command = [sys.executable, "-m", "gradstream.alias", *options, str(script)]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


def _steps(out: subprocess.CompletedProcess) -> list[dict]:
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def unconstrained(tmp_path_factory):
    return _steps(_run(tmp_path_factory.mktemp("free")))


@pytest.mark.parametrize("option", [["--memory-budget", "60%"], ["--memory-budget=60%"]])
def test_percentage_of_the_first_steps_peak(tmp_path, unconstrained, option):
    steps = _steps(_run(tmp_path, *option))
    assert all(s["budget"] is None for s in unconstrained)
    budget = steps[0]["budget"]
    # Set when the first backward ended, from the peak up to then (the step's own).
    assert budget == int(0.6 * steps[0]["peak"])
    assert steps[0]["peak"] == unconstrained[0]["peak"]
    for s in steps[1:]:
        assert s["budget"] == budget
        assert s["peak"] <= budget
    assert [s["loss"] for s in steps] == [s["loss"] for s in unconstrained]


def test_bytes(tmp_path, unconstrained):
    size = int(0.6 * unconstrained[1]["peak"])
    steps = _steps(_run(tmp_path, "--memory-budget", str(size)))
    assert all(s["budget"] == size and s["peak"] <= size for s in steps)
    assert [s["loss"] for s in steps] == [s["loss"] for s in unconstrained]


@pytest.mark.parametrize("size", ["lots", "0%", "150%", "-3MiB"])
def test_bad_size_is_a_usage_error(tmp_path, size):
    out = _run(tmp_path, "--memory-budget", size)
    assert out.returncode == 2
    assert "--memory-budget" in out.stderr and size in out.stderr


def test_percentage_in_a_with_block_is_refused():
    with pytest.raises(ValueError, match="fraction of a step's peak"):
        with gs.memory.budget("60%"):
            pass
