"""gradstream.bench's `--device cuda` path on a machine without a GPU: the NVML sampler's
fallbacks, the harness's plumbing with stand-in children, the max-batch search against
stand-in "fits" functions, the failure of the systems' setup without CUDA, and
tools/gpu-check.sh's budget with a stand-in Python. (tests/test_bench.py has the fail-fast of
the command line, the GPU tables and the driver figures from a real child's phases.)
"""

import json
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gradstream.bench import child, gpu, max_batch, report, runner
from gradstream.bench.__main__ import check_device, config, parse_args

MIB = 2**20
ROOT = Path(__file__).resolve().parents[1]


def _no_gpu() -> bool:
    import gradstream

    return not gradstream.cuda.is_available()


needs_no_gpu = pytest.mark.skipif(not _no_gpu(), reason="checks the behaviour without a GPU")


# ---------------------------------------------------------------- the NVML sampler


class _NVMLError(Exception):
    pass


class _NVMLError_LibraryNotFound(_NVMLError):  # noqa: N801 (pynvml's name)
    pass


def _fake_pynvml(init_error=None, used=3 * 2**30):
    """A stand-in `pynvml` that records which device was asked for."""
    calls = []

    def init():
        calls.append(("init",))
        if init_error is not None:
            raise init_error

    mod = types.ModuleType("pynvml")
    mod.calls = calls
    mod.nvmlInit = init
    mod.nvmlDeviceGetHandleByIndex = lambda i: calls.append(("index", i)) or f"h{i}"
    mod.nvmlDeviceGetHandleByUUID = lambda u: calls.append(("uuid", u)) or f"h{u}"
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=used, total=80 * 2**30)
    mod.nvmlDeviceGetName = lambda h: b"Stand-in GPU"
    mod.nvmlSystemGetDriverVersion = lambda: "580.1"
    return mod


def test_sampler_without_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # `import pynvml` raises ImportError
    sampler, why = gpu.Sampler.open()
    assert sampler is None
    assert why == "pynvml is not installed (pip install nvidia-ml-py)"


def test_sampler_without_libnvidia_ml(monkeypatch):
    fake = _fake_pynvml(init_error=_NVMLError_LibraryNotFound("NVML Shared Library Not Found"))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    sampler, why = gpu.Sampler.open()
    assert sampler is None
    assert why == "NVML: _NVMLError_LibraryNotFound: NVML Shared Library Not Found"
    assert fake.calls == [("init",)]  # no device was asked for


@pytest.mark.parametrize(
    ("visible", "call"),
    [
        (None, ("index", 0)),
        ("", ("index", 0)),
        ("3,1", ("index", 3)),
        ("GPU-1b2c,GPU-99", ("uuid", "GPU-1b2c")),
        ("MIG-77", ("uuid", "MIG-77")),
    ],
)
def test_sampler_opens_cudas_device_0(monkeypatch, visible, call):
    fake = _fake_pynvml(used=5 * MIB)
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    sampler, why = gpu.Sampler.open()
    assert why is None and sampler is not None
    assert fake.calls[:2] == [("init",), call]
    assert sampler.used() == 5 * MIB
    meta = sampler.describe()
    assert meta["gpu"] == "Stand-in GPU" and meta["driver_version"] == "580.1"
    assert meta["gpu_memory_bytes"] == 80 * 2**30


def test_sampler_keeps_its_samples_when_the_device_goes_away():
    answers = iter([1, 2, 3])

    def info(handle):
        return types.SimpleNamespace(used=next(answers))  # StopIteration after three

    sampler = gpu.Sampler(types.SimpleNamespace(nvmlDeviceGetMemoryInfo=info), None, 0.001)
    sampler.start()
    time.sleep(0.1)
    assert [u for _, u in sampler.stop()] == [1, 2, 3]


