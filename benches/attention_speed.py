"""Forward + backward of scaled_dot_product_attention, gradstream against PyTorch, at the
LoRA benchmark's shape (batch 2, 12 heads, T 512, head dim 64, causal), float32, 2 threads,
median of 5; each system in its own process. Also the bytes the op saves for backward.

    python benches/attention_speed.py            # both, and the ratio
    python benches/attention_speed.py --system gradstream   # one (what the parent runs)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

THREADS = 2
SHAPE = (2, 12, 512, 64)


def run(system: str, repeat: int) -> dict:
    import numpy as np

    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(SHAPE).astype(np.float32) for _ in range(3)]
    grad = rng.standard_normal(SHAPE).astype(np.float32)
    if system == "torch":
        import torch

        torch.set_num_threads(THREADS)
        lib, sdpa = torch, torch.nn.functional.scaled_dot_product_attention
        q, k, v = (torch.tensor(a, requires_grad=True) for a in arrays)
        g = torch.tensor(grad)
    else:
        import gradstream as gs
        import gradstream.nn.functional as F
        from gradstream import memory

        lib, sdpa = gs, F.scaled_dot_product_attention
        q, k, v = (gs.tensor(a, requires_grad=True) for a in arrays)
        g = gs.tensor(grad)

    def step():
        out = sdpa(q, k, v, is_causal=True)
        out.backward(g)
        q.grad = k.grad = v.grad = None
        return out

    step()
    fwd, total = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = sdpa(q, k, v, is_causal=True)
        t1 = time.perf_counter()
        out.backward(g)
        t2 = time.perf_counter()
        q.grad = k.grad = v.grad = None
        fwd.append(t1 - t0)
        total.append(t2 - t0)
    res = {"forward_ms": 1e3 * statistics.median(fwd), "fwd_bwd_ms": 1e3 * statistics.median(total)}
    if lib is not sys.modules.get("torch"):
        before = memory.memory_by_category()["activation"]
        out = sdpa(q, k, v, is_causal=True)
        res["saved_bytes"] = memory.memory_by_category()["activation"] - before
        res["l_by_s_bytes"] = SHAPE[0] * SHAPE[1] * SHAPE[2] * SHAPE[2] * 4
        del out
    return res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--system", choices=["gradstream", "torch"])
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    if a.system:
        print(json.dumps(run(a.system, a.repeat)))
        return
    env = dict(os.environ, RAYON_NUM_THREADS=str(THREADS), OMP_NUM_THREADS=str(THREADS))
    res = {}
    for system in ("torch", "gradstream"):
        cmd = [sys.executable, __file__, "--system", system, "--repeat", str(a.repeat)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
        res[system] = json.loads(out.stdout.strip().splitlines()[-1])
    print(f"shape {SHAPE} causal float32, {THREADS} threads, median of {a.repeat}")
    for system, r in res.items():
        fwd, total = r["forward_ms"], r["fwd_bwd_ms"]
        print(f"{system:<11} forward {fwd:8.1f} ms   forward+backward {total:8.1f} ms")
    ratio = res["gradstream"]["fwd_bwd_ms"] / res["torch"]["fwd_bwd_ms"]
    print(f"ratio gradstream / torch (forward+backward): {ratio:.2f}x")
    r = res["gradstream"]
    print(
        f"saved for backward: {r['saved_bytes']} bytes (q, k, v, out, lse); one L x S "
        f"float32 matrix would be {r['l_by_s_bytes']} bytes"
    )


if __name__ == "__main__":
    main()
