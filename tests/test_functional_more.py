"""`nn.functional` activations, losses, distances and shape ops against PyTorch.

Hypothesis draws the shape (0-d and empty included), the dtype, the layout (contiguous or
a transposed view) and the arguments; values and input gradients must match PyTorch's,
including the one-sided gradients PyTorch picks at each kink (the drawn values include
the kinks exactly). float64 gradients are also checked by finite differences.
"""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from helpers import assert_close  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn.functional as F  # noqa: E402
from gradstream.autograd import gradcheck  # noqa: E402

TF = torch.nn.functional
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tol(dtype) -> dict:
    return dict(rtol=2e-5, atol=2e-6) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-12)


def _values(seed: int, shape, dtype, scale=3.0, specials=()):
    """Normal draws with the given special values (kinks) written over some entries."""
    rng = np.random.default_rng(seed)
    a = np.asarray(rng.standard_normal(shape) * scale)
    flat = a.reshape(-1)
    for i, v in enumerate(specials):
        if i < flat.size:
            flat[(i * 7) % flat.size] = v
    return a.astype(dtype)


def _leaf(lib, arr, grad):
    t = lib.tensor(arr)
    if grad and arr.dtype.kind == "f":
        t.requires_grad_(True)
    return t


def _transposed(t):
    """The same values through a non-contiguous view (a transposed copy, transposed back)."""
    return t.transpose(0, 1).contiguous().transpose(0, 1) if t.dim() >= 2 else t


def compare(fn, arrays, grads, dtype, transposed=False, terms=None, args=(), kwargs=None, tol=None):
    """``fn(lib, *tensors, *args, **kwargs)`` on both libraries: same value, same gradients
    of a random weighting of the output for the inputs flagged in ``grads``."""
    kwargs = kwargs or {}
    arrays = [np.asarray(a) if isinstance(a, np.generic) else a for a in arrays]
    outs, leaves = [], []
    for lib in (gs, torch):
        ls = [
            _leaf(lib, a, g) if isinstance(a, np.ndarray) else a
            for a, g in zip(arrays, grads, strict=True)
        ]
        xs = [_transposed(t) if transposed and isinstance(t, lib.Tensor) else t for t in ls]
        outs.append(fn(lib, *xs, *args, **kwargs))
        leaves.append(ls)
    tol = tol or _tol(dtype)
    assert_close(outs[0], outs[1], terms=terms, **tol)
    if not any(grads) or not outs[1].requires_grad:
        return outs
    w = np.random.default_rng(5).standard_normal(tuple(outs[1].shape)).astype(dtype)
    (outs[0] * gs.tensor(w)).sum().backward()
    (outs[1] * torch.tensor(w)).sum().backward()
    for g_leaf, t_leaf, flag in zip(leaves[0], leaves[1], grads, strict=True):
        if flag and isinstance(t_leaf, torch.Tensor):
            assert g_leaf.grad is not None, "missing gradient"
            tg = t_leaf.grad if t_leaf.grad is not None else torch.zeros_like(t_leaf)
            assert_close(g_leaf.grad, tg, terms=terms, **tol)
    return outs


shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)
dtypes = st.sampled_from([np.float32, np.float64])
seeds = st.integers(0, 2**16)

# ---- activations ----

ACTIVATIONS = [
    ("leaky_relu", {}, (0.0,)),
    ("leaky_relu", {"negative_slope": 0.2}, (0.0,)),
    ("elu", {}, (0.0, 100.0)),
    ("elu", {"alpha": 0.5}, (0.0,)),
    ("selu", {}, (0.0, 100.0)),
    ("celu", {}, (0.0,)),
    ("celu", {"alpha": 2.0}, (0.0,)),
    ("relu6", {}, (0.0, 6.0)),
    ("hardtanh", {}, (-1.0, 1.0)),
    ("hardtanh", {"min_val": -2.0, "max_val": 0.5}, (-2.0, 0.5)),
    ("hardsigmoid", {}, (-3.0, 3.0)),
    ("hardswish", {}, (-3.0, 3.0)),
    ("mish", {}, (0.0, 30.0, -30.0)),
    ("logsigmoid", {}, (0.0, 30.0, -30.0, -25.0, 25.0, -800.0)),
    ("softsign", {}, (0.0,)),
    ("tanhshrink", {}, (0.0,)),
    ("softshrink", {}, (0.5, -0.5)),
    ("softshrink", {"lambd": 1.5}, (1.5, -1.5)),
    ("hardshrink", {}, (0.5, -0.5)),
    ("hardshrink", {"lambd": 0.0}, (0.0,)),
    ("softmin", {"dim": -1}, ()),
    ("rrelu", {}, (0.0,)),  # eval mode: leaky_relu with the mean slope
]


@pytest.mark.parametrize("name,kwargs,specials", ACTIVATIONS)
@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds, transposed=st.booleans())
def test_activation_matches_torch(name, kwargs, specials, shape, dtype, seed, transposed):
    if name == "softmin" and not shape:
        shape = (3,)
    x = _values(seed, shape, dtype, specials=specials)
    tol = None
    if name in ("hardsigmoid", "hardswish") and dtype == np.float64:
        tol = dict(rtol=1e-7, atol=1e-12)  # PyTorch's backward uses float constants (1/6, 1/3)
    compare(
        lambda lib, t: getattr(lib.nn.functional, name)(t, **kwargs),
        [x],
        [True],
        dtype,
        transposed,
        tol=tol,
    )


@pytest.mark.parametrize(
    "name,kwargs",
    [(n, k) for n, k, _ in ACTIVATIONS if n not in ("softmin", "rrelu")]
    + [("glu", {"dim": 0}), ("softmin", {"dim": 0})],
)
def test_activation_gradcheck(name, kwargs):
    x = gs.tensor(np.random.default_rng(0).uniform(-5, 5, (4, 3)), requires_grad=True)
    assert gradcheck(lambda t: getattr(F, name)(t, **kwargs), (x,))


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("leaky_relu", {"negative_slope": 0.3}),
        ("elu", {}),
        ("selu", {}),
        ("celu", {}),
        ("hardtanh", {}),
        ("rrelu", {}),
    ],
)
def test_inplace_activations(name, kwargs):
    x = _values(1, (3, 4), np.float64, specials=(0.0, 1.0, 6.0))
    g, t = gs.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    g2, t2 = g * 1.0, t * 1.0
    ng = getattr(F, name + "_")(g2, **kwargs)
    nt = getattr(TF, name + "_")(t2, **kwargs)
    assert ng is g2
    assert_close(g2, t2)
    ng.sum().backward()
    nt.sum().backward()
    assert_close(g.grad, t.grad)
    # The inplace= spelling writes through too.
    h = gs.tensor(x)
    getattr(F, name)(h, inplace=True, **kwargs)
    assert_close(h, nt.detach())


