"""Optimizers and LR schedulers against PyTorch: 50-step trajectories, state dicts, bad input."""

from __future__ import annotations

import copy

import numpy as np
import pytest
from helpers import to_torch

import gradstream as gs

STEPS = 50


def make_models(torch, in_f=5, hidden=7, out_f=3):
    """The same small MLP in both libraries (weights copied through a state_dict)."""
    gs.manual_seed(0)
    g = gs.nn.Sequential(gs.nn.Linear(in_f, hidden), gs.nn.Tanh(), gs.nn.Linear(hidden, out_f))
    t = torch.nn.Sequential(
        torch.nn.Linear(in_f, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, out_f)
    )
    t.load_state_dict(gs.utils.to_torch_state_dict(g.state_dict()))
    return g, t


def batches(n=STEPS, b=8, in_f=5, out_f=3, seed=1):
    rng = np.random.default_rng(seed)
    return [
        (rng.standard_normal((b, in_f)).astype(np.float32),
         rng.standard_normal((b, out_f)).astype(np.float32))
        for _ in range(n)
    ]  # fmt: skip


def snapshot(model):
    return [p.detach().numpy().copy() for p in model.parameters()]


def run(lib, model, opt, sched, data, in_backward=False):
    """Train; returns the parameters after every step."""
    traj = []
    for x, y in data:
        out = model(lib.tensor(x))
        loss = lib.nn.functional.mse_loss(out, lib.tensor(y))
        loss.backward()
        if not in_backward:
            opt.step()
            opt.zero_grad()
        if sched is not None:
            sched.step()
        traj.append(snapshot(model))
    return traj


CONFIGS = [
    ("SGD", dict(lr=0.05, momentum=0.9), lambda m, o: m.StepLR(o, step_size=10, gamma=0.5)),
    (
        "SGD",
        dict(lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-3),
        lambda m, o: m.CosineAnnealingLR(o, T_max=STEPS),
    ),
    (
        "SGD",
        dict(lr=0.05, momentum=0.5, dampening=0.2),
        lambda m, o: m.LambdaLR(o, lambda e: 0.97**e),
    ),
    ("SGD", dict(lr=0.05), lambda m, o: m.MultiStepLR(o, milestones=[10, 30], gamma=0.3)),
    ("Adam", dict(lr=1e-2), lambda m, o: m.ExponentialLR(o, gamma=0.97)),
    (
        "Adam",
        dict(lr=1e-2, amsgrad=True, weight_decay=1e-2, betas=(0.8, 0.99)),
        lambda m, o: m.MultiStepLR(o, milestones=[10, 30]),
    ),
    (
        "AdamW",
        dict(lr=1e-2, weight_decay=0.1),
        lambda m, o: m.LinearLR(o, start_factor=0.5, total_iters=10),
    ),
    (
        "AdamW",
        dict(lr=1e-2, amsgrad=True),
        lambda m, o: m.OneCycleLR(o, max_lr=0.05, total_steps=STEPS),
    ),
    (
        "Adam",
        dict(lr=1e-2),
        lambda m, o: m.SequentialLR(
            o,
            [m.LinearLR(o, start_factor=0.1, total_iters=5), m.CosineAnnealingLR(o, T_max=45)],
            milestones=[5],
        ),
    ),
    (
        "SGD",
        dict(lr=0.05, momentum=0.9),
        lambda m, o: m.OneCycleLR(o, max_lr=0.1, total_steps=STEPS),
    ),
]


def _trajectories(torch, name, kw, sched_fn, in_backward):
    g, t = make_models(torch)
    data = batches()
    gopt = getattr(gs.optim, name)(g.parameters(), in_backward=in_backward, **kw)
    topt = getattr(torch.optim, name)(t.parameters(), **kw)
    gs_traj = run(gs, g, gopt, sched_fn(gs.optim.lr_scheduler, gopt), data, in_backward)
    t_traj = run(torch, t, topt, sched_fn(torch.optim.lr_scheduler, topt), data)
    return gs_traj, t_traj


