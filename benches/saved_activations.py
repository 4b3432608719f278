"""Saved-activation bytes of an 8-layer ReLU MLP: PyTorch against gradstream's policies.

    python benches/saved_activations.py            # a few seconds per configuration
    python benches/saved_activations.py --width 512 --batch 128 --out /tmp/saved.md

Two models, each Linear+ReLU × `layers` (width × width, batch × width input), loss = sum:

- ``mlp``: ``x = relu(linear(x))``. Each ReLU output is also the next Linear's input,
  which saves it anyway: 1-bit masks save little here (the last ReLU's output).
- ``residual``: ``x = x + relu(linear(x))``. The ReLU output feeds only the add, which
  saves nothing: PyTorch keeps it for ReluBackward, gradstream keeps 1/32 of it.

What is counted, after the forward and before the backward: the bytes of the tensors
the graph saved, parameters excluded.

- PyTorch: a ``saved_tensors_hooks`` pack hook records every saved tensor's storage;
  distinct storages' bytes are summed (relu's output and the next Linear's input are
  one storage, counted once). The bf16 row packs with ``t.to(torch.bfloat16)`` (except
  parameters' storages, as gradstream's policy) and sums the packed tensors' bytes: a
  storage saved by two nodes is packed twice.
- gradstream: ``memory.memory_by_category()["activation"]``, the exact accounting (a
  buffer saved by two nodes counts once; the masks are uint8 tensors).

Configurations: torch; torch with bf16 hooks; gradstream with masks (default);
gradstream with masks off (``set_relu_bitmask(False)``: saves like PyTorch); gradstream
with masks and ``save_in_bfloat16()``. Each runs in its own process. For the bf16 rows
the child also reports the relative error of the parameter gradients against the
same system saving float32 (max over parameters of max|g16 - g32| / max|g32|), and the
same figure for a tiny NeRF-like MLP (positional encoding, 8 × 128 with a skip
connection, density and colour heads).

The Markdown table is printed and written to ``--out`` (for the README).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

SYSTEMS = ["torch", "torch-bf16", "gradstream", "gradstream-nomask", "gradstream-bf16"]
VARIANTS = ["mlp", "residual"]
LABELS = {
    "torch": "PyTorch",
    "torch-bf16": "PyTorch, bf16 pack hooks (parameters kept)",
    "gradstream": "gradstream, 1-bit masks (default)",
    "gradstream-nomask": "gradstream, masks off",
    "gradstream-bf16": "gradstream, masks + save_in_bfloat16()",
}


def _model(lib, width: int, layers: int, seed: int):
    lib.manual_seed(seed)
    return [lib.nn.Linear(width, width) for _ in range(layers)]


def _forward(lib, lins, x, variant: str):
    h = x
    for lin in lins:
        h = h + lib.relu(lin(h)) if variant == "residual" else lib.relu(lin(h))
    return h.sum()


def _nerf_like(lib, seed: int, points: int = 2048, width: int = 128, freqs: int = 6):
    """Inputs and a loss function of a tiny NeRF-like MLP (no volume rendering)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    pts = lib.tensor(rng.uniform(-1, 1, (points, 3)).astype(np.float32))
    target = lib.tensor(rng.uniform(0, 1, (points, 3)).astype(np.float32))
    feats = [pts]
    for k in range(freqs):
        feats += [lib.sin(pts * 2.0**k), lib.cos(pts * 2.0**k)]
    enc = lib.cat(feats, dim=-1)
    n_enc = enc.shape[-1]
    lib.manual_seed(seed)
    layers = []
    for i in range(8):
        n_in = n_enc if i == 0 else width
        layers.append(lib.nn.Linear(n_in + (n_enc if i == 5 else 0), width))
    sigma, rgb = lib.nn.Linear(width, 1), lib.nn.Linear(width, 3)

    def loss():
        h = enc
        for i, layer in enumerate(layers):
            if i == 5:
                h = lib.cat([h, enc], dim=-1)
            h = lib.relu(layer(h))
        s = lib.relu(sigma(h))
        c = lib.sigmoid(rgb(h))
        return ((c * (1 - lib.exp(-s)) - target) ** 2).mean()

    params = [p for m in [*layers, sigma, rgb] for p in m.parameters()]
    return loss, params


def _grads(params):
    return [p.grad.float().numpy().copy() for p in params]


def _rel_err(a, b) -> float:
    import numpy as np

    pairs = zip(a, b, strict=True)
    return float(max(np.abs(x - y).max() / max(np.abs(y).max(), 1e-30) for x, y in pairs))


