"""Checkpoints cross over with PyTorch: ``torch.load`` (weights-only) reads what
`gradstream.save` writes, and `gradstream.load` reads what ``torch.save`` writes, in its zip
and its older format: every dtype, 0-d and empty tensors, views and storages they share,
parameters, nested containers, state dicts; bad and hostile files raise and run nothing."""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import to_numpy  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensor_data import DTYPES, FLOATS, gs_tensor, shapes, torch_tensor, values  # noqa: E402

import gradstream as gs  # noqa: E402
from gradstream.serialization import zip_format  # noqa: E402
from gradstream.serialization.torch_pickler import (  # noqa: E402
    StorageRef,
    TorchPickler,
    torch_name,
)

# Views both libraries spell alike.
VIEWS = {
    "whole": lambda x: x,
    "transposed": lambda x: x.transpose(0, -1) if x.dim() else x,
    "stepped": lambda x: x[..., ::2] if x.dim() else x,
    "offset": lambda x: x[1:] if x.dim() else x,
    "expanded": lambda x: x.unsqueeze(0).expand(2, *x.shape),
}


def assert_same(g, t):
    """A gradstream tensor and a torch tensor hold the same dtype, shape and values."""
    assert isinstance(g, gs.Tensor), type(g)
    assert isinstance(t, torch.Tensor), type(t)
    assert repr(g.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert tuple(g.shape) == tuple(t.shape)
    assert g.requires_grad == t.requires_grad
    assert isinstance(g, gs.nn.Parameter) == isinstance(t, torch.nn.Parameter)
    np.testing.assert_array_equal(to_numpy(g), to_numpy(t))


def gs_round_trip(obj):
    buf = io.BytesIO()
    gs.save(obj, buf)
    return buf.getvalue()


# ---- gradstream.save -> torch.load


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=shapes,
    view=st.sampled_from(sorted(VIEWS)),
    requires_grad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_torch_loads_what_gradstream_saves(dtype, shape, view, requires_grad, seed):
    arr = values(dtype, shape, seed)
    g = VIEWS[view](gs_tensor(dtype, arr))
    t = VIEWS[view](torch_tensor(dtype, arr))
    requires_grad = requires_grad and dtype in FLOATS
    if requires_grad:
        g = g.detach().requires_grad_(True)
        t = t.detach().requires_grad_(True)
    data = gs_round_trip({"t": g, "nested": [(g,)]})
    back = torch.load(io.BytesIO(data), map_location="cpu")  # weights_only=True, the default
    assert set(back) == {"t", "nested"}
    np.testing.assert_array_equal(to_numpy(back["t"]), to_numpy(t))
    assert back["t"].dtype == t.dtype and back["t"].shape == t.shape
    assert back["t"].requires_grad == requires_grad
    # The same tensor twice in the object is one storage, as torch.save writes it.
    assert back["nested"][0][0].untyped_storage().data_ptr() == (
        back["t"].untyped_storage().data_ptr()
    )
    assert_same(gs.load(io.BytesIO(data))["t"], back["t"])


def test_the_archive_holds_the_records_torch_writes():
    data = gs_round_trip({"w": gs.ones(3), "i": gs.arange(5)})
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert names == [
        "archive/data.pkl",
        "archive/.format_version",
        "archive/.storage_alignment",
        "archive/byteorder",
        "archive/data/0",
        "archive/data/1",
        "archive/version",
        "archive/.data/serialization_id",
    ]
    buf = io.BytesIO()
    torch.save({"w": torch.ones(3), "i": torch.arange(5)}, buf)
    assert zipfile.ZipFile(buf).namelist() == names


def test_storages_are_aligned_for_mmap(tmp_path):
    path = tmp_path / "ckpt.pt"
    gs.save({f"t{i}": gs.ones(i + 1, dtype=gs.float64) for i in range(5)}, path)
    with zipfile.ZipFile(path) as zf, open(path, "rb") as fh:
        records = [i for i in zf.infolist() if "/data/" in i.filename]
        assert len(records) == 5 and records[0].filename.startswith("ckpt/")
        for info in records:
            fh.seek(info.header_offset + 26)
            name_len, extra_len = np.frombuffer(fh.read(4), "<u2")
            assert (info.header_offset + 30 + name_len + extra_len) % 64 == 0
    back = torch.load(path, mmap=True, map_location="cpu")
    np.testing.assert_array_equal(back["t4"].numpy(), np.ones(5))


def test_parameters_and_gradstream_values_cross_over():
    w = gs.nn.Parameter(gs.ones(2, 3))
    frozen = gs.nn.Parameter(gs.zeros(2), requires_grad=False)
    obj = {
        "w": w,
        "frozen": frozen,
        "size": w.shape,
        "device": gs.device("cpu"),
        "dtype": gs.bfloat16,
        "od": OrderedDict(b=1, a=2.5),
        "misc": (None, "s", 3, -1.5, True, b"\x00\xff", {1, 2}),
    }
    back = torch.load(io.BytesIO(gs_round_trip(obj)), map_location="cpu")
    assert isinstance(back["w"], torch.nn.Parameter) and back["w"].requires_grad
    assert isinstance(back["frozen"], torch.nn.Parameter) and not back["frozen"].requires_grad
    assert back["size"] == torch.Size([2, 3]) and type(back["size"]) is torch.Size
    assert back["device"] == torch.device("cpu") and back["dtype"] is torch.bfloat16
    assert back["od"] == OrderedDict(b=1, a=2.5) and type(back["od"]) is OrderedDict
    assert back["misc"] == obj["misc"]
    again = gs.load(io.BytesIO(gs_round_trip(obj)))
    assert isinstance(again["w"], gs.nn.Parameter) and again["w"].requires_grad
    assert not again["frozen"].requires_grad
    assert again["size"] == gs.Size([2, 3]) and again["dtype"] is gs.bfloat16
    assert again["device"] == gs.device("cpu") and again["misc"] == obj["misc"]


# ---- torch.save -> gradstream.load


@settings(max_examples=40, deadline=None)
@given(
    dtype=st.sampled_from(DTYPES),
    shape=shapes,
    views=st.lists(st.sampled_from(sorted(VIEWS)), min_size=1, max_size=3),
    zipped=st.booleans(),
    requires_grad=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_gradstream_loads_what_torch_saves(dtype, shape, views, zipped, requires_grad, seed):
    base = torch_tensor(dtype, values(dtype, shape, seed))
    if requires_grad and dtype in FLOATS:
        base.requires_grad_(True)
    # Views of one storage: torch writes one record, each view its offset and strides.
    with torch.no_grad():
        tensors = [VIEWS[v](base) for v in views]
    tensors = [t.detach().requires_grad_(base.requires_grad) for t in tensors]
    buf = io.BytesIO()
    torch.save({"views": tensors, "base": base}, buf, _use_new_zipfile_serialization=zipped)
    back = gs.load(io.BytesIO(buf.getvalue()))
    assert_same(back["base"], base)
    assert len(back["views"]) == len(tensors)
    for g, t in zip(back["views"], tensors, strict=True):
        assert_same(g, t)


nested = st.recursive(
    st.none() | st.integers(-(2**40), 2**40) | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3)
        | st.dictionaries(st.text(max_size=3), inner, max_size=3).map(OrderedDict)
    ),
    max_leaves=8,
)


