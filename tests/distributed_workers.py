"""What each rank runs in the two-process tests (test_distributed.py). Spawned processes
import this module, so it stays light. Each scenario returns a dict of measured figures
(largest parameter differences from the one-process reference, ...) that the tests check.
"""

from __future__ import annotations

import gc
import os
import time
import traceback
import weakref
from datetime import timedelta

import numpy as np

import gradstream as gs
import gradstream.distributed as dist
from gradstream import nn
from gradstream.distributed.optim import ZeroRedundancyOptimizer
from gradstream.nn.parallel import DistributedDataParallel as DDP

B = 4  # samples per rank and micro-batch
STEPS = 3
SMALL_BUCKET_MB = 400 / 2**20  # a few parameters a bucket: several buckets in flight


def run_world(scenario: str, world: int = 2, timeout: float = 60.0) -> list:
    """Run `scenario` on `world` spawned ranks over gloo; each rank's (status, payload)."""
    import multiprocessing as mp
    import queue
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [
        ctx.Process(target=entry, args=(scenario, r, world, port, q), daemon=True)
        for r in range(world)
    ]
    for p in procs:
        p.start()
    results: dict = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            try:
                rank, status, payload = q.get(timeout=left)
            except queue.Empty:
                break
            results[rank] = (status, payload)
    finally:
        for p in procs:
            p.join(timeout=max(0.0, deadline - time.monotonic()) + 1)
            if p.is_alive():
                p.kill()
                p.join()
    return [results.get(r, ("hung", None)) for r in range(world)]


def entry(scenario: str, rank: int, world: int, port: int, q) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    import torch

    torch.set_num_threads(1)
    try:
        dist.init_process_group("gloo", rank=rank, world_size=world, timeout=timedelta(seconds=15))
        out = SCENARIOS[scenario](rank, world)
        q.put((rank, "ok", out))
    except BaseException as e:  # reported to the parent, which decides
        q.put((rank, "error", (type(e).__name__, str(e), traceback.format_exc(), time.time())))
        if scenario == "rank_raises":
            q.close()
            q.join_thread()
            os._exit(1)  # a crashed rank: no clean shutdown
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


# ---- models and data ----


def mlp(seed: int) -> nn.Module:
    gs.manual_seed(seed)
    return nn.Sequential(
        nn.Linear(6, 12), nn.Tanh(), nn.Linear(12, 12), nn.Tanh(), nn.Linear(12, 3)
    ).double()


def batch(step: int, micro: int = 0):
    """The whole (all ranks) batch of a step: 2*B samples."""
    rng = np.random.default_rng(1000 * step + micro)
    x = rng.standard_normal((2 * B, 6))
    y = rng.standard_normal((2 * B, 3))
    return gs.tensor(x), gs.tensor(y)


def shard(t, rank: int):
    return t[rank * B : (rank + 1) * B]


def loss_fn(model, x, y):
    return ((model(x) - y) ** 2).mean()


def max_diff(a: nn.Module, b: nn.Module) -> float:
    pairs = zip(a.parameters(), b.parameters(), strict=True)
    return max(float((p.detach() - q.detach()).abs().max()) for p, q in pairs)


# ---- scenarios ----


def collectives(rank: int, world: int) -> dict:
    out = {}
    t = gs.tensor([1.0, 2.0, 3.0]) * (rank + 1)
    dist.all_reduce(t)
    out["all_reduce"] = t.tolist()
    t = gs.tensor([float(rank), -float(rank)])
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    out["max"] = t.tolist()
    m = gs.arange(12.0).reshape(3, 4) * (rank + 1)
    col = m.t()  # non-contiguous
    dist.all_reduce(col)
    out["noncontiguous"] = m.tolist()
    b = gs.full((2, 2), float(rank + 7), dtype=gs.int64)
    dist.broadcast(b, src=1)
    out["broadcast"] = b.tolist()
    gathered = [gs.zeros(3) for _ in range(world)]
    dist.all_gather(gathered, gs.full((3,), float(rank)))
    out["all_gather"] = [g.tolist() for g in gathered]
    rs = gs.zeros(2)
    dist.reduce_scatter(rs, [gs.full((2,), float(10 * r + rank)) for r in range(world)])
    out["reduce_scatter"] = rs.tolist()
    w = dist.all_reduce(gs.ones(4), async_op=True)
    out["work_type"] = type(w).__name__
    w.wait()
    out["work_done"] = w.is_completed()
    a = gs.ones(4)
    dist.all_reduce(a, async_op=True).wait()
    out["async"] = a.tolist()
    dist.barrier()
    out["rank"], out["world"] = dist.get_rank(), dist.get_world_size()
    return out


