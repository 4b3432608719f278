"""RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD and Adafactor against
torch.optim:
the same parameters and gradients for several steps, over a hypothesis-drawn spread of
hyperparameters; the in-backward mode against step(); state dicts; LR schedulers; bad
arguments. LBFGS: the same iterates as torch's on a quadratic and on Rosenbrock."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import gradstream as gs

torch = pytest.importorskip("torch")

STEPS = 6
SHAPES = [(3, 4), (5,), (2, 3, 2)]

floats = st.floats
lr = floats(1e-3, 0.1)
wd = st.sampled_from([0.0, 1e-2, 0.1])
eps = st.sampled_from([1e-8, 1e-6, 1e-3])
maximize = st.booleans()
betas = st.tuples(floats(0.0, 0.95), floats(0.5, 0.999))

HYPER = {
    "RMSprop": st.fixed_dictionaries(
        dict(
            lr=lr,
            alpha=floats(0.5, 0.999),
            eps=eps,
            weight_decay=wd,
            momentum=st.sampled_from([0.0, 0.5, 0.9]),
            centered=st.booleans(),
            maximize=maximize,
        )
    ),
    "Adagrad": st.fixed_dictionaries(
        dict(
            lr=lr,
            lr_decay=st.sampled_from([0.0, 0.01, 0.5]),
            weight_decay=wd,
            initial_accumulator_value=st.sampled_from([0.0, 0.1, 1.0]),
            eps=st.sampled_from([1e-10, 1e-6]),
            maximize=maximize,
        )
    ),
    "Adamax": st.fixed_dictionaries(
        dict(lr=lr, betas=betas, eps=eps, weight_decay=wd, maximize=maximize)
    ),
    "NAdam": st.fixed_dictionaries(
        dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=wd,
            momentum_decay=st.sampled_from([4e-3, 0.05]),
            decoupled_weight_decay=st.booleans(),
            maximize=maximize,
        )
    ),
    "RAdam": st.fixed_dictionaries(
        dict(
            lr=lr,
            betas=betas,
            eps=eps,
            weight_decay=wd,
            decoupled_weight_decay=st.booleans(),
            maximize=maximize,
        )
    ),
    "Adadelta": st.fixed_dictionaries(
        dict(
            lr=floats(0.1, 1.0),
            rho=floats(0.5, 0.99),
            eps=st.sampled_from([1e-6, 1e-3]),
            weight_decay=wd,
            maximize=maximize,
        )
    ),
    "Rprop": st.fixed_dictionaries(
        dict(
            lr=lr,
            etas=st.tuples(floats(0.2, 0.9), floats(1.1, 2.0)),
            step_sizes=st.tuples(st.sampled_from([1e-6, 1e-3]), st.sampled_from([0.05, 50.0])),
            maximize=maximize,
        )
    ),
    "ASGD": st.fixed_dictionaries(
        dict(
            lr=lr,
            lambd=st.sampled_from([1e-4, 1e-2]),
            alpha=st.sampled_from([0.75, 0.5]),
            t0=st.sampled_from([1e6, 2.0, 0.0]),
            weight_decay=wd,
            maximize=maximize,
        )
    ),
    "Adafactor": st.fixed_dictionaries(
        dict(
            # Up to 0.5, past 1/sqrt(step) from step 5: both sides of its min(lr, .).
            lr=floats(1e-3, 0.5),
            beta2_decay=st.sampled_from([-0.8, -0.5, 0.0]),
            eps=st.tuples(st.sampled_from([None, 1e-30, 1e-3]), st.sampled_from([1e-3, 1e-2])),
            d=st.sampled_from([1.0, 1.5, 10.0]),
            weight_decay=wd,
            maximize=maximize,
        )
    ),
}
NAMES = list(HYPER)

# A representative setting of each, for the tests that do not draw hyperparameters.
FIXED = {
    "RMSprop": dict(lr=0.01, momentum=0.9, centered=True, weight_decay=1e-2),
    "Adagrad": dict(lr=0.05, lr_decay=0.01, initial_accumulator_value=0.1),
    "Adamax": dict(lr=0.01, weight_decay=1e-2),
    "NAdam": dict(lr=0.01, weight_decay=1e-2, decoupled_weight_decay=True),
    "RAdam": dict(lr=0.01, betas=(0.9, 0.9), weight_decay=1e-2),
    "Adadelta": dict(lr=0.5, rho=0.8, weight_decay=1e-2),
    "Rprop": dict(lr=0.01),
    "ASGD": dict(lr=0.02, t0=2.0, lambd=1e-2),
    "Adafactor": dict(lr=0.05, weight_decay=1e-2, d=1.5),
}


def start(seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(np.float32) for s in SHAPES]


def grads(n=STEPS, seed=1):
    rng = np.random.default_rng(seed)
    return [[rng.standard_normal(s).astype(np.float32) for s in SHAPES] for _ in range(n)]


def backward(lib, params, gs_):
    """A loss whose gradient with respect to each parameter is exactly `gs_[i]`."""
    loss = sum((p * lib.tensor(g)).sum() for p, g in zip(params, gs_, strict=True))
    loss.backward()


def run(lib, name, kw, init, gsteps, in_backward=False, sched=None):
    """Step an optimizer over `gsteps`; the parameters after each step, and the optimizer."""
    params = [lib.tensor(a.copy(), requires_grad=True) for a in init]
    extra = {"in_backward": True} if in_backward else {}
    opt = getattr(lib.optim, name)(params, **kw, **extra)
    sch = sched(lib, opt) if sched is not None else None
    traj = []
    for g in gsteps:
        backward(lib, params, g)
        if not in_backward:
            opt.step()
            opt.zero_grad()
        if sch is not None:
            sch.step()
        traj.append([p.detach().numpy().copy() for p in params])
    return traj, opt


def close(a, b):
    for sa, sb in zip(a, b, strict=True):
        for pa, pb in zip(sa, sb, strict=True):
            atol = 1e-6 * max(1.0, float(np.abs(pb).max(initial=0.0)))
            np.testing.assert_allclose(pa, pb, rtol=1e-5, atol=atol)


def state_np(opt):
    """The state dict's per-parameter state as NumPy arrays (scalars as floats)."""
    out = {}
    for k, s in opt.state_dict()["state"].items():
        out[k] = {
            n: (v.detach().numpy() if hasattr(v, "detach") else np.asarray(v)) for n, v in s.items()
        }
    return out


SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("name", NAMES)
@SETTINGS
@given(data=st.data())
def test_matches_torch(name, data):
    kw = data.draw(HYPER[name])
    init, gsteps = start(), grads()
    a, gopt = run(gs, name, kw, init, gsteps)
    b, topt = run(torch, name, kw, init, gsteps)
    close(a, b)
    # The state dict: PyTorch's keys, its values.
    sa, sb = state_np(gopt), state_np(topt)
    assert sa.keys() == sb.keys()
    for k in sb:
        assert sa[k].keys() == sb[k].keys(), (sa[k].keys(), sb[k].keys())
        for n in sb[k]:
            assert sa[k][n].dtype == sb[k][n].dtype, n
            atol = 1e-6 * max(1.0, float(np.abs(sb[k][n]).max(initial=0.0)))
            np.testing.assert_allclose(sa[k][n], sb[k][n], rtol=1e-5, atol=atol, err_msg=n)
    ga, gb = gopt.state_dict()["param_groups"], topt.state_dict()["param_groups"]
    for x, y in zip(ga, gb, strict=True):
        for key in kw:
            assert (tuple(x[key]) if isinstance(x[key], (list, tuple)) else x[key]) == (
                tuple(y[key]) if isinstance(y[key], (list, tuple)) else y[key]
            ), key


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=10, deadline=None)
@given(data=st.data())
def test_in_backward_matches_step(name, data):
    kw = data.draw(HYPER[name])
    init, gsteps = start(2), grads(seed=3)
    a, oa = run(gs, name, kw, init, gsteps)
    b, ob = run(gs, name, kw, init, gsteps, in_backward=True)
    for sa, sb in zip(a, b, strict=True):
        for pa, pb in zip(sa, sb, strict=True):
            np.testing.assert_array_equal(pa, pb)
    for k, s in state_np(oa).items():
        for n, v in s.items():
            np.testing.assert_array_equal(v, state_np(ob)[k][n])


def step_lr(lib, opt):
    return lib.optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)


