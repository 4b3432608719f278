"""The CPU matrix product reads its operands in place, on any strides: transposed, sliced and
broadcast operands, batches of small matrices (one per thread) and large products (split
across threads), empty dims, float16/32/64; values and gradients against PyTorch."""

import numpy as np
import pytest
from helpers import assert_close, to_torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradstream as gs

TOL = {"float64": 1e-12, "float32": 2e-6, "float16": 2e-3}


def _view(x, layout: str):
    """`x` (a tensor whose last two dims are the matrix) through a layout of the same values:
    "dense", "t" (a transposed copy transposed back: column-major), "step" (every other
    column of a wider buffer) or "both" (a column-major view of every other row)."""
    if layout == "dense":
        return x
    if layout == "t":
        return x.transpose(-1, -2).contiguous().transpose(-1, -2)
    if layout == "step":
        wide = gs.stack([x, gs.zeros_like(x)], -1).flatten(-2)
        return wide[..., ::2]
    wide = gs.stack([x, gs.zeros_like(x)], -2).flatten(-3, -2)
    return _view(wide, "t")[..., ::2, :]


def _check(torch, a_np, b_np, la, lb, dtype, grads=True):
    ga = gs.tensor(a_np, dtype=getattr(gs, dtype))
    gb = gs.tensor(b_np, dtype=getattr(gs, dtype))
    va, vb = _view(ga, la), _view(gb, lb)
    assert np.array_equal(va.float().numpy(), ga.float().numpy())
    if grads:
        va.requires_grad_()
        vb.requires_grad_()
    ta, tb = to_torch(va, grads), to_torch(vb, grads)
    out, ref = va @ vb, ta @ tb
    k = a_np.shape[-1]
    tol = TOL[dtype]
    assert_close(out, ref, rtol=tol * 4, atol=tol, terms=max(k, 1))
    if not grads or out.numel() == 0:
        return
    g = np.random.default_rng(0).standard_normal(tuple(ref.shape)).astype(a_np.dtype)
    out.backward(gs.tensor(g, dtype=out.dtype))
    ref.backward(torch.from_numpy(g).to(ref.dtype))
    n, m = out.shape[-2] if out.ndim > 1 else 1, out.shape[-1]
    # Broadcast batch dims sum their gradients over the batch too.
    terms = max(n, m, 1) * max(int(np.prod(out.shape[:-2], dtype=np.int64)), 1)
    assert_close(va.grad, ta.grad, rtol=tol * 4, atol=tol, terms=terms)
    assert_close(vb.grad, tb.grad, rtol=tol * 4, atol=tol, terms=terms)


LAYOUTS = st.sampled_from(["dense", "t", "step", "both"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    batch_a=st.lists(st.integers(0, 3), max_size=2),
    batch_b=st.lists(st.integers(0, 3), max_size=2),
    n=st.integers(0, 9),
    k=st.integers(0, 9),
    m=st.integers(0, 9),
    la=LAYOUTS,
    lb=LAYOUTS,
    dtype=st.sampled_from(["float32", "float64"]),
    seed=st.integers(0, 2**16),
)
def test_matmul_on_any_layout_matches_torch(
    torch_ref, batch_a, batch_b, n, k, m, la, lb, dtype, seed
):
    # Batch dims that broadcast: where both have a dim, one of them may be 1.
    r = min(len(batch_a), len(batch_b))
    for i in range(1, r + 1):
        if batch_a[-i] != batch_b[-i]:
            batch_b[-i] = 1
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*batch_a, n, k))
    b = rng.standard_normal((*batch_b, k, m))
    np_dtype = np.float32 if dtype == "float32" else np.float64
    _check(torch_ref, a.astype(np_dtype), b.astype(np_dtype), la, lb, dtype)


@pytest.mark.parametrize(
    ("sa", "sb"),
    [
        ((64, 2, 24, 16), (64, 2, 16, 20)),  # many small products: one per thread
        ((3, 96, 64), (64, 80)),  # a batch against one matrix: folded into rows
        ((2, 96, 64), (1, 64, 200)),  # a broadcast batch (stride 0), each product threaded
        ((300, 200), (200, 130)),  # one product split across threads
    ],
)
@pytest.mark.parametrize(("la", "lb"), [("dense", "dense"), ("t", "t"), ("step", "both")])
def test_large_and_batched_products_match_torch(torch_ref, sa, sb, la, lb):
    rng = np.random.default_rng(1)
    a = rng.standard_normal(sa).astype(np.float32)
    b = rng.standard_normal(sb).astype(np.float32)
    _check(torch_ref, a, b, la, lb, "float32")


@pytest.mark.parametrize(("la", "lb"), [("dense", "dense"), ("t", "step")])
def test_float16_products_match_torch(torch_ref, la, lb):
    rng = np.random.default_rng(2)
    a = rng.standard_normal((3, 17, 40)).astype(np.float16)
    b = rng.standard_normal((3, 40, 33)).astype(np.float16)
    _check(torch_ref, a, b, la, lb, "float16", grads=False)


def test_linear_reads_the_weight_in_place(torch_ref):
    """Linear's `x @ W.T` and both gradients, at a workload-like shape."""
    rng = np.random.default_rng(3)
    x = gs.tensor(rng.standard_normal((512, 96)).astype(np.float32), requires_grad=True)
    lin = gs.nn.Linear(96, 72)
    tlin = torch_ref.nn.Linear(96, 72)
    with torch_ref.no_grad():
        tlin.weight.copy_(to_torch(lin.weight))
        tlin.bias.copy_(to_torch(lin.bias))
    tx = to_torch(x, True)
    out, ref = lin(x), tlin(tx)
    assert_close(out, ref, rtol=1e-5, atol=1e-6, terms=96)
    out.square().sum().backward()
    ref.square().sum().backward()
    assert_close(x.grad, tx.grad, rtol=1e-5, atol=1e-6, terms=512)
    assert_close(lin.weight.grad, tlin.weight.grad, rtol=1e-5, atol=1e-6, terms=512)