@SETTINGS
@given(
    lead=st.lists(st.integers(0, 3), max_size=2),
    half=st.integers(0, 3),
    dtype=dtypes,
    seed=seeds,
    data=st.data(),
)
def test_glu(lead, half, dtype, seed, data):
    shape = list(lead)
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)))
    shape.insert(dim % (len(shape) + 1), 2 * half)
    x = _values(seed, tuple(shape), dtype)
    compare(lambda lib, t: lib.nn.functional.glu(t, dim), [x], [True], dtype)


def test_glu_errors():
    for lib in (gs, torch):
        with pytest.raises(RuntimeError, match="even"):
            lib.nn.functional.glu(lib.ones(3, 5), -1)
        with pytest.raises(RuntimeError, match="scalars"):
            lib.nn.functional.glu(lib.tensor(1.0))


def test_activation_argument_errors():
    for lib in (gs, torch):
        x = lib.ones(3)
        with pytest.raises(ValueError, match="min_val cannot be greater than max_val"):
            lib.nn.functional.hardtanh(x, 1.0, -1.0)
        with pytest.raises(RuntimeError, match="lambda must be"):
            lib.nn.functional.softshrink(x, -1.0)


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=2, max_size=4).map(tuple),
    per_channel=st.booleans(),
    dtype=dtypes,
    seed=seeds,
)
def test_prelu(shape, per_channel, dtype, seed):
    x = _values(seed, shape, dtype, specials=(0.0,))
    w = _values(seed + 1, (shape[1] if per_channel else 1,), dtype)
    compare(
        lambda lib, a, b: lib.nn.functional.prelu(a, b),
        [x, w],
        [True, True],
        dtype,
        terms=max(x.size, 1),
    )


def test_prelu_bad_weight():
    for lib in (gs, torch):
        with pytest.raises(RuntimeError):
            lib.nn.functional.prelu(lib.ones(2, 3), lib.ones(2))


def test_random_activations_statistics():
    x = gs.randn(4000, dtype=gs.float64)
    y = F.rrelu(x, 0.1, 0.3, training=True).detach().numpy()
    xs = x.numpy()
    slope = y[xs < 0] / xs[xs < 0]
    assert slope.min() >= 0.1 and slope.max() <= 0.3 and slope.std() > 0.03
    np.testing.assert_array_equal(y[xs > 0], xs[xs > 0])

    logits = gs.randn(50, 6, dtype=gs.float64, requires_grad=True)
    soft = F.gumbel_softmax(logits, tau=0.5)
    np.testing.assert_allclose(soft.sum(-1).detach().numpy(), 1.0, rtol=1e-12)
    hard = F.gumbel_softmax(logits, hard=True, dim=-1)
    assert set(np.unique(hard.detach().numpy())) <= {0.0, 1.0}
    np.testing.assert_array_equal(hard.detach().numpy().sum(-1), 1.0)
    (hard * gs.arange(6, dtype=gs.float64)).sum().backward()
    assert logits.grad is not None and np.abs(logits.grad.numpy()).sum() > 0
    # Sampling follows softmax(logits): the argmax frequencies of fixed logits.
    probs = np.array([0.6, 0.3, 0.1])
    lg = gs.tensor(np.log(np.tile(probs, (20000, 1))))
    freq = F.gumbel_softmax(lg, hard=True).numpy().mean(0)
    np.testing.assert_allclose(freq, probs, atol=0.02)


# ---- losses ----

REDUCTIONS = ["none", "mean", "sum"]


def _pm1(seed, shape, dtype):
    return np.asarray(np.where(np.random.default_rng(seed).random(shape) < 0.5, -1.0, 1.0), dtype)


def _unit(seed, shape, dtype):
    return np.asarray(np.random.default_rng(seed).uniform(0.02, 0.98, shape), dtype)


# name -> (make(seed, shape, dtype) -> arrays, which arrays get gradients, keyword variants)
POINTWISE_LOSSES = {
    "l1_loss": (lambda s, sh, dt: [_values(s, sh, dt), _values(s + 1, sh, dt)], [1, 1], [{}]),
    "smooth_l1_loss": (
        lambda s, sh, dt: [_values(s, sh, dt, specials=(1.0, 0.0)), np.zeros(sh, dt)],
        [1, 1],
        [{}, {"beta": 0.5}, {"beta": 0.0}],
    ),
    "huber_loss": (
        lambda s, sh, dt: [_values(s, sh, dt, specials=(0.7, -0.7, 0.0)), np.zeros(sh, dt)],
        [1, 1],
        [{}, {"delta": 0.7}],
    ),
    "kl_div": (
        lambda s, sh, dt: [_values(s, sh, dt), _unit(s + 1, sh, dt)],
        [1, 1],
        [{}, {"log_target": True}],
    ),
    "binary_cross_entropy": (
        lambda s, sh, dt: [_unit(s, sh, dt), _unit(s + 1, sh, dt)],
        [1, 1],
        [{}],
    ),
    "binary_cross_entropy_with_logits": (
        lambda s, sh, dt: [_values(s, sh, dt), _unit(s + 1, sh, dt)],
        [1, 1],
        [{}],
    ),
    "poisson_nll_loss": (
        lambda s, sh, dt: [_values(s, sh, dt, scale=1.0), _unit(s + 1, sh, dt) * 4],
        [1, 1],
        [{}, {"full": True}],
    ),
    "soft_margin_loss": (lambda s, sh, dt: [_values(s, sh, dt), _pm1(s, sh, dt)], [1, 0], [{}]),
    "hinge_embedding_loss": (
        lambda s, sh, dt: [_values(s, sh, dt, specials=(1.0,)), _pm1(s, sh, dt)],
        [1, 0],
        [{}, {"margin": 0.5}],
    ),
    "margin_ranking_loss": (
        lambda s, sh, dt: [_values(s, sh, dt), _values(s + 1, sh, dt), _pm1(s, sh, dt)],
        [1, 1, 0],
        [{}, {"margin": 0.3}],
    ),
    "gaussian_nll_loss": (
        lambda s, sh, dt: [_values(s, sh, dt), _values(s + 1, sh, dt), _unit(s + 2, sh, dt)],
        [1, 1, 1],
        [{}, {"full": True}],
    ),
}