@pytest.mark.parametrize("name,kw,sched_fn", CONFIGS)
def test_trajectory_matches_torch(torch_ref, name, kw, sched_fn):
    gs_std, t_traj = _trajectories(torch_ref, name, kw, sched_fn, in_backward=False)
    gs_ib, _ = _trajectories(torch_ref, name, kw, sched_fn, in_backward=True)
    for step, (a, b, c) in enumerate(zip(gs_std, gs_ib, t_traj, strict=True)):
        for pa, pb, pc in zip(a, b, c, strict=True):
            np.testing.assert_allclose(pa, pc, rtol=1e-5, atol=1e-6, err_msg=f"step {step}")
            np.testing.assert_allclose(pb, pa, rtol=1e-6, atol=1e-7, err_msg=f"step {step}")


def test_param_groups_with_different_hyperparameters(torch_ref):
    torch = torch_ref
    for in_backward in (False, True):
        g, t = make_models(torch)
        data = batches(20)

        def groups(m):
            return [
                {"params": m[0].parameters(), "lr": 0.02, "betas": (0.8, 0.9)},
                {"params": m[2].parameters(), "weight_decay": 0.1},
            ]

        gopt = gs.optim.AdamW(groups(g), lr=0.01, in_backward=in_backward)
        topt = torch.optim.AdamW(groups(t), lr=0.01)
        gsch = gs.optim.lr_scheduler.StepLR(gopt, 5, 0.5)
        tsch = torch.optim.lr_scheduler.StepLR(topt, 5, 0.5)
        a = run(gs, g, gopt, gsch, data, in_backward)
        b = run(torch, t, topt, tsch, data)
        for sa, sb in zip(a, b, strict=True):
            for pa, pb in zip(sa, sb, strict=True):
                np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
        assert gsch.get_last_lr() == pytest.approx(tsch.get_last_lr())


def test_maximize_and_float64(torch_ref):
    torch = torch_ref
    w0 = np.random.randn(4, 3)
    for name, kw in [("SGD", dict(lr=0.1, momentum=0.9, maximize=True)),
                     ("Adam", dict(lr=0.01, maximize=True))]:  # fmt: skip
        gw = gs.tensor(w0, requires_grad=True)
        tw = torch.tensor(w0, requires_grad=True)
        gopt = getattr(gs.optim, name)([gw], **kw)
        topt = getattr(torch.optim, name)([tw], **kw)
        for _ in range(10):
            (-(gw * gw).sum()).backward()
            (-(tw * tw).sum()).backward()
            gopt.step()
            topt.step()
            gopt.zero_grad()
            topt.zero_grad()
        assert gw.dtype == gs.float64
        np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-12)


@pytest.mark.parametrize(
    "name, kw",
    [
        ("Adam", dict(lr=0.1)),
        ("Adam", dict(lr=0.1, weight_decay=0.1)),
        ("AdamW", dict(lr=0.1, weight_decay=0.1)),
        ("SGD", dict(lr=0.1, momentum=0.9)),
    ],
)
@pytest.mark.parametrize("n", [5, 70_000])  # one chunk, and the parallel walk
def test_non_finite_parameters_and_gradients_match_torch(torch_ref, name, kw, n):
    """The update loop has no branch per absent option (clip, scale, L2 decay): each is a
    neutral value or a select, never `0 * p`, so an infinite parameter without L2 decay keeps
    finite moments, as in PyTorch; infinities and NaNs land where PyTorch's do."""
    torch = torch_ref
    w0 = np.random.randn(n).astype(np.float32)
    w0[:3] = [np.inf, -np.inf, np.nan]
    g0 = np.random.randn(n).astype(np.float32)
    g0[3:5] = [np.inf, np.nan]
    gw, tw = gs.tensor(w0, requires_grad=True), torch.tensor(w0, requires_grad=True)
    gopt = getattr(gs.optim, name)([gw], **kw)
    topt = getattr(torch.optim, name)([tw], **kw)
    for _ in range(2):
        gw.grad, tw.grad = gs.tensor(g0), torch.tensor(g0)
        gopt.step()
        topt.step()
    np.testing.assert_allclose(gw.detach().numpy(), tw.detach().numpy(), rtol=1e-5, atol=1e-6)
    for key, tv in topt.state[tw].items():
        if key != "step":
            gv = gopt.state[gw][key]
            np.testing.assert_allclose(gv.numpy(), tv.numpy(), rtol=1e-5, atol=1e-6)


