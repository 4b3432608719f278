"""gradstream.memory: exact bytes, categories, track(), history, snapshots, timeline."""

import gc
import pickle
import pickletools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import gradstream as gs
from gradstream import memory

MB = 1000 * 1000


@pytest.fixture(autouse=True)
def _no_history():
    """Every test starts and ends without a recorded history or a phase."""
    memory.record_history(None)
    yield
    memory.record_history(None)


def alloc():
    gc.collect()
    return memory.memory_allocated()


def param(*shape):
    p = gs.randn(*shape, requires_grad=True)
    p._mark_parameter()
    return p


# ---- exact bytes ----


@pytest.mark.parametrize(
    "dtype, itemsize",
    [(gs.float32, 4), (gs.float64, 8), (gs.float16, 2), (gs.int64, 8), (gs.int32, 4), (gs.bool, 1)],
)
def test_creation_adds_exact_bytes(dtype, itemsize):
    base = alloc()
    t = gs.zeros(1000, 250, dtype=dtype)
    assert memory.memory_allocated() - base == 250_000 * itemsize
    del t
    assert memory.memory_allocated() == base


def test_thousand_square_float32_is_four_million_bytes():
    base = alloc()
    t = gs.ones(1000, 1000)
    assert memory.memory_allocated() - base == 4 * MB
    del t
    assert memory.memory_allocated() == base


def test_empty_and_scalar_tensors():
    base = alloc()
    e = gs.zeros(0, 5)
    assert memory.memory_allocated() == base
    s = gs.tensor(3.0)
    assert memory.memory_allocated() - base == 4
    del e, s
    assert memory.memory_allocated() == base


def test_views_add_no_bytes():
    t = gs.randn(200, 300)
    base = alloc()
    views = [
        t.t(),
        t.transpose(0, 1),
        t.reshape(300, 200),
        t.view(-1),
        t.unsqueeze(0),
        t.detach(),
        t.permute(1, 0),
        t.unsqueeze(0).expand(4, 200, 300),
        t.contiguous(),  # already contiguous: the same buffer
    ]
    assert memory.memory_allocated() == base
    del views


def test_copies_add_their_bytes():
    t = gs.randn(200, 300)
    base = alloc()
    c = t.clone()
    assert memory.memory_allocated() - base == 200 * 300 * 4
    e = t.double()
    assert memory.memory_allocated() - base == 200 * 300 * 4 + 200 * 300 * 8
    del c, e
    assert memory.memory_allocated() == base


@settings(max_examples=60, deadline=None)
@given(
    shape=st.lists(st.integers(0, 7), min_size=1, max_size=4),
    seed=st.integers(0, 2**16),
    dtype=st.sampled_from(["float32", "float64", "int64", "bool"]),
)
def test_strided_copy_holds_exactly_its_elements(shape, seed, dtype):
    """A permuted (and sliced) view made contiguous costs numel * itemsize bytes, no more
    (a copy collected into a growing Vec would hold up to twice that), or nothing when the
    view already is contiguous (as PyTorch, `contiguous()` then returns it); NumPy's values."""
    rng = np.random.default_rng(seed)
    a = (rng.standard_normal(shape) * 10).astype(dtype)
    t = gs.tensor(a)
    perm = [int(i) for i in rng.permutation(len(shape))]
    v, ref = t.permute(*perm), a.transpose(perm)
    if ref.ndim and ref.shape[-1] > 1:
        v, ref = v[..., 1:], ref[..., 1:]
    copied = not v.is_contiguous()
    base = alloc()
    d = v.contiguous()
    assert memory.memory_allocated() - base == (ref.size * ref.itemsize if copied else 0)
    assert d.is_contiguous()
    np.testing.assert_array_equal(d.numpy(), ref)
    del d
    assert memory.memory_allocated() == base


def test_buffer_lives_while_a_view_does():
    base = alloc()
    t = gs.randn(100, 100)
    v = t.t()
    del t
    assert memory.memory_allocated() - base == 40_000
    del v
    assert memory.memory_allocated() == base