def test_driver_figures_with_no_quiet_samples_take_the_last_before_baseline():
    # Samples at 0 and 1 s; the baseline mark at 2 s: nothing in the quiet span before it.
    samples = [(0.0, 10), (1.0, 20), (2.5, 70), (3.5, 90)]
    fig = gpu.driver_figures(samples, {"baseline": 2.0, "measure": 2.2, "done": 3.0})
    assert fig["driver_baseline_bytes"] == 20 and fig["driver_peak_bytes"] == 50
    assert fig["driver_samples"] == 1
    fig = gpu.driver_figures(samples, {"baseline": 2.0, "measure": 2.6, "done": 3.0})
    assert "too few samples (4)" in fig["driver_reason"]


# ---------------------------------------------------------------- the harness on a "GPU"


def _gpu_cfg(**kw):
    cfg = dict(
        workloads=["mlp"],
        systems=["torch", "gradstream-in-backward"],
        steps=2,
        threads=1,
        preset="tiny",
        device="cuda",
        plain_progress=True,
    )
    cfg.update(kw)
    return runner.Config(**cfg)


def _stand_in_child(peak=None):
    """A stand-in for `run_one`: each system's figures as a GPU child reports them."""
    calls = []

    def run_one(cmd, env, timeout, sampler=None):
        spec = json.loads(cmd[-1])
        calls.append({"spec": spec, "timeout": timeout, "sampler": sampler})
        rec = {
            "status": "ok",
            "device": "cuda",
            "peak_bytes": peak or (200 if spec["variant"] == "standard" else 100) * MIB,
            "step_seconds": 0.004,
            "step_times": [0.004, 0.005],
            "losses": [1.0, 0.9, 0.8],
        }
        if sampler is not None:
            rec["driver_peak_bytes"] = rec["peak_bytes"] + 64 * MIB
        return rec

    return run_one, calls


def test_gpu_run_without_nvml_still_measures_and_says_why(monkeypatch):
    run_one, calls = _stand_in_child()
    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: None)
    monkeypatch.setattr(gpu.Sampler, "open", classmethod(lambda cls: (None, "pynvml is absent")))
    result = runner.run(_gpu_cfg(), log=lambda s: None)
    assert result["notes"] == ["driver memory not measured: pynvml is absent"]
    assert [c["sampler"] for c in calls] == [None, None]
    assert all(c["spec"]["device"] == "cuda" and c["spec"]["steps"] == 2 for c in calls)
    assert result["meta"]["device"] == "cuda" and "gpu" not in result["meta"]
    gs = next(r for r in result["records"] if r["system"] == "gradstream-in-backward")
    assert "driver_peak_bytes" not in gs and gs["ratio_to_torch"]["peak"] == 0.5
    assert "driver_peak" not in gs["ratio_to_torch"]
    head = [c for c, _ in report.CUDA_COLUMNS]
    row = dict(zip(head, report.rows(result)[1], strict=True))
    assert row["peak MiB"] == "100.0" and row["driver MiB"] == "" and row["step ms"] == "4.00"


def test_gpu_run_with_a_sampler_hands_it_to_every_child(monkeypatch):
    run_one, calls = _stand_in_child()
    fake = _fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: None)
    result = runner.run(_gpu_cfg(), log=lambda s: None)
    assert "notes" not in result
    assert all(isinstance(c["sampler"], gpu.Sampler) for c in calls) and len(calls) == 2
    assert result["meta"]["gpu"] == "Stand-in GPU"
    gs = next(r for r in result["records"] if r["system"] == "gradstream-in-backward")
    assert gs["ratio_to_torch"]["driver_peak"] == pytest.approx(164 / 264)


def test_gpu_run_skips_torch_where_pytorch_sees_no_gpu(monkeypatch):
    run_one, calls = _stand_in_child()
    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(gpu.Sampler, "open", classmethod(lambda cls: (None, "no NVML")))
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: "this PyTorch sees no CUDA device")
    result = runner.run(_gpu_cfg(), log=lambda s: None)
    torch_rec = next(r for r in result["records"] if r["system"] == "torch")
    assert torch_rec["status"] == "skipped"
    assert torch_rec["reason"] == "this PyTorch sees no CUDA device"
    assert [c["spec"]["variant"] for c in calls] == ["in_backward"]