@pytest.mark.parametrize("name", sorted(POINTWISE_LOSSES))
@SETTINGS
@given(
    shape=shapes,
    dtype=dtypes,
    seed=seeds,
    transposed=st.booleans(),
    reduction=st.sampled_from(REDUCTIONS),
    variant=st.integers(0, 2),
)
def test_pointwise_loss_matches_torch(name, shape, dtype, seed, transposed, reduction, variant):
    make, grads, variants = POINTWISE_LOSSES[name]
    kwargs = dict(variants[variant % len(variants)], reduction=reduction)
    arrays = make(seed, shape, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns about reduction='mean' for kl_div
        compare(
            lambda lib, *t: getattr(lib.nn.functional, name)(*t, **kwargs),
            arrays,
            [bool(g) for g in grads],
            dtype,
            transposed,
            terms=max(arrays[0].size, 1),
        )


@SETTINGS
@given(shape=shapes, dtype=dtypes, seed=seeds, log_target=st.booleans())
def test_kl_div_batchmean(shape, dtype, seed, log_target):
    x, t = _values(seed, shape, dtype), _unit(seed + 1, shape, dtype)
    if log_target:
        t = np.log(t)
    compare(
        lambda lib, a, b: lib.nn.functional.kl_div(
            a, b, reduction="batchmean", log_target=log_target
        ),
        [x, t],
        [True, True],
        dtype,
        terms=max(x.size, 1),
    )


def test_kl_div_zero_target_is_finite():
    x = np.log(np.array([[0.2, 0.3, 0.5]]))
    t = np.array([[0.0, 0.5, 0.5]])
    compare(
        lambda lib, a, b: lib.nn.functional.kl_div(a, b, reduction="sum"),
        [x, t],
        [True, False],
        np.float64,
    )


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    dtype=dtypes,
    seed=seeds,
    reduction=st.sampled_from(REDUCTIONS),
    weighted=st.booleans(),
    pos_weighted=st.booleans(),
    extreme=st.booleans(),
)
def test_bce_with_logits_weights(shape, dtype, seed, reduction, weighted, pos_weighted, extreme):
    # extreme: logits of +-200, where a naive log(sigmoid(x)) overflows.
    x = _values(seed, shape, dtype, scale=200.0 if extreme else 3.0)
    t = _unit(seed + 1, shape, dtype)
    w = _unit(seed + 2, shape[-1:], dtype) if weighted else None
    pw = _unit(seed + 3, shape[-1:], dtype) * 3 if pos_weighted else None

    def fn(lib, a, b, wt, pwt):
        return lib.nn.functional.binary_cross_entropy_with_logits(
            a, b, weight=wt, pos_weight=pwt, reduction=reduction
        )

    compare(fn, [x, t, w, pw], [True, True, False, False], dtype, terms=max(x.size, 1))


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    dtype=dtypes,
    seed=seeds,
    reduction=st.sampled_from(REDUCTIONS),
)
def test_bce_weight_and_saturation(shape, dtype, seed, reduction):
    p = _unit(seed, shape, dtype)
    p.reshape(-1)[:2] = [0.0, 1.0][: p.size]  # log clamped at -100
    t = _unit(seed + 1, shape, dtype)
    w = _unit(seed + 2, shape[-1:], dtype)
    # Values only: at 0 and 1 PyTorch's gradients are those of the unclamped logs (+-inf,
    # or (x - t) / 1e-12), not of the clamped value.
    compare(
        lambda lib, a, b, c: lib.nn.functional.binary_cross_entropy(a, b, c, reduction=reduction),
        [p, t, w],
        [False, False, False],
        dtype,
        terms=max(p.size, 1),
    )


@pytest.mark.parametrize("log_input", [True, False])
def test_poisson_nll_not_log_input(log_input):
    x = _unit(3, (4, 5), np.float64) * 3
    t = np.floor(_unit(4, (4, 5), np.float64) * 5)
    compare(
        lambda lib, a, b: lib.nn.functional.poisson_nll_loss(a, b, log_input=log_input, full=True),
        [x, t],
        [True, False],
        np.float64,
    )