@settings(max_examples=30, deadline=None)
@given(tree=nested, zipped=st.booleans())
def test_nested_containers_both_ways(tree, zipped):
    obj = {"tree": tree, "t": torch.arange(3)}
    buf = io.BytesIO()
    torch.save(obj, buf, _use_new_zipfile_serialization=zipped)
    back = gs.load(io.BytesIO(buf.getvalue()))
    assert back["tree"] == tree and type(back["tree"]) is type(tree)
    assert_same(back["t"], obj["t"])
    again = torch.load(io.BytesIO(gs_round_trip(back)), map_location="cpu")
    assert again["tree"] == tree
    assert_same(back["t"], again["t"])


def test_torch_parameters_load_as_gradstream_parameters():
    p = torch.nn.Parameter(torch.randn(2, 2))
    frozen = torch.nn.Parameter(torch.randn(3), requires_grad=False)
    tagged = torch.ones(2)
    tagged.note = "kept"  # a tensor with attributes pickles through _rebuild_from_type_v2
    buf = io.BytesIO()
    torch.save({"p": p, "frozen": frozen, "tagged": tagged, "size": p.shape}, buf)
    back = gs.load(io.BytesIO(buf.getvalue()))
    assert_same(back["p"], p)
    assert_same(back["frozen"], frozen)
    assert_same(back["tagged"], tagged) and back["tagged"].note == "kept"
    assert back["size"] == gs.Size([2, 2])


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_every_pickle_protocol_both_ways(protocol):
    for zipped in (True, False):
        buf = io.BytesIO()
        obj = {"w": torch.nn.Parameter(torch.ones(2)), "b": b"xy", "s": {1}}
        torch.save(obj, buf, pickle_protocol=protocol, _use_new_zipfile_serialization=zipped)
        back = gs.load(io.BytesIO(buf.getvalue()))
        assert_same(back["w"], obj["w"])
        assert back["b"] == b"xy" and back["s"] == {1}
    buf = io.BytesIO()
    gs.save({"w": gs.nn.Parameter(gs.ones(2)), "b": b"xy"}, buf, pickle_protocol=protocol)
    # torch's weights-only unpickler reads protocol 2 only, as for its own files.
    back = torch.load(io.BytesIO(buf.getvalue()), weights_only=protocol == 2, map_location="cpu")
    assert_same(gs.load(io.BytesIO(buf.getvalue()))["w"], back["w"])


