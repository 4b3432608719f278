"""split / chunk / unbind: one backward node with an output per piece.

Gradients are compared with PyTorch (float64); memory with `gradstream.memory`'s exact
byte counts.
"""

import gc

import numpy as np
import pytest
from helpers import assert_close, to_torch

import gradstream as gs
from gradstream import memory


def f64(*shape):
    return gs.randn(*shape, dtype=gs.float64, requires_grad=True)


def backward_calls():
    return gs._core._backward_calls()


# Each case: split the input, then a loss over some pieces (by index): pieces left out
# get no gradient, a piece used twice gets both contributions.
CASES = [
    ("split, all used", lambda L, x: x.split(2), lambda p: (p[0] * 2).sum() + p[1].sin().sum()),
    ("split, one used", lambda L, x: x.split(1, 1), lambda p: p[2].exp().sum()),
    ("split, used twice", lambda L, x: x.split(3), lambda p: (p[0] * p[0]).sum() + p[0].sum()),
    (
        "split_with_sizes, middle unused",
        lambda L, x: L.split(x, [1, 2, 2], 1),
        lambda p: p[0].sum() + (p[2] ** 2).sum(),
    ),
    ("split, last short", lambda L, x: x.split(3, 1), lambda p: (p[-1] * 3).sum()),
    ("chunk", lambda L, x: x.chunk(3, 1), lambda p: p[0].sum() + p[2].cos().sum()),
    ("unbind, some rows", lambda L, x: x.unbind(0), lambda p: (p[1] * p[3]).sum() + p[1].sum()),
    ("unbind, last dim", lambda L, x: L.unbind(x, -1), lambda p: p[4].tanh().sum()),
    ("split of a transpose", lambda L, x: x.t().split(2), lambda p: (p[1] * 5).sum()),
    (
        "pieces meet again",
        lambda L, x: x.chunk(2, 0),
        lambda p: (p[0] * p[1]).sum() + (p[1] - p[0]).exp().sum(),
    ),
]


@pytest.mark.parametrize(("name", "split", "loss"), CASES, ids=[c[0] for c in CASES])
def test_gradients_match_torch(torch_ref, name, split, loss):
    x = f64(4, 5)
    tx = to_torch(x, True)
    loss(split(gs, x)).backward()
    loss(split(torch_ref, tx)).backward()
    assert_close(x.grad, tx.grad, rtol=1e-12, atol=1e-12)


def test_one_node_for_all_pieces(torch_ref):
    x = f64(6, 2)
    pieces = x.split(2)
    assert all(p.grad_fn == pieces[0].grad_fn for p in pieces)
    assert pieces[0].grad_fn.name() == "SplitBackward0"
    assert x.split([2, 4])[0].grad_fn.name() == "SplitWithSizesBackward0"
    assert x.chunk(3)[0].grad_fn.name() == "SplitBackward0"
    assert x.unbind(1)[0].grad_fn.name() == "UnbindBackward0"
    # Each piece's consumer points at its own output of the node, as in PyTorch.
    tx = to_torch(x, True)
    for t in (x, tx):
        a, b, c = t.split(2)
        assert [nr for _, nr in (c * 2).grad_fn.next_functions][:1] == [2]
        assert [nr for _, nr in (a * 2).grad_fn.next_functions][:1] == [0]
    before = backward_calls()
    (pieces[0].sum() + pieces[1].sum() + pieces[2].sum()).backward()
    # three SumBackward0, two AddBackward0 and one SplitBackward0
    assert backward_calls() - before == 6
    np.testing.assert_array_equal(x.grad.numpy(), np.ones((6, 2)))


def test_unused_pieces_are_zero_and_pruned(torch_ref):
    x = f64(5, 3)
    a, b = x.split([2, 3])
    before = backward_calls()
    (a * 4).sum().backward()
    assert backward_calls() - before == 3  # Sum, Mul, Split
    expected = np.zeros((5, 3))
    expected[:2] = 4.0
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_hooks_and_retain_grad_are_per_piece(torch_ref):
    x = f64(4, 3)
    tx = to_torch(x, True)
    seen = {}
    results = []
    for lib, t in ((gs, x), (torch_ref, tx)):
        a, b = t.split(2)
        b.retain_grad()
        a.register_hook(lambda g, lib=lib: seen.update({lib.__name__: g.numpy().copy()}))
        b.register_hook(lambda g: g * 10)  # replaces b's gradient only
        ((a * 2).sum() + (b * 3).sum()).backward()
        results.append((t.grad, b.grad))
    np.testing.assert_array_equal(seen["gradstream"], seen["torch"])
    np.testing.assert_array_equal(seen["gradstream"], np.full((2, 3), 2.0))
    assert_close(results[0][0], results[1][0])
    assert_close(results[0][1], results[1][1])  # retain_grad sees the hooked gradient
    assert x.grad.numpy()[2:].tolist() == [[30.0] * 3] * 2


