"""Shape ops against PyTorch: values, gradients, views sharing memory, and errors."""

import numpy as np
import pytest
from helpers import arr, run_both

import gradstream as gs


def shares(a, b):
    """a is a view of b: writing a changes b."""
    before = b.clone()
    with gs.no_grad():
        a.fill_(123.0)
    changed = not np.array_equal(b.numpy(), before.numpy())
    with gs.no_grad():
        b.copy_(before)
    return changed


# ---- reshape family ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: x.reshape(4, -1),
        lambda L, x: x.reshape((-1,)),
        lambda L, x: L.reshape(x, (2, -1, 3)),
        lambda L, x: x.view(6, 4),
        lambda L, x: x.view(-1),
        lambda L, x: x.flatten(),
        lambda L, x: x.flatten(1),
        lambda L, x: x.flatten(0, 1),
        lambda L, x: x.flatten(-2, -1),
        lambda L, x: L.flatten(x, start_dim=1),
        lambda L, x: x.unflatten(1, (3, 1)),
        lambda L, x: L.unflatten(x, -1, (2, -1)),
        lambda L, x: x.ravel(),
        lambda L, x: x.squeeze(),
        lambda L, x: x.unsqueeze(0).unsqueeze(-1).squeeze(),
        lambda L, x: x.unsqueeze(-1).squeeze(-1),
        lambda L, x: L.squeeze(x.unsqueeze(1).unsqueeze(3), (1, 3)),
        lambda L, x: x.unsqueeze(2).squeeze(0),
        lambda L, x: L.unsqueeze(x, -2),
    ],
)
def test_reshape_family(torch_ref, fn):
    run_both(torch_ref, fn, arr(2, 3, 4))


def test_flatten_0d_and_squeeze_0d(torch_ref):
    run_both(torch_ref, lambda L, x: x.flatten(), np.array(2.5))
    run_both(torch_ref, lambda L, x: x.squeeze(), np.array(2.5))
    run_both(torch_ref, lambda L, x: x.unsqueeze(0), np.array(2.5))
    run_both(torch_ref, lambda L, x: x.reshape(1, 1), np.array(2.5))


def test_views_share_memory():
    x = gs.tensor(arr(2, 3, 4))
    assert shares(x.view(6, 4), x)
    assert shares(x.unsqueeze(1), x)
    assert shares(x.unsqueeze(0).squeeze(0), x)
    assert shares(x.transpose(0, 2), x)
    assert shares(x.permute(2, 0, 1), x)
    assert shares(x.mT, x)
    assert shares(x.narrow(1, 1, 2), x)
    assert shares(x.select(2, -1), x)
    assert shares(x[:, 0].unsqueeze(0), x)
    assert shares(x.transpose(0, 1).unsqueeze(1), x)
    assert shares(x[0].expand(5, 3, 4)[0], x)
    for part in x.split(1, 1) + x.chunk(2, 2) + x.unbind(0):
        assert shares(part, x)
    assert not shares(x.flip(0), x)
    assert not shares(x.roll(1, 0), x)
    assert not shares(x.repeat(1, 1, 1), x)


def test_view_of_noncontiguous_raises():
    x = gs.tensor(arr(3, 4)).t()
    with pytest.raises(RuntimeError, match=r"reshape"):
        x.view(12)
    assert x.reshape(12).shape == (12,)


def test_reshape_errors():
    x = gs.tensor(arr(2, 3))
    with pytest.raises(RuntimeError, match=r"\[4, -1\].*size 6"):
        x.reshape(4, -1)
    with pytest.raises(RuntimeError, match="only one dimension"):
        x.reshape(-1, -1)
    with pytest.raises(RuntimeError, match=r"don't multiply up.*\(3\)"):
        x.unflatten(1, (2, 2))
    with pytest.raises(IndexError, match="Dimension out of range"):
        x.flatten(0, 5)
    with pytest.raises(TypeError):
        x.reshape(2.0, 3)


