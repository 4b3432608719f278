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
