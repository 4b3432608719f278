"""gradstream.bench: the harness end to end on tiny sizes, and its pieces.

The candle program is included only with GRADSTREAM_BENCH_CANDLE=1 (its first build compiles
candle-nn, minutes), or when cargo is here and the program is already built.
"""

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from gradstream.bench import report, runner, tensorfile, workloads
from gradstream.bench.systems import BY_NAME, candle

pytestmark = pytest.mark.cpu_backend(
    "runs programs in child processes, where an op with no kernel on the path cannot be "
    "told from a bug"
)

MIB = 2**20


def test_tensorfile_round_trip(tmp_path):
    tensors = {
        "w": np.arange(12, dtype=np.float32).reshape(3, 4),
        "x": np.linspace(-1, 1, 5).astype(np.float32),
        "s": np.array(2.5, dtype=np.float64),
    }
    tensorfile.save(tmp_path / "t.safetensors", tensors)
    raw = (tmp_path / "t.safetensors").read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0  # data stays aligned
    header = json.loads(raw[8 : 8 + n])
    assert header["w"]["dtype"] == "F32" and header["w"]["shape"] == [3, 4]
    begin, end = header["w"]["data_offsets"]
    assert end - begin == 48 and begin % 8 == 0
    back = tensorfile.load(tmp_path / "t.safetensors")
    assert set(back) == set(tensors)
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape
        np.testing.assert_array_equal(back[k], v)


def test_tensorfile_rejects_unsupported_dtype(tmp_path):
    with pytest.raises(TypeError, match="b.*complex64"):
        tensorfile.save(tmp_path / "t.safetensors", {"b": np.zeros(2, np.complex64)})


def test_workload_tensors_are_deterministic_and_shaped():
    wl = workloads.make("nerf", "tiny")
    a, b = wl.tensors(0), wl.tensors(0)
    for k in a:
        np.testing.assert_array_equal(a[k], b[k])
        assert a[k].dtype == np.float32
    assert a["pts"].shape == (wl.points, 3)
    assert a["dists"].shape == (wl.rays, wl.samples)
    assert (a["dists"] > 0).all()
    assert a[f"layers.{wl.skip + 1}.weight"].shape == (wl.width, wl.width + wl.features)
    assert sum(v.size for k, v in a.items() if "." in k) == wl.num_params()


def test_lower_bound_mlp_default():
    wl = workloads.make("mlp")
    b = wl.lower_bound()
    params = 6 * 2048 * 2049 * 4
    assert b["parameters"] == params
    assert b["optimizer_state"] == 2 * params
    assert b["saved_activations"] == 8 * 64 * 2048 * 4
    assert b["largest_gradient"] == 2048 * 2048 * 4
    assert b["total"] == sum(v for k, v in b.items() if k != "total")
    assert 300 * MIB < b["total"] < 320 * MIB


def test_lower_bound_nerf_default():
    wl = workloads.make("nerf")
    assert wl.features == 39 and wl.points == 65536
    b = wl.lower_bound()
    assert b["largest_gradient"] == 65536 * 256 * 4  # one hidden activation's gradient
    assert b["saved_activations"] > 8 * 65536 * 256 * 4


def test_workload_overrides_and_bad_sizes():
    wl = workloads.make("mlp", "quick", {"width": "128", "lr": "0.01"})
    assert (wl.width, wl.lr, wl.depth) == (128, 0.01, 6)
    with pytest.raises(ValueError, match="mlp has no size 'rays'"):
        workloads.make("mlp", "default", {"rays": "3"})
    with pytest.raises(ValueError, match="unknown workload 'resnet'"):
        workloads.make("resnet")
    assert workloads.make("lora", "tiny", {"alpha": "2"}).alpha == 2.0


def test_cnn_tensors_follow_the_layers():
    wl = workloads.make("cnn", "tiny")
    t = wl.tensors(0)
    assert t["x"].shape == (wl.batch, wl.in_channels, wl.size, wl.size)
    assert t["target"].dtype == np.int64 and t["target"].shape == (wl.batch, wl.size, wl.size)
    assert 0 <= t["target"].min() and t["target"].max() < wl.classes
    assert sum(v.size for k, v in t.items() if "." in k) == wl.num_params()
    assert t["enc1.conv0.weight"].shape == (2 * wl.width, wl.width, 3, 3)
    assert t["dec1.up.weight"].shape == (2 * wl.width, wl.width, 2, 2)  # (in, out, kh, kw)
    assert t["head.weight"].shape == (wl.classes, wl.width, 1, 1)
    kinds = [k for k, *_ in wl.layers()]
    assert kinds.count("pool") == kinds.count("up") == wl.stages
    assert wl.layers()[-1][4] == wl.size  # the decoder comes back to full resolution