def ddp_steps(rank: int, world: int) -> dict:
    out = {}
    for as_view in (False, True):
        ref = mlp(0)
        model = mlp(rank)  # a different start on each rank: DDP broadcasts rank 0's
        ddp = DDP(model, bucket_cap_mb=SMALL_BUCKET_MB, gradient_as_bucket_view=as_view)
        opt = gs.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
        ref_opt = gs.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
        for step in range(STEPS):
            x, y = batch(step)
            opt.zero_grad()
            loss_fn(ddp, shard(x, rank), shard(y, rank)).backward()
            opt.step()
            ref_opt.zero_grad()
            loss_fn(ref, x, y).backward()
            ref_opt.step()
        out[f"as_view={as_view}"] = max_diff(model, ref)
        out[f"buckets as_view={as_view}"] = len(ddp.reducer.buckets)
        reducer = weakref.ref(ddp.reducer)
        del ddp, opt
        gc.collect()
        out[f"freed as_view={as_view}"] = reducer() is None
    return out


def no_sync(rank: int, world: int) -> dict:
    ref = mlp(0)
    model = mlp(rank)
    ddp = DDP(model, bucket_cap_mb=SMALL_BUCKET_MB)
    opt = gs.optim.SGD(ddp.parameters(), lr=0.1)
    ref_opt = gs.optim.SGD(ref.parameters(), lr=0.1)
    grads_local_after_no_sync = None
    for step in range(STEPS):
        opt.zero_grad()
        ref_opt.zero_grad()
        for micro in range(2):
            x, y = batch(step, micro)
            if micro == 0:
                with ddp.no_sync():
                    loss_fn(ddp, shard(x, rank), shard(y, rank)).backward()
                grads_local_after_no_sync = [p.grad.clone() for p in model.parameters()]
            else:
                loss_fn(ddp, shard(x, rank), shard(y, rank)).backward()
            loss_fn(ref, x, y).backward()
        opt.step()
        ref_opt.step()
    return {
        "max_diff": max_diff(model, ref),
        "grad_dims": [list(g.shape) for g in grads_local_after_no_sync],
    }


def in_backward_clip_schedule(rank: int, world: int) -> dict:
    ref = mlp(0)
    model = mlp(rank)
    ddp = DDP(model, bucket_cap_mb=SMALL_BUCKET_MB, gradient_as_bucket_view=True)
    opt = gs.optim.Adam(ddp.parameters(), lr=0.05, in_backward=True)
    opt.clip_grad(max_norm=0.3, global_norm=True)
    sched = gs.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ref_opt = gs.optim.Adam(ref.parameters(), lr=0.05)
    ref_sched = gs.optim.lr_scheduler.StepLR(ref_opt, step_size=1, gamma=0.5)
    norms, ref_norms, grads_left = [], [], []
    for step in range(STEPS):
        x, y = batch(step)
        opt.backward(loss_fn(ddp, shard(x, rank), shard(y, rank)))
        norms.append(opt.last_total_norm)
        grads_left.append(sum(p.grad is not None for p in model.parameters()))
        sched.step()
        ref_opt.zero_grad()
        loss_fn(ref, x, y).backward()
        ref_norms.append(float(nn.utils.clip_grad_norm_(ref.parameters(), 0.3)))
        ref_opt.step()
        ref_sched.step()
    # no clipping: a plain in-backward step, one backward per step
    plain = mlp(rank)
    plain_ref = mlp(0)
    ddp2 = DDP(plain, bucket_cap_mb=SMALL_BUCKET_MB)
    opt2 = gs.optim.Adam(ddp2.parameters(), lr=0.05, in_backward=True)
    ref2 = gs.optim.Adam(plain_ref.parameters(), lr=0.05, in_backward=True)
    # per-parameter clipping, by norm and by value, as the one-process in-backward step does
    opt2.clip_grad(max_value=0.04, max_norm=0.1)
    ref2.clip_grad(max_value=0.04, max_norm=0.1)
    for step in range(STEPS):
        x, y = batch(step)
        loss_fn(ddp2, shard(x, rank), shard(y, rank)).backward()
        loss_fn(plain_ref, x, y).backward()
    return {
        "max_diff": max_diff(model, ref),
        "norms": norms,
        "ref_norms": ref_norms,
        "grads_left": grads_left,
        "plain_max_diff": max_diff(plain, plain_ref),
        "plain_in_backward": opt2.in_backward,
    }