def test_in_place_ops_add_no_bytes():
    t = gs.randn(100, 100)
    base = alloc()
    t.zero_()
    t.fill_(2.0)
    t.copy_(gs.ones(100, 100))  # the temporary source is freed again
    assert memory.memory_allocated() == base


def test_peak_and_reset():
    base = alloc()
    memory.reset_peak_memory_stats()
    assert memory.max_memory_allocated() == base
    a = gs.zeros(1000, 1000)
    del a
    assert memory.max_memory_allocated() - base == 4 * MB
    assert memory.memory_allocated() == base
    memory.reset_peak_memory_stats()
    assert memory.max_memory_allocated() == base


def test_track_reports_peak_and_net():
    keep = []
    with memory.track() as m:
        tmp = gs.zeros(1000, 1000)  # 4 MB, freed inside
        keep.append(gs.zeros(500, 1000))  # 2 MB, kept
        del tmp
    assert m.peak_increase == 6 * MB
    assert m.net == 2 * MB
    assert m.by_category["other"] == 2 * MB
    with memory.track() as m2:
        keep.clear()
    assert m2.net == -2 * MB
    assert m2.peak_increase == 0


def test_memory_stats_keys_and_counts():
    s0 = memory.memory_stats()
    for key in (
        "allocated_bytes.all.current",
        "allocated_bytes.all.peak",
        "allocated_bytes.all.allocated",
        "allocated_bytes.all.freed",
        "allocation.all.current",
        "reserved_bytes.all.current",
        "num_allocs",
        "num_frees",
        "allocated_bytes.parameter.current",
        "allocated_bytes.activation.peak",
    ):
        assert key in s0, key
    t = gs.zeros(10, 10)
    del t
    s1 = memory.memory_stats()
    assert s1["num_allocs"] - s0["num_allocs"] == 1
    assert s1["num_frees"] - s0["num_frees"] == 1
    assert s1["allocated_bytes.all.allocated"] - s0["allocated_bytes.all.allocated"] == 400
    assert s1["allocated_bytes.all.freed"] - s0["allocated_bytes.all.freed"] == 400
    assert s1["allocated_bytes.all.current"] == memory.memory_allocated()
    assert "parameter" in memory.memory_summary()
    assert memory.accounting_mode() == "on"


# ---- categories and backward ----


def linear_relu_sum(x, w, b):
    return gs.relu(x.matmul(w.t()) + b).sum()


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
def test_categories_of_a_linear_layer():
    gc.collect()
    cat0 = memory.memory_by_category()
    w, b = param(32, 64), param(32)
    x = gs.randn(16, 64)
    cat = memory.memory_by_category()
    assert cat["parameter"] - cat0["parameter"] == (32 * 64 + 32) * 4

    h = gs.relu(x.matmul(w.t()) + b)
    loss = h.sum()
    cat = memory.memory_by_category()
    # matmul saves x (w needs a gradient, x does not); relu saves a 1-bit mask of h.
    assert cat["activation"] - cat0["activation"] == 16 * 64 * 4 + 16 * 32 // 8
    assert cat["gradient"] == cat0["gradient"]

    loss.backward()
    cat = memory.memory_by_category()
    assert cat["activation"] == cat0["activation"]  # released by the backward
    assert cat["gradient"] - cat0["gradient"] == (32 * 64 + 32) * 4

    w.grad = None
    b.grad = None
    assert memory.memory_by_category()["gradient"] == cat0["gradient"]


def test_backward_returns_to_baseline():
    w, b = param(64, 128), param(64)
    x = gs.randn(32, 128)
    base = alloc()
    for _ in range(3):
        loss = linear_relu_sum(x, w, b)
        loss.backward()
        del loss
        assert memory.memory_allocated() - base == (64 * 128 + 64) * 4  # the two .grad
        w.grad = None
        b.grad = None
        assert memory.memory_allocated() == base