def test_autograd_grad_wrt_pieces(torch_ref):
    x = f64(4, 3)
    tx = to_torch(x, True)
    got = []
    for lib, t in ((gs, x), (torch_ref, tx)):
        a, b, c, d = t.unbind(0)
        loss = (a * b).sum() + (d**2).sum()
        got.append(lib.autograd.grad(loss, [d, a, t, a], retain_graph=True))
        got.append(lib.autograd.grad(loss, [c], allow_unused=True))
    for g, t in zip(got[0], got[2], strict=True):
        assert_close(g, t)
    assert got[1] == (None,) and got[3] == (None,)


def test_double_backward_through_split(torch_ref):
    x = f64(4, 3)
    tx = to_torch(x, True)
    out = []
    for lib, t in ((gs, x), (torch_ref, tx)):
        a, b = t.split(2)
        (g,) = lib.autograd.grad((a**3).sum() + (b * b).sum(), t, create_graph=True)
        (gg,) = lib.autograd.grad((g * g).sum(), t)
        out.append((g, gg))
    assert out[0][0].grad_fn.name() == "CatBackward0"  # as in PyTorch
    assert_close(out[0][0], out[1][0])
    assert_close(out[0][1], out[1][1])
    for lib, t in ((gs, x), (torch_ref, tx)):
        a, b, c, d = t.unbind(0)
        (g,) = lib.autograd.grad((b**3).sum(), t, create_graph=True)
        (gg,) = lib.autograd.grad(g.sum(), t)
        out.append((g, gg))
    assert out[2][0].grad_fn.name() == "StackBackward0"
    assert_close(out[2][0], out[3][0])
    assert_close(out[2][1], out[3][1])


def test_inplace_on_a_piece_is_refused_like_torch(torch_ref):
    x = f64(4)
    tx = to_torch(x, True)
    for t in (x, tx):
        a, b = t.split(2)
        with pytest.raises(RuntimeError, match="Output 1 of Split is a view .* multiple views"):
            b.mul_(2)
        u = t.unbind()
        with pytest.raises(RuntimeError, match="Output 3 of Unbind is a view"):
            u[3].add_(1)
    with gs.no_grad():
        a, b = x.split(2)
        b.mul_(2)  # allowed without grad mode, as in PyTorch
    np.testing.assert_array_equal(x.detach().numpy()[2:], 2 * tx.detach().numpy()[2:])


@pytest.mark.parametrize("used", [[0], [0, 2, 4, 6], list(range(8))])
def test_backward_of_a_split_allocates_one_full_gradient(used):
    """The gradient of x is one buffer, zeros only where no piece's gradient came. Before,
    each piece's node made a full-size zero gradient of its own and the first two were
    summed out of place: 3 full-size buffers at the peak when more than one piece is used."""
    gc.collect()
    x = gs.randn(1024, 256, requires_grad=True)
    rows = 1024 // 8
    pieces = x.split(rows)
    loss = pieces[used[0]].sum()
    for i in used[1:]:
        loss = loss + pieces[i].sum()
    del pieces
    with memory.track() as m:
        loss.backward()
    # x.grad, kept without a copy, and the root's 4-byte gradient (each SumBackward0
    # passes on a zero-stride view of it).
    assert m.net == x.nbytes
    assert m.peak_increase == x.nbytes + 4, m.peak_increase / x.nbytes
    expected = np.zeros((1024, 256), dtype=np.float32)
    for i in used:
        expected[i * rows : (i + 1) * rows] = 1.0
    np.testing.assert_array_equal(x.grad.numpy(), expected)


def test_split_is_freed_with_its_graph():
    gc.collect()
    start = memory.memory_allocated()
    x = gs.randn(64, 64, requires_grad=True)
    pieces = x.split(8)
    loss = sum((p * p).sum() for p in pieces)
    del pieces
    loss.backward()
    del loss
    gc.collect()
    assert memory.memory_allocated() - start == 2 * x.nbytes  # x and x.grad
    assert memory.memory_by_category()["activation"] == 0