def test_param_without_grad_is_skipped(torch_ref):
    a = gs.tensor([1.0, 2.0], requires_grad=True)
    b = gs.tensor([3.0, 4.0], requires_grad=True)
    opt = gs.optim.Adam([a, b], lr=0.1)
    (a * a).sum().backward()
    opt.step()
    assert b.tolist() == [3.0, 4.0]
    assert a not in [] and len(opt.state) == 1


def test_state_layout_and_memory_role(torch_ref):
    g, t = make_models(torch_ref)
    gopt = gs.optim.Adam(g.parameters(), lr=0.01, amsgrad=True)
    topt = torch_ref.optim.Adam(t.parameters(), lr=0.01, amsgrad=True)
    x, y = batches(1)[0]
    for lib, m, o in ((gs, g, gopt), (torch_ref, t, topt)):
        lib.nn.functional.mse_loss(m(lib.tensor(x)), lib.tensor(y)).backward()
        o.step()
    gsd, tsd = gopt.state_dict(), topt.state_dict()
    assert list(gsd["state"]) == list(tsd["state"])
    for k in tsd["state"]:
        assert set(gsd["state"][k]) == set(tsd["state"][k])
        for name, v in tsd["state"][k].items():
            np.testing.assert_allclose(
                gsd["state"][k][name].numpy(), v.numpy(), rtol=1e-5, atol=1e-9
            )
    assert [g["params"] for g in gsd["param_groups"]] == [g["params"] for g in tsd["param_groups"]]
    assert set(gsd["param_groups"][0]) >= {"lr", "betas", "eps", "weight_decay", "amsgrad"}
    # Optimizer state is counted as such: three buffers per parameter (exp_avg, exp_avg_sq, max).
    p_bytes = sum(p.numel() * 4 for p in g.parameters())
    assert gs.memory.memory_by_category()["optimizer_state"] >= 3 * p_bytes
    p0 = next(iter(g.parameters()))
    st = gopt.state[p0]
    assert st["exp_avg"].shape == p0.shape and float(st["step"]) == 1.0


@pytest.mark.parametrize("in_backward", [False, True])
def test_resume_reproduces_trajectory(torch_ref, in_backward):
    data = batches(30)
    g, _ = make_models(torch_ref)
    init = copy.deepcopy(g.state_dict())

    def build(model):
        opt = gs.optim.Adam(model.parameters(), lr=0.01, amsgrad=True, in_backward=in_backward)
        return opt, gs.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=30)

    opt, sch = build(g)
    run(gs, g, opt, sch, data[:12], in_backward)
    ckpt = copy.deepcopy(
        {"model": g.state_dict(), "opt": opt.state_dict(), "sched": sch.state_dict()}
    )
    full = run(gs, g, opt, sch, data[12:], in_backward)

    g2, _ = make_models(torch_ref)
    g2.load_state_dict(init)  # a different start, overwritten by the checkpoint
    g2.load_state_dict(ckpt["model"])
    opt2, sch2 = build(g2)
    opt2.load_state_dict(ckpt["opt"])
    sch2.load_state_dict(ckpt["sched"])
    resumed = run(gs, g2, opt2, sch2, data[12:], in_backward)
    for a, b in zip(full, resumed, strict=True):
        for pa, pb in zip(a, b, strict=True):
            np.testing.assert_array_equal(pa, pb)