@pytest.mark.parametrize("var_shape", ["same", "drop_last", "last_one", "scalar"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gaussian_nll_var_shapes(var_shape, dtype):
    x, t = _values(0, (5, 3), dtype), _values(1, (5, 3), dtype)
    shape = {"same": (5, 3), "drop_last": (5,), "last_one": (5, 1), "scalar": None}[var_shape]
    if shape is None:
        compare(
            lambda lib, a, b: lib.nn.functional.gaussian_nll_loss(a, b, 0.7),
            [x, t],
            [True, True],
            dtype,
        )
        return
    v = _unit(2, shape, dtype)
    v.reshape(-1)[0] = 1e-9  # clamped at eps; its gradient still flows
    compare(
        lambda lib, a, b, c: lib.nn.functional.gaussian_nll_loss(a, b, c, eps=1e-6),
        [x, t, v],
        [True, True, True],
        dtype,
    )


def test_gaussian_nll_errors():
    for lib in (gs, torch):
        x = lib.ones(5, 3)
        with pytest.raises(ValueError, match="var is of incorrect size"):
            lib.nn.functional.gaussian_nll_loss(x, x, lib.ones(4))
        with pytest.raises(ValueError, match="negative"):
            lib.nn.functional.gaussian_nll_loss(x, x, -lib.ones(5, 3))


ROW_LOSSES = {
    "cosine_embedding_loss": (
        lambda s, n, d, dt: [_values(s, (n, d), dt), _values(s + 1, (n, d), dt), _pm1(s, (n,), dt)],
        [1, 1, 0],
        [{}, {"margin": 0.2}],
    ),
    "triplet_margin_loss": (
        lambda s, n, d, dt: [
            _values(s, (n, d), dt),
            _values(s + 1, (n, d), dt),
            _values(s + 2, (n, d), dt),
        ],
        [1, 1, 1],
        [{}, {"p": 1}, {"swap": True}, {"margin": 0.5, "p": 3, "eps": 1e-3}],
    ),
    "triplet_margin_with_distance_loss": (
        lambda s, n, d, dt: [
            _values(s, (n, d), dt),
            _values(s + 1, (n, d), dt),
            _values(s + 2, (n, d), dt),
        ],
        [1, 1, 1],
        [{}, {"swap": True, "margin": 2.0}],
    ),
    "multilabel_soft_margin_loss": (
        lambda s, n, d, dt: [_values(s, (n, d), dt), (_unit(s + 1, (n, d), dt) > 0.5).astype(dt)],
        [1, 0],
        [{}],
    ),
}


@pytest.mark.parametrize("name", sorted(ROW_LOSSES))
@SETTINGS
@given(
    n=st.integers(1, 5),
    d=st.integers(1, 4),
    dtype=dtypes,
    seed=seeds,
    transposed=st.booleans(),
    reduction=st.sampled_from(REDUCTIONS),
    variant=st.integers(0, 3),
)
def test_row_loss_matches_torch(name, n, d, dtype, seed, transposed, reduction, variant):
    make, grads, variants = ROW_LOSSES[name]
    kwargs = dict(variants[variant % len(variants)], reduction=reduction)
    arrays = make(seed, n, d, dtype)
    compare(
        lambda lib, *t: getattr(lib.nn.functional, name)(*t, **kwargs),
        arrays,
        [bool(g) for g in grads],
        dtype,
        transposed,
        terms=n * d,
    )


def test_unbatched_row_losses():
    a, b, c = (_values(i, (4,), np.float64) for i in range(3))
    compare(
        lambda lib, x, y: lib.nn.functional.cosine_embedding_loss(x, y, lib.tensor(-1.0)),
        [a, b],
        [True, True],
        np.float64,
    )
    compare(
        lambda lib, x, y, z: lib.nn.functional.triplet_margin_loss(x, y, z),
        [a, b, c],
        [True, True, True],
        np.float64,
    )
    compare(
        lambda lib, x: lib.nn.functional.multi_margin_loss(x, lib.tensor(2)),
        [a],
        [True],
        np.float64,
    )


def test_weighted_multilabel_soft_margin():
    x, t = _values(0, (3, 4), np.float64), (_unit(1, (3, 4), np.float64) > 0.5) * 1.0
    w = _unit(2, (4,), np.float64)
    compare(
        lambda lib, a, b, c: lib.nn.functional.multilabel_soft_margin_loss(a, b, c),
        [x, t, w],
        [True, False, False],
        np.float64,
    )


def test_triplet_custom_distance():
    arrays = [_values(i, (4, 3), np.float64) for i in range(3)]

    def fn(lib, a, p, n):
        def dist(x, y):
            return 1.0 - lib.nn.functional.cosine_similarity(x, y)

        return lib.nn.functional.triplet_margin_with_distance_loss(
            a, p, n, distance_function=dist, margin=0.4
        )

    compare(fn, arrays, [True, True, True], np.float64)


@SETTINGS
@given(
    n=st.integers(1, 5),
    c=st.integers(1, 4),
    dtype=dtypes,
    seed=seeds,
    p=st.sampled_from([1, 2]),
    margin=st.sampled_from([1.0, 0.3]),
    weighted=st.booleans(),
    reduction=st.sampled_from(REDUCTIONS),
)
def test_multi_margin_loss(n, c, dtype, seed, p, margin, weighted, reduction):
    x = _values(seed, (n, c), dtype, scale=0.7)
    y = np.random.default_rng(seed).integers(0, c, n)
    w = _unit(seed + 1, (c,), dtype) if weighted else None
    compare(
        lambda lib, a, b, wt: lib.nn.functional.multi_margin_loss(
            a, b, p=p, margin=margin, weight=wt, reduction=reduction
        ),
        [x, y, w],
        [True, False, False],
        dtype,
        terms=max(n * c, 1),
    )


LOSS_CALLS = {
    "l1_loss": lambda F, x: F.l1_loss(x, x, reduction="bad"),
    "smooth_l1_loss": lambda F, x: F.smooth_l1_loss(x, x, reduction="bad"),
    "huber_loss": lambda F, x: F.huber_loss(x, x, reduction="bad"),
    "kl_div": lambda F, x: F.kl_div(x, x, reduction="bad"),
    "binary_cross_entropy": lambda F, x: F.binary_cross_entropy(x.sigmoid(), x, reduction="bad"),
    "bce_with_logits": lambda F, x: F.binary_cross_entropy_with_logits(x, x, reduction="bad"),
    "poisson_nll_loss": lambda F, x: F.poisson_nll_loss(x, x, reduction="bad"),
    "gaussian_nll_loss": lambda F, x: F.gaussian_nll_loss(x, x, x.abs(), reduction="bad"),
    "margin_ranking_loss": lambda F, x: F.margin_ranking_loss(x, x, x, reduction="bad"),
    "hinge_embedding_loss": lambda F, x: F.hinge_embedding_loss(x, x, reduction="bad"),
    "soft_margin_loss": lambda F, x: F.soft_margin_loss(x, x, reduction="bad"),
    "cosine_embedding_loss": lambda F, x: F.cosine_embedding_loss(x, x, x[:, 0], reduction="bad"),
    "triplet_margin_loss": lambda F, x: F.triplet_margin_loss(x, x, x, reduction="bad"),
    "triplet_with_distance": lambda F, x: F.triplet_margin_with_distance_loss(
        x, x, x, reduction="bad"
    ),
    "multilabel_soft_margin_loss": lambda F, x: F.multilabel_soft_margin_loss(
        x, x, reduction="bad"
    ),
    "multi_margin_loss": lambda F, x: F.multi_margin_loss(x, x[:, 0].long() * 0, reduction="bad"),
}


@pytest.mark.parametrize("name", sorted(LOSS_CALLS))
def test_bad_reduction_raises_value_error(name):
    for lib in (gs, torch):
        x = lib.tensor(_unit(0, (3, 4), np.float32))
        with pytest.raises(ValueError):
            LOSS_CALLS[name](lib.nn.functional, x)


def test_loss_argument_errors():
    for lib in (gs, torch):
        f = lib.nn.functional
        with pytest.raises(RuntimeError):
            f.huber_loss(lib.ones(3), lib.ones(3), delta=0.0)
        with pytest.raises(RuntimeError):
            f.smooth_l1_loss(lib.ones(3), lib.ones(3), beta=-1.0)
        with pytest.raises(ValueError, match="size"):
            f.binary_cross_entropy(lib.ones(3) * 0.5, lib.ones(4))
        with pytest.raises(ValueError, match="size"):
            f.binary_cross_entropy_with_logits(lib.ones(3), lib.ones(2, 3))
        with pytest.raises(RuntimeError, match="dimension"):
            f.margin_ranking_loss(lib.ones(3), lib.ones(3), lib.ones(1, 3))
        with pytest.raises(RuntimeError):
            f.triplet_margin_loss(lib.ones(2, 3), lib.ones(2, 3), lib.ones(3))
        with pytest.raises(RuntimeError):
            f.cosine_embedding_loss(lib.ones(2, 3), lib.ones(2, 3), lib.ones(2, 1))
        with pytest.raises(RuntimeError):
            f.cosine_embedding_loss(lib.ones(2, 3), lib.ones(2, 3), lib.tensor(1.0))
        with pytest.raises(ValueError, match="only p == 1 and p == 2"):
            f.multi_margin_loss(lib.ones(2, 3), lib.tensor([0, 1]), p=3)
        with pytest.raises(ValueError, match="margin"):
            f.triplet_margin_with_distance_loss(lib.ones(2), lib.ones(2), lib.ones(2), margin=0)
        with pytest.raises(RuntimeError), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # PyTorch warns about the sizes first
            f.l1_loss(lib.ones(3), lib.ones(4))


def test_loss_broadcast_target():
    x, t = _values(0, (4, 3), np.float64), _values(1, (3,), np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # PyTorch warns that the sizes differ
        for name in ("l1_loss", "smooth_l1_loss", "huber_loss"):
            compare(
                lambda lib, a, b, name=name: getattr(lib.nn.functional, name)(a, b),
                [x, t],
                [True, True],
                np.float64,
            )


@pytest.mark.parametrize(
    "name,make",
    [
        ("huber_loss", lambda r: [r.standard_normal((3, 4)), r.standard_normal((3, 4))]),
        ("smooth_l1_loss", lambda r: [r.standard_normal((3, 4)), r.standard_normal((3, 4))]),
        ("kl_div", lambda r: [r.standard_normal((3, 4)), r.uniform(0.1, 1, (3, 4))]),
        ("poisson_nll_loss", lambda r: [r.standard_normal((3, 4)), r.uniform(0, 3, (3, 4))]),
        (
            "gaussian_nll_loss",
            lambda r: [
                r.standard_normal((3, 4)),
                r.standard_normal((3, 4)),
                r.uniform(0.5, 2, (3, 4)),
            ],
        ),
        (
            "margin_ranking_loss",
            lambda r: [r.standard_normal(5), r.standard_normal(5), np.sign(r.standard_normal(5))],
        ),
        ("soft_margin_loss", lambda r: [r.standard_normal(5), np.sign(r.standard_normal(5))]),
        (
            "cosine_embedding_loss",
            lambda r: [
                r.standard_normal((3, 4)),
                r.standard_normal((3, 4)),
                np.array([1.0, -1.0, -1.0]),
            ],
        ),
        ("triplet_margin_loss", lambda r: [r.standard_normal((3, 4)) for _ in range(3)]),
        (
            "multilabel_soft_margin_loss",
            lambda r: [r.standard_normal((3, 4)), (r.random((3, 4)) > 0.5) * 1.0],
        ),
        ("binary_cross_entropy", lambda r: [r.uniform(0.1, 0.9, (3, 4)), r.random((3, 4))]),
    ],
)
def test_loss_gradcheck(name, make):
    arrays = make(np.random.default_rng(7))
    ts = [gs.tensor(a, requires_grad=True) for a in arrays]
    fn = getattr(F, name)
    assert gradcheck(lambda *t: fn(*t, reduction="sum"), ts)


# ---- distances ----


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple),
    dtype=dtypes,
    seed=seeds,
    broadcast=st.booleans(),
    eps=st.sampled_from([1e-8, 1e-3, 1.0]),
    transposed=st.booleans(),
    data=st.data(),
)
def test_cosine_similarity(shape, dtype, seed, broadcast, eps, transposed, data):
    dim = data.draw(st.integers(-len(shape), len(shape) - 1))
    a = _values(seed, shape, dtype)
    b = _values(seed + 1, shape[1:] if broadcast else shape, dtype)
    if a.size:
        a.reshape(-1)[: shape[-1]] = 0.0  # a zero row: its norm is clamped at eps
    compare(
        lambda lib, x, y: lib.nn.functional.cosine_similarity(x, y, dim, eps),
        [a, b],
        [True, True],
        dtype,
        transposed,
        terms=max(shape[dim], 1),
    )


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple),
    dtype=dtypes,
    seed=seeds,
    p=st.sampled_from([2.0, 1.0, 3.0, math.inf, 0.5]),
    keepdim=st.booleans(),
    eps=st.sampled_from([1e-6, 0.0]),
    broadcast=st.booleans(),
)
def test_pairwise_distance(shape, dtype, seed, p, keepdim, eps, broadcast):
    a = _values(seed, shape, dtype)
    b = _values(seed + 1, shape[1:] if broadcast and shape else shape, dtype)
    if shape and shape[-1] == 0 and math.isinf(p):
        for lib in (gs, torch):  # the max over nothing
            with pytest.raises(RuntimeError):
                lib.nn.functional.pairwise_distance(lib.tensor(a), lib.tensor(b), p, eps)
        return
    compare(
        lambda lib, x, y: lib.nn.functional.pairwise_distance(x, y, p, eps, keepdim),
        [a, b],
        [True, True],
        dtype,
        terms=max(shape[-1] if shape else 1, 1),
    )


