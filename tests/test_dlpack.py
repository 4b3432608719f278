"""DLPack: gradstream tensors exported to NumPy and PyTorch share memory both ways; imports
copy; autograd semantics and errors as PyTorch's."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import gradstream as gs
from gradstream.utils import dlpack

torch = pytest.importorskip("torch")

DTYPES = ["bool", "uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]


def make(dtype: str, shape=(3, 4)):
    t = gs.arange(int(np.prod(shape)), dtype=gs.float32).reshape(*shape) - 5
    return t.to(getattr(gs, dtype))


def address(g) -> int:
    """Where a gradstream tensor's first element lives (through a zero-copy export)."""
    return torch.from_dlpack(g.detach()).data_ptr()


def as_list(t):
    return t.float().tolist() if t.dtype in (gs.bfloat16, torch.bfloat16) else t.tolist()


@pytest.mark.parametrize("dtype", DTYPES)
def test_torch_sees_gradstream_memory_both_ways(dtype):
    g = make(dtype)
    t = torch.from_dlpack(g)
    assert t.dtype == getattr(torch, dtype)
    assert t.shape == (3, 4)
    assert as_list(t) == as_list(g)
    assert t.data_ptr() == address(g)
    t[1, 2] = 7
    assert as_list(g)[1][2] == as_list(t)[1][2]
    g.fill_(2)
    assert as_list(t) == as_list(torch.full((3, 4), 2).to(t.dtype))


@pytest.mark.cpu_only("NumPy reads host memory only (a CUDA tensor is refused, as torch's is)")
@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "bfloat16"])
def test_numpy_sees_gradstream_memory_both_ways(dtype):
    g = make(dtype)
    a = np.from_dlpack(g)
    assert a.dtype == np.dtype(dtype)
    assert a.tolist() == g.tolist()
    if dtype != "bool":
        a[0, 0] = 9
        assert g.tolist()[0][0] == 9
        g.add_(1)
        assert a[0, 0] == 10


def test_numpy_refuses_bfloat16_like_for_torch():
    with pytest.raises(Exception) as ours:
        np.from_dlpack(make("bfloat16"))
    with pytest.raises(Exception) as theirs:
        np.from_dlpack(torch.zeros(2, dtype=torch.bfloat16))
    assert type(ours.value) is type(theirs.value)


@pytest.mark.parametrize(
    "view",
    [
        lambda x: x.t(),
        lambda x: x[1:, ::2],
        lambda x: x[2],
        lambda x: x[:, 1],
        lambda x: x.narrow(1, 1, 2).t(),
        lambda x: x.expand(2, 3, 4),
        lambda x: x[1, 1],
        lambda x: x[3:],
    ],
)
def test_strided_views_export_without_a_copy(view):
    base = gs.arange(12.0).reshape(3, 4)
    tb = torch.arange(12.0).reshape(3, 4)
    g, t = view(base), view(tb)
    shared = torch.from_dlpack(g)
    assert shared.shape == t.shape and shared.stride() == t.stride()
    assert shared.tolist() == t.tolist()
    if g.numel():
        base.mul_(-1)
        assert shared.tolist() == (-t).tolist()
        if g.device.type == "cpu":  # NumPy reads host memory only
            assert np.from_dlpack(g).tolist() == (-t).tolist()


def test_export_keeps_the_buffer_alive():
    g = gs.arange(6.0)
    t = torch.from_dlpack(g)
    del g
    assert t.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    t += 1
    assert t.tolist() == [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]


def test_exported_memory_stays_counted_until_the_consumer_frees_it():
    before = gs.memory.memory_allocated()
    g = gs.zeros(1000)
    t = torch.from_dlpack(g)
    del g
    assert gs.memory.memory_allocated() - before == 4000
    del t
    assert gs.memory.memory_allocated() == before


def test_dlpack_device_and_protocol_arguments():
    g = gs.zeros(2)
    assert tuple(g.__dlpack_device__()) == tuple(int(v) for v in torch.zeros(2).__dlpack_device__())
    assert tuple(g.__dlpack_device__()) == (1, 0)
    t = torch.from_dlpack(g.__dlpack__(max_version=(1, 0)))
    t[0] = 3
    assert g.tolist() == [3.0, 0.0]
    copied = torch.from_dlpack(g.__dlpack__(copy=True))
    copied[1] = 5
    assert g.tolist() == [3.0, 0.0]
    assert torch.from_dlpack(g, copy=True).data_ptr() != address(g)
    with pytest.raises(BufferError):
        g.__dlpack__(dl_device=(2, 0))
    with pytest.raises(ValueError, match="stream"):
        g.__dlpack__(stream=5)
    g.__dlpack__(stream=None)
    g.__dlpack__(stream=-1)


