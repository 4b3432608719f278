"""broadcast_shapes, broadcast_tensors and linalg.norm against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_close, pair

import gradstream as gs


@pytest.mark.parametrize(
    "shapes", [[(3, 1), (1, 4)], [(2, 3, 4), (4,)], [(5,), ()], [(0, 1), (1, 3)], [2, (3, 1)]]
)
def test_broadcast_shapes(torch_ref, shapes):
    assert tuple(gs.broadcast_shapes(*shapes)) == tuple(torch_ref.broadcast_shapes(*shapes))


def test_broadcast_shapes_mismatch_names_the_shapes():
    with pytest.raises(RuntimeError, match=r"\[2, 3\].*\[4\]"):
        gs.broadcast_shapes((2, 3), (4,))


def test_broadcast_tensors_values_and_gradients(torch_ref):
    rng = np.random.default_rng(0)
    a_np, b_np = rng.standard_normal((3, 1)), rng.standard_normal((1, 4))
    (a, ta), (b, tb) = pair(torch_ref, a_np, True), pair(torch_ref, b_np, True)
    x, y = gs.broadcast_tensors(a, b)
    tx, ty = torch_ref.broadcast_tensors(ta, tb)
    assert_close(x, tx)
    assert_close(y, ty)
    w = rng.standard_normal((3, 4))
    (x * gs.tensor(w) + 2 * y).sum().backward()
    (tx * torch_ref.tensor(w) + 2 * ty).sum().backward()
    assert_close(a.grad, ta.grad)
    assert_close(b.grad, tb.grad)


def test_broadcast_tensors_rejects_non_tensors():
    with pytest.raises(TypeError, match="element 1"):
        gs.broadcast_tensors(gs.ones(2), [1, 2])


@pytest.mark.parametrize(
    "shape, kw",
    [
        ((5,), {}),
        ((3, 4), {}),
        ((3, 4), {"ord": "fro"}),
        ((2, 3, 4), {}),
        ((3, 4), {"ord": 1, "dim": 1}),
        ((3, 4), {"ord": float("inf"), "dim": -1, "keepdim": True}),
        ((6,), {"ord": 3}),
    ],
)
def test_linalg_norm(torch_ref, shape, kw):
    arr = np.random.default_rng(1).standard_normal(shape)
    x, tx = pair(torch_ref, arr, True)
    out, tout = gs.linalg.norm(x, **kw), torch_ref.linalg.norm(tx, **kw)
    assert_close(out, tout)
    out.sum().backward()
    tout.sum().backward()
    assert_close(x.grad, tx.grad)


@pytest.mark.parametrize("ord", ["nuc", 2, -2, 1, float("inf")])
def test_linalg_norm_matrix_orders(torch_ref, ord):
    arr = np.random.default_rng(2).standard_normal((3, 4))
    x, tx = pair(torch_ref, arr, True)
    assert_close(gs.linalg.norm(x, ord), torch_ref.linalg.norm(tx, ord))
