"""`python -m gradstream.bench --world 2`: data-parallel mlp training, per-rank peak memory
and step time, gradstream's DDP (standard, in-backward, ZeRO-1) beside PyTorch's DDP.

Every configuration runs as `world` fresh processes on this machine over gloo. Peak is the
RSS high-water mark above each rank's baseline (taken after the imports, the process group
and the workload's NumPy arrays, before the model), as in the single-process benchmark; the
table shows the worst rank. "hidden comm" is the all-reduce time of one step's gradients
(measured alone) minus the time backward waited for the reductions at its end: the
communication that overlapped with backward.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import statistics
import time
from pathlib import Path

from . import workloads
from .measure import measure, status_bytes

SYSTEMS = ["torch-ddp", "gradstream-ddp", "gradstream-ddp-in-backward", "gradstream-zero1"]


def _torch_step(workload, tensors):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    layers = []
    for name, n_in, n_out in workload.layer_shapes():
        lin = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            lin.weight.copy_(torch.from_numpy(tensors[f"{name}.weight"]))
            lin.bias.copy_(torch.from_numpy(tensors[f"{name}.bias"]))
        layers += [lin, torch.nn.ReLU()]
    model = DDP(torch.nn.Sequential(*layers))
    opt = torch.optim.Adam(model.parameters(), lr=workload.lr)
    x, target = torch.from_numpy(tensors["x"]), torch.from_numpy(tensors["target"])

    def step():
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    return step, None


def _gradstream_step(workload, tensors, system):
    import gradstream as gs
    from gradstream.distributed.optim import ZeroRedundancyOptimizer
    from gradstream.nn.parallel import DistributedDataParallel as DDP

    layers = []
    for name, n_in, n_out in workload.layer_shapes():
        lin = gs.nn.Linear(n_in, n_out)
        with gs.no_grad():
            lin.weight.copy_(gs.from_numpy(tensors[f"{name}.weight"]))
            lin.bias.copy_(gs.from_numpy(tensors[f"{name}.bias"]))
        layers += [lin, gs.nn.ReLU()]
    model = DDP(gs.nn.Sequential(*layers), gradient_as_bucket_view=True)
    x, target = gs.from_numpy(tensors["x"]), gs.from_numpy(tensors["target"])
    in_backward = system == "gradstream-ddp-in-backward"
    if system == "gradstream-zero1":
        opt = ZeroRedundancyOptimizer(model.parameters(), gs.optim.Adam, lr=workload.lr)
    else:
        opt = gs.optim.Adam(model.parameters(), lr=workload.lr, in_backward=in_backward)

    def step():
        loss = gs.nn.functional.mse_loss(model(x), target)
        loss.backward()
        if not in_backward:
            opt.step()
            opt.zero_grad(set_to_none=True)
        return loss.item()

    return step, model.reducer


def _comm_seconds(reducer, repeats: int = 3) -> float:
    """One step's all-reduces, run alone (bucket by bucket, as backward launches them)."""
    import gradstream as gs
    from gradstream import distributed as dist

    times = []
    for _ in range(repeats):
        flats = [gs.zeros(b.numel, dtype=b.dtype) for b in reducer.buckets]
        dist.barrier()
        t0 = time.perf_counter()
        works = [dist.all_reduce(f, async_op=True) for f in flats]
        for w in works:
            w.wait()
        times.append(time.perf_counter() - t0)
        del flats
    return statistics.median(times)


def worker(system, rank, world, port, preset, overrides, steps, threads, q) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    try:
        import torch
        import torch.distributed as tdist

        torch.set_num_threads(threads)
        os.environ["RAYON_NUM_THREADS"] = str(threads)
        tdist.init_process_group("gloo", rank=rank, world_size=world)
        import gradstream  # noqa: F401  (its import is part of the baseline, as torch's)

        workload = workloads.make("mlp", preset, overrides)
        tensors = workload.tensors(0)
        tensors.update({k: workload.tensors(1 + rank)[k] for k in ("x", "target")})
        # The NumPy weights stay alive, inside the baseline: the peak is the model's alone.
        baseline = status_bytes("VmRSS")
        if system == "torch-ddp":
            step, reducer = _torch_step(workload, tensors)
        else:
            step, reducer = _gradstream_step(workload, tensors, system)
        if reducer is not None:
            reducer.wait_seconds = 0.0
        res = measure(step, steps, baseline)
        if reducer is not None:
            res["exposed_comm_seconds"] = reducer.wait_seconds / (steps + 1)
            res["comm_seconds"] = _comm_seconds(reducer)
        tdist.barrier()
        tdist.destroy_process_group()
        q.put((rank, res))
    except BaseException as e:
        q.put((rank, {"status": "error", "error": f"{type(e).__name__}: {e}"}))


