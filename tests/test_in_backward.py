"""The optimizer inside the backward pass: each parameter stepped by a Rust hook the moment
its gradient is final, then the gradient freed."""

from __future__ import annotations

import numpy as np
import pytest

import gradstream as gs


def mlp(seed=0, sizes=(6, 16, 16, 4)):
    gs.manual_seed(seed)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=False):
        layers += [gs.nn.Linear(a, b), gs.nn.Tanh()]
    return gs.nn.Sequential(*layers[:-1])


def data(n=4, b=8, seed=3):
    rng = np.random.default_rng(seed)
    return [
        (gs.tensor(rng.standard_normal((b, 6)).astype(np.float32)),
         gs.tensor(rng.standard_normal((b, 4)).astype(np.float32)))
        for _ in range(n)
    ]  # fmt: skip


def params(m):
    return [p.detach().numpy().copy() for p in m.parameters()]


def loss_of(m, x, y, scale=1.0):
    loss = gs.nn.functional.mse_loss(m(x), y)
    return loss * scale if scale != 1.0 else loss


def assert_params(a, b, **kw):
    for pa, pb in zip(a, b, strict=True):
        np.testing.assert_allclose(pa, pb, **kw)


@pytest.mark.parametrize("opt_name", ["SGD", "Adam", "AdamW"])
def test_backward_is_the_whole_update(opt_name):
    kw = {"lr": 0.05, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.01}
    m1, m2 = mlp(), mlp()
    o1 = getattr(gs.optim, opt_name)(m1.parameters(), **kw)
    o2 = getattr(gs.optim, opt_name)(m2.parameters(), in_backward=True, **kw)
    grads_before = gs.memory.memory_by_category()["gradient"]  # other tests' live .grads
    for x, y in data():
        loss_of(m1, x, y).backward()
        o1.step()
        o1.zero_grad()
        loss_of(m2, x, y).backward()
        assert all(p.grad is None for p in m2.parameters())
        assert gs.memory.memory_by_category()["gradient"] == grads_before
        before = params(m2)
        o2.step()  # harmless no-ops
        o2.zero_grad()
        assert_params(params(m2), before, rtol=0, atol=0)
    assert_params(params(m1), params(m2), rtol=1e-6, atol=1e-7)


def test_closure_step_runs_backward_once():
    m = mlp()
    opt = gs.optim.Adam(m.parameters(), lr=0.01, in_backward=True)
    x, y = data(1)[0]
    before = params(m)

    def closure():
        loss = loss_of(m, x, y)
        loss.backward()
        return loss

    loss = opt.step(closure)
    assert loss is not None
    assert not np.array_equal(before[0], params(m)[0])
    assert float(opt.state[next(iter(m.parameters()))]["step"]) == 1.0


def test_shared_parameter_stepped_once_with_full_gradient():
    def build(in_backward):
        gs.manual_seed(1)
        w = gs.nn.Parameter(gs.randn(5, 5) * 0.3)
        return w, gs.optim.SGD([w], lr=0.1, momentum=0.9, in_backward=in_backward)

    (w1, o1), (w2, o2) = build(False), build(True)
    x = gs.randn(3, 5)
    for _ in range(3):
        for w, o, ib in ((w1, o1, False), (w2, o2, True)):
            h = x.matmul(w).tanh()
            out = h.matmul(w) + x.matmul(w.t())  # w feeds three ops
            (out * out).mean().backward()
            if not ib:
                o.step()
                o.zero_grad()
    np.testing.assert_allclose(w2.detach().numpy(), w1.detach().numpy(), rtol=1e-6, atol=1e-7)
    assert o2.state_dict()["state"][0]["momentum_buffer"] is not None


@pytest.mark.parametrize("opt_name", ["SGD", "Adam"])
def test_accumulate_equals_full_batch(opt_name):
    kw = {"lr": 0.05, "momentum": 0.9} if opt_name == "SGD" else {"lr": 0.01}
    full, micro = mlp(), mlp()
    of = getattr(gs.optim, opt_name)(full.parameters(), **kw)
    om = getattr(gs.optim, opt_name)(micro.parameters(), in_backward=True, **kw).accumulate(4)
    rng = np.random.default_rng(0)
    for _ in range(2):
        x = rng.standard_normal((16, 6)).astype(np.float32)
        y = rng.standard_normal((16, 4)).astype(np.float32)
        loss_of(full, gs.tensor(x), gs.tensor(y)).backward()
        of.step()
        of.zero_grad()
        for i in range(4):
            xs, ys = gs.tensor(x[4 * i : 4 * i + 4]), gs.tensor(y[4 * i : 4 * i + 4])
            loss_of(micro, xs, ys, 0.25).backward()
            om.step()
            om.zero_grad()  # no-ops: the accumulated gradient survives them
            if i < 3:
                assert all(p.grad is not None for p in micro.parameters())
            else:
                assert all(p.grad is None for p in micro.parameters())
        assert_params(params(micro), params(full), rtol=1e-5, atol=1e-6)


def test_per_parameter_value_and_norm_clipping():
    def step_std(m, opt, x, y, how):
        loss_of(m, x, y).backward()
        for p in m.parameters():
            if how == "value":
                gs.nn.utils.clip_grad_value_([p], 0.01)
            else:
                gs.nn.utils.clip_grad_norm_([p], 0.05)
        opt.step()
        opt.zero_grad()

    for how in ("value", "norm"):
        m1, m2 = mlp(), mlp()
        o1 = gs.optim.Adam(m1.parameters(), lr=0.01)
        o2 = gs.optim.Adam(m2.parameters(), lr=0.01, in_backward=True)
        if how == "value":
            o2.clip_grad(max_value=0.01)
        else:
            o2.clip_grad(max_norm=0.05)
        for x, y in data():
            step_std(m1, o1, x, y, how)
            loss_of(m2, x, y).backward()
        assert_params(params(m2), params(m1), rtol=1e-5, atol=1e-7)