# ---- transposes ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: x.transpose(0, -1),
        lambda L, x: L.transpose(x, 1, 2),
        lambda L, x: x.swapaxes(0, 1),
        lambda L, x: L.swapdims(x, -1, -2),
        lambda L, x: x.permute(2, 0, 1),
        lambda L, x: x.permute((1, 2, 0)),
        lambda L, x: L.permute(x, (-1, 0, 1)),
        lambda L, x: x.mT,
        lambda L, x: x.T if L is gs else x.permute(2, 1, 0),
        lambda L, x: x[0].t(),
        lambda L, x: L.t(x[0]),
        lambda L, x: x.movedim(0, -1),
        lambda L, x: L.movedim(x, (0, 1), (2, 0)),
        lambda L, x: x.moveaxis(-1, 0),
    ],
)
def test_transposes(torch_ref, fn):
    run_both(torch_ref, fn, arr(2, 3, 4))


def test_t_of_vector_and_errors():
    v = gs.tensor(arr(3))
    assert v.t().shape == (3,)
    with pytest.raises(RuntimeError, match="3D"):
        gs.tensor(arr(2, 2, 2)).t()
    with pytest.raises(RuntimeError, match="multiple times"):
        gs.tensor(arr(2, 3)).permute(0, 0)
    with pytest.raises(IndexError):
        gs.tensor(arr(2, 3)).transpose(0, 2)


# ---- expand ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: x.expand(4, 3, 2),
        lambda L, x: x.expand(-1, 2),
        lambda L, x: x.expand(2, -1, -1),
        lambda L, x: L.broadcast_to(x, (5, 3, 2)),
        lambda L, x: x.broadcast_to((3, 2)),
        lambda L, x: x.expand_as(L.zeros(2, 3, 2)),
    ],
)
def test_expand(torch_ref, fn):
    run_both(torch_ref, fn, arr(3, 1))


def test_expand_errors():
    x = gs.tensor(arr(3, 1))
    with pytest.raises(RuntimeError, match=r"\[4, 2\].*\[3, 1\]"):
        x.expand(4, 2)
    with pytest.raises(RuntimeError, match="leading, non-existing dimension"):
        x.expand(-1, 3, 2)
    with pytest.raises(RuntimeError, match="number of sizes"):
        x.expand(3)


# ---- cat / stack ----


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_cat_dims(torch_ref, dim):
    run_both(torch_ref, lambda L, a, b: L.cat([a, b], dim), arr(2, 3), arr(2, 3) + 7)


def test_cat_aliases_and_noncontiguous(torch_ref):
    run_both(torch_ref, lambda L, a, b: L.cat((a.t(), b), dim=0), arr(3, 2), arr(4, 3))
    run_both(torch_ref, lambda L, a, b: L.concat([a, b[:, ::2]], 1), arr(3, 2), arr(3, 4))
    run_both(torch_ref, lambda L, a, b: L.concatenate([a, b], axis=1), arr(2, 1), arr(2, 2))
    run_both(torch_ref, lambda L, a: L.cat([a]), arr(2, 2))


def test_cat_promotes_like_torch(torch_ref):
    i64 = np.arange(4, dtype=np.int64).reshape(2, 2)
    i32 = np.arange(4, dtype=np.int32).reshape(2, 2)
    f32 = arr(2, 2, dtype=np.float32)
    bl = np.array([[True, False], [False, True]])
    run_both(torch_ref, lambda L, a, b: L.cat([a, b]), i64, f32)
    run_both(torch_ref, lambda L, a, b: L.cat([a, b], 1), i32, i64, grad=False)
    run_both(torch_ref, lambda L, a, b: L.cat([a, b]), bl, i32, grad=False)
    run_both(torch_ref, lambda L, a, b: L.cat([a, b]), f32, arr(2, 2))