def test_time_limit_skips_what_is_left(monkeypatch):
    """Configurations are not started within a second of --time-limit, and the one that runs
    gets the time that is left as its timeout."""
    calls = []

    def run_one(cmd, env, timeout, sampler=None):
        calls.append(timeout)
        time.sleep(1.2)
        return {"status": "ok", "peak_bytes": MIB, "step_seconds": 0.01, "losses": [1.0]}

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(gpu.Sampler, "open", classmethod(lambda cls: (None, "no NVML")))
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: None)
    cfg = _gpu_cfg(time_limit=2.0, systems=["torch", "gradstream", "gradstream-in-backward"])
    result = runner.run(cfg, log=lambda s: None)
    status = [(r["system"], r["status"]) for r in result["records"]]
    assert status == [
        ("torch", "ok"),
        ("gradstream", "skipped"),
        ("gradstream-in-backward", "skipped"),
    ]
    assert result["records"][1]["reason"] == "--time-limit 2 s"
    assert len(calls) == 1 and 1.0 < calls[0] <= 2.0


def test_candle_on_a_gpu_needs_a_built_program(tmp_path, monkeypatch):
    from gradstream.bench.systems import BY_NAME

    monkeypatch.delenv("GRADSTREAM_CANDLE_BIN", raising=False)
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: None)
    systems = [BY_NAME["candle"]]
    cfg = _gpu_cfg()
    reasons = runner.prepare(cfg, systems, log=lambda s: None)
    assert "tools/build-candle-cuda.sh" in reasons["candle"] and cfg.candle_exe is None
    cfg = _gpu_cfg(candle_bin=tmp_path / "missing")
    reasons = runner.prepare(cfg, systems, log=lambda s: None)
    assert reasons["candle"] == f"--candle-bin {tmp_path / 'missing'}: no such file"
    exe = tmp_path / "candle-bench"
    exe.write_text("")
    monkeypatch.setenv("GRADSTREAM_CANDLE_BIN", str(exe))
    cfg = _gpu_cfg()
    reasons = runner.prepare(cfg, systems, log=lambda s: None)
    assert reasons["candle"] is None and cfg.candle_exe == exe


# ---------------------------------------------------------------- the systems without CUDA


@needs_no_gpu
def test_gradstream_setup_on_cuda_says_there_is_none():
    from gradstream.bench.systems import Unsupported, gradstream_impl

    with pytest.raises(Unsupported, match="gradstream sees no CUDA device"):
        gradstream_impl.setup(1, "cuda")


def test_torch_setup_on_cuda_says_there_is_none():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this PyTorch sees a GPU")
    from gradstream.bench.systems import Unsupported, torch_impl

    with pytest.raises(Unsupported, match="sees no CUDA device"):
        torch_impl.setup(1, "cuda")


@needs_no_gpu
def test_a_cuda_child_without_a_gpu_is_a_skipped_row(tmp_path):
    """The child's own answer where the harness's check was passed by (its skip, not a
    traceback)."""
    from gradstream.bench import tensorfile, workloads

    wl = workloads.make("mlp", "tiny")
    data = tmp_path / "mlp.safetensors"
    tensorfile.save(data, wl.tensors(0))
    cmd = runner.child_command(_gpu_cfg(), runner.BY_NAME["gradstream"], wl, data, 1)
    rec = runner.run_one(cmd, runner.child_env(1), 120)
    assert rec["status"] == "skipped", rec
    assert "gradstream sees no CUDA device" in rec["reason"]