def test_global_norm_clipping_two_pass(torch_ref):
    torch = torch_ref
    m = mlp()
    t = torch.nn.Sequential(
        torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 4),
    )  # fmt: skip
    t.load_state_dict(gs.utils.to_torch_state_dict(m.state_dict()))
    opt = gs.optim.SGD(m.parameters(), lr=0.1, momentum=0.9, in_backward=True)
    opt.clip_grad(max_norm=0.05, global_norm=True)
    topt = torch.optim.SGD(t.parameters(), lr=0.1, momentum=0.9)
    for x, y in data():
        opt.backward(loss_of(m, x, y))
        tl = torch.nn.functional.mse_loss(t(torch.tensor(x.numpy())), torch.tensor(y.numpy()))
        tl.backward()
        total = torch.nn.utils.clip_grad_norm_(t.parameters(), 0.05)
        topt.step()
        topt.zero_grad()
        assert opt.last_total_norm == pytest.approx(float(total), rel=1e-5)
    for p, tp in zip(m.parameters(), t.parameters(), strict=True):
        np.testing.assert_allclose(p.detach().numpy(), tp.detach().numpy(), rtol=1e-5, atol=1e-6)
    with pytest.raises(NotImplementedError, match="accumulate"):
        opt.accumulate(2).backward(loss_of(m, *data(1)[0]))


def test_step_param_from_a_python_hook():
    m1, m2 = mlp(), mlp()
    o1 = gs.optim.AdamW(m1.parameters(), lr=0.01)
    o2 = gs.optim.AdamW(m2.parameters(), lr=0.01)
    calls = []

    def hook(p):
        calls.append(p.shape)
        o2.step_param(p)
        p.grad = None

    handles = [p.register_post_accumulate_grad_hook(hook) for p in m2.parameters()]
    for x, y in data():
        loss_of(m1, x, y).backward()
        o1.step()
        o1.zero_grad()
        loss_of(m2, x, y).backward()
    assert len(calls) == 4 * len(list(m2.parameters()))
    assert_params(params(m2), params(m1), rtol=1e-6, atol=1e-7)
    for h in handles:
        h.remove()


def test_python_optimizer_in_backward():
    class PlainSGD(gs.optim.Optimizer):
        def __init__(self, params, lr, **kw):
            super().__init__(params, dict(lr=lr), **kw)

        def step(self, closure=None):
            with gs.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            p.copy_(p - group["lr"] * p.grad)

    m1, m2 = mlp(), mlp()
    o1 = PlainSGD(m1.parameters(), lr=0.1)
    _keep = PlainSGD(m2.parameters(), lr=0.1, in_backward=True)  # owns the hooks
    for x, y in data():
        loss_of(m1, x, y).backward()
        o1.step()
        o1.zero_grad()
        loss_of(m2, x, y).backward()
        assert all(p.grad is None for p in m2.parameters())
    assert_params(params(m2), params(m1), rtol=1e-6, atol=1e-7)


def test_scheduler_changes_lr_inside_backward():
    w = gs.tensor([1.0], requires_grad=True)
    opt = gs.optim.SGD([w], lr=1.0, in_backward=True)
    sched = gs.optim.lr_scheduler.StepLR(opt, 1, gamma=0.5)
    values = []
    for _ in range(3):
        (w * 1.0).sum().backward()  # gradient 1: w -= lr
        values.append(w.item())
        sched.step()
    assert values == [0.0, -0.5, -0.75]


def test_remove_hooks_restores_normal_accumulation():
    m = mlp()
    opt = gs.optim.SGD(m.parameters(), lr=0.1, in_backward=True)
    x, y = data(1)[0]
    opt.remove_hooks()
    before = params(m)
    loss_of(m, x, y).backward()
    assert all(p.grad is not None for p in m.parameters())
    assert_params(params(m), before, rtol=0, atol=0)
    opt.step()
    assert not np.array_equal(params(m)[0], before[0])


def test_parameter_without_gradient_this_pass_is_not_stepped():
    a = gs.nn.Parameter(gs.ones(3))
    b = gs.nn.Parameter(gs.ones(3))
    opt = gs.optim.Adam([a, b], lr=0.1, in_backward=True)
    (a * a).sum().backward()
    assert b.tolist() == [1.0, 1.0, 1.0] and a.tolist() != [1.0, 1.0, 1.0]
    assert len(opt.state_dict()["state"]) == 1


def test_gradient_peak_is_one_layer_not_all():
    """In the standard mode every gradient is alive after backward; in the in-backward mode
    each is freed right after its step, so the peak holds far fewer."""
    sizes = (64, 128, 128, 128, 128, 128, 8)

    def peak(in_backward):
        m = mlp(sizes=sizes)
        opt = gs.optim.SGD(m.parameters(), lr=0.01, in_backward=in_backward)
        x, y = gs.randn(4, 64), gs.randn(4, 8)
        loss = gs.nn.functional.mse_loss(m(x), y)
        base = gs.memory.memory_allocated()
        gs.memory.reset_peak_memory_stats()
        loss.backward()
        p = gs.memory.max_memory_allocated() - base
        opt.step()
        del loss, opt
        return p

    one_layer = 128 * 128 * 4
    std, streamed = peak(False), peak(True)
    assert streamed < std - 3 * one_layer, (std, streamed)
