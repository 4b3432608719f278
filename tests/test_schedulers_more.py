"""Learning-rate schedulers against PyTorch's: a gradstream and a torch optimizer with the
same param groups are driven through the same steps, and the lr (and the cycled momentum)
sequences must agree to 1e-12 relative, for arguments drawn by hypothesis."""

from __future__ import annotations

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402

SETTINGS = settings(max_examples=30, deadline=None)
REL = 1e-12


def _optimizers(kind: str, lrs=(0.1, 0.3)):
    """The same two param groups in both libraries."""
    out = []
    for lib in (gs, torch):
        groups = [{"params": [lib.tensor([1.0], requires_grad=True)], "lr": lr} for lr in lrs]
        if kind == "sgd":
            out.append(lib.optim.SGD(groups, lr=lrs[0], momentum=0.9))
        else:
            out.append(lib.optim.Adam(groups, lr=lrs[0]))
    return out


def _check_same(gopt, topt, gsch, tsch):
    assert gsch.get_last_lr() == pytest.approx(tsch.get_last_lr(), rel=REL, abs=1e-300)
    for a, b in zip(gopt.param_groups, topt.param_groups, strict=True):
        assert a["lr"] == pytest.approx(b["lr"], rel=REL, abs=1e-300)
        if "momentum" in b:
            assert a["momentum"] == pytest.approx(b["momentum"], rel=REL)
        if "betas" in b:
            assert a["betas"][0] == pytest.approx(b["betas"][0], rel=REL)


def drive(make, steps: int, kind: str = "sgd", lrs=(0.1, 0.3), metrics=None):
    """Builds the scheduler in both libraries and compares every step's lrs."""
    gopt, topt = _optimizers(kind, lrs)
    try:
        tsch = make(torch.optim.lr_scheduler, topt)
    except Exception as e:  # noqa: BLE001  (an edge PyTorch refuses, e.g. a 0-step phase)
        with pytest.raises(type(e)):
            make(gs.optim.lr_scheduler, gopt)
        return None
    gsch = make(gs.optim.lr_scheduler, gopt)
    for i in range(steps):
        _check_same(gopt, topt, gsch, tsch)
        gopt.step()
        topt.step()
        if metrics is None:
            gsch.step()
            tsch.step()
        else:
            gsch.step(metrics[i])
            tsch.step(metrics[i])
    _check_same(gopt, topt, gsch, tsch)
    return gopt, topt, gsch, tsch


steps = st.integers(1, 60)
factors = st.floats(0.05, 1.0)


@SETTINGS
@given(n=steps, factor=factors, total=st.integers(0, 20))
def test_constant_lr(n, factor, total):
    drive(lambda m, o: m.ConstantLR(o, factor=factor, total_iters=total), n)


@SETTINGS
@given(n=steps, total=st.integers(1, 30), power=st.floats(0.1, 4.0))
def test_polynomial_lr(n, total, power):
    drive(lambda m, o: m.PolynomialLR(o, total_iters=total, power=power), n)


@SETTINGS
@given(n=steps, gamma=st.floats(0.5, 1.2), every=st.integers(1, 5))
def test_multiplicative_lr(n, gamma, every):
    def lam(e):
        return gamma if e % every == 0 else 1.0

    drive(lambda m, o: m.MultiplicativeLR(o, lam), n)
    drive(lambda m, o: m.MultiplicativeLR(o, [lam, lambda e: 0.95]), n)


@SETTINGS
@given(
    n=st.integers(1, 120), up=st.integers(1, 12), down=st.one_of(st.none(), st.integers(1, 12)),
    mode=st.sampled_from(["triangular", "triangular2", "exp_range"]),
    gamma=st.floats(0.9, 1.0), kind=st.sampled_from(["sgd", "adam"]),
    cycle_momentum=st.booleans(),
)  # fmt: skip
def test_cyclic_lr(n, up, down, mode, gamma, kind, cycle_momentum):
    drive(
        lambda m, o: m.CyclicLR(o, base_lr=[0.01, 0.02], max_lr=0.5, step_size_up=up,
                                step_size_down=down, mode=mode, gamma=gamma,
                                cycle_momentum=cycle_momentum),
        n, kind,
    )  # fmt: skip