def test_lower_bound_cnn_default():
    wl = workloads.make("cnn")
    b = wl.lower_bound()
    n, s = 8, 128
    assert b["parameters"] == wl.num_params() * 4 and b["optimizer_state"] == 2 * b["parameters"]
    # Counted by hand, per stage: what each layer keeps (bytes).
    saved = 0
    c_in, r = 3, s
    for c in (32, 64, 128):
        act = n * c * r * r
        saved += 4 * n * c_in * r * r  # conv0 input
        saved += 2 * 4 * (act + 2 * c)  # bn0, bn1 inputs + mean, inverse std
        saved += 4 * act  # conv1 input (the ReLU output)
        saved += act // 8 + act // 4  # ReLU mask before the pool, the pool's argmax bytes
        c_in, r = c, r // 2
    for c in (64, 32, 32):
        saved += 4 * n * c_in * r * r  # transposed conv input
        r *= 2
        saved += 4 * n * c * r * r + 4 * (n * c * r * r + 2 * c)  # conv input, bn input + 2C
        c_in = c
    saved += 4 * n * 32 * s * s + 4 * n * 8 * s * s + 8 * n * s * s  # head input, logits, target
    assert b["saved_activations"] == saved
    assert b["largest_gradient"] == 4 * n * 32 * s * s
    assert 180 * MIB < b["total"] < 200 * MIB


def test_lower_bound_lora_default():
    wl = workloads.make("lora")
    b = wl.lower_bound()
    base = 1024 * 768 + 512 * 768 + 12 * (12 * 768 * 768 + 13 * 768) + 2 * 768
    adapters = 12 * 4 * 2 * 8 * 768
    assert wl.num_base_params() == base and wl.num_adapter_params() == adapters
    assert b["parameters"] == 4 * (base + adapters)
    assert b["optimizer_state"] == 4 * 2 * adapters  # the frozen base has no optimizer state
    tokens = 2 * 512
    # per token and block: ln1 out + rstd, 3 rank-8 intermediates, q k v out + 12 logsumexp,
    # proj adapter intermediate, ln2 out + rstd, GELU input
    per_block = 769 + 24 + (4 * 768 + 12) + 8 + 769 + 4 * 768
    assert b["saved_activations"] == 4 * tokens * (12 * per_block + 769 + 1024) + 8 * 2 * 513
    assert b["largest_gradient"] == 4 * tokens * 4 * 768


def test_lora_adapters_all_get_gradients(torch_ref):
    from gradstream.bench.systems import lora_gpt

    wl = workloads.make("lora", "tiny")
    loss_fn, params = lora_gpt.build(torch_ref, wl, wl.tensors(0), torch_ref.from_numpy)
    assert len(params) == 2 * len(wl.adapter_names())
    loss = loss_fn()
    assert abs(loss.item() - np.log(wl.vocab)) < 0.5  # a random base model
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().max() > 0 for p in params)


def test_gradstream_rows_name_the_missing_layer(monkeypatch):
    import gradstream as gs
    from gradstream.bench.systems import gradstream_impl, unavailable_reason

    monkeypatch.delattr(gs.nn, "Conv2d", raising=False)
    monkeypatch.delattr(gs.nn.functional, "scaled_dot_product_attention", raising=False)
    assert (
        gradstream_impl.missing("standard", "cnn") == "needs gradstream.nn.Conv2d (not built yet)"
    )
    reason = unavailable_reason(BY_NAME["gradstream-in-backward"], "lora")
    assert reason == ("needs gradstream.nn.functional.scaled_dot_product_attention (not built yet)")
    assert unavailable_reason(BY_NAME["gradstream"], "mlp") is None