@SETTINGS
@given(
    n=st.integers(0, 5),
    d=st.integers(1, 4),
    dtype=dtypes,
    seed=seeds,
    p=st.sampled_from([2.0, 1.0, 3.0, math.inf]),
)
def test_pdist(n, d, dtype, seed, p):
    x = _values(seed, (n, d), dtype)
    # PyTorch's pdist backward crashes (segfault) with fewer than two rows: values only there.
    compare(lambda lib, t: lib.nn.functional.pdist(t, p), [x], [n >= 2], dtype, terms=d)
    if n < 2:
        g = gs.tensor(x, requires_grad=True)
        F.pdist(g, p).sum().backward()
        np.testing.assert_array_equal(g.grad.numpy(), np.zeros_like(x))


def test_distance_gradcheck():
    r = np.random.default_rng(3)
    a, b = (gs.tensor(r.standard_normal((3, 4)), requires_grad=True) for _ in range(2))
    assert gradcheck(lambda x, y: F.cosine_similarity(x, y, dim=1), (a, b))
    assert gradcheck(lambda x, y: F.pairwise_distance(x, y, 3.0), (a, b))
    assert gradcheck(lambda x: F.pdist(x), (a,))


def test_normalize_matches_torch():
    x = _values(0, (3, 4), np.float64)
    x[1] = 0.0  # a zero row: the norm is clamped at eps
    for p, dim in [(2.0, 1), (1.0, 0), (3.0, -1), (math.inf, 1), (0.5, 1)]:
        compare(
            lambda lib, t, p=p, dim=dim: lib.nn.functional.normalize(t, p, dim),
            [x],
            [True],
            np.float64,
        )


# ---- one_hot, pad, shuffles ----


@SETTINGS
@given(shape=shapes, seed=seeds, extra=st.integers(-1, 3))
def test_one_hot(shape, seed, extra):
    idx = np.random.default_rng(seed).integers(0, 4, shape)
    if idx.size == 0 and extra < 1:
        for lib in (gs, torch):
            with pytest.raises(RuntimeError, match="empty tensor"):
                lib.nn.functional.one_hot(lib.tensor(idx, dtype=lib.int64), extra)
        return
    n = -1 if extra == -1 else int(idx.max(initial=-1)) + 1 + extra
    g = F.one_hot(gs.tensor(idx), n)
    t = TF.one_hot(torch.tensor(idx), n)
    assert g.dtype == gs.int64
    np.testing.assert_array_equal(g.numpy(), t.numpy())