@SETTINGS
@given(
    n=st.integers(1, 60), up=st.integers(1, 8), scale_mode=st.sampled_from(["cycle", "iterations"])
)
def test_cyclic_lr_custom_scale_fn(n, up, scale_mode):
    drive(
        lambda m, o: m.CyclicLR(o, 0.01, 0.1, step_size_up=up, scale_fn=lambda x: 0.9**x,
                                scale_mode=scale_mode, base_momentum=0.7, max_momentum=0.95),
        n,
    )  # fmt: skip


@SETTINGS
@given(n=st.integers(1, 100), t0=st.integers(1, 10), t_mult=st.integers(1, 3),
       eta_min=st.floats(0.0, 0.05))  # fmt: skip
def test_cosine_annealing_warm_restarts(n, t0, t_mult, eta_min):
    drive(lambda m, o: m.CosineAnnealingWarmRestarts(o, t0, t_mult, eta_min), n)


@SETTINGS
@given(t0=st.integers(1, 10), t_mult=st.integers(1, 3),
       epochs=st.lists(st.floats(0.0, 80.0), min_size=1, max_size=15))  # fmt: skip
def test_cosine_annealing_warm_restarts_fractional_epochs(t0, t_mult, epochs):
    gopt, topt = _optimizers("sgd")
    gsch = gs.optim.lr_scheduler.CosineAnnealingWarmRestarts(gopt, t0, t_mult)
    tsch = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(topt, t0, t_mult)
    for e in epochs:
        gsch.step(e)
        tsch.step(e)
        _check_same(gopt, topt, gsch, tsch)
        assert gsch.T_cur == pytest.approx(tsch.T_cur, rel=REL, abs=1e-12)
        assert gsch.T_i == tsch.T_i and gsch.last_epoch == tsch.last_epoch


@SETTINGS
@given(n=steps, gamma=st.floats(0.5, 0.99), factor=factors, total=st.integers(1, 10))
def test_chained_scheduler(n, gamma, factor, total):
    drive(
        lambda m, o: m.ChainedScheduler(
            [m.ConstantLR(o, factor=factor, total_iters=total), m.ExponentialLR(o, gamma)]
        ),
        n,
    )


@SETTINGS
@given(n=steps, milestone=st.integers(1, 20), power=st.floats(0.5, 2.0))
def test_sequential_with_new_schedulers(n, milestone, power):
    drive(
        lambda m, o: m.SequentialLR(
            o, [m.ConstantLR(o, 0.5, 3), m.PolynomialLR(o, 15, power)], [milestone]
        ),
        n,
    )


# The existing schedulers, with drawn arguments.
@SETTINGS
@given(
    n=steps, step_size=st.integers(1, 6), gamma=st.floats(0.1, 0.99),
    milestones=st.lists(st.integers(1, 30), max_size=4), t_max=st.integers(1, 15),
    eta_min=st.floats(0.0, 0.05), start=st.floats(0.05, 1.0), end=st.floats(0.0, 1.0),
    total=st.integers(1, 12), which=st.integers(0, 5),
)  # fmt: skip
def test_existing_schedulers(n, step_size, gamma, milestones, t_max, eta_min, start, end,
                             total, which):  # fmt: skip
    makers = [
        lambda m, o: m.StepLR(o, step_size, gamma),
        lambda m, o: m.MultiStepLR(o, milestones, gamma),
        lambda m, o: m.ExponentialLR(o, gamma),
        lambda m, o: m.CosineAnnealingLR(o, t_max, eta_min),
        lambda m, o: m.LinearLR(o, start, end, total),
        lambda m, o: m.LambdaLR(o, lambda e: gamma**e),
    ]
    drive(makers[which], n)


@SETTINGS
@given(
    n=st.integers(2, 60), pct=st.floats(0.05, 0.9), three_phase=st.booleans(),
    anneal=st.sampled_from(["cos", "linear"]), kind=st.sampled_from(["sgd", "adam"]),
)  # fmt: skip
def test_one_cycle(n, pct, three_phase, anneal, kind):
    if three_phase and pct * n < 2:
        pct = 0.45
    drive(
        lambda m, o: m.OneCycleLR(o, [1.0, 2.0], total_steps=n + 1, pct_start=pct,
                                  anneal_strategy=anneal, three_phase=three_phase),
        n, kind,
    )  # fmt: skip


@SETTINGS
@given(
    metrics=st.lists(st.floats(0.0, 10.0), min_size=1, max_size=40),
    mode=st.sampled_from(["min", "max"]), patience=st.integers(0, 4),
    threshold_mode=st.sampled_from(["rel", "abs"]), cooldown=st.integers(0, 3),
)  # fmt: skip
def test_reduce_on_plateau(metrics, mode, patience, threshold_mode, cooldown):
    drive(
        lambda m, o: m.ReduceLROnPlateau(o, mode=mode, factor=0.5, patience=patience,
                                         threshold_mode=threshold_mode, cooldown=cooldown,
                                         min_lr=[0.01, 0.0]),
        len(metrics), metrics=metrics,
    )  # fmt: skip


