"""`autocast` and `GradScaler` against PyTorch's, and the activation bytes autocast saves."""

from __future__ import annotations

import gc
import threading
import warnings

import numpy as np
import pytest
from helpers import to_numpy, to_torch

import gradstream as gs
from gradstream import memory

torch = pytest.importorskip("torch")

BF16_EPS = 2.0**-8  # the spacing of bfloat16 numbers near 1


def _bf16_close(actual, expected, terms: int = 1):
    """bfloat16 results: each may be off by a few ulps of the largest magnitude involved."""
    a, e = to_numpy(actual).astype(np.float64), to_numpy(expected).astype(np.float64)
    scale = max(float(np.abs(e).max(initial=0.0)), 1e-30)
    np.testing.assert_allclose(a, e, rtol=0, atol=4 * BF16_EPS * scale * np.sqrt(terms))


def _pair(*shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    return gs.tensor(x), torch.tensor(x)


@pytest.mark.parametrize(
    "op",
    [
        lambda m, a, b, c: m.matmul(a, b),
        lambda m, a, b, c: m.mm(a, b),
        lambda m, a, b, c: m.addmm(c, a, b),
        lambda m, a, b, c: m.nn.functional.linear(a, b.t(), c),
        lambda m, a, b, c: m.bmm(a.unsqueeze(0), b.unsqueeze(0)),
        lambda m, a, b, c: a @ b,
    ],
    ids=["matmul", "mm", "addmm", "linear", "bmm", "@"],
)
def test_products_run_in_bfloat16_like_pytorch(op):
    (ga, ta), (gb, tb), (gc_, tc) = _pair(6, 5, seed=1), _pair(5, 3, seed=2), _pair(3, seed=3)
    with gs.autocast("cpu"):
        out = op(gs, ga, gb, gc_)
    with torch.autocast("cpu"):
        ref = op(torch, ta, tb, tc)
    assert out.dtype == gs.bfloat16 and ref.dtype == torch.bfloat16
    _bf16_close(out, ref, terms=5)


def test_float64_and_outside_the_region_are_left_alone():
    a = gs.randn(3, 3, dtype=gs.float64)
    with gs.autocast("cpu"):
        assert (a @ a).dtype == gs.float64
        assert gs.randn(2, 2).tanh().dtype == gs.float32  # not on the list: unchanged
    assert (gs.randn(2, 2) @ gs.randn(2, 2)).dtype == gs.float32
    assert not gs.is_autocast_enabled("cpu")


def test_losses_run_in_float32_like_pytorch():
    (gx, tx), (gy, ty) = _pair(4, 3, seed=4), _pair(4, 3, seed=5)
    target = np.array([0, 2, 1, 2])
    with gs.autocast("cpu"):
        logits = gx @ gs.eye(3)
        losses = [
            gs.nn.functional.mse_loss(logits, gy),
            gs.nn.functional.cross_entropy(logits, gs.tensor(target)),
            gs.nn.functional.huber_loss(logits, gy),
        ]
    with torch.autocast("cpu"):
        tlogits = tx @ torch.eye(3)
        refs = [
            torch.nn.functional.mse_loss(tlogits, ty),
            torch.nn.functional.cross_entropy(tlogits, torch.tensor(target)),
            torch.nn.functional.huber_loss(tlogits, ty),
        ]
    assert logits.dtype == gs.bfloat16
    for loss, ref in zip(losses, refs, strict=True):
        assert loss.dtype == gs.float32 and ref.dtype == torch.float32
        _bf16_close(loss, ref, terms=3)


def test_mlp_step_matches_pytorch_and_gradients_stay_float32():
    gs.manual_seed(0)
    model = gs.nn.Sequential(gs.nn.Linear(16, 32), gs.nn.GELU(), gs.nn.Linear(32, 4))
    ref = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    ref.load_state_dict({k: to_torch(v.detach()) for k, v in model.state_dict().items()})
    (gx, tx), (gy, ty) = _pair(8, 16, seed=6), _pair(8, 4, seed=7)
    with gs.autocast("cpu", dtype=gs.bfloat16):
        loss = gs.nn.functional.mse_loss(model(gx), gy)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        tloss = torch.nn.functional.mse_loss(ref(tx), ty)
    loss.backward()
    tloss.backward()
    _bf16_close(loss, tloss, terms=32)
    for p, tp in zip(model.parameters(), ref.parameters(), strict=True):
        assert p.grad.dtype == gs.float32
        _bf16_close(p.grad, tp.grad, terms=32)


def test_autocast_halves_the_saved_activation_bytes():
    """Under autocast every saved tensor is a bfloat16 copy: exactly half the bytes."""

    def saved_bytes(autocast: bool) -> int:
        gc.collect()
        gs.manual_seed(0)
        x = gs.randn(64, 128)
        w1 = gs.randn(128, 256, requires_grad=True)
        w2 = gs.randn(256, 32, requires_grad=True)
        with gs.autocast("cpu", enabled=autocast):
            loss = ((x @ w1).tanh() @ w2).float().sum()
        saved = memory.memory_by_category()["activation"]
        loss.backward()
        assert memory.memory_by_category()["activation"] == 0
        return saved

    plain = saved_bytes(False)
    assert plain == (64 * 128 + 64 * 256 + 256 * 32) * 4  # x, tanh's output, w2
    assert saved_bytes(True) == plain // 2


def test_nesting_disabling_decorator_and_threads():
    a = gs.randn(2, 2)
    with gs.autocast("cpu"):
        with gs.autocast("cpu", enabled=False):
            assert (a @ a).dtype == gs.float32
        assert (a @ a).dtype == gs.bfloat16

        seen = []
        thread = threading.Thread(target=lambda: seen.append((a @ a).dtype))
        thread.start()
        thread.join()
        assert seen == [gs.float32]  # autocast state is per thread, as in PyTorch

    @gs.autocast("cpu", dtype=gs.float16)
    def f(t):
        return t @ t

    assert f(a).dtype == gs.float16
    assert (a @ a).dtype == gs.float32
    with gs.cpu.amp.autocast():
        assert (a @ a).dtype == gs.bfloat16
        assert gs.get_autocast_dtype("cpu") == gs.bfloat16


def test_bad_arguments_warn_or_raise_like_pytorch():
    for mod in (gs, torch):
        with pytest.raises(ValueError, match="device_type"):
            mod.autocast(0)
        with pytest.raises(RuntimeError, match="device type at start of device string"):
            mod.autocast("nonsense")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with mod.autocast("cpu", dtype=mod.float64):
                a = mod.ones(2, 2)
                assert (a @ a).dtype == mod.float32
        assert any("target dtype is not supported" in str(w.message) for w in caught)
    with pytest.warns(UserWarning, match="CUDA is not available"):
        gs.autocast("cuda")


def _train_with_scaler(mod, grads_scale: list[float]) -> tuple[list[float], list[np.ndarray]]:
    """Steps whose loss is multiplied by each entry of `grads_scale` (inf forces a skip)."""
    w = mod.nn.Parameter(mod.tensor([1.0, -2.0, 3.0]))
    opt = mod.optim.SGD([w], lr=0.1)
    scaler = mod.amp.GradScaler("cpu", init_scale=8.0, growth_interval=2)
    scales, params = [], []
    for k in grads_scale:
        opt.zero_grad()
        loss = (w * w).sum() * k
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        mod.nn.utils.clip_grad_norm_([w], 100.0)
        scaler.step(opt)
        scaler.update()
        scales.append(scaler.get_scale())
        params.append(to_numpy(w.detach()).copy())
    return scales, params


def test_grad_scaler_matches_pytorch_through_skips_and_growth():
    sequence = [1.0, 1.0, float("inf"), 1.0, 1.0, 1.0]
    scales, params = _train_with_scaler(gs, sequence)
    tscales, tparams = _train_with_scaler(torch, sequence)
    assert scales == tscales == [8.0, 16.0, 8.0, 8.0, 16.0, 16.0]
    for p, tp in zip(params, tparams, strict=True):
        np.testing.assert_allclose(p, tp, rtol=1e-6)


def test_grad_scaler_state_and_errors_like_pytorch():
    for mod in (gs, torch):
        w = mod.nn.Parameter(mod.ones(2))
        opt = mod.optim.SGD([w], lr=0.1)
        scaler = mod.amp.GradScaler("cpu", init_scale=4.0)
        scaler.scale(w.sum()).backward()
        scaler.unscale_(opt)
        with pytest.raises(RuntimeError, match="already been called"):
            scaler.unscale_(opt)
        scaler.step(opt)
        with pytest.raises(RuntimeError, match="step\\(\\) has already been called"):
            scaler.step(opt)
        with pytest.raises(RuntimeError, match="Closure use"):
            scaler.step(opt, closure=lambda: 0)
        scaler.update()
        state = scaler.state_dict()
        assert state["scale"] == 4.0 and state["_growth_tracker"] == 1
        other = mod.amp.GradScaler("cpu")
        other.load_state_dict(state)
        assert other.get_scale() == 4.0
        with pytest.raises(RuntimeError, match="source state dict is empty"):
            other.load_state_dict({})
        with pytest.raises(AssertionError, match="No inf checks"):
            scaler.update()
        disabled = mod.amp.GradScaler("cpu", enabled=False)
        assert disabled.scale(w) is w and disabled.get_scale() == 1.0


def test_grad_scaler_refuses_an_in_backward_optimizer():
    w = gs.nn.Parameter(gs.ones(2))
    opt = gs.optim.Adam([w], in_backward=True)
    scaler = gs.amp.GradScaler("cpu")
    with pytest.raises(RuntimeError, match="in_backward"):
        scaler.unscale_(opt)


def test_bfloat16_products_work_like_pytorch_outside_autocast():
    (ga, ta), (gb, tb) = _pair(3, 7, 9, seed=8), _pair(3, 9, 4, seed=9)
    ga, gb = ga.to(gs.bfloat16).requires_grad_(), gb.to(gs.bfloat16)
    ta, tb = ta.to(torch.bfloat16).requires_grad_(), tb.to(torch.bfloat16)
    out, ref = ga @ gb, ta @ tb
    assert out.dtype == gs.bfloat16
    _bf16_close(out, ref, terms=9)
    out.sum().backward()
    ref.sum().backward()
    assert ga.grad.dtype == gs.bfloat16
    _bf16_close(ga.grad, ta.grad, terms=4)


def _two_linear(mod):
    mod.manual_seed(0)
    return mod.nn.Sequential(mod.nn.Linear(128, 256), mod.nn.Tanh(), mod.nn.Linear(256, 32))


def test_autocast_saves_no_copy_of_the_weights():
    """PyTorch keeps a bfloat16 copy of each weight for backward; gradstream keeps the
    parameter (alive anyway) and casts it again when backward needs it."""
    gc.collect()
    model = _two_linear(gs)
    x = gs.randn(64, 128)
    with gs.autocast("cpu"):
        loss = model(x).float().sum()
    # x's bfloat16 copy (for the first weight's gradient) and tanh's bfloat16 output.
    assert memory.memory_by_category()["activation"] == (64 * 128 + 64 * 256) * 2
    loss.backward()
    assert memory.memory_by_category()["activation"] == 0

    ref = torch.nn.Sequential(torch.nn.Linear(128, 256), torch.nn.Tanh(), torch.nn.Linear(256, 32))
    ref.load_state_dict({k: to_torch(v.detach()) for k, v in model.state_dict().items()})
    with torch.autocast("cpu"):
        ref(to_torch(x)).float().sum().backward()
    for p, tp in zip(model.parameters(), ref.parameters(), strict=True):
        _bf16_close(p.grad, tp.grad, terms=256)


def test_recast_weights_double_backward_like_pytorch():
    model, ref = _two_linear(gs), _two_linear(torch)
    ref.load_state_dict({k: to_torch(v.detach()) for k, v in model.state_dict().items()})
    (gx, tx) = _pair(8, 128, seed=10)
    gx.requires_grad_()
    tx.requires_grad_()
    results = []
    for mod, net, x in ((gs, model, gx), (torch, ref, tx)):
        with mod.autocast("cpu"):
            out = net(x).float().pow(2).sum()
        (gx_,) = mod.autograd.grad(out, x, create_graph=True)
        (gw,) = mod.autograd.grad(gx_.float().pow(2).sum(), net[2].weight)
        results.append(gw)
    _bf16_close(results[0], results[1], terms=256)


def test_a_parameter_changed_in_place_before_backward_is_caught():
    model = _two_linear(gs)
    with gs.autocast("cpu"):
        loss = model(gs.randn(4, 128, requires_grad=True)).float().sum()
    with gs.no_grad():
        model[2].weight.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        loss.backward()


def test_convolution_and_attention_run_in_bfloat16_like_pytorch():
    (gx, tx), (gw, tw) = _pair(2, 3, 8, 8, seed=11), _pair(4, 3, 3, 3, seed=12)
    (gq, tq) = _pair(2, 2, 5, 4, seed=13)
    with gs.autocast("cpu"):
        conv = gs.nn.functional.conv2d(gx, gw, padding=1)
        attn = gs.nn.functional.scaled_dot_product_attention(gq, gq, gq, is_causal=True)
    with torch.autocast("cpu"):
        tconv = torch.nn.functional.conv2d(tx, tw, padding=1)
        tattn = torch.nn.functional.scaled_dot_product_attention(tq, tq, tq, is_causal=True)
    assert conv.dtype == gs.bfloat16 and tconv.dtype == torch.bfloat16
    assert attn.dtype == gs.bfloat16 and tattn.dtype == torch.bfloat16
    _bf16_close(conv, tconv, terms=27)
    _bf16_close(attn, tattn, terms=5)