class Trusted:
    """A class of the test's own: loads only with weights_only=False."""

    def __init__(self, value):
        self.value = value


@pytest.mark.parametrize("zipped", [True, False])
def test_weights_only_false_loads_other_classes(zipped):
    buf = io.BytesIO()
    torch.save({"obj": Trusted(3), "w": torch.ones(2)}, buf, _use_new_zipfile_serialization=zipped)
    with pytest.raises(pickle.UnpicklingError, match="refuses the global test_checkpoint_interop"):
        gs.load(io.BytesIO(buf.getvalue()))
    back = gs.load(io.BytesIO(buf.getvalue()), weights_only=False)
    assert isinstance(back["obj"], Trusted) and back["obj"].value == 3
    assert isinstance(back["w"], gs.Tensor)
    with pytest.raises(RuntimeError, match="pickle_module"):
        gs.load(io.BytesIO(buf.getvalue()), pickle_module=pickle)


# ---- state dicts


def test_gradstream_linear_state_dict_loads_into_torch_linear():
    g = gs.nn.Linear(4, 3)
    back = torch.load(io.BytesIO(gs_round_trip(g.state_dict())), map_location="cpu")
    t = torch.nn.Linear(4, 3)
    t.load_state_dict(back)
    x = np.random.default_rng(0).standard_normal((5, 4)).astype(np.float32)
    expected = t(torch.from_numpy(x)).detach().numpy()
    np.testing.assert_allclose(g(gs.from_numpy(x)).detach().numpy(), expected, rtol=1e-5, atol=1e-6)