def test_cli_one_workload_and_its_default_steps():
    from gradstream.bench.__main__ import config, parse_args

    cfg = config(parse_args(["--workload", "lora"]))
    assert cfg.workloads == ["lora"] and cfg.steps is None
    assert runner.steps_for(cfg, workloads.make("lora")) == 3
    assert runner.steps_for(cfg, workloads.make("cnn")) == 5
    cfg = config(parse_args(["--workload", "lora", "--steps", "2"]))
    assert runner.steps_for(cfg, workloads.make("lora")) == 2
    assert candle.command(Path("cb"), workloads.make("lora"), Path("d"), 2, 2)[-6:] == [
        "--layers", "12", "--heads", "12", "--alpha", "16.0"
    ]  # fmt: skip


def _rec(system, loss, final, peak=100 * MIB, seconds=1.0):
    return {
        "workload": "mlp",
        "system": system,
        "status": "ok",
        "peak_bytes": peak,
        "step_seconds": seconds,
        "losses": [loss, final],
        "loss": loss,
        "final_loss": final,
    }


def test_compare_ratios_and_flags_a_loss_mismatch():
    records = [
        _rec("torch", 1.0, 0.5, peak=200 * MIB, seconds=2.0),
        _rec("torch-hook", 1.0, 0.5000001, peak=100 * MIB),
        _rec("gradstream", 1.0, 0.9),  # did less work: the final loss gives it away
        {"workload": "mlp", "system": "candle", "status": "skipped", "reason": "no cargo"},
    ]
    runner._compare(records)
    torch_, hook, gs_, cnd = records
    assert torch_["loss_ok"] and hook["loss_ok"]
    assert hook["ratio_to_torch"] == {"peak": 0.5, "time": 0.5}
    assert torch_["ratio_to_torch_hook"]["peak"] == 2.0
    assert gs_["loss_ok"] is False and "final_loss 0.9 vs torch 0.5" in gs_["loss_mismatch"]
    assert "loss_ok" not in cnd
    result = {
        "meta": {
            "command": "x",
            "date": "d",
            "threads": 1,
            "steps": 1,
            "preset": "tiny",
            "sizes": {"mlp": {}},
            "memory_method": "m",
        },
        "lower_bounds": {
            "mlp": {
                "parameters": 1,
                "optimizer_state": 2,
                "saved_activations": 3,
                "largest_gradient": 4,
                "total": 10,
                "how": "h",
            }
        },
        "records": records,
    }
    md = report.markdown(result)
    assert "(!) mlp / gradstream" in md and "skipped: no cargo" in md
    table = report.text_table(result)
    assert "skipped: no cargo" in table and "0.9 (!)" in table


def test_cli_rejects_unknown_names():
    from gradstream.bench.__main__ import config, parse_args

    with pytest.raises(SystemExit, match="unknown system 'tf'"):
        config(parse_args(["--systems", "torch,tf"]))
    with pytest.raises(SystemExit, match="expected WORKLOAD.SIZE=VALUE"):
        config(parse_args(["--set", "mlp=3"]))
    with pytest.raises(SystemExit, match="nerf has no size 'batch'"):
        config(parse_args(["--set", "nerf.batch=3"]))


def _want_candle() -> bool:
    if os.environ.get("GRADSTREAM_BENCH_CANDLE") == "1":
        return True
    return shutil.which("cargo") is not None and candle.binary().exists()