def test_dropping_an_unused_graph_frees_its_activations():
    w, b = param(64, 128), param(64)
    x = gs.randn(32, 128)
    base = alloc()
    act = memory.memory_by_category()["activation"]
    loss = linear_relu_sum(x, w, b)
    assert memory.memory_allocated() > base
    del loss
    assert memory.memory_allocated() == base
    assert memory.memory_by_category()["activation"] == act


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
def test_max_by_category_tracks_activation_peak():
    w, b = param(16, 8), param(16)
    x = gs.randn(4, 8)
    gc.collect()
    memory.reset_peak_memory_stats()
    before = memory.memory_by_category()["activation"]
    linear_relu_sum(x, w, b).backward()
    peak = memory.max_memory_by_category()["activation"]
    assert peak - before == 4 * 8 * 4 + 4 * 16 // 8  # x, and relu's 1-bit mask


# ---- history and snapshots ----


def mlp_step(x, params, lr=0.1):
    w1, w2 = params
    with memory.phase("forward"):
        loss = gs.relu(x.matmul(w1)).matmul(w2).sum()
    with memory.phase("backward"):
        loss.backward()
    with memory.phase("optimizer"), gs.no_grad():
        for p in params:
            p.copy_(p - lr * p.grad)
            p.grad = None


def recorded_steps(n=2, **kw):
    params = [param(32, 64), param(64, 8)]
    x = gs.randn(16, 32)
    memory.record_history("all", **kw)
    for _ in range(n):
        mlp_step(x, params)
    snap = memory.snapshot()
    return snap, params, x


def test_history_labels_phases_and_ops():
    snap, *_ = recorded_steps(1)
    events = snap["gradstream"]["events"]
    kinds = {e["kind"] for e in events}
    assert {"alloc", "free", "category", "phase"} <= kinds
    fwd_ops = {e["op"] for e in events if e["kind"] == "alloc" and e["phase"] == "forward"}
    assert {"MmBackward0", "ReluBackward0"} <= fwd_ops
    assert any(op.startswith("SumBackward") for op in fwd_ops)
    bwd_ops = {e["op"] for e in events if e["phase"] == "backward"}
    assert "MmBackward0" in bwd_ops
    assert any(e["phase"] == "optimizer" and e["kind"] == "alloc" for e in events)
    grads = [e for e in events if e["kind"] == "category" and e["category"] == "gradient"]
    assert sorted(e["size"] for e in grads) == [64 * 8 * 4, 32 * 64 * 4]


def test_forward_ops_are_labelled_without_a_phase():
    w = param(8, 8)
    memory.record_history("all")
    y = gs.relu(w)
    events = memory.snapshot()["gradstream"]["events"]
    allocs = [e for e in events if e["kind"] == "alloc"]  # the output and relu's mask
    assert ("forward", "ReluBackward0") in [(a["phase"], a["op"]) for a in allocs]
    y.sum().backward()
    events = memory.snapshot()["gradstream"]["events"]
    assert any(e["phase"] == "backward" for e in events)  # the engine names its nodes


def test_phases_nest_and_restore():
    memory.record_history("all")
    with memory.phase("outer"):
        with memory.phase("inner"):
            t = gs.zeros(2)
        u = gs.zeros(2)
    v = gs.zeros(2)
    allocs = [e for e in memory.snapshot()["gradstream"]["events"] if e["kind"] == "alloc"]
    assert [e["phase"] for e in allocs] == ["inner", "outer", ""]
    del t, u, v