def test_torch_linear_state_dict_loads_into_gradstream_linear(tmp_path):
    t = torch.nn.Linear(4, 3)
    torch.save(t.state_dict(), tmp_path / "linear.pt")
    for mmap in (False, True):
        g = gs.nn.Linear(4, 3)
        g.load_state_dict(gs.load(tmp_path / "linear.pt", mmap=mmap))
        x = np.random.default_rng(1).standard_normal((5, 4)).astype(np.float32)
        expected = t(torch.from_numpy(x)).detach().numpy()
        got = g(gs.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


# ---- map_location and mmap


def with_location(data: bytes, location: str) -> bytes:
    """A torch checkpoint of CPU tensors rewritten to name another location (no GPU here)."""
    old = b"X\x03\x00\x00\x00cpu"
    new = b"X" + len(location).to_bytes(4, "little") + location.encode()
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            payload = src.read(info)
            if info.filename.endswith("/data.pkl"):
                assert old in payload
                payload = payload.replace(old, new)
            dst.writestr(info, payload)
    return out.getvalue()


def test_map_location_forms():
    buf = io.BytesIO()
    torch.save({"w": torch.arange(4.0)}, buf)
    data = with_location(buf.getvalue(), "cuda:0")
    # torch itself reads the rewritten file where told to map it.
    assert torch.load(io.BytesIO(data), map_location="cpu")["w"].sum() == 6
    expected = np.arange(4.0, dtype=np.float32)

    def load(map_location):
        return gs.load(io.BytesIO(data), map_location=map_location)["w"]

    forms = ["cpu", b"cpu", gs.device("cpu"), torch.device("cpu"), {"cuda:0": "cpu"}]
    forms += [lambda storage, loc: storage, lambda storage, loc: storage.cpu()]
    forms += [lambda storage, loc: None]
    if not gs.cuda.is_available():
        forms.append(None)  # the saved location, where gradstream has it here; else the CPU
    for form in forms:
        w = load(form)
        assert w.device == gs.device("cpu")
        np.testing.assert_array_equal(w.numpy(), expected)
    if not gs.cuda.is_available():
        for form in ("cuda", torch.device("cuda:0"), {"cuda:0": "cuda:0"}):
            with pytest.raises(RuntimeError, match="map_location='cpu'"):
                load(form)
        with pytest.raises(RuntimeError, match="map_location='cpu'"):
            load(lambda storage, loc: storage.cuda())
    with pytest.raises(TypeError, match="must return the storage"):
        load(lambda storage, loc: "cpu")
    with pytest.raises(TypeError, match="map_location must be"):
        load(3)


def test_mmap_needs_a_zip_checkpoint_at_a_path(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "legacy.pt", _use_new_zipfile_serialization=False)
    with pytest.raises(RuntimeError, match="mmap can only be used"):
        gs.load(tmp_path / "legacy.pt", mmap=True)
    with pytest.raises(ValueError, match="file path"):
        gs.load(io.BytesIO(gs_round_trip({"w": gs.ones(2)})), mmap=True)


def test_checkpoints_of_earlier_gradstream_versions_still_load():
    # Earlier gradstream.save pickled straight: a Tensor as a NumPy array plus its dtype.
    w = gs.nn.Parameter(gs.arange(3.0))
    old = pickle.dumps({"w": w, "t": gs.ones(2, dtype=gs.int32)}, protocol=5)
    back = gs.load(io.BytesIO(old))
    assert isinstance(back["w"], gs.nn.Parameter)
    np.testing.assert_array_equal(back["w"].detach().numpy(), [0.0, 1.0, 2.0])
    assert back["t"].dtype == gs.int32


# ---- bad files


class WritesMarker:
    """Unpickling this calls os.system, which would create the marker file."""

    def __init__(self, marker):
        self.marker = os.fspath(marker)

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def crafted(obj, records=None, protocol=2) -> bytes:
    """A zip checkpoint of `obj` pickled as gradstream.save pickles, with these records."""
    data = io.BytesIO()
    pickler = TorchPickler(data, protocol)
    pickler.dump(obj)
    if records is None:
        records = {k: np.ascontiguousarray(t.numpy()) for k, t in pickler.storages.items()}
    out = io.BytesIO()
    zip_format.write(out, "archive", data.getvalue(), records.items())
    return out.getvalue()


class CraftedTensor:
    """A float32 tensor over storage "0" of `numel` elements, viewed as (size, stride)."""

    def __init__(self, numel, offset, size, stride):
        self.args = (numel, offset, size, stride)

    def __reduce__(self):
        numel, offset, size, stride = self.args
        ref = StorageRef("0", torch_name("torch", "FloatStorage"), "cpu", numel)
        rebuild = torch_name("torch._utils", "_rebuild_tensor_v2")
        return rebuild, (ref, offset, size, stride, False, OrderedDict())


def both_raise(data: bytes, error, match: str):
    """gradstream.load raises `error` on `data`, and so does torch.load."""
    with pytest.raises(error, match=match):
        gs.load(io.BytesIO(data))
    with pytest.raises(error):
        torch.load(io.BytesIO(data))


def test_a_storage_shorter_than_its_view_is_refused():
    four = {"0": np.arange(4, dtype=np.float32)}
    both_raise(crafted(CraftedTensor(4, 2, (3,), (1,)), four), RuntimeError, "out of bounds")
    both_raise(crafted(CraftedTensor(4, 0, (2, 2), (3, 1)), four), RuntimeError, "out of bounds")
    # The file's record is shorter than the storage its pickle names.
    with pytest.raises(RuntimeError, match="holds 16 bytes; its storage needs 40"):
        gs.load(io.BytesIO(crafted(CraftedTensor(10, 0, (2,), (1,)), four)))
    ok = gs.load(io.BytesIO(crafted(CraftedTensor(4, 1, (3,), (1,)), four)))
    np.testing.assert_array_equal(ok.numpy(), [1.0, 2.0, 3.0])


def test_a_missing_record_is_refused():
    both_raise(crafted(CraftedTensor(4, 0, (4,), (1,)), {}), RuntimeError, "no record")
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as zf:
        zf.writestr("archive/version", b"3\n")
    both_raise(data.getvalue(), RuntimeError, "no record 'archive/data.pkl'")


@pytest.mark.parametrize("zipped", [True, False])
def test_a_malicious_pickle_runs_nothing(tmp_path, zipped):
    marker = tmp_path / "marker"
    if zipped:
        data = crafted({"evil": WritesMarker(marker)}, records={})
    else:
        header = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950A86A20F9469CFC6C, 1001, {}))
        data = header + pickle.dumps({"evil": WritesMarker(marker)}, protocol=2)
        data += pickle.dumps([], protocol=2)
    for weights_only in (None, True):
        with pytest.raises(pickle.UnpicklingError, match=r"refuses the global (posix|nt)\.system"):
            gs.load(io.BytesIO(data), weights_only=weights_only)
        assert not marker.exists()
    with pytest.raises(pickle.UnpicklingError):
        torch.load(io.BytesIO(data))
    assert not marker.exists()
    # The same file with weights_only=False does run it: the test's pickle is real.
    gs.load(io.BytesIO(data), weights_only=False)
    assert marker.exists()