def test_export_of_a_tensor_that_requires_grad_is_refused_like_torch():
    with pytest.raises(BufferError) as ours:
        torch.from_dlpack(gs.ones(2, requires_grad=True))
    with pytest.raises(BufferError) as theirs:
        torch.from_dlpack(torch.ones(2, requires_grad=True))
    assert str(ours.value) == str(theirs.value)
    with pytest.raises(BufferError):
        np.from_dlpack(gs.ones(2, requires_grad=True))
    # detach() exports the same memory; utils.dlpack.to_dlpack exports the data as torch's does
    p = gs.ones(2, requires_grad=True)
    t = torch.utils.dlpack.from_dlpack(dlpack.to_dlpack(p))
    assert not t.requires_grad
    t[0] = 4
    assert p.tolist() == [4.0, 1.0]
    assert torch.from_dlpack(p.detach()).data_ptr() == address(p)


@pytest.mark.parametrize("dtype", DTYPES)
def test_import_from_torch_copies_into_a_leaf(dtype):
    t = (torch.arange(12).reshape(3, 4) - 5).to(getattr(torch, dtype))
    g = gs.from_dlpack(t)
    assert g.dtype == getattr(gs, dtype)
    assert as_list(g) == as_list(t)
    assert g.is_leaf and not g.requires_grad and g.grad_fn is None
    # a copy: candle's CPU storage owns its allocation, it cannot adopt torch's
    if dtype != "bool":
        t.fill_(1)
        assert as_list(g) == as_list((torch.arange(12).reshape(3, 4) - 5).to(t.dtype))


def test_import_of_views_scalars_and_empty_tensors():
    base = torch.arange(24.0).reshape(2, 3, 4)
    for t in (
        base.transpose(0, 2),
        base[:, ::2, 1:],
        base[1, 2, 3],
        base[:, :0],
        base.expand(2, 2, 3, 4),
    ):
        g = gs.from_dlpack(t)
        assert tuple(g.shape) == tuple(t.shape)
        assert g.tolist() == t.tolist()
    a = np.arange(10, dtype=np.int32)[::3]
    assert gs.from_dlpack(a).tolist() == a.tolist()
    assert gs.utils.dlpack.from_dlpack(torch.utils.dlpack.to_dlpack(base)).tolist() == base.tolist()


def test_import_requires_grad_errors_like_torch():
    with pytest.raises(BufferError):
        gs.from_dlpack(torch.ones(2, requires_grad=True))
    with pytest.raises(TypeError, match="from_dlpack"):
        gs.from_dlpack([1.0, 2.0])
    cap = torch.utils.dlpack.to_dlpack(torch.ones(2))
    gs.from_dlpack(cap)
    with pytest.raises(ValueError, match="from_dlpack"):
        gs.from_dlpack(cap)  # a capsule is consumed once
    with pytest.raises(BufferError, match="dtype"):
        gs.from_dlpack(torch.ones(2, dtype=torch.complex64))


def test_from_dlpack_of_a_gradstream_tensor_shares_its_memory():
    g = gs.arange(3.0, requires_grad=True)
    h = gs.from_dlpack(g.detach())
    assert not h.requires_grad and address(h) == address(g)


def test_round_trip_gradstream_torch_gradstream():
    g = gs.arange(6.0).reshape(2, 3)
    back = gs.from_dlpack(torch.from_dlpack(g))
    assert back.tolist() == g.tolist()


@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=4),
    dtype=st.sampled_from(["float32", "float64", "int64", "uint8"]),
    transpose=st.booleans(),
    step=st.integers(1, 2),
)
def test_random_layouts_survive_both_directions(shape, dtype, transpose, step):
    t = torch.arange(int(np.prod(shape)) if shape else 1).reshape(shape).to(getattr(torch, dtype))
    if transpose and t.dim() >= 2:
        t = t.transpose(0, -1)
    if t.dim() >= 1:
        t = t[::step]
    g = gs.from_dlpack(t)
    assert tuple(g.shape) == tuple(t.shape) and g.tolist() == t.tolist()
    back = torch.from_dlpack(g)
    assert back.tolist() == t.tolist()
    if t.dim() >= 2:
        view = g.transpose(0, 1)
        assert torch.from_dlpack(view).tolist() == t.transpose(0, 1).tolist()
