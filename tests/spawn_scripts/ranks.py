"""Plain PyTorch: `torch.multiprocessing.spawn` runs `work(rank, ...)` in two processes, once
succeeding ("ok"), once with rank 1 raising ("raise"), once with rank 1 exiting with code 3
("exit"). Prints, as JSON, what each rank saw and what each call raised.

usage: ranks.py CASE [CASE ...]
"""

import json
import sys

import torch
import torch.multiprocessing as mp


def work(rank, queue, fail):
    if fail == "raise" and rank == 1:
        raise ValueError(f"rank {rank} gives up")
    if fail == "exit" and rank == 1:
        sys.exit(3)
    x = torch.arange(4, dtype=torch.float32) * (rank + 1)
    if queue is not None:
        queue.put([rank, torch.__name__, type(x).__module__, mp.__name__, x.sum().item()])


def outcome(fail, queue=None):
    try:
        returned = mp.spawn(work, args=(queue, fail), nprocs=2)
    except (mp.ProcessRaisedException, mp.ProcessExitedException) as e:
        return {
            "raised": type(e).__name__,
            "msg": str(e),
            "error_index": e.error_index,
            "exit_code": getattr(e, "exit_code", None),
        }
    return {"returned": returned}


if __name__ == "__main__":
    report = {"main": [torch.__name__, mp.__name__]}
    if "ok" in sys.argv[1:]:
        queue = mp.get_context("spawn").SimpleQueue()
        report["ok"] = outcome("none", queue)
        report["ranks"] = sorted(queue.get() for _ in range(2))
    for case in ("raise", "exit"):
        if case in sys.argv[1:]:
            report[case] = outcome(case)
    print(json.dumps(report))