def test_child_applies_the_cap_by_its_rule(monkeypatch):
    calls = []
    impl = types.SimpleNamespace(cap_fraction=lambda dev, n: calls.append(("fraction", dev, n)))
    monkeypatch.setattr(gpu, "leave_free", lambda n: calls.append(("ballast", n)))
    child.apply_cap(impl, "cuda", {"rule": "fraction", "bytes": 8 * 2**30})
    child.apply_cap(impl, "cuda", {"rule": "ballast", "bytes": 2**30})
    assert calls == [("fraction", "cuda", 8 * 2**30), ("ballast", 2**30)]
    with pytest.raises(ValueError, match="unknown cap rule 'nope'"):
        child.apply_cap(impl, "cuda", {"rule": "nope", "bytes": 1})


# ---------------------------------------------------------------- arguments


def test_device_arguments():
    with pytest.raises(SystemExit) as e:
        parse_args(["--device", "tpu"])
    assert e.value.code == 2  # argparse's own error
    with pytest.raises(SystemExit, match="--world runs on the CPU only"):
        check_device(parse_args(["--device", "cuda", "--world", "2"]))
    args = parse_args(["--device", "cuda", "--time-limit", "90", "--candle-bin", "/x/cb"])
    cfg = config(args)
    assert cfg.time_limit == 90.0 and cfg.candle_bin == Path("/x/cb")
    assert config(parse_args(["--device", "cuda", "--steps", "3"])).steps == 3
    # --workloads given: kept on a GPU, --quick or not.
    cfg = config(parse_args(["--device", "cuda", "--quick", "--workloads", "nerf"]))
    assert cfg.workloads == ["nerf"] and cfg.only == {"nerf": max_batch_quick_nerf()}
    assert parse_args([]).cap_rule == "ballast"
    assert parse_args(["--cap-rule", "fraction"]).cap_rule == "fraction"


def max_batch_quick_nerf():
    from gradstream.bench.__main__ import CUDA_QUICK

    return CUDA_QUICK["nerf"]


@needs_no_gpu
def test_check_device_without_a_gpu_names_the_build():
    with pytest.raises(SystemExit) as e:
        check_device(parse_args(["--device", "cuda"]))
    assert str(e.value).startswith("--device cuda: no CUDA device here")
    assert "this gradstream is the CPU build" in str(e.value)
    check_device(parse_args([]))  # the CPU run passes


# ---------------------------------------------------------------- the max-batch search


@settings(max_examples=300, deadline=None)
@given(
    limit=st.integers(0, max_batch.MAX_RAYS * 2),
    start=st.sampled_from([16, 256, 1024, 4096, 65536]),
    rtol=st.sampled_from([1 / 8, 1 / 64]),
)
def test_search_finds_the_threshold_of_a_monotone_system(limit, start, rtol):
    tried = []

    def fits(n):
        tried.append(n)
        return n <= limit

    ok, bad, cut = max_batch.search(fits, start, rtol)
    assert not cut
    assert len(tried) == len(set(tried)) <= 40  # no probe twice, a few dozen at most
    assert all(n % max_batch.MIN_RAYS == 0 for n in tried)
    if limit < max_batch.MIN_RAYS:
        assert ok is None and bad == max_batch.MIN_RAYS
        return
    assert ok is not None and ok <= limit and ok in tried
    if ok >= max_batch.MAX_RAYS:
        assert bad is None
        return
    assert bad > limit and bad in tried
    # Close enough: within rtol of the largest that fit, or within two grains (a bisection's
    # midpoint is rounded down to the grain).
    assert bad - ok <= max(2 * max_batch.MIN_RAYS, int(ok * rtol))


def test_search_stops_when_told():
    tried = []
    budget = iter([False, False, True])
    ok, bad, cut = max_batch.search(
        lambda n: tried.append(n) or True, 1024, 1 / 64, out_of_time=lambda: next(budget)
    )
    assert cut and ok == 2048 and bad is None and tried == [1024, 2048]


