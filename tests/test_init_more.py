"""`nn.init`: the bounds and spreads PyTorch's initialisers promise (from fan_in, fan_out and
the gain), checked on large tensors, plus the deterministic fills against PyTorch."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import gradstream as gs  # noqa: E402
import gradstream.nn.init as init  # noqa: E402

TI = torch.nn.init

NONLINEARITIES = [
    ("linear", None), ("conv1d", None), ("conv2d", None), ("conv3d", None),
    ("conv_transpose1d", None), ("conv_transpose2d", None), ("conv_transpose3d", None),
    ("sigmoid", None), ("tanh", None), ("relu", None), ("leaky_relu", None),
    ("leaky_relu", 0.2), ("leaky_relu", 3), ("selu", None),
]  # fmt: skip

# Large enough that the sample std is within ~0.5% of the true one (its relative standard
# error is about 1 / sqrt(2 n)), with conv-shaped weights among them.
SHAPES = [(300, 400), (64, 32, 3, 3), (200, 20, 5), (1000, 60)]


def _fans(shape):
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


@pytest.mark.parametrize("name,param", NONLINEARITIES)
def test_calculate_gain(name, param):
    assert init.calculate_gain(name, param) == pytest.approx(TI.calculate_gain(name, param))


def test_calculate_gain_errors():
    for lib in (init, TI):
        with pytest.raises(ValueError, match="Unsupported nonlinearity"):
            lib.calculate_gain("softmax")
        with pytest.raises(ValueError, match="not a valid number"):
            lib.calculate_gain("leaky_relu", "x")


def _sample(fn, shape, *args, **kwargs):
    t = gs.empty(*shape, dtype=gs.float64)
    assert fn(t, *args, **kwargs) is t
    return t.numpy()


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("gain", [1.0, 0.5, 2.0])
def test_xavier(shape, gain):
    fan_in, fan_out = _fans(shape)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    bound = math.sqrt(3.0) * std
    u = _sample(init.xavier_uniform_, shape, gain=gain)
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.99 * bound
    assert u.std() == pytest.approx(std, rel=0.02)
    n = _sample(init.xavier_normal_, shape, gain=gain)
    assert n.std() == pytest.approx(std, rel=0.02) and abs(n.mean()) < 0.05 * std


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize(
    "a,mode,nonlinearity",
    [(0, "fan_in", "leaky_relu"), (math.sqrt(5), "fan_in", "leaky_relu"),
     (0, "fan_out", "relu"), (0.1, "fan_out", "tanh"), (0, "fan_in", "linear")],
)  # fmt: skip
def test_kaiming(shape, a, mode, nonlinearity):
    fan = _fans(shape)[0 if mode == "fan_in" else 1]
    std = TI.calculate_gain(nonlinearity, a) / math.sqrt(fan)
    bound = math.sqrt(3.0) * std
    u = _sample(init.kaiming_uniform_, shape, a=a, mode=mode, nonlinearity=nonlinearity)
    assert np.abs(u).max() <= bound and np.abs(u).max() > 0.99 * bound
    assert u.std() == pytest.approx(std, rel=0.02)
    n = _sample(init.kaiming_normal_, shape, a=a, mode=mode, nonlinearity=nonlinearity)
    assert n.std() == pytest.approx(std, rel=0.02) and abs(n.mean()) < 0.05 * std


def test_fan_errors():
    for lib in (gs, torch):
        with pytest.raises(ValueError, match="fewer than 2 dimensions"):
            (init if lib is gs else TI).xavier_uniform_(lib.empty(5))
        with pytest.raises(ValueError, match="Mode"):
            (init if lib is gs else TI).kaiming_normal_(lib.empty(3, 4), mode="fan_avg")
        with pytest.raises(ValueError, match="Unsupported nonlinearity"):
            (init if lib is gs else TI).kaiming_uniform_(lib.empty(3, 4), nonlinearity="elu")


def _truncated_moments(mean, std, a, b):
    alpha, beta = (a - mean) / std, (b - mean) / std

    def pdf(x):
        return math.exp(-x * x / 2) / math.sqrt(2 * math.pi)

    def cdf(x):
        return (1 + math.erf(x / math.sqrt(2))) / 2

    z = cdf(beta) - cdf(alpha)
    m = mean + std * (pdf(alpha) - pdf(beta)) / z
    var = std**2 * (
        1 + (alpha * pdf(alpha) - beta * pdf(beta)) / z - ((pdf(alpha) - pdf(beta)) / z) ** 2
    )
    return m, math.sqrt(var)


@pytest.mark.parametrize(
    "mean,std,a,b",
    [(0.0, 1.0, -2.0, 2.0), (0.5, 2.0, -1.0, 3.0), (0.0, 0.02, -0.04, 0.04),
     (1.0, 1.0, 1.5, 4.0), (0.0, 1.0, -0.1, 0.1)],
)  # fmt: skip
@pytest.mark.parametrize("dtype", [gs.float32, gs.float64])
def test_trunc_normal(mean, std, a, b, dtype):
    t = gs.empty(400, 500, dtype=dtype)
    assert init.trunc_normal_(t, mean, std, a, b) is t
    assert t.dtype == dtype
    v = t.numpy().astype(np.float64)
    assert v.min() >= a and v.max() <= b
    m, s = _truncated_moments(mean, std, a, b)
    assert v.mean() == pytest.approx(m, abs=0.01 * s)
    assert v.std() == pytest.approx(s, rel=0.01)
    # The tails are filled too: the extreme values come close to the bounds.
    assert v.min() < a + 0.01 * (b - a) and v.max() > b - 0.01 * (b - a)


def test_trunc_normal_warns_far_from_the_interval():
    with pytest.warns(UserWarning, match="more than 2 std"):
        init.trunc_normal_(gs.empty(10), mean=10.0, std=1.0, a=-1.0, b=1.0)


@pytest.mark.parametrize("shape", [(3, 3), (2, 5), (5, 2), (0, 3)])
def test_eye(shape):
    g, t = gs.empty(*shape), torch.empty(*shape)
    assert init.eye_(g) is g
    TI.eye_(t)
    np.testing.assert_array_equal(g.numpy(), t.numpy())
    for lib, fn in ((gs, init.eye_), (torch, TI.eye_)):
        with pytest.raises(ValueError, match="2 dimensions"):
            fn(lib.empty(2, 2, 2))


@pytest.mark.parametrize(
    "shape,groups",
    [((4, 3, 3), 1), ((6, 4, 3, 3), 2), ((3, 5, 2, 2), 1), ((4, 2, 3, 3, 3), 2), ((4, 4, 5), 4)],
)
def test_dirac(shape, groups):
    g, t = gs.randn(*shape), torch.randn(*shape)
    assert init.dirac_(g, groups) is g
    TI.dirac_(t, groups)
    np.testing.assert_array_equal(g.numpy(), t.numpy())


def test_dirac_errors():
    for lib, fn in ((gs, init.dirac_), (torch, TI.dirac_)):
        with pytest.raises(ValueError, match="3, 4, or 5 dimensions"):
            fn(lib.empty(3, 3))
        with pytest.raises(ValueError, match="divisible by groups"):
            fn(lib.empty(3, 3, 3), 2)


@pytest.mark.parametrize("rows,cols,sparsity", [(100, 40, 0.1), (10, 300, 0.55), (7, 3, 0.0)])
def test_sparse(rows, cols, sparsity):
    t = gs.empty(rows, cols, dtype=gs.float64)
    assert init.sparse_(t, sparsity, std=0.5) is t
    v = t.numpy()
    zeros = math.ceil(sparsity * rows)
    np.testing.assert_array_equal((v == 0).sum(0), zeros)
    if (rows - zeros) * cols >= 1000:  # enough values for a 10% check of the spread
        assert v[v != 0].std() == pytest.approx(0.5, rel=0.1)
    # The zeroed rows differ between columns.
    if zeros and cols > 5:
        assert len({tuple(np.flatnonzero(v[:, c] == 0)) for c in range(cols)}) > 1
    for lib, fn in ((gs, init.sparse_), (torch, TI.sparse_)):
        with pytest.raises(ValueError, match="2 dimensions"):
            fn(lib.empty(3), 0.1)


@pytest.mark.parametrize(
    "name,args",
    [("uniform_", (-1.0, 1.0)), ("normal_", ()), ("constant_", (0.3,)), ("ones_", ()),
     ("zeros_", ()), ("xavier_uniform_", ()), ("xavier_normal_", ()), ("kaiming_uniform_", ()),
     ("kaiming_normal_", ()), ("trunc_normal_", ()), ("eye_", ()), ("sparse_", (0.5,)),
     ("orthogonal_", ())],
)  # fmt: skip
def test_initialisers_run_without_recording_and_keep_the_leaf(name, args):
    p = gs.nn.Parameter(gs.zeros(6, 5))
    out = getattr(init, name)(p, *args)
    assert out is p and p.is_leaf and p.requires_grad and p.grad_fn is None
    # A later use differentiates as usual.
    (p * 2).sum().backward()
    np.testing.assert_array_equal(p.grad.numpy(), 2.0)


def test_same_seed_same_values():
    a, b = gs.empty(50, 40), gs.empty(50, 40)
    gs.manual_seed(3)
    init.trunc_normal_(a)
    init.kaiming_uniform_(a)
    gs.manual_seed(3)
    init.trunc_normal_(b)
    init.kaiming_uniform_(b)
    np.testing.assert_array_equal(a.numpy(), b.numpy())


@pytest.mark.parametrize(
    "old,args",
    [("uniform", ()), ("normal", ()), ("constant", (1.0,)), ("xavier_uniform", ()),
     ("xavier_normal", ()), ("kaiming_uniform", ()), ("kaiming_normal", ()), ("eye", ()),
     ("dirac", ()), ("sparse", (0.2,)), ("orthogonal", ())],
)  # fmt: skip
def test_deprecated_spellings_warn_and_delegate(old, args):
    shape = (4, 4, 3) if old == "dirac" else (4, 3)
    t = gs.zeros(*shape)
    with pytest.warns(FutureWarning, match=f"nn.init.{old}_"):
        assert getattr(init, old)(t, *args) is t
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref = getattr(TI, old)(torch.zeros(*shape), *args)
    assert tuple(ref.shape) == tuple(t.shape)
    if old in ("constant", "eye", "dirac"):
        np.testing.assert_array_equal(t.numpy(), ref.numpy())
    else:
        assert t.numpy().any()


@pytest.mark.parametrize("shape", [(5, 3), (3, 5), (4, 2, 3), (64, 64), (30, 10, 2, 2), (1, 7)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_orthogonal(shape, gain):
    t = gs.empty(*shape, dtype=gs.float64)
    assert init.orthogonal_(t, gain) is t
    v = t.numpy().reshape(shape[0], -1) / gain
    small = v @ v.T if v.shape[0] <= v.shape[1] else v.T @ v
    np.testing.assert_allclose(small, np.eye(small.shape[0]), atol=1e-10)
    with pytest.raises(ValueError, match="2 or more dimensions"):
        init.orthogonal_(gs.empty(3))


def test_orthogonal_is_haar_distributed():
    # For a Haar-random orthogonal matrix every entry has mean 0 and variance 1 / n, and the
    # determinant is +1 or -1 with equal odds (no sign bias from the QR).
    n, draws = 4, 600
    dets, entries = [], []
    for _ in range(draws):
        q = init.orthogonal_(gs.empty(n, n, dtype=gs.float64)).numpy()
        dets.append(np.linalg.det(q))
        entries.append(q)
    entries = np.stack(entries)
    assert abs(entries.mean()) < 0.02
    np.testing.assert_allclose(entries.var(0), 1 / n, atol=0.04)
    frac_pos = np.mean(np.array(dets) > 0)
    assert 0.4 < frac_pos < 0.6
