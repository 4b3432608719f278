"""cumsum / cumprod against PyTorch: values, dtypes, dims, gradients (zeros included)."""

import numpy as np
import pytest
from helpers import assert_close, pair
from helpers import check_op as check

import gradstream as gs
from gradstream.autograd import gradcheck


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dim", [0, 1, 2, -1, -3])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_scan_matches_torch(torch_ref, op, dim, layout):
    arr = np.random.randn(3, 4, 5)
    view = None if layout == "contiguous" else (lambda x: x.transpose(0, 2))
    check(torch_ref, lambda x: getattr(x, op)(dim), arr, view=view)
    g, t = pair(torch_ref, arr)
    assert_close(getattr(gs, op)(g, dim=dim), getattr(torch_ref, op)(t, dim=dim))


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, np.bool_, np.float32, np.float16])
def test_scan_dtypes(torch_ref, op, dtype):
    arr = (np.random.rand(4, 5) * 3).astype(dtype)
    g, t = pair(torch_ref, arr)
    tol = {"rtol": 2e-3, "atol": 1e-3}
    assert_close(getattr(g, op)(1), getattr(t, op)(1), **tol)
    assert_close(
        getattr(g, op)(0, dtype=gs.float64), getattr(t, op)(0, dtype=torch_ref.float64), **tol
    )


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_large_matches_torch(torch_ref, op):
    """A (1024, 192) float32 tensor along both dims: the parallel paths of the kernel."""
    arr = np.random.randn(1024, 192).astype(np.float32)
    if op == "cumprod":
        arr = (1.0 + 0.01 * arr).astype(np.float32)
        arr[::97, ::13] = 0.0
    for dim in (0, 1, -1):
        check(torch_ref, lambda x, d=dim: getattr(x, op)(d), arr, rtol=1e-4, atol=1e-4)


def test_scan_empty_and_zero_dim(torch_ref):
    for op in ["cumsum", "cumprod"]:
        for arr, dim in [(np.zeros((0, 3)), 0), (np.zeros((0, 3)), 1), (np.zeros((2, 0)), 1)]:
            check(torch_ref, lambda x, d=dim, o=op: getattr(x, o)(d), arr)
        check(torch_ref, lambda x, o=op: getattr(x, o)(0), np.array(2.5))
        check(torch_ref, lambda x, o=op: getattr(x, o)(-1), np.array(2.5))


@pytest.mark.parametrize(
    "row",
    [
        [2.0, 0.0, 3.0, 4.0, 0.5],
        [0.0, 0.0, 3.0, 4.0, 0.5],
        [0.0, 1.5, 2.0, -1.0, 2.0],
        [1.0, 2.0, 3.0, 4.0, 0.0],
        [1.0, 0.0, 2.0, 0.0, 3.0],
    ],
)
def test_cumprod_gradient_with_zeros(torch_ref, row):
    arr = np.array([row, np.random.randn(5)])
    check(torch_ref, lambda x: x.cumprod(1), arr)
    check(torch_ref, lambda x: x.cumprod(0), arr.T.copy())
    x = gs.tensor(arr, requires_grad=True)
    assert gradcheck(lambda x: x.cumprod(1), (x,))
    assert gradcheck(lambda x: x.cumprod(0), (x,))


def test_cumsum_gradcheck():
    x = gs.tensor(np.random.randn(3, 4), requires_grad=True)
    assert gradcheck(lambda x: x.cumsum(1), (x,))
    assert gradcheck(lambda x: x.cumsum(-2), (x,))


def test_double_backward_with_zeros(torch_ref):
    arr = np.array([[1.5, 0.0, 2.0, -1.0], [0.0, 0.0, 3.0, 1.0]])
    w = np.random.randn(2, 4)
    for op in ["cumprod", "cumsum"]:
        g, t = pair(torch_ref, arr, True)
        (dg,) = gs.autograd.grad((getattr(g, op)(1) * gs.tensor(w)).sum(), g, create_graph=True)
        (dt,) = torch_ref.autograd.grad(
            (getattr(t, op)(1) * torch_ref.tensor(w)).sum(), t, create_graph=True
        )
        assert_close(dg, dt)
        if op == "cumprod":
            (dg * dg).sum().backward()
            (dt * dt).sum().backward()
            assert_close(g.grad, t.grad)


def test_scan_of_a_nonleaf_in_a_chain(torch_ref):
    """Transmittance-like use: exp(-cumsum(sigma * delta)) and a cumprod of (1 - alpha)."""
    arr = np.random.rand(6, 8)
    check(torch_ref, lambda x: (x * 0.5).cumsum(1).neg().exp(), arr)
    check(torch_ref, lambda x: (1.0 - x).cumprod(-1), arr)


@pytest.mark.parametrize("op", ["cumsum", "cumprod"])
def test_scan_bad_input(op):
    x = gs.ones(2, 3)
    with pytest.raises(IndexError, match=r"range of \[-2, 1\]"):
        getattr(x, op)(2)
    with pytest.raises(TypeError, match="tuple"):
        getattr(x, op)((0, 1))
    with pytest.raises(TypeError, match="float"):
        getattr(gs, op)(x, 1.0)
    with pytest.raises(TypeError, match="list"):
        getattr(gs, op)([1, 2], 0)
    with pytest.raises(TypeError, match="dtype"):
        getattr(x, op)(0, dtype="float")