def zero(rank: int, world: int) -> dict:
    ref = mlp(0)
    model = mlp(rank)
    ddp = DDP(model)
    opt = ZeroRedundancyOptimizer(ddp.parameters(), gs.optim.Adam, lr=0.05)
    sched = gs.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    ref_opt = gs.optim.Adam(ref.parameters(), lr=0.05)
    ref_sched = gs.optim.lr_scheduler.StepLR(ref_opt, step_size=2, gamma=0.5)
    for step in range(STEPS):
        x, y = batch(step)
        opt.zero_grad()
        loss_fn(ddp, shard(x, rank), shard(y, rank)).backward()
        opt.step()
        sched.step()
        ref_opt.zero_grad()
        loss_fn(ref, x, y).backward()
        ref_opt.step()
        ref_sched.step()
    out = {"max_diff": max_diff(model, ref)}
    out["local_states"] = len(opt.optim.state_dict()["state"])
    out["params"] = len(list(model.parameters()))
    opt.consolidate_state_dict(to=0)
    if rank == 0:
        sd, rsd = opt.state_dict(), ref_opt.state_dict()
        out["state_keys"] = sorted(sd["state"]) == sorted(rsd["state"])
        out["state_diff"] = max(
            float((sd["state"][k][name] - rsd["state"][k][name]).abs().max())
            for k in rsd["state"]
            for name in ("exp_avg", "exp_avg_sq")
        )
        out["lr"] = sd["param_groups"][0]["lr"]
        # a fresh ZeRO optimizer loads the consolidated state and steps as the reference
    else:
        try:
            opt.state_dict()
            out["unconsolidated"] = "no error"
        except RuntimeError:
            out["unconsolidated"] = "RuntimeError"
    return out


def rank_raises(rank: int, world: int) -> dict:
    t = gs.ones(3)
    dist.all_reduce(t)  # both ranks get here
    if rank == 1:
        raise ValueError("rank 1 fails in its training step")
    start = time.time()
    try:
        dist.all_reduce(t)  # rank 1 never joins
    finally:
        pass
    return {"elapsed": time.time() - start}


SCENARIOS = {
    "collectives": collectives,
    "ddp_steps": ddp_steps,
    "no_sync": no_sync,
    "in_backward_clip_schedule": in_backward_clip_schedule,
    "zero": zero,
    "rank_raises": rank_raises,
}


def every_scenario(rank: int, world: int) -> dict:
    """The passing scenarios in one launch (one process start for the whole module)."""
    out = {}
    for name in ("collectives", "ddp_steps", "no_sync", "in_backward_clip_schedule", "zero"):
        try:
            out[name] = ("ok", SCENARIOS[name](rank, world))
        except Exception as e:
            out[name] = ("error", f"{type(e).__name__}: {e}\n{traceback.format_exc()}")
            raise
    return out


SCENARIOS["every_scenario"] = every_scenario