@pytest.mark.parametrize(
    "make",
    [
        lambda m, o: m.ConstantLR(o, 0.25, 4),
        lambda m, o: m.PolynomialLR(o, 9, 2.0),
        lambda m, o: m.MultiplicativeLR(o, lambda e: 0.9),
        lambda m, o: m.CyclicLR(o, 0.01, 0.1, 3, mode="triangular2"),
        lambda m, o: m.CosineAnnealingWarmRestarts(o, 3, 2),
        lambda m, o: m.ChainedScheduler([m.ExponentialLR(o, 0.9), m.ConstantLR(o, 0.5, 3)]),
    ],
)
def test_state_dict_resume(make):
    gopt, _ = _optimizers("sgd")
    sched = make(gs.optim.lr_scheduler, gopt)
    for _ in range(5):
        sched.step()
    sd = sched.state_dict()
    assert "optimizer" not in sd
    saved = [g["lr"] for g in gopt.param_groups]
    expected = []
    for _ in range(6):
        sched.step()
        expected += sched.get_last_lr()
    for g, lr in zip(gopt.param_groups, saved, strict=True):
        g["lr"] = lr
    sched2 = make(gs.optim.lr_scheduler, gopt)
    sched2.load_state_dict(sd)
    for g, lr in zip(gopt.param_groups, saved, strict=True):
        g["lr"] = lr
    got = []
    for _ in range(6):
        sched2.step()
        got += sched2.get_last_lr()
    assert got == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("name", ["ConstantLR", "PolynomialLR"])
def test_closed_form_with_epoch(name):
    gopt, topt = _optimizers("sgd")
    gsch = getattr(gs.optim.lr_scheduler, name)(gopt)
    tsch = getattr(torch.optim.lr_scheduler, name)(topt)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for e in [3, 1, 7, 4, 5, 0]:
            gsch.step(e)
            tsch.step(e)
            _check_same(gopt, topt, gsch, tsch)


def test_scheduler_argument_errors():
    for lib in (gs, torch):
        sched = lib.optim.lr_scheduler
        opt = lib.optim.SGD([lib.tensor([1.0], requires_grad=True)], lr=0.1)
        no_momentum = lib.optim.SGD([lib.tensor([1.0], requires_grad=True)], lr=0.1)
        with pytest.raises(ValueError, match="between 0 and 1"):
            sched.ConstantLR(opt, factor=1.5)
        with pytest.raises(ValueError, match="T_0"):
            sched.CosineAnnealingWarmRestarts(opt, 0)
        with pytest.raises(ValueError, match="T_mult"):
            sched.CosineAnnealingWarmRestarts(opt, 3, T_mult=0)
        with pytest.raises(ValueError, match="mode is invalid"):
            sched.CyclicLR(opt, 0.01, 0.1, mode="bad", cycle_momentum=False)
        with pytest.raises(ValueError, match="max_lr must have the same length"):
            sched.CyclicLR(opt, 0.01, [0.1, 0.2], cycle_momentum=False)
        with pytest.raises(TypeError):
            sched.CyclicLR(object(), 0.01, 0.1)
        with pytest.raises(ValueError, match="at least one scheduler"):
            sched.ChainedScheduler([])
        other = lib.optim.SGD([lib.tensor([1.0], requires_grad=True)], lr=0.1)
        with pytest.raises(ValueError, match="same optimizer"):
            sched.ChainedScheduler([sched.ExponentialLR(opt, 0.9), sched.StepLR(other, 2)])
        with pytest.raises(ValueError, match="ReduceLROnPlateau"):
            sched.ChainedScheduler([sched.ReduceLROnPlateau(opt)])
        # An optimizer with neither momentum nor betas cannot cycle the momentum.
        no_momentum.defaults.pop("momentum")
        with pytest.raises(ValueError, match="momentum"):
            sched.CyclicLR(no_momentum, 0.01, 0.1)


def test_every_scheduler_name_is_there():
    missing = [n for n in torch.optim.lr_scheduler.__all__ if not hasattr(
        gs.optim.lr_scheduler, n)]  # fmt: skip
    assert missing == []
