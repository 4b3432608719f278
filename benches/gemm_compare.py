"""The workloads' matrix products through every candidate GEMM, with PyTorch's `torch.mm` as
the bar, each system in its own process at the same thread count.

`benches/gemm_compare.rs` (a cargo example) times candle's matmul, the `gemm` crate called
directly, faer, and gradstream's own CPU product, and prints one JSON row per product; this
script runs it, then times the same products (same layouts: a transposed operand is a
transposed view) with torch and with NumPy (its bundled OpenBLAS), and prints one Markdown
table. Times are medians in ms; the last column is gradstream's time over torch's.

    python benches/gemm_compare.py [--threads 2] [--exe target/dev-release/examples/gemm_compare]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Runs in a child process: `lib` is "torch" or "numpy"; rows come on stdin as JSON.
CHILD = textwrap.dedent(
    """
    import json, sys, time
    lib, rows = sys.argv[1], json.load(sys.stdin)
    if lib == "torch":
        import torch
        torch.set_num_threads(int(sys.argv[2]))
        def make(r, c, t):
            x = torch.rand(c, r) if t else torch.rand(r, c)
            return x.t() if t else x
        mm = torch.mm
    else:
        import numpy as np
        rng = np.random.default_rng(0)
        def make(r, c, t):
            x = rng.random((c, r) if t else (r, c), dtype=np.float32)
            return x.T if t else x
        mm = np.matmul
    def median_ms(f):
        f()
        s = time.perf_counter(); f(); once = time.perf_counter() - s
        reps = max(1, min(10000, int(0.02 / max(once, 1e-9))))
        ts = []
        for _ in range(7):
            s = time.perf_counter()
            for _ in range(reps):
                f()
            ts.append((time.perf_counter() - s) * 1e3 / reps)
        return sorted(ts)[3]
    out = []
    for r in rows:
        if lib == "torch":
            torch.set_num_threads(r["threads"])
        a = make(r["m"], r["k"], r["lhs_t"])
        b = make(r["k"], r["n"], r["rhs_t"])
        out.append(median_ms(lambda: mm(a, b)))
    print(json.dumps(out))
    """
)


def run_child(lib: str, rows: list[dict], threads: int) -> list[float] | None:
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env[var] = str(threads)
    if lib == "numpy" and any(r["threads"] != threads for r in rows):
        # OpenBLAS reads its thread count once: the one-thread rows run in their own process.
        single = [r for r in rows if r["threads"] == 1]
        rest = [r for r in rows if r["threads"] != 1]
        a = run_child(lib, single, 1) if single else []
        b = run_child(lib, rest, threads) if rest else []
        if a is None or b is None:
            return None
        it_a, it_b = iter(a), iter(b)
        return [next(it_a) if r["threads"] == 1 else next(it_b) for r in rows]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, lib, str(threads)],
        input=json.dumps(rows),
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        print(f"{lib}: skipped ({proc.stderr.strip().splitlines()[-1:]})", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--exe", help="a built gemm_compare example (default: cargo run it)")
    args = ap.parse_args()
    cmd = (
        [args.exe]
        if args.exe
        else ["cargo", "run", "-q", "--profile", "dev-release", "--example", "gemm_compare", "--"]
    )
    proc = subprocess.run(
        [*cmd, "--json", "--threads", str(args.threads)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    torch_ms = run_child("torch", rows, args.threads)
    numpy_ms = run_child("numpy", rows, args.threads)
    print(
        f"{args.threads} threads (rows marked 1t: one), float32, median ms; "
        f"gemm's AVX-512 kernels: {rows[0]['avx512']}\n"
    )
    cols = "torch | OpenBLAS (NumPy) | candle | gemm | faer | gradstream | gradstream / torch"
    print(f"| product | m × n × k | {cols} |")
    print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
    for i, r in enumerate(rows):
        t = torch_ms[i] if torch_ms else float("nan")
        o = numpy_ms[i] if numpy_ms else float("nan")
        print(
            f"| {r['name']} | {r['m']} × {r['n']} × {r['k']} | {t:.3f} | {o:.3f} | "
            f"{r['candle']:.3f} | {r['gemm']:.3f} | {r['faer']:.3f} | {r['ours']:.3f} | "
            f"{r['ours'] / t:.2f} |"
        )


if __name__ == "__main__":
    main()
