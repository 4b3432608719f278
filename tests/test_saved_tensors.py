"""What the graph saves: relu/threshold's 1-bit masks, saved_tensors_hooks, and the
built-in policies (bfloat16, host, disk), against PyTorch and the exact accounting."""

from __future__ import annotations

import gc
import os

import numpy as np
import pytest
from helpers import assert_close, to_torch

import gradstream as gs
from gradstream import memory
from gradstream.autograd import graph

# ---------------------------------------------------------------- relu / threshold


def _pair(shape, dtype="float32", seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return gs.tensor(a, requires_grad=True), a


@pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (13, 9), (300, 131), (3, 40001)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("bitmask", [True, False])
def test_relu_forward_backward_vs_torch(torch_ref, shape, dtype, bitmask):
    x, a = _pair(shape, dtype)
    g = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    with graph.relu_bitmask(bitmask):
        y = gs.relu(x)
        y.backward(gs.tensor(g))
    tx = torch_ref.tensor(a, requires_grad=True)
    ty = torch_ref.relu(tx)
    ty.backward(torch_ref.tensor(g))
    assert_close(y, ty, rtol=0, atol=0)
    assert_close(x.grad, tx.grad, rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_relu_half_types_vs_torch(torch_ref, dtype):
    x = gs.randn(37, 5).to(getattr(gs, dtype)).requires_grad_()
    tx = to_torch(x, requires_grad=True)
    gs.relu(x).sum().backward()
    torch_ref.relu(tx).sum().backward()
    assert_close(x.grad, tx.grad, rtol=0, atol=0)


def test_relu_noncontiguous_input_and_gradient(torch_ref):
    base, a = _pair((40, 30))
    x = base.t()  # non-contiguous view; gradients flow back to base
    g = gs.randn(40, 30).t()
    gs.relu(x).backward(g)
    tb = torch_ref.tensor(a, requires_grad=True)
    torch_ref.relu(tb.t()).backward(to_torch(g))
    assert_close(base.grad, tb.grad, rtol=0, atol=0)


def test_relu_nan_passes_like_torch(torch_ref):
    a = np.array([np.nan, -1.0, 0.0, 2.0, -0.0], dtype="float32")
    x = gs.tensor(a, requires_grad=True)
    y = gs.relu(x)
    y.sum().backward()
    tx = torch_ref.tensor(a, requires_grad=True)
    ty = torch_ref.relu(tx)
    ty.sum().backward()
    assert_close(y, ty, rtol=0, atol=0)
    assert_close(x.grad, tx.grad, rtol=0, atol=0)


@pytest.mark.parametrize("th,value", [(0.3, -2.0), (-0.5, 0.7), (0.0, 0.0)])
@pytest.mark.parametrize("shape", [(0,), (11,), (200, 170)])
@pytest.mark.parametrize("bitmask", [True, False])
def test_threshold_vs_torch(torch_ref, th, value, shape, bitmask):
    x, a = _pair(shape, "float64")
    with graph.relu_bitmask(bitmask):
        y = gs.nn.functional.threshold(x * 1.0, th, value)
        (y * y).sum().backward()
    tx = torch_ref.tensor(a, requires_grad=True)
    ty = torch_ref.nn.functional.threshold(tx * 1.0, th, value)
    (ty * ty).sum().backward()
    assert_close(y, ty, rtol=0, atol=0)
    assert_close(x.grad, tx.grad, rtol=1e-12, atol=0)


@pytest.mark.parametrize("bitmask", [True, False])
def test_inplace_relu_and_threshold_vs_torch(torch_ref, bitmask):
    x, a = _pair((6, 9))
    tx = torch_ref.tensor(a, requires_grad=True)
    with graph.relu_bitmask(bitmask):
        outs = []
        for lib, t in ((gs, x), (torch_ref, tx)):
            h1 = t * 2.0
            r1 = lib.nn.functional.relu(h1, inplace=True)
            assert r1 is h1
            h2 = t * 3.0
            lib.relu_(h2)
            h3 = t - 0.5
            lib.nn.ReLU(inplace=True)(h3)
            h4 = t + 0.25
            r4 = lib.nn.functional.threshold(h4, 0.1, -1.0, inplace=True)
            assert r4 is h4
            h5 = t * 0.5
            lib.nn.Threshold(0.2, 5.0, inplace=True)(h5)
            h6 = t * 1.5
            lib.threshold_(h6, -0.3, 0.5)
            total = h1 * h2 + h3 * h4 + h5 * h6
            total.sum().backward()
            outs.append(total)
    assert_close(outs[0], outs[1])
    assert_close(x.grad, tx.grad)


def test_threshold_module_and_functional_vs_torch(torch_ref):
    x, a = _pair((5, 8))
    tx = torch_ref.tensor(a, requires_grad=True)
    m, tm = gs.nn.Threshold(0.1, 20.0), torch_ref.nn.Threshold(0.1, 20.0)
    assert repr(m) == repr(tm)
    y, ty = m(x), tm(tx)
    y.sum().backward()
    ty.sum().backward()
    assert_close(y, ty)
    assert_close(x.grad, tx.grad)
    assert_close(gs.threshold(x.detach(), 0.0, 1.0), torch_ref.threshold(tx.detach(), 0.0, 1.0))


def test_threshold_integers_and_bool(torch_ref):
    a = np.array([[-3, 0, 2], [5, -1, 1]], dtype="int64")
    assert_close(gs.threshold(gs.tensor(a), 1, 9), torch_ref.threshold(torch_ref.tensor(a), 1, 9))
    with pytest.raises(NotImplementedError, match="threshold: not implemented for bool"):
        gs.threshold(gs.tensor([True, False]), 0.0, 1.0)


def test_threshold_rejects_non_tensor():
    with pytest.raises(TypeError, match=r"'input' \(position 1\) must be Tensor, not list"):
        gs.nn.functional.threshold([1.0], 0.0, 0.0)


# ---------------------------------------------------------------- exact saved bytes


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
@pytest.mark.parametrize("n", [1, 8, 1001, 100_003])
def test_relu_saves_one_bit_per_element(n):
    gc.collect()
    x = gs.randn(n, requires_grad=True)
    assert memory.memory_by_category()["activation"] == 0
    y = gs.relu(x)
    assert memory.memory_by_category()["activation"] == (n + 7) // 8
    y.sum().backward()
    assert memory.memory_by_category()["activation"] == 0
    with graph.relu_bitmask(False):
        y = gs.relu(x)
    assert memory.memory_by_category()["activation"] == 4 * n  # the output, as PyTorch
    del y
    gc.collect()
    z = gs.nn.functional.threshold(x, 0.5, 0.0)
    assert memory.memory_by_category()["activation"] == (n + 7) // 8
    del z


def test_no_mask_without_grad():
    gc.collect()
    x = gs.randn(1000)
    before = memory.memory_allocated()
    y = gs.relu(x)
    assert memory.memory_allocated() - before == y.nbytes
    assert memory.memory_by_category()["activation"] == 0


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
def test_residual_relu_mlp_saves_masks_not_outputs():
    """x = x + relu(linear(x)): the relu output is used only by the add, so it is freed;
    each layer keeps its input (for the weight's gradient) and a 1/32 mask."""
    gc.collect()
    batch, width, layers = 16, 64, 4
    lins = [gs.nn.Linear(width, width) for _ in range(layers)]
    x = gs.randn(batch, width)
    h = x
    for lin in lins:
        h = h + gs.relu(lin(h))
    act = memory.memory_by_category()["activation"]
    floats = batch * width * 4
    # inputs of layers 1..: the sums; layer 0's input is x (a user tensor, saved once)
    assert act == layers * floats + layers * (batch * width // 8)
    h.sum().backward()
    assert memory.memory_by_category()["activation"] == 0


# ---------------------------------------------------------------- double backward


def _penalty(lib, x, w1, w2, th=None):
    h = x @ w1
    h = lib.relu(h) if th is None else lib.nn.functional.threshold(h, th, -0.5)
    out = (h * h @ w2).sum()
    (g,) = lib.autograd.grad(out, x, create_graph=True)
    pen = (g * g).sum()
    pen.backward()
    return pen


@pytest.mark.parametrize("bitmask", [True, False])
@pytest.mark.parametrize("th", [None, 0.2])
def test_double_backward_through_relu_vs_torch(torch_ref, bitmask, th):
    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) for s in [(6, 5), (5, 7), (7, 3)]]
    ours = [gs.tensor(a, requires_grad=True) for a in arrays]
    theirs = [torch_ref.tensor(a, requires_grad=True) for a in arrays]
    with graph.relu_bitmask(bitmask):
        p = _penalty(gs, *ours, th=th)
    tp = _penalty(torch_ref, *theirs, th=th)
    assert_close(p, tp, rtol=1e-12)
    for a, b in zip(ours, theirs, strict=True):
        assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-12)