def test_state_dict_loads_into_torch_and_back(torch_ref):
    """The layout is PyTorch's: a gradstream state_dict continues in PyTorch identically."""
    torch = torch_ref
    g, t = make_models(torch)
    data = batches(20)
    gopt = gs.optim.Adam(g.parameters(), lr=0.01)
    topt = torch.optim.Adam(t.parameters(), lr=0.01)
    run(gs, g, gopt, None, data[:10])
    sd = gopt.state_dict()
    tsd = {
        "state": {k: {n: to_torch(v) for n, v in s.items()} for k, s in sd["state"].items()},
        "param_groups": copy.deepcopy(sd["param_groups"]),
    }
    t.load_state_dict(gs.utils.to_torch_state_dict(g.state_dict()))
    topt.load_state_dict(tsd)
    a = run(gs, g, gopt, None, data[10:])
    b = run(torch, t, topt, None, data[10:])
    for sa, sb in zip(a, b, strict=True):
        for pa, pb in zip(sa, sb, strict=True):
            np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=1e-6)
    # And back: a torch state_dict loads into gradstream.
    gopt2 = gs.optim.Adam(g.parameters(), lr=0.01)
    tstate = topt.state_dict()
    state = {k: {n: gs.tensor(v.numpy()) for n, v in s.items()} for k, s in tstate["state"].items()}
    gopt2.load_state_dict(tstate | {"state": state})
    assert float(gopt2.state[next(iter(g.parameters()))]["step"]) == 20.0


def test_accumulate_standard_mode_steps_every_nth(torch_ref):
    g, _ = make_models(torch_ref)
    x, y = batches(1, b=8)[0]
    opt = gs.optim.SGD(g.parameters(), lr=0.1).accumulate(2)
    before = snapshot(g)
    gs.nn.functional.mse_loss(g(gs.tensor(x)), gs.tensor(y)).backward()
    opt.step()
    opt.zero_grad()
    assert all(np.array_equal(a, b) for a, b in zip(before, snapshot(g), strict=True))
    assert all(p.grad is not None for p in g.parameters())
    gs.nn.functional.mse_loss(g(gs.tensor(x)), gs.tensor(y)).backward()
    opt.step()
    opt.zero_grad()
    assert not any(np.array_equal(a, b) for a, b in zip(before, snapshot(g), strict=True))
    assert all(p.grad is None for p in g.parameters())


def test_zero_grad_set_to_none_false():
    w = gs.tensor([1.0, 2.0], requires_grad=True)
    opt = gs.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert w.grad.tolist() == [0.0, 0.0]
    opt.zero_grad()
    assert w.grad is None


def test_param_group_writes_through_to_rust():
    w = gs.tensor([1.0], requires_grad=True)
    opt = gs.optim.Adam([w], lr=0.1)
    g = opt.param_groups[0]
    g["lr"] = 0.5
    g["betas"] = (0.5, 0.6)
    assert g._core.get("lr") == 0.5 and g._core.get("betas") == (0.5, 0.6)
    opt.add_param_group({"params": [gs.tensor([2.0], requires_grad=True)], "lr": 0.2})
    assert opt.param_groups[1]._core.get("lr") == 0.2
    assert opt.param_groups[1]["betas"] == (0.9, 0.999)


def test_python_optimizer_subclass():
    class PlainSGD(gs.optim.Optimizer):
        def __init__(self, params, lr):
            super().__init__(params, dict(lr=lr))

        def step(self, closure=None):
            with gs.no_grad():
                for group in self.param_groups:
                    for p in group["params"]:
                        if p.grad is not None:
                            self.state[p]["n"] = self.state[p].get("n", 0) + 1
                            p.copy_(p - group["lr"] * p.grad)

    w = gs.tensor([1.0, -2.0], requires_grad=True)
    opt = PlainSGD([w], lr=0.1)
    (w * w).sum().backward()
    opt.step()
    assert w.tolist() == pytest.approx([0.8, -1.6])
    sd = opt.state_dict()
    assert sd["state"][0]["n"] == 1 and sd["param_groups"][0]["params"] == [0]


# ---- schedulers on their own ----