def test_one_hot_errors():
    for lib in (gs, torch):
        f = lib.nn.functional
        with pytest.raises(RuntimeError, match="non-negative"):
            f.one_hot(lib.tensor([1, -1]))
        with pytest.raises(RuntimeError, match="smaller than num_classes"):
            f.one_hot(lib.tensor([1, 5]), 3)
        with pytest.raises(RuntimeError, match="empty tensor"):
            f.one_hot(lib.tensor([], dtype=lib.int64))
        with pytest.raises(RuntimeError, match="LongTensor"):
            f.one_hot(lib.tensor([1.0]))


@SETTINGS
@given(
    shape=st.lists(st.integers(0, 4), min_size=1, max_size=4).map(tuple),
    dtype=dtypes,
    seed=seeds,
    data=st.data(),
    value=st.sampled_from([None, 0.0, -2.5]),
)
def test_pad_constant(shape, dtype, seed, data, value):
    k = data.draw(st.integers(1, len(shape)))
    pads = []
    for i in range(k):
        n = shape[len(shape) - 1 - i]
        pads += [data.draw(st.integers(-n, 3)), data.draw(st.integers(-n, 3))]
        if pads[-1] + pads[-2] < -n:
            pads[-1] = -n - pads[-2]
    x = _values(seed, shape, dtype)
    compare(lambda lib, t: lib.nn.functional.pad(t, pads, value=value), [x], [True], dtype)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@SETTINGS
@given(nd=st.integers(1, 3), batch=st.booleans(), dtype=dtypes, seed=seeds, data=st.data())
def test_pad_modes(mode, nd, batch, dtype, seed, data):
    spatial = [data.draw(st.integers(2, 4)) for _ in range(nd)]
    shape = ([2] if batch else []) + [2] + spatial
    pads = []
    for n in reversed(spatial):
        hi = n - 1 if mode == "reflect" else n
        pads += [data.draw(st.integers(0, hi)), data.draw(st.integers(0, hi))]
    x = _values(seed, tuple(shape), dtype)
    compare(lambda lib, t: lib.nn.functional.pad(t, pads, mode=mode), [x], [True], dtype, terms=8)


def test_pad_errors():
    for lib in (gs, torch):
        f = lib.nn.functional
        x = lib.ones(2, 3)
        with pytest.raises(RuntimeError, match="divisible by 2"):
            f.pad(x, (1,))
        with pytest.raises(RuntimeError, match="two times the input dimension"):
            f.pad(x, (1,) * 6)
        with pytest.raises(NotImplementedError):
            f.pad(x, (1, 1), mode="foo")
        with pytest.raises(RuntimeError, match="value"):
            f.pad(x, (1, 1), mode="reflect", value=1.0)
        with pytest.raises(RuntimeError, match="Padding size should be less than"):
            f.pad(x, (3, 3), mode="reflect")
        with pytest.raises(NotImplementedError):
            f.pad(lib.ones(3), (1, 1), mode="replicate")


@SETTINGS
@given(
    batch=st.lists(st.integers(1, 2), max_size=2),
    c=st.integers(1, 2),
    r=st.integers(1, 3),
    h=st.integers(1, 3),
    w=st.integers(1, 3),
    seed=seeds,
)
def test_pixel_and_channel_shuffle(batch, c, r, h, w, seed):
    x = _values(seed, (*batch, c * r * r, h, w), np.float64)
    compare(lambda lib, t: lib.nn.functional.pixel_shuffle(t, r), [x], [True], np.float64)
    y = _values(seed, (*batch, c, h * r, w * r), np.float64)
    compare(lambda lib, t: lib.nn.functional.pixel_unshuffle(t, r), [y], [True], np.float64)
    if len(batch) == 1:
        z = _values(seed, (batch[0], c * r, h, w), np.float64)
        compare(lambda lib, t: lib.nn.functional.channel_shuffle(t, r), [z], [True], np.float64)


def test_shuffle_errors():
    for lib in (gs, torch):
        f = lib.nn.functional
        with pytest.raises(RuntimeError):
            f.pixel_shuffle(lib.ones(1, 3, 2, 2), 2)
        with pytest.raises(RuntimeError):
            f.pixel_unshuffle(lib.ones(1, 1, 3, 2), 2)
        with pytest.raises(RuntimeError):
            f.pixel_shuffle(lib.ones(4, 2), 2)


# ---- composite layers ----


@SETTINGS
@given(
    lead=st.lists(st.integers(0, 3), max_size=2),
    k=st.integers(1, 2),
    dtype=dtypes,
    seed=seeds,
    affine=st.booleans(),
    eps=st.sampled_from([None, 1e-3]),
    transposed=st.booleans(),
)
def test_rms_norm(lead, k, dtype, seed, affine, eps, transposed):
    ns = (3, 2)[:k]
    x = _values(seed, (*lead, *ns), dtype)
    w = _values(seed + 1, ns, dtype) if affine else None
    compare(
        lambda lib, t, wt: lib.nn.functional.rms_norm(t, ns, wt, eps),
        [x, w],
        [True, True],
        dtype,
        transposed,
        terms=6,
    )


@SETTINGS
@given(
    n=st.integers(1, 3),
    groups=st.integers(1, 3),
    per=st.integers(1, 2),
    spatial=st.lists(st.integers(1, 3), max_size=2),
    dtype=dtypes,
    seed=seeds,
    affine=st.booleans(),
)
def test_group_norm(n, groups, per, spatial, dtype, seed, affine):
    if per * math.prod(spatial) < 3 and n * per * math.prod(spatial) > 1:
        # With one or two values per group the normalised values are constant (0 or +-1):
        # the true gradient is 0 and both libraries return rounding noise.
        per = 3
    c = groups * per
    x = _values(seed, (n, c, *spatial), dtype)
    if n * per * math.prod(spatial) == 1:
        for lib in (gs, torch):
            with pytest.raises(ValueError, match="more than 1 value"):
                lib.nn.functional.group_norm(lib.tensor(x), groups)
        return
    w = _values(seed + 1, (c,), dtype) if affine else None
    b = _values(seed + 2, (c,), dtype) if affine else None
    compare(
        lambda lib, t, wt, bt: lib.nn.functional.group_norm(t, groups, wt, bt),
        [x, w, b],
        [True, True, True],
        dtype,
        terms=x.size,
        # The input gradient of a normalisation cancels terms scaled by 1/std; float32
        # results of two correct orders of summation differ by ~1e-5 relative.
        tol=dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else None,
    )


