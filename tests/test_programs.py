"""Whole training programs in the style of public PyTorch ones, run unchanged on gradstream.

Each program under tests/programs/ is plain PyTorch code (nanoGPT-, minGPT-, minLoRA- and
Pytorch-UNet-style) that prints `RESULT {json}` as its last line. A test runs it as a child
process twice, `python prog.py ...` (PyTorch) and `python -m gradstream.alias prog.py ...`
(gradstream), and compares the figures: where both libraries draw the same numbers (weights
and data come from NumPy) the losses must agree closely; where a program draws from the
library's own RNG (a shuffling DataLoader, a RandomSampler, multinomial sampling) only what
does not depend on the draw is compared: the first loss, shapes, counts, and that training
lowers the loss.
"""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import gradstream as gs

pytestmark = pytest.mark.cpu_backend(
    "runs programs in child processes, where an op with no kernel on the path cannot be "
    "told from a bug"
)

PROGRAMS = Path(__file__).parent / "programs"
TIMEOUT = 240
RUST_FRAME = re.compile(r"\s+(\d+: |at )")


def run_program(name, args, *, alias, cwd, memory_limit=None):
    """The RESULT dict of tests/programs/<name>.py run under PyTorch or under the alias."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(Path(gs.__file__).parent.parent), env.get("PYTHONPATH", "")]
    )
    env["OMP_NUM_THREADS"] = "1"  # PyTorch's thread pool on a shared 2-core machine crawls
    runner = [sys.executable, "-m", "gradstream.alias"] if alias else [sys.executable]

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))

    out = subprocess.run(
        [*runner, str(PROGRAMS / f"{name}.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=TIMEOUT,
        preexec_fn=limit if memory_limit else None,
    )
    lib = "gradstream" if alias else "torch"
    # without the frames of a Rust backtrace, which would push the message out of view
    stderr = [ln for ln in out.stderr.splitlines() if not RUST_FRAME.match(ln)]
    assert out.returncode == 0, (
        f"{name}.py {' '.join(args)} under {lib} exited with {out.returncode}:\n"
        + "\n".join(stderr[-15:])
    )
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("RESULT "), f"{name}.py under {lib}: last line {last!r}"
    return json.loads(last[len("RESULT ") :])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """run(name, args, alias=..., tag=...) once per distinct call: tests share runs.

    `tag` names the run's working folder (relative out dirs land there), so that a resume
    can continue where an earlier run of the same tag left its checkpoint."""
    cache = {}
    base = tmp_path_factory.mktemp("programs")

    def run(name, args=(), *, alias, tag="default", **kw):
        key = (name, tuple(args), alias, tag)
        if key not in cache:
            cwd = base / f"{name}-{tag}-{'gs' if alias else 'torch'}"
            cwd.mkdir(exist_ok=True)
            cache[key] = run_program(name, list(args), alias=alias, cwd=cwd, **kw)
        return cache[key]

    run.base = base
    return run


def both(runs, name, args=(), **kw):
    return runs(name, args, alias=False, **kw), runs(name, args, alias=True, **kw)


def assert_close(actual, expected, rtol, what):
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol, err_msg=what)


def mean_drop(losses, n):
    """How much the mean of the last `n` losses is below the mean of the first `n`."""
    return float(np.mean(losses[:n]) - np.mean(losses[-n:]))


# ---------------------------------------------------------------- nanoGPT style

NANO_SCRATCH = ("--out_dir=out", "--max_iters=12")
NANO_RESUME = ("--out_dir=out", "--max_iters=18", "--init_from=resume")


def test_nanogpt_trains_as_torch(runs, torch_ref):
    ref, got = both(runs, "nanogpt_style", NANO_SCRATCH)
    # NumPy weights and batches: every figure is the same computation in both libraries
    assert len(got["train_losses"]) == len(ref["train_losses"]) == 13
    assert_close(got["train_losses"], ref["train_losses"], 1e-4, "train losses")
    assert got["lrs"] == ref["lrs"]
    assert_close(got["grad_norms"], ref["grad_norms"], 1e-4, "clip_grad_norm_ totals")
    assert [e["iter"] for e in got["evals"]] == [e["iter"] for e in ref["evals"]] == [6, 12]
    for key in ("train", "val"):
        assert_close([e[key] for e in got["evals"]], [e[key] for e in ref["evals"]], 1e-4, key)
    assert_close(got["last_logits"], ref["last_logits"], 1e-4, "logits after training")
    assert mean_drop(got["train_losses"], 3) > 0.3
    for key in ("num_params", "tied", "last_logits_shape", "sample_shapes"):
        assert got[key] == ref[key], key
    assert got["tied"] and got["sample_shapes"] == [[1, 12], [1, 12]]
    assert got["sample_in_vocab"] and got["sample_prefix_kept"]


def test_nanogpt_resumes_as_torch(runs, torch_ref):
    both(runs, "nanogpt_style", NANO_SCRATCH)  # writes out/ckpt.pt at iteration 12
    ref, got = both(runs, "nanogpt_style", NANO_RESUME)
    assert got["start_iter"] == ref["start_iter"] == 12
    assert got["lrs"] == ref["lrs"] and len(got["lrs"]) == 7
    # the resumed model and AdamW state carry on: the same losses as PyTorch's resume
    assert_close(got["train_losses"], ref["train_losses"], 1e-4, "resumed losses")
    scratch = runs("nanogpt_style", NANO_SCRATCH, alias=True)
    assert np.mean(got["train_losses"]) < np.mean(scratch["train_losses"][:3]) - 0.3


def test_nanogpt_manual_attention_under_bfloat16_autocast(runs, torch_ref):
    args = ("--out_dir=out", "--flash=False", "--dtype=bfloat16", "--max_iters=4")
    ref, got = both(runs, "nanogpt_style", args, tag="manual-bf16")
    # bfloat16 matmuls round differently (accumulation order): close, not equal
    assert_close(got["train_losses"], ref["train_losses"], 2e-3, "bfloat16 losses")
    assert got["sample_shapes"] == ref["sample_shapes"]
    assert all(np.isfinite(got["last_logits"]))


def test_nanogpt_resumes_from_a_torch_checkpoint(runs, torch_ref):
    runs("nanogpt_style", NANO_SCRATCH, alias=False)
    ref = runs("nanogpt_style", NANO_RESUME, alias=False)
    # a checkpoint of its own: the run above has moved its folder's on to iteration 18
    runs("nanogpt_style", NANO_SCRATCH, alias=False, tag="torch-ckpt")
    dst = runs.base / "nanogpt_style-from-torch-gs" / "out"
    if not dst.exists():
        shutil.copytree(runs.base / "nanogpt_style-torch-ckpt-torch" / "out", dst)
    got = runs("nanogpt_style", NANO_RESUME, alias=True, tag="from-torch")
    assert got["start_iter"] == 12
    assert_close(got["train_losses"], ref["train_losses"], 1e-4, "losses resumed from torch")


# ---------------------------------------------------------------- minGPT style

# A finite epoch here: the program's default draws "forever" (see the test after this one).
MINGPT = ("--system.work_dir=out", "--trainer.num_samples=1000")


def test_mingpt_trains_as_torch(runs, torch_ref):
    ref, got = both(runs, "mingpt_style", MINGPT)
    assert got["vocab_size"] == ref["vocab_size"]
    # before any step the model and the fixed batch are the same: the same loss, the same
    # greedy completion; after it the RandomSampler's batches differ between the libraries
    assert_close(got["init_loss"], ref["init_loss"], 1e-5, "loss before training")
    assert got["init_greedy"] == ref["init_greedy"]
    for r in (ref, got):
        assert r["iters"] == len(r["train_losses"]) == 20
        assert r["final_loss"] < r["init_loss"] - 0.5
        assert mean_drop(r["train_losses"], 5) > 0.3
        # the state_dict saved by the callback and loaded into a fresh GPT is the model
        assert r["reloaded_loss"] == r["final_loss"]
        assert r["reloaded_greedy"] == r["final_greedy"]
        assert r["completion_lengths"] == [18, 18] and r["samples_in_vocab"]
    assert abs(got["final_loss"] - ref["final_loss"]) < 0.3


def test_mingpt_endless_random_sampler(runs):
    # An 8 GiB address-space cap turns an eager 1e10-index draw into a quick failure.
    got = runs("mingpt_style", ("--system.work_dir=out",), alias=True, memory_limit=8 << 30)
    assert got["iters"] == 20 and got["final_loss"] < got["init_loss"] - 0.5


# ---------------------------------------------------------------- minLoRA style


def test_minlora_fine_tunes_as_torch(runs, torch_ref):
    ref, got = both(runs, "minlora_style", ("--out_dir=out",))
    for key in ("base_loss", "tuned_loss", "loaded_loss", "merged_loss"):
        assert_close(got[key], ref[key], 1e-4, key)
    assert_close(got["losses"], ref["losses"], 1e-4, "LoRA training losses")
    for r in (ref, got):
        # B starts at zero; disabling the adapters gives the frozen base model back
        assert r["loss_after_add"] == r["base_loss"] == r["disabled_loss"]
        assert r["tuned_loss"] < r["base_loss"] - 1.0
        # only the LoRA factors trained; the checkpoint holds them alone and loads back
        assert r["trainable_is_lora"] and r["frozen_unchanged"]
        assert r["loaded_loss"] == r["tuned_loss"]
        assert abs(r["merged_loss"] - r["tuned_loss"]) < 1e-4
        assert r["merged_keys_match_base"] and not r["merged_has_parametrizations"]
        assert r["unexpected_keys"] == []
    # every Linear (4 per block + the head) and both Embeddings, two factors each
    assert got["n_lora_params"] == ref["n_lora_params"] == 2 * (2 * 4 + 1 + 2)
    for key in ("lora_state_keys", "lora_state_shapes", "missing_keys", "merged_params"):
        assert got[key] == ref[key], key


# ---------------------------------------------------------------- U-Net style

# What runs today: contiguous tensors and the main process's loader. The program's defaults
# (channels_last, two workers) are the tests below.
UNET = ("--out_dir=out", "--no-channels-last", "--num-workers=0")


def check_unet_trend(r, epochs, batches_per_epoch):
    assert len(r["losses"]) == epochs * batches_per_epoch
    assert len(r["val_dice"]) == len(r["lrs"]) == epochs
    assert r["checkpoints"] == [f"checkpoint_epoch{e}.pth" for e in range(1, epochs + 1)]
    assert r["final_fixed_loss"] < r["init_loss"] - 0.3
    assert all(0.0 <= d <= 1.0 for d in r["val_dice"])


def test_unet_trains_as_torch(runs, torch_ref):
    ref, got = both(runs, "unet_style", UNET)
    # NumPy weights and the seeded images: the same loss before the shuffled training
    assert_close(got["init_loss"], ref["init_loss"], 1e-4, "loss before training")
    for r in (ref, got):
        check_unet_trend(r, epochs=3, batches_per_epoch=4)
        assert mean_drop(r["losses"], 4) > 0.3
    assert (
        got["shapes"]
        == ref["shapes"]
        == {
            "images": [4, 3, 20, 20],
            "masks_pred": [4, 1, 20, 20],
            "channels_last": False,
        }
    )
    assert got["num_params"] == ref["num_params"]


def test_unet_bilinear_two_classes_checkpointed(runs, torch_ref):
    # odd image sides make F.pad do work; activation checkpointing in every stage
    args = (
        *UNET,
        "--classes=2",
        "--bilinear",
        "--checkpointing",
        "--size=19",
        "--epochs=2",
    )
    ref, got = both(runs, "unet_style", args, tag="bilinear")
    assert_close(got["init_loss"], ref["init_loss"], 1e-4, "loss before training")
    for r in (ref, got):
        check_unet_trend(r, epochs=2, batches_per_epoch=4)
    assert got["shapes"] == ref["shapes"]
    assert got["shapes"]["masks_pred"] == [4, 2, 19, 19]
    assert got["num_params"] == ref["num_params"]


@pytest.mark.parametrize("alias", [False, True], ids=["torch", "gradstream"])
def test_unet_loads_its_checkpoint(runs, alias, torch_ref):
    first = runs("unet_style", UNET, alias=alias)
    args = (*UNET, "--load=out/checkpoint_epoch3.pth", "--epochs=1")
    again = runs("unet_style", args, alias=alias)  # the same folder: the checkpoint is there
    # the fixed batch's loss (BatchNorm on batch statistics) is the saved model's
    assert_close(again["init_loss"], first["final_fixed_loss"], 1e-5, "loss after --load")


def test_unet_channels_last(runs):
    got = runs("unet_style", ("--out_dir=out", "--num-workers=0"), alias=True, tag="cl")
    assert got["shapes"]["channels_last"] is True
    check_unet_trend(got, epochs=3, batches_per_epoch=4)


def test_unet_with_loader_workers(runs):
    got = runs("unet_style", ("--out_dir=out", "--no-channels-last"), alias=True, tag="w")
    check_unet_trend(got, epochs=3, batches_per_epoch=4)
