"""`gradstream.utils.safetensors` against ``safetensors.torch``: files and bytes written by
either are read by the other with the same dtypes, shapes, values and metadata."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
st_torch = pytest.importorskip("safetensors.torch")

import safetensors  # noqa: E402
from helpers import to_numpy  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from tensor_data import DTYPES, gs_tensor, shapes, torch_tensor, values  # noqa: E402

import gradstream as gs  # noqa: E402
from gradstream.utils.safetensors import load, load_file, save, save_file  # noqa: E402

tensor_specs = st.dictionaries(
    st.text("abcxyz._", min_size=1, max_size=6),
    st.tuples(st.sampled_from(DTYPES), shapes, st.integers(0, 2**16)),
    max_size=4,
)


def assert_same_dicts(g: dict, t: dict):
    assert sorted(g) == sorted(t)
    for name, tt in t.items():
        gt = g[name]
        assert isinstance(gt, gs.Tensor)
        assert repr(gt.dtype).split(".")[-1] == str(tt.dtype).split(".")[-1], name
        assert tuple(gt.shape) == tuple(tt.shape), name
        np.testing.assert_array_equal(to_numpy(gt), to_numpy(tt))


@settings(max_examples=30, deadline=None)
@given(specs=tensor_specs)
def test_files_cross_over_both_ways(tmp_path_factory, specs):
    tmp = tmp_path_factory.mktemp("st")
    arrays = {
        name: (dtype, values(dtype, shape, seed)) for name, (dtype, shape, seed) in specs.items()
    }
    g = {name: gs_tensor(dtype, arr) for name, (dtype, arr) in arrays.items()}
    t = {name: torch_tensor(dtype, arr) for name, (dtype, arr) in arrays.items()}

    save_file(g, tmp / "gs.safetensors", metadata={"format": "pt"})
    assert_same_dicts(g, st_torch.load_file(tmp / "gs.safetensors"))
    with safetensors.safe_open(tmp / "gs.safetensors", framework="np") as f:
        assert f.metadata() == {"format": "pt"}

    st_torch.save_file(t, tmp / "pt.safetensors")
    assert_same_dicts(load_file(tmp / "pt.safetensors"), t)
    assert_same_dicts(load_file(tmp / "pt.safetensors", device=gs.device("cpu")), t)

    assert_same_dicts(load(st_torch.save(t)), t)
    assert_same_dicts(g, st_torch.load(save(g)))


def test_what_safetensors_torch_refuses_is_refused():
    with pytest.raises(ValueError, match="non contiguous"):
        save({"t": gs.ones(3, 4).t()})
    with pytest.raises(ValueError, match="expected gradstream.Tensor"):
        save({"t": np.ones(3)})


def test_dtypes_gradstream_lacks_and_broken_bytes_raise():
    with pytest.raises(TypeError, match="'w' has dtype I16"):
        load(st_torch.save({"w": torch.ones(2, dtype=torch.int16)}))
    data = save({"w": gs.ones(4)})
    for bad in (data[:5], data[: len(data) // 2], b"\xff" * 8 + data[8:]):
        with pytest.raises(safetensors.SafetensorError):
            load(bad)