def test_snapshot_has_the_visualizer_layout():
    snap, params, x = recorded_steps(2)
    snap = pickle.loads(pickle.dumps(snap))
    assert set(snap) >= {"segments", "device_traces"}
    assert len(snap["device_traces"]) == 1
    trace = snap["device_traces"][0]
    actions = {e["action"] for e in trace}
    assert {"alloc", "free_requested", "free_completed", "segment_alloc", "segment_free"} <= actions
    for e in trace:
        assert {"action", "addr", "size", "stream", "time_us", "frames"} <= set(e)
        for f in e["frames"]:
            assert set(f) >= {"filename", "line", "name"}
    times = [e["time_us"] for e in trace]
    assert times == sorted(times)
    # Every free is requested then completed, for an address that was allocated.
    live = set()
    for i, e in enumerate(trace):
        if e["action"] == "alloc":
            live.add(e["addr"])
            assert trace[i - 1]["action"] == "segment_alloc"
        elif e["action"] == "free_requested":
            assert trace[i + 1]["action"] == "free_completed"
            assert trace[i + 2]["action"] == "segment_free"
            live.discard(e["addr"])
    cats = {e.get("category") for e in trace if e["action"] == "alloc"}
    assert {"gradient", "activation"} <= cats  # parameters were allocated before recording
    assert "parameter" in {s["blocks"][0]["category"] for s in snap["segments"]}
    # Segments: every live buffer, one active block each, summing to memory_allocated().
    assert sum(s["total_size"] for s in snap["segments"]) == memory.memory_allocated()
    for s in snap["segments"]:
        assert {"device", "address", "total_size", "stream", "segment_type", "blocks"} <= set(s)
        (blk,) = s["blocks"]
        assert blk["state"] == "active_allocated"
        assert blk["size"] == blk["requested_size"] == s["total_size"]
    seg_addrs = {s["address"] for s in snap["segments"]}
    assert {e for e in live} <= seg_addrs
    del params, x


def test_dump_snapshot_uses_only_opcodes_the_web_viewer_reads(tmp_path):
    recorded_steps(1)
    path = tmp_path / "snap.pickle"
    memory.dump_snapshot(path)
    data = path.read_bytes()
    # The pickle reader in torch/utils/viz/MemoryViz.js handles protocols 2-4 and these opcodes.
    readable = {
        "PROTO", "FRAME", "STOP", "MARK", "MEMOIZE", "BINPUT", "LONG_BINPUT", "BINGET",
        "LONG_BINGET", "EMPTY_DICT", "EMPTY_LIST", "EMPTY_TUPLE", "DICT", "LIST", "TUPLE",
        "TUPLE1", "TUPLE2", "TUPLE3", "SETITEM", "SETITEMS", "APPEND", "APPENDS", "BININT",
        "BININT1", "BININT2", "LONG1", "SHORT_BINUNICODE", "BINUNICODE", "NEWTRUE",
        "NEWFALSE", "NONE", "BINFLOAT",
    }  # fmt: skip
    used = {op.name for op, _, _ in pickletools.genops(data)}
    assert used <= readable, used - readable
    assert data[1] <= 4  # protocol
    loaded = pickle.loads(data)
    assert loaded["device_traces"][0][-1]["action"] == "snapshot"


def test_torch_memory_viz_accepts_the_snapshot(torch_ref, tmp_path):
    import torch.cuda._memory_viz as viz

    snap, params, x = recorded_steps(2)
    html = viz.trace_plot(snap)
    assert "snapshot.pickle" in html
    assert "snapshot.pickle" in viz.segment_plot(snap)
    assert "Active Cached" in viz.trace_plot(snap, plot_segments=True)
    summary = viz.segsum(snap)  # checks that every segment's bytes add up
    assert "total_allocated" in summary
    text = viz.trace(snap)
    assert "TOTAL MEM" in text
    lines = viz.memory(snap, format_flamegraph=lambda s: s)
    assert sum(int(line.rsplit(" ", 1)[1]) for line in lines.splitlines()) == sum(
        s["total_size"] for s in snap["segments"]
    )
    viz.segments(snap, format_flamegraph=lambda s: s)
    filtered = viz.filter_alloc_free_pairs(pickle.loads(pickle.dumps(snap)))
    remaining = [e for e in filtered["device_traces"][0] if e["action"] == "alloc"]
    assert {e["addr"] for e in remaining} <= {s["address"] for s in snap["segments"]}
    del params, x


def test_state_only_history_keeps_labels_of_live_buffers():
    memory.record_history("state")
    with memory.phase("forward"):
        t = gs.zeros(10)
    snap = memory.snapshot()
    assert snap["device_traces"] == [[]]
    (seg,) = [s for s in snap["segments"] if s["total_size"] == 40 and s["frames"]]
    assert seg["frames"][0]["filename"] == "gradstream/forward"
    del t