def test_relu_backward_differentiable_in_grad_output(torch_ref):
    rng = np.random.default_rng(4)
    a, ga, wa = (rng.standard_normal((4, 6)) for _ in range(3))
    grads = []
    for lib in (gs, torch_ref):
        x = lib.tensor(a, requires_grad=True)
        g = lib.tensor(ga, requires_grad=True)
        (gx,) = lib.autograd.grad(lib.relu(x), x, g, create_graph=True)
        (gx * lib.tensor(wa)).sum().backward()
        grads.append(g.grad)
    assert_close(grads[0], grads[1], rtol=0, atol=0)


# ---------------------------------------------------------------- saved_tensors_hooks


class Counter:
    def __init__(self, lib):
        self.packed = 0
        self.unpacked = 0
        self.shapes = []

    def pack(self, t):
        self.packed += 1
        self.shapes.append(tuple(t.shape))
        return t

    def unpack(self, t):
        self.unpacked += 1
        return t


def _counting_run(lib, fn, arrays, retain=False):
    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    c = Counter(lib)
    with lib.autograd.graph.saved_tensors_hooks(c.pack, c.unpack):
        out = fn(*ts)
    assert c.unpacked == 0
    out.backward(retain_graph=retain)
    first = c.unpacked
    if retain:
        out.backward()
    return c, first, ts