SCHEDULERS = [
    lambda m, o: m.StepLR(o, 3, 0.5),
    lambda m, o: m.MultiStepLR(o, [2, 5, 5], 0.5),
    lambda m, o: m.ExponentialLR(o, 0.9),
    lambda m, o: m.LambdaLR(o, lambda e: 1 / (1 + e)),
    lambda m, o: m.CosineAnnealingLR(o, 7, eta_min=0.01),
    lambda m, o: m.LinearLR(o, 0.25, 1.0, 4),
    lambda m, o: m.OneCycleLR(o, 1.0, total_steps=21, three_phase=True),
    lambda m, o: m.OneCycleLR(o, 1.0, total_steps=21, anneal_strategy="linear"),
    lambda m, o: m.SequentialLR(o, [m.ExponentialLR(o, 0.5), m.StepLR(o, 2)], [4]),
]


@pytest.mark.parametrize("make", SCHEDULERS)
def test_scheduler_lrs_match_torch(torch_ref, make):
    torch = torch_ref
    gopt = gs.optim.SGD(
        [{"params": [gs.tensor([1.0], requires_grad=True)]},
         {"params": [gs.tensor([1.0], requires_grad=True)], "lr": 0.3}],
        lr=0.1, momentum=0.9,
    )  # fmt: skip
    topt = torch.optim.SGD(
        [{"params": [torch.tensor([1.0], requires_grad=True)]},
         {"params": [torch.tensor([1.0], requires_grad=True)], "lr": 0.3}],
        lr=0.1, momentum=0.9,
    )  # fmt: skip
    gsch, tsch = make(gs.optim.lr_scheduler, gopt), make(torch.optim.lr_scheduler, topt)
    for _ in range(20):
        assert gsch.get_last_lr() == pytest.approx(tsch.get_last_lr(), rel=1e-12)
        for a, b in zip(gopt.param_groups, topt.param_groups, strict=True):
            assert a["lr"] == pytest.approx(b["lr"], rel=1e-12)
            assert a["momentum"] == pytest.approx(b["momentum"], rel=1e-12)
            assert a["_core" if False else "lr"] == a._core.get("lr")
        gopt.step()
        topt.step()
        gsch.step()
        tsch.step()
    sd = gsch.state_dict()
    assert "optimizer" not in sd
    gsch.load_state_dict(sd)


def test_reduce_lr_on_plateau_matches_torch(torch_ref):
    torch = torch_ref
    gopt = gs.optim.SGD([gs.tensor([1.0], requires_grad=True)], lr=1.0)
    topt = torch.optim.SGD([torch.tensor([1.0], requires_grad=True)], lr=1.0)
    kw = dict(mode="min", factor=0.5, patience=2, cooldown=1, min_lr=0.05)
    g = gs.optim.lr_scheduler.ReduceLROnPlateau(gopt, **kw)
    t = torch.optim.lr_scheduler.ReduceLROnPlateau(topt, **kw)
    for metric in [5, 4, 4, 4, 4, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 2]:
        g.step(metric)
        t.step(metric)
        assert g.get_last_lr() == pytest.approx(t.get_last_lr())
    assert gopt.param_groups[0]._core.get("lr") == gopt.param_groups[0]["lr"]


# ---- bad input: the exception PyTorch raises, and a message naming the problem ----


def _p(lib):
    return [lib.zeros(2, requires_grad=True)]


def _both(torch, fn):
    """Run fn(lib) for both libraries; return the two exceptions."""
    errs = []
    for lib in (gs, torch):
        with pytest.raises(Exception) as e:
            fn(lib)
        errs.append(e.value)
    return errs


