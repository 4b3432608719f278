"""Bad files: `gradstream.load` and the memory-snapshot reader refuse truncated, corrupted
and hostile pickles with a clear error, and never run code from them."""

from __future__ import annotations

import io
import os
import pickle
import sys

import numpy as np
import pytest

import gradstream as gs

timeline_module = sys.modules["gradstream.memory.timeline"]


class WritesMarker:
    """Unpickling this calls os.system, which would create the marker file."""

    def __init__(self, marker):
        self.marker = os.fspath(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class WritesMarkerViaEval:
    def __init__(self, marker):
        self.marker = os.fspath(marker)

    def __reduce__(self):
        return (eval, (f"open({self.marker!r}, 'w').close()",))


def hostile_pickles(marker):
    """Pickles of every protocol whose loading would create `marker`."""
    out = []
    for proto in range(2, pickle.HIGHEST_PROTOCOL + 1):
        out.append(pickle.dumps({"w": WritesMarker(marker)}, protocol=proto))
        out.append(pickle.dumps([1, WritesMarkerViaEval(marker)], protocol=proto))
    # A dotted name inside an allowed module, reaching for a loader or builtins.
    out.append(b"\x80\x04\x8c\x0cnumpy.dtypes\x94\x8c\x1a__loader__.load_module\x94\x93\x94.")
    out.append(b"\x80\x04\x8c\ngradstream\x94\x8c\x06_core.\x94\x93\x94.")
    return out


def state_dict():
    gs.manual_seed(0)
    m = gs.nn.Linear(3, 2)
    return {"model": m.state_dict(), "step": 7, "ids": {1, 2}, "w": gs.nn.Parameter(gs.ones(2))}


def test_round_trip(tmp_path):
    sd = state_dict()
    gs.save(sd, tmp_path / "ok.pt")
    back = gs.load(tmp_path / "ok.pt")
    assert back["step"] == 7 and back["ids"] == {1, 2}
    assert isinstance(back["w"], gs.nn.Parameter)
    for k, v in sd["model"].items():
        np.testing.assert_array_equal(back["model"][k].numpy(), v.numpy())


@pytest.mark.parametrize("weights_only", [True, None])
def test_hostile_pickle_runs_no_code(tmp_path, weights_only):
    marker = tmp_path / "marker"
    for i, data in enumerate(hostile_pickles(marker)):
        path = tmp_path / f"hostile{i}.pt"
        path.write_bytes(data)
        with pytest.raises(pickle.UnpicklingError, match="gradstream.load"):
            gs.load(path, weights_only=weights_only)
        with pytest.raises(pickle.UnpicklingError, match="gradstream.load"):
            gs.load(io.BytesIO(data), weights_only=weights_only)
        assert not marker.exists(), f"pickle {i} ran code"
    # The same bytes with weights_only=False do run (the marker proves the test's pickle).
    pickle.loads(hostile_pickles(marker)[0])
    assert marker.exists()


def test_truncated_files_raise_a_clear_error(tmp_path):
    data = io.BytesIO()
    gs.save(state_dict(), data)
    raw = data.getvalue()
    for cut in sorted({0, 1, 2, len(raw) // 3, len(raw) // 2, len(raw) - 1}):
        path = tmp_path / f"cut{cut}.pt"
        path.write_bytes(raw[:cut])
        for weights_only in (True, False):
            with pytest.raises(pickle.UnpicklingError, match=r"gradstream\.load: cannot read"):
                gs.load(path, weights_only=weights_only)


def test_corrupted_files_raise_a_clear_error():
    data = io.BytesIO()
    gs.save(state_dict(), data)
    raw = bytearray(data.getvalue())
    rng = np.random.default_rng(0)
    failures = 0
    for _ in range(200):
        bad = bytearray(raw)
        for pos in rng.integers(0, len(bad), size=int(rng.integers(1, 4))):
            bad[pos] = int(rng.integers(0, 256))
        try:
            gs.load(io.BytesIO(bytes(bad)))
        except (pickle.UnpicklingError, RuntimeError) as e:
            # RuntimeError where torch.load raises one: a record missing or too short.
            assert str(e).startswith("gradstream.load"), str(e)
            failures += 1
        # A flipped byte in a field nothing reads (a date, the padding) goes unseen.
    assert failures > 0


def test_wrong_argument_types_for_allowed_globals_are_refused():
    from gradstream import _formatting

    class Evil:
        def __reduce__(self):
            return (_formatting.rebuild_tensor, (range(10**12), gs.float32, False))

    with pytest.raises(pickle.UnpicklingError, match="rebuilt from a range"):
        gs.load(io.BytesIO(pickle.dumps(Evil(), protocol=4)))

    class HugeSet:
        def __reduce__(self):
            return (set, (range(10**12),))

    with pytest.raises(pickle.UnpicklingError, match="rebuilt from a range"):
        gs.load(io.BytesIO(pickle.dumps(HugeSet(), protocol=4)))


def test_snapshot_loader_refuses_hostile_and_broken_files(tmp_path):
    gs.memory.record_history("all")
    try:
        x = gs.ones(8, requires_grad=True)
        (x * 2).sum().backward()
        good = tmp_path / "snap.pickle"
        gs.memory.dump_snapshot(good)
    finally:
        gs.memory.record_history(None)
    assert timeline_module.timeline(good).time_s

    marker = tmp_path / "marker"
    for i, data in enumerate(hostile_pickles(marker)):
        path = tmp_path / f"hostile{i}.pickle"
        path.write_bytes(data)
        with pytest.raises(pickle.UnpicklingError, match="memory snapshot"):
            timeline_module.timeline(path)
    assert not marker.exists()

    raw = good.read_bytes()
    for cut in (0, 1, len(raw) // 2, len(raw) - 1):
        path = tmp_path / f"cut{cut}.pickle"
        path.write_bytes(raw[:cut])
        with pytest.raises(pickle.UnpicklingError, match="memory snapshot: cannot read"):
            timeline_module.timeline(path)
    path = tmp_path / "list.pickle"
    path.write_bytes(pickle.dumps([1, 2]))
    with pytest.raises(pickle.UnpicklingError, match="holds a list"):
        timeline_module.timeline(path)


def test_bench_tensorfile_rejects_a_corrupted_file(tmp_path):
    pytest.importorskip("safetensors")
    from gradstream.bench import tensorfile

    path = tmp_path / "t.safetensors"
    tensorfile.save(path, {"w": np.ones((4, 4), np.float32)})
    raw = path.read_bytes()
    for bad in (raw[:5], raw[: len(raw) // 2], b"\xff" * 16 + raw[16:]):
        path.write_bytes(bad)
        with pytest.raises(Exception) as info:  # noqa: PT011  (safetensors' own error class)
            tensorfile.load(path)
        assert not isinstance(info.value, (SystemError, MemoryError))