def _torch_bf16_hooks(torch, count, params):
    """bf16 packing as gradstream's policy does it: parameters' storages kept as they are."""
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}

    def pack(t):
        if t.is_floating_point() and t.untyped_storage().data_ptr() not in param_ptrs:
            p = t.to(torch.bfloat16)
            count.append(p.untyped_storage().nbytes())
            return (p, t.dtype)
        return (t, None)

    def unpack(packed):
        t, dt = packed
        return t if dt is None else t.to(dt)

    return torch.autograd.graph.saved_tensors_hooks(pack, unpack)


def child(system: str, variant: str, width: int, batch: int, layers: int) -> dict:
    if system.startswith("torch"):
        import torch as lib

        lib.set_num_threads(max(1, os.cpu_count() or 1))
    else:
        import gradstream as lib
        from gradstream import memory
        from gradstream.autograd import graph

        graph.set_relu_bitmask(system != "gradstream-nomask")
    lins = _model(lib, width, layers, seed=0)
    params = [p for lin in lins for p in lin.parameters()]
    lib.manual_seed(1)
    x = lib.randn(batch, width)
    bf16 = system.endswith("bf16")
    out: dict = {}

    if system.startswith("torch"):
        param_ptrs = {p.untyped_storage().data_ptr() for p in params}
        storages: dict[int, int] = {}
        packed: list[int] = []

        def pack(t):
            s = t.untyped_storage()
            if s.data_ptr() not in param_ptrs:
                storages[s.data_ptr()] = s.nbytes()
            return t

        if bf16:
            with _torch_bf16_hooks(lib, packed, params):
                loss = _forward(lib, lins, x, variant)
            out["saved_bytes"] = sum(packed)
        else:
            with lib.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
                loss = _forward(lib, lins, x, variant)
            out["saved_bytes"] = sum(storages.values())
    else:
        import gc

        gc.collect()
        policy = graph.save_in_bfloat16() if bf16 else None
        if policy is None:
            loss = _forward(lib, lins, x, variant)
        else:
            with policy:
                loss = _forward(lib, lins, x, variant)
        out["saved_bytes"] = memory.memory_by_category()["activation"]
    loss.backward()

    if bf16:
        g16 = _grads(params)
        for p in params:
            p.grad = None
        _forward(lib, lins, x, variant).backward()
        out["grad_rel_err"] = _rel_err(g16, _grads(params))
        nerf_loss, nerf_params = _nerf_like(lib, seed=2)
        if system.startswith("torch"):
            ctx = _torch_bf16_hooks(lib, [], nerf_params)
        else:
            ctx = graph.save_in_bfloat16()
        with ctx:
            loss16 = nerf_loss()
        loss16.backward()
        n16 = _grads(nerf_params)
        for p in nerf_params:
            p.grad = None
        nerf_loss().backward()
        out["nerf_grad_rel_err"] = _rel_err(n16, _grads(nerf_params))
    return out


def _fmt_mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB"


def table(results: dict, args) -> str:
    lines = [
        f"Saved-activation bytes after the forward of a {args.layers}-layer Linear+ReLU MLP "
        f"(width {args.width}, batch {args.batch}, float32; parameters excluded), "
        "each configuration in its own process (`python benches/saved_activations.py`).",
        "",
        "| configuration | mlp | vs PyTorch | residual | vs PyTorch | bf16 grad rel. error "
        "(mlp / residual / NeRF-like) |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for system in SYSTEMS:
        cells = [LABELS[system]]
        errs = []
        for variant in VARIANTS:
            r = results[(system, variant)]
            base = results[("torch", variant)]["saved_bytes"]
            cells += [_fmt_mib(r["saved_bytes"]), f"{r['saved_bytes'] / base:.3f}"]
            if "grad_rel_err" in r:
                errs.append(f"{r['grad_rel_err']:.1e}")
        nerf = results[(system, "mlp")].get("nerf_grad_rel_err")
        if nerf is not None:
            errs.append(f"{nerf:.1e}")
        cells.append(" / ".join(errs) if errs else "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--layers", type=int, default=8)
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "results", "saved_activations.md"))
    ap.add_argument("--child", nargs=2, metavar=("SYSTEM", "VARIANT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        r = child(*args.child, args.width, args.batch, args.layers)
        print(json.dumps(r))
        return
    results = {}
    for system in SYSTEMS:
        for variant in VARIANTS:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", system, variant]
            cmd += ["--width", str(args.width), "--batch", str(args.batch)]
            cmd += ["--layers", str(args.layers)]
            p = subprocess.run(cmd, capture_output=True, text=True, check=False)
            if p.returncode != 0:
                sys.exit(f"{system} {variant} failed:\n{p.stderr}")
            results[(system, variant)] = json.loads(p.stdout.strip().splitlines()[-1])
            print(f"{system:18} {variant:9} {results[(system, variant)]}", file=sys.stderr)
    md = table(results, args)
    print(md)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(md)


if __name__ == "__main__":
    main()