@pytest.mark.parametrize(
    "fn",
    [
        lambda a, b: (a * b).sum(),
        lambda a, b: (a.exp() + b.sin()).sum(),
        lambda a, b: (a @ b.t()).sum(),
        lambda a, b: (a / b).tanh().sum(),
    ],
)
def test_hooks_called_like_torch(torch_ref, fn):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((3, 4)) for _ in range(2)]
    ours, first, xs = _counting_run(gs, fn, arrays, retain=True)
    theirs, tfirst, txs = _counting_run(torch_ref, fn, arrays, retain=True)
    assert ours.packed == theirs.packed
    assert first == tfirst == ours.packed  # once per saved tensor per backward
    assert ours.unpacked == theirs.unpacked == 2 * ours.packed
    for a, b in zip(xs, txs, strict=True):
        assert_close(a.grad, b.grad)


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
def test_hooks_see_relu_mask_as_uint8():
    seen = []
    x = gs.randn(3, 7, requires_grad=True)

    def pack(t):
        seen.append((t.dtype, tuple(t.shape), t.requires_grad))
        return t

    with graph.saved_tensors_hooks(pack, lambda t: t):
        y = gs.relu(x)
    assert seen == [(gs.uint8, (3,), False)]  # ceil(21 / 8) bytes, no history
    y.sum().backward()
    assert_close(x.grad, (x > 0).float())


def test_no_pack_without_grad(torch_ref):
    for lib in (gs, torch_ref):
        c = Counter(lib)
        x = lib.ones(3)
        with lib.autograd.graph.saved_tensors_hooks(c.pack, c.unpack):
            (x * x).exp()
            with lib.no_grad():
                (lib.ones(3, requires_grad=True) * 2).exp()
        assert c.packed == 0


def test_innermost_hooks_apply():
    outer, inner = Counter(gs), Counter(gs)
    x = gs.randn(4, requires_grad=True)
    with graph.saved_tensors_hooks(outer.pack, outer.unpack):
        y = x.exp()
        with graph.saved_tensors_hooks(inner.pack, inner.unpack):
            y = y.sin()
        y = y.exp()
    z = x.exp()  # outside: no hooks
    assert (outer.packed, inner.packed) == (2, 1)
    (y + z).sum().backward()
    assert (outer.unpacked, inner.unpacked) == (2, 1)
    assert_close(x.grad, (x.exp().sin().exp() * x.exp().cos() * x.exp() + x.exp()))


