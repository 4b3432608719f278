"""The candle system: build the Rust program in benches/candle and run one configuration.

The program is upstream candle's own training path (candle-nn `Linear` over `Var`s,
`loss.backward()`, candle-nn `AdamW` with weight_decay 0); it reads the same safetensors file
as every other system and prints the same JSON figures. On a GPU (`--device cuda`) it runs
a build with the program's `cuda` feature (tools/build-candle-cuda.sh), passed with
`--candle-bin`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def find_manifest() -> Path:
    """The candle program's Cargo.toml: `$GRADSTREAM_CANDLE_DIR`, else `benches/candle` in the
    current directory (the README runs the benchmark from the checkout), else next to the
    package (an editable install)."""
    candidates = [Path.cwd() / "benches" / "candle"]
    if os.environ.get("GRADSTREAM_CANDLE_DIR"):
        candidates.insert(0, Path(os.environ["GRADSTREAM_CANDLE_DIR"]))
    # python/gradstream/bench/systems/candle.py -> the repository root
    candidates.append(Path(__file__).resolve().parents[4] / "benches" / "candle")
    for c in candidates:
        if (c / "Cargo.toml").exists():
            return c / "Cargo.toml"
    return candidates[0] / "Cargo.toml"


def target_dir() -> Path:
    """Where cargo builds the program, never inside the checkout: `$GRADSTREAM_CANDLE_TARGET_DIR`,
    else `candle-baseline` in `$CARGO_TARGET_DIR` (the user's shared target folder), else
    `gradstream/candle-target` in the user's cache folder (`$XDG_CACHE_HOME`, ~/.cache)."""
    if os.environ.get("GRADSTREAM_CANDLE_TARGET_DIR"):
        return Path(os.environ["GRADSTREAM_CANDLE_TARGET_DIR"])
    if os.environ.get("CARGO_TARGET_DIR"):
        return Path(os.environ["CARGO_TARGET_DIR"]) / "candle-baseline"
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "gradstream" / "candle-target"


def binary() -> Path:
    return target_dir() / "release" / "candle-bench"


def build(manifest: Path | None = None, log=print) -> tuple[Path | None, str | None]:
    """`cargo build --release` (a no-op when cached): the binary, or None and why not."""
    manifest = manifest or find_manifest()
    if not manifest.exists():
        return None, (
            f"{manifest} not found: run from the source checkout or set GRADSTREAM_CANDLE_DIR"
        )
    cargo = shutil.which("cargo")
    if cargo is None:
        return None, "cargo is not installed"
    env = dict(os.environ, CARGO_TARGET_DIR=str(target_dir()))
    log(f"building {manifest.parent} (cargo build --release; minutes the first time)")
    proc = subprocess.run(
        [cargo, "build", "--release", "--quiet", "--manifest-path", str(manifest)],
        env=env,
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-3:]
        return None, "cargo build failed: " + " | ".join(tail)
    return binary(), None


def command(
    exe: Path,
    workload,
    data: Path,
    steps: int,
    threads: int,
    device: str = "cpu",
    leave_free: int | None = None,
) -> list[str]:
    """The program's command line. `device` "cuda" needs a build with its `cuda` feature
    (tools/build-candle-cuda.sh); `leave_free` (`--max-batch`) makes it allocate a ballast
    that leaves that many bytes of the GPU free."""
    cap = ["--leave-free", str(leave_free)] if leave_free is not None else []
    return [
        str(exe),
        "--workload", workload.model,
        "--data", str(data),
        "--steps", str(steps),
        "--threads", str(threads),
        "--device", device,
        *cap,
        "--lr", repr(workload.lr),
        "--weight-decay", repr(workload.weight_decay),
        *workload.candle_args(),
    ]  # fmt: skip