@pytest.mark.parametrize("in_backward", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_scheduler_drives_both_modes(name, in_backward):
    init, gsteps = start(4), grads(8, seed=5)
    a, _ = run(gs, name, FIXED[name], init, gsteps, in_backward=in_backward, sched=step_lr)
    b, _ = run(torch, name, FIXED[name], init, gsteps, sched=step_lr)
    close(a, b)


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trips_with_torch(name):
    """A torch state dict continues in gradstream as in torch, and ours in torch."""
    kw = FIXED[name]
    init, gsteps = start(6), grads(8, seed=7)
    _, topt = run(torch, name, kw, init, gsteps[:4])
    mid = [p.detach().numpy().copy() for p in topt.param_groups[0]["params"]]
    tsd = topt.state_dict()
    state = {
        k: {n: gs.tensor(v.numpy()) if hasattr(v, "numpy") else v for n, v in s.items()}
        for k, s in tsd["state"].items()
    }
    params = [gs.tensor(m.copy(), requires_grad=True) for m in mid]
    gopt = getattr(gs.optim, name)(params, **kw)
    gopt.load_state_dict(tsd | {"state": state})
    # ... and back into torch from ours.
    tparams = [torch.tensor(m.copy(), requires_grad=True) for m in mid]
    topt2 = getattr(torch.optim, name)(tparams, **kw)
    gsd = gopt.state_dict()
    topt2.load_state_dict(
        gsd
        | {
            "state": {
                k: {n: torch.tensor(v.numpy()) for n, v in s.items()}
                for k, s in gsd["state"].items()
            }
        }
    )
    a, b, c = [], [], []
    for g in gsteps[4:]:
        for lib, ps, opt, out in (
            (gs, params, gopt, a),
            (torch, topt.param_groups[0]["params"], topt, b),
            (torch, tparams, topt2, c),
        ):
            backward(lib, ps, g)
            opt.step()
            opt.zero_grad()
            out.append([p.detach().numpy().copy() for p in ps])
    close(a, b)
    close(c, b)


BAD = [
    ("RMSprop", dict(lr=-1.0)),
    ("RMSprop", dict(eps=-1.0)),
    ("RMSprop", dict(momentum=-0.5)),
    ("RMSprop", dict(weight_decay=-1.0)),
    ("RMSprop", dict(alpha=-0.1)),
    ("Adagrad", dict(lr=-1.0)),
    ("Adagrad", dict(lr_decay=-1.0)),
    ("Adagrad", dict(weight_decay=-1.0)),
    ("Adagrad", dict(initial_accumulator_value=-1.0)),
    ("Adagrad", dict(eps=-1.0)),
    ("Adamax", dict(lr=-1.0)),
    ("Adamax", dict(betas=(1.0, 0.9))),
    ("Adamax", dict(betas=(0.9, -0.1))),
    ("Adamax", dict(eps=-1.0)),
    ("NAdam", dict(momentum_decay=-1.0)),
    ("NAdam", dict(betas=(0.9, 1.5))),
    ("NAdam", dict(weight_decay=-1.0)),
    ("RAdam", dict(lr=-1.0)),
    ("RAdam", dict(eps=-1.0)),
    ("RAdam", dict(betas=(-0.5, 0.9))),
    ("Adadelta", dict(rho=1.5)),
    ("Adadelta", dict(rho=-0.1)),
    ("Adadelta", dict(eps=-1.0)),
    ("Adadelta", dict(lr=-1.0)),
    ("Rprop", dict(lr=-1.0)),
    ("Rprop", dict(etas=(1.5, 2.0))),
    ("Rprop", dict(etas=(0.5, 0.9))),
    ("ASGD", dict(lr=-1.0)),
    ("ASGD", dict(weight_decay=-1.0)),
    ("Adafactor", dict(lr=-1.0)),
    ("Adafactor", dict(beta2_decay=0.5)),
    ("Adafactor", dict(eps=(-1.0, 1e-3))),
    ("Adafactor", dict(eps=(None, -1.0))),
    ("Adafactor", dict(d=0.5)),
    ("Adafactor", dict(weight_decay=-1.0)),
]


@pytest.mark.parametrize(("name", "kw"), BAD)
def test_bad_arguments_raise_like_torch(name, kw):
    with pytest.raises(Exception) as te:
        getattr(torch.optim, name)([torch.zeros(2, requires_grad=True)], **kw)
    with pytest.raises(type(te.value)) as ge:
        getattr(gs.optim, name)([gs.zeros(2, requires_grad=True)], **kw)
    assert str(ge.value) == str(te.value)


@pytest.mark.parametrize("name", NAMES)
def test_param_groups_and_float64(name):
    """Two param groups with their own learning rates; float64 parameters."""
    init = [a.astype(np.float64) for a in start(8)]
    gsteps = [[g.astype(np.float64) for g in s] for s in grads(seed=9)]
    out = []
    for lib in (gs, torch):
        ps = [lib.tensor(a.copy(), requires_grad=True) for a in init]
        opt = getattr(lib.optim, name)(
            [{"params": ps[:1], "lr": 0.05}, {"params": ps[1:]}], **FIXED[name]
        )
        traj = []
        for g in gsteps:
            backward(lib, ps, g)
            opt.step()
            opt.zero_grad()
            traj.append([p.detach().numpy().copy() for p in ps])
        out.append(traj)
    for sa, sb in zip(*out, strict=True):
        for pa, pb in zip(sa, sb, strict=True):
            np.testing.assert_allclose(pa, pb, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_accumulation_and_clipping_in_backward(name):
    """In the backward pass with accumulate(2) and per-parameter clipping (the norm's
    factor, then the value clamp, as the stream applies them), each optimizer matches
    step() after accumulating two backwards and clipping with nn.utils."""
    init, gsteps = start(10), grads(8, seed=11)
    scaled = [[0.5 * g for g in s] for s in gsteps]  # two halves sum to the whole
    pa = [gs.tensor(a.copy(), requires_grad=True) for a in init]
    pb = [gs.tensor(a.copy(), requires_grad=True) for a in init]
    oa = getattr(gs.optim, name)(pa, **FIXED[name])
    ob = getattr(gs.optim, name)(pb, **FIXED[name], in_backward=True)
    ob.accumulate(2).clip_grad(max_value=0.4, max_norm=1.0)
    for g in scaled:
        backward(gs, pa, g)
        backward(gs, pa, g)
        for p in pa:
            gs.nn.utils.clip_grad_norm_([p], 1.0)
            gs.nn.utils.clip_grad_value_([p], 0.4)
        oa.step()
        oa.zero_grad()
        backward(gs, pb, g)
        backward(gs, pb, g)
        assert all(p.grad is None for p in pb)
    for a, b in zip(pa, pb, strict=True):
        np.testing.assert_allclose(a.detach().numpy(), b.detach().numpy(), rtol=1e-5, atol=1e-6)