def test_cat_skips_legacy_empty(torch_ref):
    run_both(torch_ref, lambda L, a, b: L.cat([a, b, a]), arr(0), arr(2, 3))
    run_both(torch_ref, lambda L, a, b: L.cat([a, b], 1), arr(2, 0), arr(2, 3))


@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
def test_stack(torch_ref, dim):
    a = arr(2, 3)
    run_both(torch_ref, lambda L, x, y, z: L.stack([x, y, z], dim), a, a + 1, a * 2)


def test_stack_0d_and_noncontiguous(torch_ref):
    run_both(torch_ref, lambda L, a, b: L.stack([a, b]), np.array(1.0), np.array(2.0))
    run_both(torch_ref, lambda L, a, b: L.stack([a.t(), b], -1), arr(3, 2), arr(2, 3))


def test_cat_stack_errors():
    a, b = gs.tensor(arr(2, 3)), gs.tensor(arr(2, 4))
    with pytest.raises(RuntimeError, match=r"except in dimension 0.*\[2, 3\].*\[2, 4\]"):
        gs.cat([a, b])
    with pytest.raises(RuntimeError, match="same number of dimensions"):
        gs.cat([a, gs.tensor(arr(3))])
    with pytest.raises(RuntimeError, match="non-empty"):
        gs.cat([])
    with pytest.raises(RuntimeError, match="zero-dimensional"):
        gs.cat([gs.tensor(1.0), gs.tensor(2.0)])
    with pytest.raises(IndexError, match="Dimension out of range"):
        gs.cat([a, a], 2)
    with pytest.raises(TypeError, match="element 1"):
        gs.cat([a, 1])
    with pytest.raises(TypeError, match="tuple of Tensors"):
        gs.cat(a)
    with pytest.raises(RuntimeError, match=r"\[2, 3\] at entry 0 and \[2, 4\] at entry 1"):
        gs.stack([a, b])
    with pytest.raises(TypeError):
        gs.stack([a, "x"])


# ---- split / chunk / unbind ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: x.split(2),
        lambda L, x: x.split(2, dim=1),
        lambda L, x: L.split(x, [1, 3, 1], 1),
        lambda L, x: x.split([2, 2], -2),
        lambda L, x: x.split(10),
        lambda L, x: x.chunk(3, 1),
        lambda L, x: L.chunk(x, 2),
        lambda L, x: x.chunk(4, -1),
        lambda L, x: x.unbind(),
        lambda L, x: L.unbind(x, -1),
        lambda L, x: x.t().split(2),
    ],
)
def test_split_family(torch_ref, fn):
    run_both(torch_ref, fn, arr(4, 5))


def test_split_empty_and_errors(torch_ref):
    run_both(torch_ref, lambda L, x: x.split(2), arr(0, 3))
    run_both(torch_ref, lambda L, x: x.chunk(3), arr(0, 3))
    x = gs.tensor(arr(3, 2))
    with pytest.raises(RuntimeError, match=r"sum exactly to 3.*\[1, 1\]"):
        x.split([1, 1])
    with pytest.raises(RuntimeError, match="greater than 0"):
        x.chunk(0)


# ---- repeat / flip / roll / tril / triu / narrow / select ----