def test_max_batch_stops_at_an_error_that_is_not_memory(tmp_path, monkeypatch):
    """A probe that fails for another reason (an op missing, a crash) ends that system's
    search at once, and is what the table says limited it."""
    probes = []

    def run_one(cmd, env, timeout, sampler=None):
        spec = json.loads(cmd[-1])
        from gradstream.bench import tensorfile

        rays = tensorfile.load(spec["data"])["dists"].shape[0]
        probes.append((spec["variant"], rays, spec["cap"]))
        if spec["variant"] == "standard":  # torch: out of memory above 3000 rays
            if rays <= 3000:
                return {"status": "ok"}
            return {"status": "error", "reason": "OutOfMemoryError: CUDA out of memory."}
        if rays <= 2048:
            return {"status": "ok"}
        return {"status": "error", "reason": "RuntimeError: no kernel for scatter_add"}

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(runner, "unavailable_reason", lambda s, w=None: None)
    monkeypatch.setattr(gpu, "torch_cuda_reason", lambda: None)
    args = parse_args(
        ["--device", "cuda", "--max-batch", "8GiB", "--cap-rule", "fraction"]
        + ["--systems", "gradstream-in-backward,torch", "--set", "nerf.samples=4"]
        + ["--out", str(tmp_path)]
    )
    assert max_batch.main(config(args), args) == 0
    result = json.loads((tmp_path / "max_batch.json").read_text())
    gs, torch = result["records"]
    assert [p["rays"] for p in gs["probes"]] == [1024, 2048, 4096]
    assert gs["max_rays"] == 2048 and gs["first_failing"] == 4096 and not gs["cut_short"]
    assert gs["limited_by"] == "an error: RuntimeError: no kernel for scatter_add"
    assert "no kernel for scatter_add" in gs["stopped_by"]
    assert torch["max_rays"] <= 3000 < torch["first_failing"]
    assert torch["limited_by"] == "out of memory" and "stopped_by" not in torch
    assert {p[2]["rule"] for p in probes} == {"fraction"}
    assert all(p[2]["bytes"] == 8 * 2**30 for p in probes)
    assert result["meta"]["rtol"] == 1 / 64 and result["meta"]["cap_rule"] == "fraction"
    md = (tmp_path / "max_batch.md").read_text()
    assert "torch.cuda.set_per_process_memory_fraction at 8 GiB" in md
    assert "| gradstream-in-backward | 2048 |" in md


def test_max_batch_table_of_skipped_and_cut_short_systems():
    result = {
        "records": [
            {"system": "candle", "probes": [], "status": "skipped", "reason": "not built"},
            {
                "system": "torch",
                "probes": [{"rays": 1024, "status": "ok"}],
                "status": "ok",
                "max_rays": 1024,
                "max_points": 65536,
                "first_failing": None,
                "cut_short": True,
            },
        ],
    }
    lines = max_batch.table(result)
    assert lines[2] == "| candle | skipped: not built | | | | |"
    assert lines[3] == "| torch | 1024 | 65536 |  | 1 |  (cut short by --time-limit) |"


def test_ratios_are_gradstreams_over_the_others():
    records = [
        {"system": "gradstream-in-backward", "max_rays": 6000},
        {"system": "gradstream", "max_rays": 3000},
        {"system": "torch", "max_rays": 2000},
        {"system": "candle", "max_rays": None},
    ]
    got = {(x["system"], x["versus"]): x["ratio"] for x in max_batch.ratios(records)}
    assert got == {("gradstream-in-backward", "torch"): 3.0, ("gradstream", "torch"): 1.5}


@pytest.mark.parametrize(
    ("reason", "oom"),
    [
        ("OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", True),
        ('exit 101: DriverError(CUDA_ERROR_OUT_OF_MEMORY, "out of memory")', True),
        ("cublas error: CUBLAS_STATUS_ALLOC_FAILED", True),
        ("timed out after 300 s", False),
        ("RuntimeError: ballast: only 4 bytes free, under the cap of 8", False),
    ],
)
def test_what_counts_as_out_of_memory(reason, oom):
    assert max_batch._is_oom(reason) is oom