def test_group_norm_errors():
    for lib in (gs, torch):
        with pytest.raises(RuntimeError, match="divisible by num_groups"):
            lib.nn.functional.group_norm(lib.ones(2, 3, 4), 2)


@SETTINGS
@given(
    lead=st.lists(st.integers(0, 3), max_size=2),
    in1=st.integers(1, 3),
    in2=st.integers(1, 3),
    out=st.integers(1, 3),
    dtype=dtypes,
    seed=seeds,
    bias=st.booleans(),
)
def test_bilinear(lead, in1, in2, out, dtype, seed, bias):
    a, b = _values(seed, (*lead, in1), dtype), _values(seed + 1, (*lead, in2), dtype)
    w = _values(seed + 2, (out, in1, in2), dtype)
    bb = _values(seed + 3, (out,), dtype) if bias else None
    compare(
        lambda lib, x, y, wt, bt: lib.nn.functional.bilinear(x, y, wt, bt),
        [a, b, w, bb],
        [True, True, True, True],
        dtype,
        terms=in1 * in2,
    )


@pytest.mark.parametrize(
    "name,shape",
    [
        ("dropout1d", (8, 50, 4)),
        ("dropout2d", (8, 50, 2, 2)),
        ("dropout3d", (8, 50, 2, 1, 2)),
        ("feature_alpha_dropout", (8, 50, 3)),
    ],
)
def test_channel_dropout_masks_whole_channels(name, shape):
    fn = getattr(F, name)
    x = gs.ones(*shape, dtype=gs.float64)
    y = fn(x, 0.4, training=True).numpy()
    flat = y.reshape(shape[0], shape[1], -1)
    assert (flat == flat[..., :1]).all()  # one value per (sample, channel)
    kept = np.isclose(flat[..., 0], flat.max())
    assert 0.45 < kept.mean() < 0.75
    if name != "feature_alpha_dropout":
        np.testing.assert_allclose(flat[kept], 1 / 0.6)
    assert fn(x, 0.4, training=False) is x
    with pytest.raises(ValueError):
        fn(x, 1.5)


def test_alpha_dropout_keeps_moments():
    x = gs.randn(200000, dtype=gs.float64)
    y = F.alpha_dropout(x, 0.2, training=True).numpy()
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1.0) < 0.02
    assert F.alpha_dropout(x, 0.2) is x  # training defaults to False


@SETTINGS
@given(
    n=st.integers(1, 4), c=st.integers(1, 5), dtype=dtypes, seed=seeds,
    reduction=st.sampled_from(REDUCTIONS), batched=st.booleans(),
)  # fmt: skip
def test_multilabel_margin_loss(n, c, dtype, seed, reduction, batched):
    rng = np.random.default_rng(seed)
    # Class lists ending at a -1 (or filling the row), with repeats and junk after the -1.
    target = rng.integers(-1, c, (n, c))
    x = _values(seed, (n, c), dtype, scale=0.7)
    if not batched:
        x, target = x[0], target[0]
    compare(
        lambda lib, a, b: lib.nn.functional.multilabel_margin_loss(a, b, reduction=reduction),
        [x, target],
        [True, False],
        dtype,
        terms=c * c,
    )


def test_multilabel_margin_loss_errors():
    for lib in (gs, torch):
        with pytest.raises(RuntimeError):
            lib.nn.functional.multilabel_margin_loss(lib.ones(1, 4), lib.tensor([[0, 5, -1, 1]]))
        with pytest.raises(ValueError):
            lib.nn.functional.multilabel_margin_loss(
                lib.ones(1, 4), lib.tensor([[0, 1, -1, 1]]), reduction="bad"
            )


@SETTINGS
@given(
    n=st.integers(0, 2), c=st.integers(1, 6), spatial=st.lists(st.integers(1, 3), min_size=1,
    max_size=3), size=st.integers(1, 5), dtype=dtypes, seed=seeds,
    alpha=st.sampled_from([1e-4, 0.5]), beta=st.sampled_from([0.75, 1.5]),
)  # fmt: skip
def test_local_response_norm(n, c, spatial, size, dtype, seed, alpha, beta):
    x = _values(seed, (n, c, *spatial), dtype)
    compare(
        lambda lib, t: lib.nn.functional.local_response_norm(t, size, alpha, beta, 2.0),
        [x],
        [True],
        dtype,
        terms=size,
    )


def test_local_response_norm_errors():
    for lib in (gs, torch):
        with pytest.raises(ValueError, match="3D or higher"):
            lib.nn.functional.local_response_norm(lib.ones(2, 3), 2)


@SETTINGS
@given(
    n=st.integers(1, 3), spatial=st.lists(st.integers(1, 4), min_size=2, max_size=3),
    align=st.booleans(), dtype=dtypes, seed=seeds,
)  # fmt: skip
def test_affine_grid(n, spatial, align, dtype, seed):
    k = len(spatial)
    theta = _values(seed, (n, k, k + 1), dtype, scale=1.0)
    size = [n, 2, *spatial]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compare(
            lambda lib, t: lib.nn.functional.affine_grid(t, size, align_corners=align),
            [theta],
            [True],
            dtype,
            terms=k + 1,
        )
    # Both libraries warn about unit-size grids with align_corners=True, or neither does.
    unit = [w for w in caught if "unit-size grids" in str(w.message)]
    assert len(unit) == (2 if align and min(spatial) == 1 else 0)


def test_affine_grid_errors_and_warning():
    for lib in (gs, torch):
        f = lib.nn.functional
        with pytest.warns(UserWarning, match="align_corners"):
            f.affine_grid(lib.ones(1, 2, 3), [1, 1, 2, 2])
        with pytest.raises(ValueError, match="affine matrices"):
            f.affine_grid(lib.ones(1, 3, 4), [1, 1, 2, 2], align_corners=False)
        with pytest.raises(NotImplementedError):
            f.affine_grid(lib.ones(1, 2, 3), [1, 1, 2], align_corners=False)