@pytest.mark.parametrize(
    "fn",
    [
        lambda L, x: x.repeat(2, 3),
        lambda L, x: x.repeat(2, 1, 2),
        lambda L, x: x.repeat(1, 1),
        lambda L, x: x.t().repeat(2, 2),
        lambda L, x: x.tile((2,)),
        lambda L, x: L.tile(x, (2, 1, 1)),
        lambda L, x: x.flip(0),
        lambda L, x: x.flip(0, 1),
        lambda L, x: L.flip(x, (-1,)),
        lambda L, x: x.t().flip(1),
        lambda L, x: x.roll(1),
        lambda L, x: x.roll(-4, 1),
        lambda L, x: L.roll(x, (1, 2), (0, 1)),
        lambda L, x: x.roll(7, -1),
        lambda L, x: x.t().roll(1, 0),
        lambda L, x: x.tril(),
        lambda L, x: x.triu(),
        lambda L, x: L.tril(x, -1),
        lambda L, x: L.triu(x, diagonal=1),
        lambda L, x: x.t().tril(1),
        lambda L, x: x.narrow(1, 1, 2),
        lambda L, x: x.narrow(-1, -2, 2),
        lambda L, x: L.narrow(x, 0, 0, 0),
        lambda L, x: x.select(1, -1),
        lambda L, x: L.select(x, 0, 2),
    ],
)
def test_misc_shape_ops(torch_ref, fn):
    run_both(torch_ref, fn, arr(3, 4))


def test_tril_batched_and_int(torch_ref):
    run_both(torch_ref, lambda L, x: x.triu(-1), arr(2, 3, 4))
    run_both(torch_ref, lambda L, x: x.tril(), np.arange(9).reshape(3, 3), grad=False)
    run_both(torch_ref, lambda L, x: x.flip(0), np.array([True, False, False]), grad=False)


@pytest.mark.parametrize(
    "shape, repeats",
    [((0,), (-1,)), ((0,), (1, -1)), ((2, 0), (3, -2)), ((2,), (-1,)), ((), (-1,))],
)
def test_negative_repeats_follow_pytorch(torch_ref, shape, repeats):
    """PyTorch refuses a negative repeat only where the repeated size would be negative: an
    empty dim repeated -1 times stays empty. (Forward only: PyTorch's own backward of the
    empty case fails.)"""
    for op in (lambda L, x: x.repeat(*repeats), lambda L, x: L.tile(x, repeats)):
        try:
            want = op(torch_ref, torch_ref.zeros(shape)).shape
        except RuntimeError:
            with pytest.raises(RuntimeError, match="negative dimension"):
                op(gs, gs.zeros(shape))
            continue
        assert tuple(op(gs, gs.zeros(shape)).shape) == tuple(want)


def test_misc_errors():
    x = gs.tensor(arr(3, 4))
    with pytest.raises(RuntimeError, match="at least 2 dimensions"):
        gs.tensor(arr(3)).tril()
    with pytest.raises(RuntimeError, match="can not be smaller"):
        x.repeat(2)
    with pytest.raises(RuntimeError, match=r"exceeds dimension size \(4\)"):
        x.narrow(1, 3, 2)
    with pytest.raises(IndexError, match="start out of range"):
        x.narrow(1, 5, 0)
    with pytest.raises(IndexError, match="index 3 is out of bounds for dimension 0 with size 3"):
        x.select(0, 3)
    with pytest.raises(RuntimeError, match="shifts and dimensions must align"):
        x.roll((1, 2), 0)


# ---- double backward through view backwards ----


def test_narrow_double_backward(torch_ref):
    def second(L, x):
        y = x.narrow(0, 1, 2).select(1, 0)
        (g,) = L.autograd.grad((y * y * y).sum(), x, create_graph=True)
        return g

    run_both(torch_ref, second, arr(4, 3))


def test_cat_split_double_backward(torch_ref):
    def second(L, a, b):
        c = L.cat([a, b], 1)
        p, q = c.split([1, 4], 1)
        (ga,) = L.autograd.grad((p * p).sum() + (q * c[:, :4]).sum(), a, create_graph=True)
        return ga

    run_both(torch_ref, second, arr(2, 3), arr(2, 2))


def test_gradcheck_shape_ops():
    x = gs.tensor(arr(3, 4), requires_grad=True)
    assert gs.autograd.gradcheck(lambda t: t.roll(1, 0).flip(1).tril(), (x,))
    assert gs.autograd.gradcheck(lambda t: gs.stack([t, t.t().t()], 1).repeat(1, 2, 1), (x,))