def run_system(system, world, preset, overrides, steps, threads, timeout) -> list[dict]:
    import multiprocessing as mp

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.setdefault("MALLOC_MMAP_THRESHOLD_", "65536")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    args = (world, port, preset, overrides, steps, threads, q)
    procs = [ctx.Process(target=worker, args=(system, r, *args)) for r in range(world)]
    for p in procs:
        p.start()
    results: dict = {}
    deadline = time.monotonic() + timeout
    while len(results) < world and time.monotonic() < deadline:
        try:
            rank, res = q.get(timeout=max(0.1, deadline - time.monotonic()))
        except queue.Empty:
            break
        results[rank] = res
    for p in procs:
        p.join(timeout=5)
        if p.is_alive():
            p.kill()
    return [results.get(r, {"status": "timeout"}) for r in range(world)]


def summary(system: str, ranks: list[dict]) -> dict:
    bad = [r for r in ranks if r.get("status") != "ok"]
    if bad:
        return {"system": system, "status": bad[0].get("error", bad[0].get("status"))}
    out = {
        "system": system,
        "status": "ok",
        "peak_bytes": max(r["peak_bytes"] for r in ranks),
        "step_seconds": max(r["step_seconds"] for r in ranks),
    }
    if "comm_seconds" in ranks[0]:
        comm = max(r["comm_seconds"] for r in ranks)
        exposed = max(r["exposed_comm_seconds"] for r in ranks)
        out.update(comm_seconds=comm, exposed_comm_seconds=exposed)
        out["hidden_comm_seconds"] = max(0.0, comm - exposed)
    return out


def table(rows: list[dict], world: int, workload) -> str:
    ref = next((r for r in rows if r["system"] == "torch-ddp" and r["status"] == "ok"), None)
    lines = [
        f"mlp depth={workload.depth} width={workload.width} batch={workload.batch}/rank, "
        f"world={world}, gloo on this machine",
        f"{'system':28} {'peak/rank MB':>12} {'×torch':>7} {'step ms':>9} {'×torch':>7} "
        f"{'comm ms':>8} {'hidden ms':>9}",
    ]
    for r in rows:
        if r["status"] != "ok":
            lines.append(f"{r['system']:28} {r['status']}")
            continue
        pk = r["peak_bytes"] / 2**20
        st = r["step_seconds"] * 1e3
        rp = f"{r['peak_bytes'] / ref['peak_bytes']:.2f}" if ref else "-"
        rs = f"{r['step_seconds'] / ref['step_seconds']:.2f}" if ref else "-"
        comm = f"{r['comm_seconds'] * 1e3:.1f}" if "comm_seconds" in r else "-"
        hidden = f"{r['hidden_comm_seconds'] * 1e3:.1f}" if "comm_seconds" in r else "-"
        lines.append(f"{r['system']:28} {pk:12.1f} {rp:>7} {st:9.1f} {rs:>7} {comm:>8} {hidden:>9}")
    return "\n".join(lines)


def main(args) -> int:
    world = args.world
    preset = args.preset or ("quick" if args.quick else "default")
    overrides = {}
    for item in args.set:
        key, _, value = item.partition("=")
        w, _, size = key.partition(".")
        if w == "mlp":
            overrides[size] = value
    workload = workloads.make("mlp", preset, overrides)
    systems = [s for s in args.systems.split(",") if s in SYSTEMS] or SYSTEMS
    steps = args.steps or workload.default_steps
    threads = max(1, (args.threads or os.cpu_count() or 1) // world)
    rows = []
    for system in systems:
        print(f"[{system}] {world} ranks ...", flush=True)
        ranks = run_system(system, world, preset, overrides, steps, threads, args.timeout)
        rows.append(summary(system, ranks))
    text = table(rows, world, workload)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "distributed.json").write_text(json.dumps(rows, indent=2))
    (Path(args.out) / "distributed.txt").write_text(text + "\n")
    print(f"wrote distributed.json, distributed.txt to {args.out}")
    return 0