def test_timeline_replays_to_the_exact_current_bytes():
    snap, params, x = recorded_steps(2)
    tl = memory.timeline(snap)
    now = memory.memory_by_category()
    for c in memory.CATEGORIES:
        assert tl.bytes[c][-1] == now[c], c
    assert len(tl.time_s) == len(snap["gradstream"]["events"]) + 1
    names = [p[0] for p in tl.phases]
    assert names == ["forward", "backward", "optimizer"] * 2
    # Peak inside the steps: parameters plus the saved activations and gradients.
    assert max(tl.total) > sum(now.values())
    del params, x


def test_ring_buffer_keeps_the_last_entries_and_stays_exact():
    snap, params, x = recorded_steps(3, max_entries=7)
    events = snap["gradstream"]["events"]
    assert len(events) == 7
    tl = memory.timeline(snap)
    now = memory.memory_by_category()
    for c in memory.CATEGORIES:
        assert tl.bytes[c][-1] == now[c], c
    del params, x


def test_recording_off_records_nothing():
    memory.record_history("all")
    memory.record_history(None)
    t = gs.zeros(5)
    assert memory.snapshot()["gradstream"]["events"] == []
    del t


def test_plot_timeline_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    recorded_steps(2)
    path = tmp_path / "snap.pickle"
    memory.dump_snapshot(path)
    out = tmp_path / "timeline.png"
    tl = memory.plot_timeline(path, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert max(tl.total) > 0


# ---- bad input ----


def test_record_history_rejects_unknown_modes():
    with pytest.raises(ValueError, match="'everything'"):
        memory.record_history("everything")
    with pytest.raises(ValueError, match="-1"):
        memory.record_history("all", max_entries=-1)


def test_timeline_needs_a_gradstream_history():
    with pytest.raises(ValueError, match="gradstream"):
        memory.timeline({"segments": [], "device_traces": [[]]})


def _checkpointed_step(use_checkpoint):
    from gradstream.utils.checkpoint import checkpoint_chunks

    w1, w2 = param(32, 256), param(256, 4)
    x = gs.randn(512, 32)

    def f(h):
        return gs.relu(h @ w1) @ w2

    memory.record_history("all")
    with memory.phase("forward"):
        out = checkpoint_chunks(f, x, chunks=4) if use_checkpoint else f(x)
        loss = (out * out).sum()
    with memory.phase("backward"):
        loss.backward()
    snap = memory.snapshot()
    memory.record_history(None)
    return snap, (w1, w2, x)


def test_recomputed_activations_are_labelled_in_the_history():
    snap, keep = _checkpointed_step(True)
    events = snap["gradstream"]["events"]
    recomputed = [e for e in events if e["kind"] == "alloc" and e["phase"] == "recompute"]
    assert recomputed, "the recompute allocated nothing?"
    ops = {e["op"] for e in recomputed}
    # Each buffer an op made during the recompute is named after that op.
    assert {"recompute:MmBackward0", "recompute:ReluBackward0"} <= ops, ops
    # The forward's own buffers are not recomputes, and the backward goes on afterwards.
    assert not any(e["op"].startswith("recompute:") for e in events if e["phase"] != "recompute")
    assert any(e["phase"] == "backward" and e["kind"] == "alloc" for e in events)
    # The timeline draws them as their own band, which is empty again at the end.
    tl = memory.timeline(snap)
    assert max(tl.bytes["recomputed"]) >= 128 * 256 * 4  # one chunk's hidden activation
    assert tl.bytes["recomputed"][-1] == 0
    assert "recompute" in [p[0] for p in tl.phases]
    del keep


def test_plain_backward_has_no_recompute_labels():
    snap, keep = _checkpointed_step(False)
    events = snap["gradstream"]["events"]
    assert not any(e["phase"] == "recompute" or e["op"].startswith("recompute:") for e in events)
    assert set(memory.timeline(snap).bytes["recomputed"]) == {0}
    del keep


def test_plot_timeline_draws_the_recomputed_band(tmp_path):
    pytest.importorskip("matplotlib")
    snap, keep = _checkpointed_step(True)
    out = tmp_path / "ck.png"
    tl = memory.plot_timeline(snap, out)
    assert out.stat().st_size > 1000
    assert max(tl.bytes["recomputed"]) > 0
    del keep