def test_smoke_end_to_end(tmp_path, torch_ref):
    systems = [s for s in BY_NAME if s != "candle" or _want_candle()]
    out = tmp_path / "out"
    cmd = [
        sys.executable,
        "-m",
        "gradstream.bench",
        "--preset", "tiny",
        "--steps", "2",
        "--threads", "1",
        "--systems", ",".join(systems),
        "--out", str(out),
        "--plain-progress",
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    result = json.loads((out / "results.json").read_text())
    assert set(result) >= {"meta", "lower_bounds", "records"}
    assert result["meta"]["steps"] == 2 and result["meta"]["threads"] == 1
    for name in workloads.WORKLOADS:
        b = result["lower_bounds"][name]
        assert b["total"] == sum(b[k] for k in b if k not in ("total", "how")) > 0

    records = {(r["workload"], r["system"]): r for r in result["records"]}
    # torch-checkpoint and gradstream-checkpoint are nerf only.
    expected = {(w, s) for w in workloads.WORKLOADS for s in systems if BY_NAME[s].applies_to(w)}
    assert set(records) == expected
    for key, r in records.items():
        assert r["status"] in ("ok", "skipped"), (key, r)
        if r["status"] == "skipped":
            assert r["reason"] and not r["system"].startswith("torch"), (key, r)
            continue
        assert r["peak_bytes"] > 0 and r["step_seconds"] > 0, (key, r)
        assert r["step_min_seconds"] <= r["step_seconds"] <= r["step_max_seconds"], (key, r)
        assert r["lower_bound_bytes"] == result["lower_bounds"][key[0]]["total"]
        assert r["peak_vs_bound"] == pytest.approx(r["peak_bytes"] / r["lower_bound_bytes"])
        assert len(r["losses"]) == 3 and all(math.isfinite(x) for x in r["losses"])
        assert r["loss_ok"], (key, r.get("loss_mismatch"))
        autocast = BY_NAME[r["system"]].variant == "autocast"
        expected_ref = "torch-autocast" if autocast and r["system"] != "torch-autocast" else "torch"
        assert r["loss_reference"] == expected_ref
        assert r["ratio_to_torch"]["peak"] > 0 and r["ratio_to_torch_hook"]["time"] > 0
        if r["system"].startswith("gradstream"):
            assert r["exact_peak_bytes"] > 0
    # Adam moved the weights: the losses change from step to step.
    assert records[("mlp", "torch")]["losses"][0] != records[("mlp", "torch")]["losses"][-1]
    if "candle" in systems:
        for w in workloads.WORKLOADS:
            assert records[(w, "candle")]["status"] == "ok", records[(w, "candle")]

    md = (out / "results.md").read_text()
    assert "| workload | system | peak MiB |" in md and "## Lower bounds" in md
    assert "| step s | min s | max s |" in md
    try:
        import matplotlib  # noqa: F401

        assert (out / "peak_memory.png").exists() and (out / "step_time.png").exists()
    except ImportError:
        assert "matplotlib is not installed" in proc.stdout


def test_tensorfile_load_gives_writable_arrays(tmp_path):
    tensorfile.save(tmp_path / "t.safetensors", {"w": np.ones((2, 3), np.float32)})
    w = tensorfile.load(tmp_path / "t.safetensors")["w"]
    assert w.flags.writeable and w.flags.owndata
    w[0, 0] = 5.0


def test_small_is_the_mlp_model_at_overhead_sizes():
    wl = workloads.make("small")
    assert (wl.depth, wl.width, wl.batch, wl.model) == (4, 256, 32, "mlp")
    assert runner.steps_for(runner.Config(["small"], ["torch"]), wl) == 300
    b = wl.lower_bound()
    params = 4 * 256 * 257 * 4
    assert b["parameters"] == params and b["optimizer_state"] == 2 * params
    assert b["saved_activations"] == 6 * 32 * 256 * 4
    assert b["largest_gradient"] == 256 * 256 * 4
    t = wl.tensors(0)
    assert sum(v.size for k, v in t.items() if "." in k) == wl.num_params()
    assert t["x"].shape == t["target"].shape == (32, 256)
    # The candle program runs it as its mlp, the depth from the workload.
    cmd = candle.command(Path("cb"), wl, Path("d"), 2, 2)
    assert cmd[cmd.index("--workload") + 1] == "mlp" and cmd[-2:] == ["--depth", "4"]


def test_step_spread_min_and_max_from_every_step():
    rec = _rec("torch", 1.0, 0.5, seconds=0.2)
    rec["step_times"] = [0.3, 0.1, 0.2, 0.25, 0.15]
    runner._complete(rec, 10, 5)
    assert (rec["step_min_seconds"], rec["step_max_seconds"]) == (0.1, 0.3)
    cnd = _rec("candle", 1.0, 0.5, seconds=0.004)  # no step_times: the median is all there is
    runner._complete(cnd, 10, 1)
    assert cnd["step_min_seconds"] == cnd["step_max_seconds"] == 0.004


def test_repeats_merge_into_the_median_of_process_medians():
    recs = [_rec("gradstream", 1.0, 0.5, peak=p * MIB, seconds=s) for p, s in ((3, 2.0), (5, 1.0))]
    recs.append(_rec("gradstream", 1.0, 0.5, peak=4 * MIB, seconds=4.0))
    for r, times in zip(recs, ([2.0, 2.5], [1.0, 0.9], [4.0, 6.0]), strict=True):
        r["step_times"] = times
    merged = runner.merge_repeats(recs)
    assert merged["process_step_seconds"] == [2.0, 1.0, 4.0]
    assert merged["step_seconds"] == 2.0
    assert merged["peak_bytes"] == 5 * MIB
    assert sorted(merged["step_times"]) == [0.9, 1.0, 2.0, 2.5, 4.0, 6.0]
    runner._complete(merged, 10, 2)
    assert (merged["step_min_seconds"], merged["step_max_seconds"]) == (0.9, 6.0)
    result = {"records": [merged]}
    assert report.process_spread(result) == [
        "mlp / gradstream: 3 processes, median step 1.000 / 2.000 / 4.000 s (min / median / max)"
    ]
    failed = {"workload": "mlp", "system": "gradstream", "status": "error", "reason": "boom"}
    assert runner.merge_repeats([recs[0], failed]) is failed
    assert runner.merge_repeats([recs[1]]) is recs[1]


def test_table_shows_small_step_times_with_their_digits():
    rec = _rec("torch", 1.0, 0.5, seconds=0.0004321)
    rec["step_times"] = [0.0004321, 0.0003999, 0.0012]
    runner._complete(rec, 10, 3)
    row = dict(zip([c for c, _ in report.COLUMNS], report.rows({"records": [rec]})[0], strict=True))
    assert (row["step s"], row["min s"], row["max s"]) == ("0.00043", "0.00040", "0.00120")


def test_cli_repeat():
    from gradstream.bench.__main__ import config, parse_args

    assert config(parse_args(["--workload", "small", "--repeat", "3"])).repeat == 3
    assert config(parse_args(["--workload", "small"])).repeat == 1
    with pytest.raises(SystemExit, match="--repeat 0: expected at least 1"):
        config(parse_args(["--repeat", "0"]))


# ---------------------------------------------------------------- --device cuda, without a GPU
#
# What can be checked on a machine without one: the fail-fast, the matrix and sizes that
# `--device cuda` picks, the driver sampler's plumbing (a stand-in NVML and a child that prints
# its phases), the GPU tables and charts from made-up records, and the batch search.


def _gs_sees_cuda() -> bool:
    import gradstream as gs

    return gs.cuda.is_available()


def test_cuda_device_fails_fast_without_a_gpu(tmp_path):
    if _gs_sees_cuda():
        pytest.skip("this machine has a GPU")
    for extra in ([], ["--max-batch", "8GiB"]):
        cmd = [sys.executable, "-m", "gradstream.bench", "--device", "cuda", "--quick"]
        cmd += ["--out", str(tmp_path / "out"), *extra]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert "--device cuda: no CUDA device here" in proc.stderr, proc.stderr
        assert "gradstream.cuda.is_available() is False" in proc.stderr
        assert not (tmp_path / "out").exists()  # nothing ran, nothing written


def test_cuda_modes_that_need_the_other_device():
    from gradstream.bench.__main__ import check_device, parse_args

    with pytest.raises(SystemExit, match="--max-batch: needs --device cuda"):
        check_device(parse_args(["--max-batch", "8GiB"]))
    with pytest.raises(SystemExit, match="--budget-sweep runs on the CPU only"):
        check_device(parse_args(["--device", "cuda", "--budget-sweep"]))


def test_cuda_quick_matrix_and_sizes():
    from gradstream.bench.__main__ import CUDA_QUICK, config, parse_args

    cfg = config(parse_args(["--device", "cuda", "--quick"]))
    assert cfg.device == "cuda" and cfg.preset == "default" and cfg.steps == 10
    assert cfg.workloads == ["nerf", "mlp", "cnn", "lora"] and cfg.only == CUDA_QUICK
    pairs = [
        (w, s)
        for w in cfg.workloads
        for s in cfg.systems
        if BY_NAME[s].applies_to(w) and s in cfg.only[w]
    ]
    assert len(pairs) == 10
    assert ("nerf", "candle") in pairs and ("nerf", "gradstream-in-backward") in pairs
    # Without --quick: every system on mlp, nerf, cnn and lora; --systems picks them again.
    cfg = config(parse_args(["--device", "cuda"]))
    assert cfg.workloads == ["mlp", "nerf", "cnn", "lora"] and cfg.only is None
    cfg = config(parse_args(["--device", "cuda", "--quick", "--systems", "torch"]))
    assert cfg.only is None and cfg.systems == ["torch"]
    # The CPU run keeps its own: the quick preset, the workloads' default steps.
    cfg = config(parse_args(["--quick"]))
    assert cfg.device == "cpu" and cfg.preset == "quick" and cfg.steps is None
    assert cfg.only is None and "small" in cfg.workloads


def test_candle_command_on_a_gpu():
    wl = workloads.make("nerf", "tiny")
    cpu = candle.command(Path("cb"), wl, Path("d"), 2, 2)
    assert cpu[cpu.index("--device") + 1] == "cpu" and "--leave-free" not in cpu
    gpu_cmd = candle.command(Path("cb"), wl, Path("d"), 1, 2, "cuda", leave_free=8 * 2**30)
    assert gpu_cmd[gpu_cmd.index("--device") + 1] == "cuda"
    assert gpu_cmd[gpu_cmd.index("--leave-free") + 1] == str(8 * 2**30)
    assert gpu_cmd[-6:] == cpu[-6:]  # the workload's own arguments last


def test_candle_child_finds_the_nvidia_libraries(tmp_path, monkeypatch):
    from gradstream.bench import gpu

    lib = tmp_path / "site" / "nvidia" / "cu13" / "lib"
    lib.mkdir(parents=True)
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    env = gpu.candle_env({"LD_LIBRARY_PATH": "/already"})
    assert env["LD_LIBRARY_PATH"].split(":")[0] == str(lib)
    assert env["LD_LIBRARY_PATH"].endswith(":/already")


class _FakeNVML:
    """NVML's memory query, answering the GiB a file holds (the child writes it)."""

    def __init__(self, path):
        self.path = path

    def nvmlDeviceGetMemoryInfo(self, handle):  # noqa: N802 (NVML's name)
        import types

        used = int(float(self.path.read_text() or 0) * 2**30)
        return types.SimpleNamespace(used=used, total=80 * 2**30)


def test_driver_peak_from_the_phases_of_a_child(tmp_path):
    """The sampler's plumbing end to end: a child that prints its phases like a GPU child,
    and a device whose memory the child sets: 1 GiB idle, 3 GiB during the measured steps,
    5 GiB after them (not counted)."""
    from gradstream.bench import gpu

    level = tmp_path / "level"
    level.write_text("1")
    sampler = gpu.Sampler(_FakeNVML(level), None, period=0.002)
    child = "\n".join(
        [
            "import pathlib, time",
            "from gradstream.bench import gpu",
            f"level = pathlib.Path({str(level)!r})",
            "gpu.mark('baseline')",
            "time.sleep(0.1)",
            "gpu.mark('measure')",
            "level.write_text('3'); time.sleep(0.2); level.write_text('2'); time.sleep(0.1)",
            "gpu.mark('done')",
            "level.write_text('5'); time.sleep(0.2)",
            'print(\'{"status": "ok", "peak_bytes": 5}\')',
        ]
    )
    rec = runner.run_one([sys.executable, "-c", child], dict(os.environ), 60, sampler)
    assert rec["status"] == "ok" and rec["peak_bytes"] == 5
    assert rec["driver_baseline_bytes"] == 2**30
    assert rec["driver_peak_bytes"] == 2 * 2**30
    assert rec["driver_samples"] > 20


def test_driver_figures_say_why_not():
    from gradstream.bench import gpu

    assert (
        "no done mark"
        in gpu.driver_figures([(0.0, 1)], {"baseline": 0, "measure": 1})["driver_reason"]
    )
    samples = [(t / 10, 100 + (50 if 2 <= t <= 4 else 0)) for t in range(10)]
    fig = gpu.driver_figures(samples, {"baseline": 0.1, "measure": 0.2, "done": 0.45})
    assert fig["driver_baseline_bytes"] == 100 and fig["driver_peak_bytes"] == 50


def _gpu_result(records):
    wls = {w: workloads.make(w) for w in ("nerf", "mlp")}
    for r in records:
        runner._complete(r, wls[r["workload"]].lower_bound()["total"], 2)
    runner._compare(records)
    return {
        "meta": {
            "command": "x",
            "date": "d",
            "threads": 2,
            "steps": 2,
            "preset": "default",
            "device": "cuda",
            "gpu": "NVIDIA H100",
            "sizes": {w: workloads.sizes(wl) for w, wl in wls.items()},
            "memory_method": "m",
            "timing_method": "t",
        },
        "lower_bounds": {w: {**wl.lower_bound(), "how": "h"} for w, wl in wls.items()},
        "records": records,
    }


def test_gpu_tables_headlines_and_charts(tmp_path):
    def rec(w, s, peak, driver, seconds, **extra):
        r = _rec(s, 1.0, 0.5, peak=peak, seconds=seconds)
        r.update(workload=w, device="cuda", driver_peak_bytes=driver, **extra)
        return r

    grads = {"peak_by_category": {"gradient": 16 * MIB}}
    grads.update(largest_param_bytes=16 * MIB, trained_param_bytes=96 * MIB)
    records = [
        rec("nerf", "torch", 800 * MIB, 900 * MIB, 0.010),
        rec("nerf", "candle", None, 2400 * MIB, 0.030),
        rec("nerf", "gradstream-in-backward", 600 * MIB, 700 * MIB, 0.012, **grads),
        rec("mlp", "gradstream-in-backward", 330 * MIB, 400 * MIB, 0.002, **grads),
    ]
    result = _gpu_result(records)
    head = [c for c, _ in report.CUDA_COLUMNS]
    rows = {(r[0], r[1]): dict(zip(head, r, strict=True)) for r in report.rows(result)}
    gs_row = rows[("nerf", "gradstream-in-backward")]
    assert gs_row["peak MiB"] == "600.0" and gs_row["× torch"] == "0.75"
    assert gs_row["driver MiB"] == "700.0" and gs_row["driver × torch"] == "0.78"
    assert gs_row["grad MiB"] == "16.0" and gs_row["step ms"] == "12.00"
    assert gs_row["× torch time"] == "1.20"
    candle_row = rows[("nerf", "candle")]
    assert candle_row["peak MiB"] == "" and candle_row["× bound"] == ""
    assert candle_row["driver × torch"] == "2.67"
    lines = report.headlines(result)
    text = "\n".join(lines)
    assert "nerf: gradstream-in-backward peak 600.0 MiB vs torch 800.0 MiB ×0.75" in text
    assert "step 12.00 ms vs torch 10.00 ms ×1.20" in text
    assert "nerf: candle driver peak 2400.0 MiB; gradstream-in-backward 700.0 MiB" in text
    assert "mlp: gradients alive at once with in_backward=True: 16.0 MiB (×1.00" in text
    assert "not run here: cnn, lora" in text
    mlp_bound = result["lower_bounds"]["mlp"]["total"]
    assert f"×{330 * MIB / mlp_bound:.2f} its lower bound" in text
    assert report.headlines({"meta": {}, "records": []}) == []  # none for a CPU run
    md = report.markdown(result)
    assert "| driver MiB | driver × torch | grad MiB | step ms |" in md
    assert "## Headline figures" in md and "On cuda (NVIDIA H100)." in md
    assert "driver MiB" in report.text_table(result)
    files = report.write(result, tmp_path)
    assert {"results.json", "results.md"} <= set(files)
    try:
        import matplotlib  # noqa: F401

        assert (tmp_path / "peak_memory.png").exists() and (tmp_path / "step_time.png").exists()
    except ImportError:
        pass


def test_max_batch_search_doubles_then_bisects():
    from gradstream.bench import max_batch

    tried = []

    def fits(n):
        tried.append(n)
        return n <= 5000

    ok, bad, cut = max_batch.search(fits, 1024, 1 / 64)
    assert ok <= 5000 < bad and bad - ok <= max(16, ok // 64) and not cut
    assert tried[:4] == [1024, 2048, 4096, 8192] and all(n % 16 == 0 for n in tried)
    tried.clear()
    ok, bad, _ = max_batch.search(lambda n: tried.append(n) or n <= 100, 1024, 1 / 8)
    assert tried[:5] == [1024, 512, 256, 128, 64] and ok <= 100 < bad
    assert max_batch.search(lambda n: False, 64, 1 / 8) == (None, 16, False)
    calls = iter(range(100))
    assert max_batch.search(lambda n: True, 64, 1 / 8, out_of_time=lambda: next(calls) > 2)[2]


def test_max_batch_mode_with_stand_in_probes(tmp_path, monkeypatch):
    """The mode's search, records, ratios and outputs, with each probe answered by a stand-in
    for the child process: "fits" up to a batch of its own per system."""
    from gradstream.bench import max_batch

    limit = {"torch": 3000, "candle": 1000, "gradstream-in-backward": 6000}
    probes = []

    def run_one(cmd, env, timeout, sampler=None):
        if cmd[0] == str(exe):  # the candle program
            system, rays = "candle", None
            data = cmd[cmd.index("--data") + 1]
            assert cmd[cmd.index("--leave-free") + 1] == str(8 * 2**30)
        else:
            spec = json.loads(cmd[-1])
            assert spec["device"] == "cuda" and spec["steps"] == 1
            assert spec["cap"] == {"rule": "ballast", "bytes": 8 * 2**30}
            system = {"standard": "torch", "in_backward": "gradstream-in-backward"}[spec["variant"]]
            data = spec["data"]
        rays = tensorfile.load(data)["dists"].shape[0]
        probes.append((system, rays))
        if rays <= limit[system]:
            return {"status": "ok", "peak_bytes": rays}
        return {"status": "error", "reason": "OutOfMemoryError: CUDA out of memory"}

    monkeypatch.setattr(runner, "run_one", run_one)
    monkeypatch.setattr(runner, "unavailable_reason", lambda s, w=None: None)
    monkeypatch.setattr(runner.gpu, "torch_cuda_reason", lambda: None)
    from gradstream.bench.__main__ import config, parse_args

    exe = tmp_path / "candle-bench"
    exe.write_text("")
    args = parse_args(
        ["--device", "cuda", "--max-batch", "8GiB", "--quick", "--candle-bin", str(exe)]
        + ["--set", "nerf.samples=4", "--set", "nerf.rays=256", "--out", str(tmp_path)]
    )
    cfg = config(args)
    assert max_batch.main(cfg, args) == 0
    result = json.loads((tmp_path / "max_batch.json").read_text())
    found = {r["system"]: r for r in result["records"]}
    for name, lim in limit.items():
        r = found[name]
        assert r["max_rays"] <= lim < r["first_failing"], r
        assert r["first_failing"] - r["max_rays"] <= max(16, r["max_rays"] // 8)
        assert r["limited_by"] == "out of memory" and r["max_points"] == r["max_rays"] * 4
    ratios = {(x["system"], x["versus"]): x["ratio"] for x in result["ratios"]}
    assert set(ratios) == {
        ("gradstream-in-backward", "torch"),
        ("gradstream-in-backward", "candle"),
    }
    assert ratios[("gradstream-in-backward", "torch")] == pytest.approx(
        found["gradstream-in-backward"]["max_rays"] / found["torch"]["max_rays"]
    )
    md = (tmp_path / "max_batch.md").read_text()
    assert "every system: after its runtime has started, a ballast" in md
    assert "gradstream-in-backward / candle: ×" in md


def test_candle_builds_outside_the_checkout(monkeypatch, tmp_path):
    for var in ("GRADSTREAM_CANDLE_TARGET_DIR", "CARGO_TARGET_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert candle.target_dir() == tmp_path / "home" / ".cache" / "gradstream" / "candle-target"
    checkout = candle.find_manifest().parent
    assert checkout not in candle.target_dir().parents
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert candle.target_dir() == tmp_path / "cache" / "gradstream" / "candle-target"
    # The user's shared target folder, in a folder of its own (its own Cargo.lock).
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "target"))
    assert candle.target_dir() == tmp_path / "target" / "candle-baseline"
    assert candle.binary() == tmp_path / "target" / "candle-baseline" / "release" / "candle-bench"
    monkeypatch.setenv("GRADSTREAM_CANDLE_TARGET_DIR", str(tmp_path / "mine"))
    assert candle.target_dir() == tmp_path / "mine"


def test_candle_build_passes_its_target_dir_to_cargo(monkeypatch, tmp_path):
    seen = {}

    def fake_run(cmd, env, **kwargs):
        seen.update(cmd=cmd, target=env["CARGO_TARGET_DIR"])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.delenv("GRADSTREAM_CANDLE_TARGET_DIR", raising=False)
    monkeypatch.setenv("CARGO_TARGET_DIR", str(tmp_path / "t"))
    monkeypatch.setattr(candle.shutil, "which", lambda name: "/usr/bin/cargo")
    monkeypatch.setattr(candle.subprocess, "run", fake_run)
    manifest = tmp_path / "Cargo.toml"
    manifest.write_text("")
    exe, why = candle.build(manifest, log=lambda s: None)
    assert why is None and exe == tmp_path / "t" / "candle-baseline" / "release" / "candle-bench"
    assert seen["target"] == str(tmp_path / "t" / "candle-baseline")
    assert seen["cmd"][-2:] == ["--manifest-path", str(manifest)]