# ---------------------------------------------------------------- tools/gpu-check.sh


FAKE_PY = """#!/usr/bin/env bash
# A stand-in Python for tools/gpu-check.sh: logs its arguments, sleeps where told.
printf '%s\\n' "$*" >> "$FAKE_LOG"
case "$*" in
  "-m pip"*) exit 0 ;;
  "-") cat > /dev/null; echo "gradstream build: cuda" ;;
  *pytest*tests/test_cuda.py*) sleep "${FAKE_TEST_CUDA_S:-0}" ;;
  *pytest*) sleep "${FAKE_SUITE_S:-0}" ;;
esac
exit 0
"""


def _gpu_check(tmp_path, candle=False, **env):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "gradstream-0-cp312-cp312-linux_x86_64.whl").write_text("")
    if candle:
        (wheels / "candle-bench").write_text("")
        (wheels / "candle-bench").chmod(0o755)
    py = tmp_path / "python"
    py.write_text(FAKE_PY)
    py.chmod(0o755)
    log = tmp_path / "calls.log"
    run_env = dict(os.environ, PYTHON=str(py), FAKE_LOG=str(log), **env)
    proc = subprocess.run(
        ["bash", str(ROOT / "tools" / "gpu-check.sh"), str(wheels), str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=60,
        env=run_env,
        cwd=ROOT,
    )
    calls = log.read_text().splitlines()
    bench = [c for c in calls if "gradstream.bench" in c]
    return proc, calls, bench


def test_gpu_check_runs_the_benches_without_candle(tmp_path):
    proc, calls, bench = _gpu_check(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "== bench (limit 130s)" in proc.stdout
    assert "== bench_max_batch (limit 110s)" in proc.stdout
    assert len(bench) == 2 and not any("--candle-bin" in c for c in bench)
    assert "--device cuda --quick --time-limit 105 " in bench[0]
    assert "--max-batch 8GiB --quick --time-limit 90 " in bench[1]


def test_gpu_check_passes_the_carried_candle_program(tmp_path):
    proc, _, bench = _gpu_check(tmp_path, candle=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    exe = str(tmp_path / "wheels" / "candle-bench")
    assert all(c.endswith(f"--candle-bin {exe}") for c in bench) and len(bench) == 2


def test_gpu_check_keeps_within_its_budget(tmp_path):
    """With a budget of 102 s, the steps' limits shrink so that the later ones keep their
    reserve (the suite 200 s, the max-batch search 70 s), and a step left under 30 s is not
    run (and counted as failed)."""
    proc, calls, bench = _gpu_check(tmp_path, BUDGET="102")
    out = proc.stdout
    assert "== test_cuda: not run" in out and "== suite: not run" in out
    assert not any(c.startswith("-m pytest") for c in calls)
    limits = {
        line.split()[1]: int(line.split("limit ")[1].rstrip("s)"))
        for line in out.splitlines()
        if line.startswith("== bench")
    }
    assert 30 <= limits["bench"] <= 32 and 100 <= limits["bench_max_batch"] <= 102
    assert f"--time-limit {limits['bench'] - 25} " in bench[0]
    assert f"--time-limit {limits['bench_max_batch'] - 20} " in bench[1]
    assert proc.returncode == 2  # the two steps not run
    assert (tmp_path / "out" / "suite.log").read_text().startswith("== suite: not run")


def test_gpu_check_suite_gives_way_to_the_benches(tmp_path):
    proc, _, _ = _gpu_check(tmp_path, BUDGET="330")
    # test_cuda: min(90, 330 - 320) < 30, not run; the suite: min(300, 330 - 200) = 130 (less
    # the seconds gone); the benches their full limits.
    assert "== test_cuda: not run" in proc.stdout
    suite = next(x for x in proc.stdout.splitlines() if x.startswith("== suite"))
    assert 128 <= int(suite.split("limit ")[1].rstrip("s)")) <= 130
    assert "== bench (limit 130s)" in proc.stdout