@SETTINGS
@given(
    bags=st.lists(st.lists(st.integers(0, 5), max_size=4), min_size=1, max_size=4),
    mode=st.sampled_from(["sum", "mean", "max"]), padding=st.sampled_from([None, 2, -1]),
    weighted=st.booleans(), last=st.booleans(), dtype=dtypes, seed=seeds,
)  # fmt: skip
def test_embedding_bag_offsets(bags, mode, padding, weighted, last, dtype, seed):
    flat = np.array([i for b in bags for i in b], dtype=np.int64)
    offsets = np.cumsum([0] + [len(b) for b in bags])
    offsets = offsets if last else offsets[:-1]
    w = _values(seed, (6, 3), dtype)
    psw = _unit(seed + 1, flat.shape, dtype) if weighted and mode == "sum" else None

    def fn(lib, weight, x, off, p):
        return lib.nn.functional.embedding_bag(
            x,
            weight,
            off,
            mode=mode,
            per_sample_weights=p,
            include_last_offset=last,
            padding_idx=padding,
        )

    compare(fn, [w, flat, offsets, psw], [True, False, False, True], dtype, terms=4)


@SETTINGS
@given(b=st.integers(1, 3), n=st.integers(1, 4), mode=st.sampled_from(["sum", "mean", "max"]),
       seed=seeds)  # fmt: skip
def test_embedding_bag_2d(b, n, mode, seed):
    idx = np.random.default_rng(seed).integers(0, 5, (b, n))
    w = _values(seed, (5, 4), np.float64)
    compare(lambda lib, weight, x: lib.nn.functional.embedding_bag(x, weight, mode=mode),
            [w, idx], [True, False], np.float64)  # fmt: skip


def test_embedding_bag_errors():
    for lib in (gs, torch):
        f, w = lib.nn.functional, lib.ones(5, 3)
        with pytest.raises(ValueError, match="offsets has to be None"):
            f.embedding_bag(lib.tensor([[1, 2]]), w, lib.tensor([0]))
        with pytest.raises(ValueError, match="offsets has to be a 1D Tensor"):
            f.embedding_bag(lib.tensor([1, 2]), w)
        with pytest.raises(RuntimeError, match="offsets"):
            f.embedding_bag(lib.tensor([1, 2, 3]), w, lib.tensor([1, 2]))
        with pytest.raises(NotImplementedError, match="per_sample_weights"):
            f.embedding_bag(lib.tensor([1, 2]), w, lib.tensor([0]), per_sample_weights=lib.ones(2))


@SETTINGS
@given(
    n=st.integers(1, 3), c=st.integers(1, 3), spatial=st.lists(st.integers(1, 4), min_size=1,
    max_size=3), dtype=dtypes, seed=seeds, affine=st.booleans(), running=st.booleans(),
)  # fmt: skip
def test_instance_norm(n, c, spatial, dtype, seed, affine, running):
    if math.prod(spatial) < 3:
        spatial = [3] + spatial[1:]  # one or two values: the true gradient is 0 (noise)
    x = _values(seed, (n, c, *spatial), dtype)
    w = _values(seed + 1, (c,), dtype) if affine else None
    b = _values(seed + 2, (c,), dtype) if affine else None
    stats = {}

    def fn(lib, t, wt, bt):
        rm = lib.tensor(_values(seed + 3, (c,), dtype)) if running else None
        rv = lib.tensor(_unit(seed + 4, (c,), dtype)) if running else None
        stats[lib.__name__] = (rm, rv)
        return lib.nn.functional.instance_norm(t, rm, rv, wt, bt, momentum=0.3)

    compare(fn, [x, w, b], [True, True, True], dtype, terms=x.size,
            tol=dict(rtol=2e-4, atol=2e-5) if dtype == np.float32 else None)  # fmt: skip
    if running:  # the running stats are updated in place, as PyTorch's
        for g, t in zip(stats["gradstream"], stats["torch"], strict=True):
            assert_close(g, t, **_tol(dtype))


def test_instance_norm_with_running_stats_only():
    x = _values(0, (2, 3, 4), np.float64)
    rm, rv = _values(1, (3,), np.float64), _unit(2, (3,), np.float64)
    compare(lambda lib, t, m, v: lib.nn.functional.instance_norm(t, m, v, use_input_stats=False),
            [x, rm, rv], [True, False, False], np.float64)  # fmt: skip
    for lib in (gs, torch):
        with pytest.raises(ValueError, match="more than 1 spatial element"):
            lib.nn.functional.instance_norm(lib.ones(2, 3, 1))


def test_kl_div_mean_warns_like_torch():
    for lib in (gs, torch):
        with pytest.warns(UserWarning, match="batchmean"):
            lib.nn.functional.kl_div(lib.zeros(2, 3), lib.ones(2, 3) * 0.3)


@SETTINGS
@given(
    t=st.integers(1, 6), n=st.integers(1, 3), c=st.integers(2, 5), data=st.data(),
    padded=st.booleans(), reduction=st.sampled_from(REDUCTIONS), zero_inf=st.booleans(),
    blank=st.sampled_from([0, -1]), dtype=dtypes, seed=seeds,
)  # fmt: skip
def test_ctc_loss(t, n, c, data, padded, reduction, zero_inf, blank, dtype, seed):
    blank = blank % c
    rng = np.random.default_rng(seed)
    in_lens = [data.draw(st.integers(0 if n > 1 else 1, t)) for _ in range(n)]
    tg_lens = [data.draw(st.integers(0, 3)) for _ in range(n)]
    # Labels other than the blank, with repeats (which need a blank between them).
    labels = [[int(v) for v in (rng.integers(1, c, k) + blank) % c] for k in tg_lens]
    if padded:
        targets = np.zeros((n, max(max(tg_lens), 1)), dtype=np.int64)
        for i, lab in enumerate(labels):
            targets[i, : len(lab)] = lab
    else:
        targets = np.array([v for lab in labels for v in lab], dtype=np.int64)
    logits = _values(seed, (t, n, c), dtype, scale=1.5)

    def fn(lib, x, tg):
        lp = x.log_softmax(2)
        return lib.nn.functional.ctc_loss(lp, tg, in_lens, tg_lens, blank, reduction, zero_inf)

    out = fn(torch, torch.tensor(logits), torch.tensor(targets))
    # PyTorch's gradient of an infinite (impossible) loss is NaN: compare values only there.
    finite = bool(torch.isfinite(out).all())
    compare(fn, [logits, targets], [finite, False], dtype, terms=4 * t,
            tol=dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else None)  # fmt: skip


def test_ctc_loss_unbatched_and_gradcheck():
    x = gs.tensor(np.random.default_rng(0).standard_normal((5, 4)), requires_grad=True)
    tg = gs.tensor([1, 2, 2])

    def f(a):
        return F.ctc_loss(a.log_softmax(1), tg, [5], [3], reduction="sum")

    assert gradcheck(f, (x,))
    compare(lambda lib, a, b: lib.nn.functional.ctc_loss(a.log_softmax(1), b, [5], [3]),
            [x.detach().numpy(), tg.numpy()], [True, False], np.float64)  # fmt: skip
