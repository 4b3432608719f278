"""`python -m gradstream.alias` reaches into the processes a script starts: DataLoader
workers, `torch.multiprocessing.spawn` ranks and `multiprocessing` pools started with spawn
or forkserver bind gradstream where the script says `import torch`.

The scripts under tests/spawn_scripts/ are plain PyTorch; each runs in a subprocess with a
timeout (a hang fails the test instead of stopping the suite), under the alias and, where
the comparison says something, under PyTorch itself.
"""

from __future__ import annotations

import json
import multiprocessing.spawn
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gradstream as gs
import gradstream.alias as alias
import gradstream.multiprocessing as gmp

pytestmark = pytest.mark.cpu_backend(
    "runs programs in child processes, where an op with no kernel on the path cannot be "
    "told from a bug"
)

SCRIPTS = Path(__file__).parent / "spawn_scripts"


def _run(*args: str, aliased: bool, cwd: Path = SCRIPTS):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gs.__file__).parent.parent), env.get("PYTHONPATH", "")]
    )
    command = [sys.executable, *(["-m", "gradstream.alias"] if aliased else []), *args]
    try:
        out = subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=180)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} hung")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def torch_loader():
    pytest.importorskip("torch")
    return _run("loader.py", "spawn", aliased=False)


@pytest.fixture(scope="module")
def torch_ranks():
    pytest.importorskip("torch")
    # Its failures only: what a successful rank sees is asserted without PyTorch.
    return _run("ranks.py", "raise", "exit", aliased=False)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_dataloader_workers_see_gradstream(start_method, torch_loader):
    got = _run("loader.py", start_method, aliased=True)
    assert got["main"] == {"torch": "gradstream", "tensor_module": "gradstream"}
    for batch in got["batches"]:
        assert batch["torch"] == ["gradstream"]
        assert batch["tensor_module"] == ["gradstream"]
    assert torch_loader["main"] == {"torch": "torch", "tensor_module": "torch"}
    strip = [{k: b[k] for k in ("x", "worker")} for b in got["batches"]]
    assert strip == [{k: b[k] for k in ("x", "worker")} for b in torch_loader["batches"]]


def _without_library_frame(msg: str) -> list[str]:
    """The message less the frame of the library's own wrapper (its file and line differ)."""
    lines = msg.splitlines()
    i = lines.index("Traceback (most recent call last):")
    return lines[: i + 1] + lines[i + 3 :]


def test_multiprocessing_spawn_ranks_and_failures_as_torch(torch_ranks):
    got = _run("ranks.py", "ok", "raise", "exit", aliased=True)
    assert got["main"] == ["gradstream", "gradstream.multiprocessing"]
    assert torch_ranks["main"] == ["torch", "torch.multiprocessing"]
    # rank, what `torch` and its tensor and multiprocessing are there, sum(arange(4) * (rank+1))
    assert got["ranks"] == [
        [rank, "gradstream", "gradstream", "gradstream.multiprocessing", 6.0 * (rank + 1)]
        for rank in range(2)
    ]
    assert got["ok"] == {"returned": None}
    assert got["exit"] == torch_ranks["exit"]
    raised, expected = got["raise"], torch_ranks["raise"]
    assert _without_library_frame(raised.pop("msg")) == _without_library_frame(expected.pop("msg"))
    assert raised == expected


def test_spawned_pool_task_imports_gradstream():
    got = _run("pool.py", aliased=True)
    assert got == [[i, "gradstream", "gradstream", [float(i * i)] * 2] for i in range(4)]


def test_module_run_with_dash_m(tmp_path):
    # `python -m gradstream.alias -m pkg.mod`: the child imports the main module by name.
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "pool.py").write_text((SCRIPTS / "pool.py").read_text())
    got = _run("-m", "pkg.pool", aliased=True, cwd=tmp_path)
    assert [t[1:3] for t in got] == [["gradstream", "gradstream"]] * 4


# ---------------------------------------------------------------- in this process


def test_preparation_data_carries_the_alias_only_while_installed():
    stdlib = multiprocessing.spawn.get_preparation_data
    assert "gradstream.alias" not in stdlib("x")
    with alias.torch_alias():
        with alias.torch_alias():
            assert "gradstream.alias" in multiprocessing.spawn.get_preparation_data("x")
        assert "gradstream.alias" in multiprocessing.spawn.get_preparation_data("x")
    assert multiprocessing.spawn.get_preparation_data is stdlib
    assert "gradstream.alias" not in stdlib("x")


def test_forkserver_started_under_the_alias_does_not_preload_main(monkeypatch):
    # CPython preloads `__main__` into the forkserver from 3.13.8 / 3.14 on (before, the
    # preload was dead code); what the server is told to preload is what matters here.
    forkserver = pytest.importorskip("multiprocessing.forkserver")
    seen = []
    monkeypatch.setattr(
        forkserver.ForkServer, "ensure_running", lambda s: seen.append(list(s._preload_modules))
    )
    server = forkserver.ForkServer()
    server.set_forkserver_preload(["__main__", "json"])
    with alias.torch_alias():
        server.ensure_running()
    server.ensure_running()
    assert seen == [["gradstream._alias_child", "json"], ["__main__", "json"]]
    server.set_forkserver_preload(["json"])
    with alias.torch_alias():
        server.ensure_running()
    assert seen[-1] == ["json"]


def test_multiprocessing_has_torchs_names(torch_ref):
    import torch.multiprocessing as tmp

    names = set(tmp.__all__) | {
        "spawn",
        "start_processes",
        "ProcessContext",
        "ProcessRaisedException",
        "ProcessExitedException",
    }
    assert sorted(n for n in names if not hasattr(gmp, n)) == []
    assert gs.multiprocessing is gmp
    assert gmp.get_all_sharing_strategies() == tmp.get_all_sharing_strategies()
    assert gmp.get_sharing_strategy() == tmp.get_sharing_strategy()


def test_bad_sharing_strategy_raises_like_torch(torch_ref):
    import torch.multiprocessing as tmp

    with pytest.raises(AssertionError) as expected:
        tmp.set_sharing_strategy("cuda_ipc")
    with pytest.raises(AssertionError) as got:
        gmp.set_sharing_strategy("cuda_ipc")
    assert str(got.value) == str(expected.value)


def test_start_processes_without_join_as_torch(torch_ref):
    # fn(i) = os._exit(i): process 0 exits cleanly, process 1 with code 1.
    import torch.multiprocessing as tmp

    def outcome(module):
        context = module.start_processes(os._exit, nprocs=2, join=False)
        assert isinstance(context, module.ProcessContext)
        assert len(set(context.pids())) == 2
        try:
            while not context.join(timeout=60):
                pass
        except module.ProcessExitedException as e:
            return type(e).__name__, str(e), e.error_index, e.exit_code, e.signal_name
        return None

    assert (
        outcome(gmp)
        == outcome(tmp)
        == (
            "ProcessExitedException",
            "process 1 terminated with exit code 1",
            1,
            1,
            None,
        )
    )