def test_a_pickle_cannot_change_what_later_loads_see():
    # BUILD sets attributes on the object a global resolved to: here a builder's defaults,
    # a storage type's dtype, a rebuild function.
    builds = [
        b"ctorch\nSize\nN}X\x0c\x00\x00\x00__defaults__K\x05\x85\x85s\x86b.",
        b"ctorch\nFloatStorage\nN}X\x08\x00\x00\x00np_dtypeX\x02\x00\x00\x00<is\x86b.",
        b"ctorch._utils\n_rebuild_tensor_v2\nN}X\x08\x00\x00\x00__self__K\x01s\x86b.",
        b"ccollections\nOrderedDict\nN}X\x0c\x00\x00\x00__defaults__K\x05\x85\x85s\x86b.",
    ]
    for body in builds:
        out = io.BytesIO()
        zip_format.write(out, "archive", b"\x80\x02" + body, [])
        with pytest.raises(pickle.UnpicklingError, match=r"gradstream\.load: cannot read"):
            gs.load(io.BytesIO(out.getvalue()))
        old_format = b"\x80\x02" + body.replace(b"ctorch\nSize", b"c__builtin__\nset")
        with pytest.raises(pickle.UnpicklingError, match=r"gradstream\.load"):
            gs.load(io.BytesIO(old_format))
    buf = io.BytesIO()
    torch.save({"s": torch.Size([]), "w": torch.arange(3.0), "od": OrderedDict()}, buf)
    back = gs.load(io.BytesIO(buf.getvalue()))
    assert back["s"] == gs.Size([]) and back["od"] == OrderedDict()
    assert back["w"].dtype == gs.float32 and back["w"].tolist() == [0.0, 1.0, 2.0]


def test_truncated_and_mangled_checkpoints_raise_a_clear_error():
    raw = gs_round_trip({"w": gs.ones(40), "step": 3})
    for cut in sorted({4, 30, len(raw) // 3, len(raw) // 2, len(raw) - 30, len(raw) - 1}):
        with pytest.raises((pickle.UnpicklingError, RuntimeError), match=r"gradstream\.load"):
            gs.load(io.BytesIO(raw[:cut]))
        with pytest.raises(RuntimeError):
            torch.load(io.BytesIO(raw[:cut]))
    for magic in (b"PK\x03\x05", b"\x00\x00\x00\x00", b"\x80\x02}q"):
        with pytest.raises(pickle.UnpicklingError, match=r"gradstream\.load: cannot read"):
            gs.load(io.BytesIO(magic + raw[4:]))
    buf = io.BytesIO()
    torch.save({"w": torch.ones(40), "step": 3}, buf, _use_new_zipfile_serialization=False)
    legacy = buf.getvalue()
    for cut in sorted({20, len(legacy) // 2, len(legacy) - 100, len(legacy) - 1}):
        with pytest.raises((pickle.UnpicklingError, RuntimeError), match=r"gradstream\.load"):
            gs.load(io.BytesIO(legacy[:cut]))
    # A storage claiming more elements than the file holds.
    count = (40).to_bytes(8, "little")
    assert legacy.count(count) == 1
    huge = legacy.replace(count, (2**60).to_bytes(8, "little"))
    with pytest.raises(pickle.UnpicklingError, match="ends early"):
        gs.load(io.BytesIO(huge))
    # A legacy file whose protocol version is wrong, as torch reports it.
    data = b"".join(pickle.dumps(x, protocol=2) for x in (0x1950A86A20F9469CFC6C, 999, {}))
    with pytest.raises(RuntimeError, match="invalid protocol version: 999"):
        gs.load(io.BytesIO(data))


def test_tensors_gradstream_has_no_dtype_for_are_named():
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2, dtype=torch.int16)}, buf)
    with pytest.raises(RuntimeError, match="int16"):
        gs.load(io.BytesIO(buf.getvalue()))
    buf = io.BytesIO()
    torch.save({"w": torch.ones(2).to_sparse()}, buf)
    with pytest.raises(RuntimeError, match="sparse tensor"):
        gs.load(io.BytesIO(buf.getvalue()))