class Cube(gs.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * g * x * x


def test_hooks_apply_to_function_save_for_backward():
    c = Counter(gs)
    x = gs.randn(5, requires_grad=True)
    with graph.saved_tensors_hooks(c.pack, c.unpack):
        y = Cube.apply(x)
    assert c.packed == 1
    y.sum().backward()
    assert c.unpacked == 1
    assert_close(x.grad, 3 * x.detach() ** 2)


def test_function_double_backward_through_packed_input(torch_ref):
    a = np.random.default_rng(5).standard_normal(5)
    x = gs.tensor(a, requires_grad=True)
    with graph.save_on_cpu():
        y = Cube.apply(x * 1.0)
    (g,) = gs.autograd.grad(y.sum(), x, create_graph=True)
    g.sum().backward()
    assert_close(x.grad, 6 * gs.tensor(a))


def test_unpack_must_return_same_shape_and_dtype():
    x = gs.randn(3, 4, requires_grad=True)
    with graph.saved_tensors_hooks(lambda t: t, lambda t: t[:2]):
        y = x.exp()
    with pytest.raises(RuntimeError, match=r"shape \[2, 4\].*shape \[3, 4\] saved by ExpBackward0"):
        y.sum().backward()
    with graph.saved_tensors_hooks(lambda t: t, lambda t: t.double()):
        y = x.exp()
    with pytest.raises(RuntimeError, match="dtype float64 .* dtype float32 and shape"):
        y.sum().backward()
    with graph.saved_tensors_hooks(lambda t: t, lambda t: 3):
        y = x.exp()
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor .* type int"):
        y.sum().backward()


def test_hooks_must_be_callable():
    with pytest.raises(TypeError, match="pack_hook must be callable"):
        with graph.saved_tensors_hooks(1, lambda t: t):
            pass


class HookError(Exception):
    pass


def _fail(_):
    raise HookError("boom")


def test_exception_in_pack_propagates_and_engine_stays_consistent(torch_ref):
    x = gs.randn(4, requires_grad=True)
    with pytest.raises(HookError, match="boom"):
        with graph.saved_tensors_hooks(_fail, lambda t: t):
            x.exp()
    assert gs._core._saved_tensors_hooks_depth() == 0
    # also for a composite op whose inner ops save, and in-place ones
    h = x * 1.0
    w = gs.randn(3, 4, requires_grad=True)
    with graph.saved_tensors_hooks(_fail, lambda t: t):
        with pytest.raises(HookError):
            gs.nn.functional.linear(x.view(1, 4), w)
        with pytest.raises(HookError):
            h.relu_()
        with pytest.raises(HookError):
            Cube.apply(x)
    # a later graph works, with and without hooks
    y = (x.exp() * x).sum()
    y.backward()
    c = Counter(gs)
    x2 = x * 2.0
    with graph.saved_tensors_hooks(c.pack, c.unpack):
        z = gs.relu(x2).sum()
    z.backward()
    assert c.packed == c.unpacked == 1
    tx = to_torch(x.detach(), requires_grad=True)
    (tx.exp() * tx).sum().backward()
    torch_ref.relu(tx * 2.0).sum().backward()
    assert_close(x.grad, tx.grad)


def test_exception_in_unpack_propagates_and_engine_stays_consistent():
    x = gs.randn(4, requires_grad=True)
    with graph.saved_tensors_hooks(lambda t: t, _fail):
        y = x.exp().sum()
    with pytest.raises(HookError, match="boom"):
        y.backward()
    assert x.grad is None
    (x.exp().sum()).backward()
    assert_close(x.grad, x.detach().exp())


def test_version_check_applies_to_the_original():
    x = gs.randn(5, requires_grad=True)
    h = x * 2.0
    with graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
        y = h.sin()  # saves h (a copy is what is kept)
    h.add_(1.0)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: \[float32 \[5\]\]"):
        y.sum().backward()


def test_hooks_packed_release_after_backward():
    released = []

    class Box:
        def __init__(self, t):
            self.t = t

        def __del__(self):
            released.append(1)

    x = gs.randn(4, requires_grad=True)
    with graph.saved_tensors_hooks(Box, lambda b: b.t):
        y = x.exp().sin().sum()
    assert not released
    y.backward()
    gc.collect()
    assert len(released) == 2


# ---------------------------------------------------------------- policies


def _mlp(seed=0, width=64, batch=32, layers=8, residual=False):
    gs.manual_seed(seed)
    lins = [gs.nn.Linear(width, width) for _ in range(layers)]
    x = gs.randn(batch, width)
    return lins, x


def _step(lins, x, residual=False):
    h = x
    for lin in lins:
        h = h + gs.relu(lin(h)) if residual else gs.relu(lin(h))
    return (h * h).mean()


def _grads(lins):
    return [p.grad.numpy().copy() for lin in lins for p in (lin.weight, lin.bias)]


def _run(policy, residual=False):
    gc.collect()
    lins, x = _mlp()
    with policy:
        loss = _step(lins, x, residual)
    act = memory.memory_by_category()["activation"]
    alloc = memory.memory_allocated()
    loss.backward()
    return _grads(lins), act, alloc


class _Nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def _rel_err(a, b):
    return max(np.abs(x - y).max() / np.abs(y).max() for x, y in zip(a, b, strict=True))


@pytest.mark.cpu_backend("the 1-bit relu mask is the CPU kernel's")
@pytest.mark.parametrize("residual", [False, True])
def test_save_in_bfloat16(residual):
    ref, act, _ = _run(_Nothing(), residual)
    got, act16, _ = _run(graph.save_in_bfloat16(), residual)
    masks = 8 * 32 * 64 // 8
    # every float32 saved tensor in half the bytes; the loss's h * h saves h twice, which
    # the policy packs twice (a buffer saved by two nodes is counted once without it)
    assert act16 - masks == (act - masks) // 2 + 32 * 64 * 2
    assert 0 < _rel_err(got, ref) < 1e-2


def test_save_in_bfloat16_keeps_half_types():
    x = gs.randn(8, dtype=gs.float16, requires_grad=True)
    with graph.save_in_bfloat16():
        y = x.exp()
    y.sum().backward()
    assert_close(x.grad, x.detach().exp(), rtol=0, atol=0)


@pytest.mark.parametrize("residual", [False, True])
def test_save_on_cpu_is_exact_and_leaves_tensor_memory(residual):
    ref, act, alloc = _run(_Nothing(), residual)
    got, act_host, alloc_host = _run(graph.save_on_cpu(), residual)
    assert act > 0 and act_host == 0
    assert alloc_host < alloc
    for a, b in zip(got, ref, strict=True):
        np.testing.assert_array_equal(a, b)
    got, _, _ = _run(graph.offload_to_host(), residual)
    np.testing.assert_array_equal(got[0], ref[0])


def test_save_on_cpu_bfloat16_round_trip():
    x = gs.randn(6, dtype=gs.bfloat16, requires_grad=True)
    with graph.save_on_cpu():
        y = (x * x).sum()
    y.backward()
    assert_close(x.grad, 2 * x.detach(), rtol=0, atol=0)


def test_save_to_disk_is_exact_and_cleans_up(tmp_path):
    ref, act, alloc = _run(_Nothing())
    gc.collect()
    lins, x = _mlp()
    with graph.save_to_disk(tmp_path):
        loss = _step(lins, x)
    files = os.listdir(tmp_path)
    assert len(files) > 0 and all(f.endswith(".npy") for f in files)
    assert memory.memory_by_category()["activation"] == 0
    assert memory.memory_allocated() < alloc
    loss.backward(retain_graph=True)
    assert len(os.listdir(tmp_path)) == len(files)  # retained: still needed
    for a, b in zip(_grads(lins), ref, strict=True):
        np.testing.assert_array_equal(a, b)
    del loss
    gc.collect()
    assert os.listdir(tmp_path) == []


def test_save_to_disk_default_directory_removed():
    x = gs.randn(5, requires_grad=True)
    policy = graph.save_to_disk()
    path = policy.directory.path
    with policy:
        y = x.exp().sum()
    assert len(os.listdir(path)) == 1
    y.backward()
    del policy, y
    gc.collect()
    assert not os.path.exists(path)
    assert_close(x.grad, x.detach().exp(), rtol=0, atol=0)


def test_policies_nest_with_user_hooks():
    c = Counter(gs)
    x = gs.randn(4, requires_grad=True)
    with graph.save_in_bfloat16():
        with graph.saved_tensors_hooks(c.pack, c.unpack):
            y = x.exp()
        z = y.sin()
    (z.sum()).backward()
    assert c.packed == c.unpacked == 1
    assert_close(x.grad, (x.exp().cos() * x.exp()).detach(), rtol=0.05, atol=0.05)


def test_graph_module_is_exported():
    assert gs.autograd.graph.saved_tensors_hooks is graph.saved_tensors_hooks
    assert graph.relu_bitmask_enabled()
