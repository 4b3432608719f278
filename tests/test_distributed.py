"""gradstream.distributed, DistributedDataParallel and ZeroRedundancyOptimizer with two
processes on localhost over gloo, against one process on the concatenated batch.

The scenarios run in spawned ranks (tests/distributed_workers.py); every launch has a
timeout, so a hang fails the test instead of stalling the suite."""

import subprocess
import sys

import pytest

pytestmark = pytest.mark.cpu_backend(
    "runs programs in child processes, where an op with no kernel on the path cannot be "
    "told from a bug"
)

torch = pytest.importorskip("torch")
if not torch.distributed.is_available() or not torch.distributed.is_gloo_available():
    pytest.skip("torch.distributed with gloo is not available", allow_module_level=True)

import distributed_workers as workers  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.distributed as dist  # noqa: E402
from gradstream.nn.parallel import DistributedDataParallel  # noqa: E402

TOL = 1e-6


@pytest.fixture(scope="module")
def ranks():
    """Every passing scenario, run once on two ranks: {scenario: [rank 0's, rank 1's]}."""
    results = workers.run_world("every_scenario", timeout=120)
    for r, (status, payload) in enumerate(results):
        if status != "ok":
            detail = payload[2] if status == "error" else "no answer before the timeout"
            pytest.fail(f"rank {r}: {status}\n{detail}")
    out = {}
    for name in results[0][1]:
        out[name] = [res[1][name][1] for res in results]
    return out


def test_collectives(ranks):
    r0, r1 = ranks["collectives"]
    for r, res in enumerate((r0, r1)):
        assert res["rank"] == r and res["world"] == 2
        assert res["all_reduce"] == [3.0, 6.0, 9.0]
        assert res["max"] == [1.0, 0.0]
        expected = [[3.0 * (4 * i + j) for j in range(4)] for i in range(3)]
        assert res["noncontiguous"] == expected
        assert res["broadcast"] == [[8, 8], [8, 8]]
        assert res["all_gather"] == [[0.0] * 3, [1.0] * 3]
        assert res["work_type"] == "Work" and res["work_done"]
        assert res["async"] == [2.0] * 4
    # reduce_scatter: rank r gets sum over ranks s of (10 r + s)
    assert r0["reduce_scatter"] == [1.0, 1.0]
    assert r1["reduce_scatter"] == [21.0, 21.0]


@pytest.mark.parametrize("as_view", [False, True])
def test_ddp_steps_equal_one_process_on_the_whole_batch(ranks, as_view):
    for res in ranks["ddp_steps"]:
        assert res[f"as_view={as_view}"] < TOL
        assert res[f"buckets as_view={as_view}"] > 1
        assert res[f"freed as_view={as_view}"]  # no reference cycle through the parameters


def test_no_sync_accumulation_equals_a_bigger_batch(ranks):
    for res in ranks["no_sync"]:
        assert res["max_diff"] < TOL


def test_in_backward_ddp_with_clipping_and_a_scheduler(ranks):
    for res in ranks["in_backward_clip_schedule"]:
        assert res["max_diff"] < TOL
        assert res["plain_max_diff"] < TOL
        # the global norm is the one of the averaged gradients, as clip_grad_norm_ sees them
        for n, ref in zip(res["norms"], res["ref_norms"], strict=True):
            assert abs(n - ref) < 1e-6 * max(1.0, ref)  # clip_grad_norm_ returns float32
        assert min(res["ref_norms"]) > 0.3  # clipping did act
        assert res["grads_left"] == [0] * workers.STEPS  # stepped and freed in backward


def test_zero_redundancy_optimizer_equals_adam(ranks):
    r0, r1 = ranks["zero"]
    for res in (r0, r1):
        assert res["max_diff"] < TOL
        assert 0 < res["local_states"] < res["params"]  # each rank holds its shard only
    assert r0["local_states"] + r1["local_states"] == r0["params"]
    assert r0["state_keys"] and r0["state_diff"] < TOL
    assert r0["lr"] == pytest.approx(0.05 * 0.5)
    assert r1["unconsolidated"] == "RuntimeError"


def test_a_rank_that_raises_makes_the_others_fail():
    results = workers.run_world("rank_raises", timeout=60)
    (s0, p0), (s1, p1) = results
    assert s1 == "error" and p1[0] == "ValueError"
    assert s0 == "error", f"rank 0 did not fail: {s0} {p0}"
    assert p0[0] in ("RuntimeError", "DistBackendError"), p0
    assert p0[3] - p1[3] < 20.0  # rank 0 failed soon after rank 1 died, well within timeout


def test_ddp_needs_a_process_group():
    if dist.is_initialized():
        pytest.skip("a process group is initialized in this process")
    with pytest.raises(RuntimeError, match="process group"):
        DistributedDataParallel(gs.nn.Linear(2, 2))


def test_collectives_check_their_arguments():
    with pytest.raises(TypeError, match="all_reduce"):
        dist.all_reduce([1.0, 2.0])
    with pytest.raises(TypeError, match="all_gather"):
        dist.all_gather([gs.zeros(2), "x"], gs.zeros(2))
    assert dist.is_available()


def test_an_in_backward_optimizer_built_before_ddp_is_refused():
    """Built first, it would step with the local gradient before the all-reduce: refused."""
    code = """
import socket
import gradstream as gs
import gradstream.distributed as dist
from gradstream.nn.parallel import DistributedDataParallel
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
model = gs.nn.Linear(3, 2)
opt = gs.optim.Adam(model.parameters(), in_backward=True)
try:
    DistributedDataParallel(model)
except RuntimeError as e:
    print("refused:", "after DistributedDataParallel" in str(e))
opt.remove_hooks()
DistributedDataParallel(model)
print("built after remove_hooks")
dist.destroy_process_group()
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["refused: True", "built after remove_hooks"]