@pytest.mark.parametrize(
    "fn,match",
    [
        (lambda lib: lib.optim.SGD(_p(lib), lr=-0.1), "learning rate: -0.1"),
        (lambda lib: lib.optim.Adam(_p(lib), lr=-1.0), "learning rate"),
        (lambda lib: lib.optim.Adam(_p(lib), betas=(1.0, 0.9)), "index 0: 1.0"),
        (lambda lib: lib.optim.Adam(_p(lib), betas=(0.9, -0.1)), "index 1"),
        (lambda lib: lib.optim.AdamW(_p(lib), eps=-1.0), "epsilon"),
        (lambda lib: lib.optim.SGD(_p(lib), momentum=-1), "momentum"),
        (lambda lib: lib.optim.SGD(_p(lib), weight_decay=-1), "weight_decay"),
        (lambda lib: lib.optim.SGD(_p(lib), nesterov=True), "Nesterov"),
        (lambda lib: lib.optim.SGD([], lr=0.1), "empty parameter list"),
        (lambda lib: lib.optim.SGD([lib.zeros(2, requires_grad=True) * 2], lr=0.1), "non-leaf"),
    ],
)
def test_bad_hyperparameters_raise_like_torch(torch_ref, fn, match):
    g, t = _both(torch_ref, fn)
    assert type(g) is type(t), (g, t)
    assert match in str(g)


def test_parameter_in_two_groups(torch_ref):
    def fn(lib):
        p = lib.zeros(2, requires_grad=True)
        lib.optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1)

    g, t = _both(torch_ref, fn)
    assert type(g) is type(t) is ValueError
    assert "more than one parameter group" in str(g)


def test_params_as_a_set(torch_ref):
    g, t = _both(
        torch_ref,
        lambda lib: lib.optim.SGD([{"params": {lib.zeros(2, requires_grad=True)}}], lr=0.1),
    )
    assert type(g) is type(t) is TypeError
    assert "ordered collections" in str(g)


def test_unknown_keys():
    p = gs.zeros(2, requires_grad=True)
    with pytest.raises(TypeError, match="learning_rate"):
        gs.optim.SGD([p], learning_rate=0.1)
    with pytest.raises(ValueError, match="learning_rate"):
        gs.optim.Adam([{"params": [p], "learning_rate": 0.1}])
    with pytest.raises(ValueError, match="momentum"):
        gs.optim.Adam([p]).add_param_group(
            {"params": [gs.zeros(1, requires_grad=True)], "momentum": 0.9}
        )


def test_params_not_requiring_grad():
    p = gs.zeros(2)  # accepted in the standard mode, as in PyTorch (simply never stepped)
    gs.optim.SGD([p], lr=0.1).step()
    with pytest.raises(ValueError, match=r"in_backward=True: a parameter of shape \(2,\)"):
        gs.optim.SGD([p], lr=0.1, in_backward=True)


def test_non_tensor_param(torch_ref):
    g, t = _both(torch_ref, lambda lib: lib.optim.SGD([1.0], lr=0.1))
    assert type(g) is type(t) is TypeError
    assert "optimize Tensors" in str(g) and "float" in str(g)


def test_accumulate_bad_values():
    opt = gs.optim.SGD([gs.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="positive integer, got 0"):
        opt.accumulate(0)
    with pytest.raises(ValueError, match="got -2"):
        opt.accumulate(-2)
    with pytest.raises(TypeError, match="float"):
        opt.accumulate(2.0)


def test_load_state_dict_mismatch(torch_ref):
    def fn(lib):
        a = lib.optim.SGD(_p(lib), lr=0.1)
        b = lib.optim.SGD([lib.zeros(2, requires_grad=True), lib.zeros(1, requires_grad=True)])
        a.load_state_dict(b.state_dict())

    g, t = _both(torch_ref, fn)
    assert type(g) is type(t) is ValueError
    assert "doesn't match the size" in str(g)


def test_state_shape_mismatch_names_shapes():
    a = gs.optim.Adam([gs.zeros(2, requires_grad=True)])
    sd = {"state": {0: {"step": gs.tensor(1.0), "exp_avg": gs.zeros(3), "exp_avg_sq": gs.zeros(2)}},
          "param_groups": a.state_dict()["param_groups"]}  # fmt: skip
    with pytest.raises(RuntimeError, match=r"exp_avg' has shape \[3\].*shape \[2\]"):
        a.load_state_dict(sd)


def test_step_param_rejects_foreign_parameter():
    opt = gs.optim.SGD([gs.zeros(2, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match=r"shape \(3,\) is not optimized"):
        opt.step_param(gs.zeros(3, requires_grad=True))
