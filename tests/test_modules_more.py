"""The `nn` modules that wrap the composite functional ops, and `ParameterList` /
`ParameterDict`, against PyTorch: repr, forward values, input and parameter gradients."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import assert_close  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn as nn  # noqa: E402


def _x(*shape, seed=0, scale=2.0):
    return np.random.default_rng(seed).standard_normal(shape) * scale


def _pm1(*shape):
    return np.sign(_x(*shape, seed=9)) + (_x(*shape, seed=9) == 0)


def _unit(*shape, seed=3):
    return np.random.default_rng(seed).uniform(0.05, 0.95, shape)


# class name, constructor args, constructor kwargs, inputs (arrays; the float ones that
# are listed in `grad` get gradients)
MODULES = [
    ("LeakyReLU", (), {}, [_x(3, 4)]),
    ("LeakyReLU", (0.2, True), {}, [_x(3, 4)]),
    ("ELU", (), {"alpha": 0.7}, [_x(3, 4)]),
    ("SELU", (), {}, [_x(3, 4)]),
    ("CELU", (1.5,), {}, [_x(3, 4)]),
    ("ReLU6", (), {}, [_x(3, 4) * 4]),
    ("Hardtanh", (-0.5, 2.0), {}, [_x(3, 4)]),
    ("Hardsigmoid", (), {}, [_x(3, 4)]),
    ("Hardswish", (), {}, [_x(3, 4)]),
    ("Mish", (), {}, [_x(3, 4)]),
    ("LogSigmoid", (), {}, [_x(3, 4)]),
    ("Softsign", (), {}, [_x(3, 4)]),
    ("Tanhshrink", (), {}, [_x(3, 4)]),
    ("Softshrink", (0.3,), {}, [_x(3, 4)]),
    ("Hardshrink", (), {"lambd": 0.8}, [_x(3, 4)]),
    ("GLU", (0,), {}, [_x(4, 3)]),
    ("Softmin", (), {"dim": 1}, [_x(3, 4)]),
    ("Softmax2d", (), {}, [_x(2, 3, 2, 2)]),
    ("PReLU", (3,), {"init": 0.1}, [_x(2, 3, 4)]),
    ("RReLU", (0.1, 0.2), {}, [_x(3, 4)]),  # eval mode below: the mean slope
    ("L1Loss", (), {"reduction": "sum"}, [_x(3, 4), _x(3, 4, seed=1)]),
    ("HuberLoss", (), {"delta": 0.5}, [_x(3, 4), _x(3, 4, seed=1)]),
    ("KLDivLoss", (), {"reduction": "batchmean"}, [_x(3, 4), _unit(3, 4)]),
    ("KLDivLoss", (), {"log_target": True, "reduction": "sum"}, [_x(3, 4), _x(3, 4, seed=1)]),
    ("PoissonNLLLoss", (), {"full": True}, [_x(3, 4), _unit(3, 4) * 5]),
    ("GaussianNLLLoss", (), {"full": True}, [_x(3, 4), _x(3, 4, seed=1), _unit(3, 4)]),
    ("MarginRankingLoss", (0.2,), {}, [_x(5), _x(5, seed=1), _pm1(5)]),
    ("HingeEmbeddingLoss", (), {"margin": 2.0}, [_x(3, 4), _pm1(3, 4)]),
    ("SoftMarginLoss", (), {}, [_x(3, 4), _pm1(3, 4)]),
    ("CosineEmbeddingLoss", (0.1,), {}, [_x(3, 4), _x(3, 4, seed=1), _pm1(3)]),
    ("TripletMarginLoss", (), {"p": 1.0, "swap": True},
     [_x(3, 4), _x(3, 4, seed=1), _x(3, 4, seed=2)]),
    ("TripletMarginWithDistanceLoss", (), {"margin": 0.5},
     [_x(3, 4), _x(3, 4, seed=1), _x(3, 4, seed=2)]),
    ("MultiLabelSoftMarginLoss", (), {}, [_x(3, 4), (_unit(3, 4) > 0.5) * 1.0]),
    ("MultiMarginLoss", (), {"p": 2, "margin": 0.5}, [_x(3, 4), np.array([0, 3, 1])]),
    ("CosineSimilarity", (), {"dim": 0}, [_x(3, 4), _x(3, 4, seed=1)]),
    ("PairwiseDistance", (), {"p": 3.0, "keepdim": True}, [_x(3, 4), _x(3, 4, seed=1)]),
    ("ConstantPad1d", ((1, 2), 3.5), {}, [_x(2, 3)]),
    ("ConstantPad2d", (1, -1.0), {}, [_x(2, 3, 3)]),
    ("ConstantPad3d", ((1, 0, 0, 1, 2, 0), 0.5), {}, [_x(1, 2, 2, 2)]),
    ("ZeroPad1d", (2,), {}, [_x(2, 3)]),
    ("ZeroPad2d", ((1, 0, 2, -1),), {}, [_x(2, 3, 3)]),
    ("ZeroPad3d", (1,), {}, [_x(1, 2, 2, 2)]),
    ("ReflectionPad1d", ((2, 1),), {}, [_x(2, 3, 4)]),
    ("ReflectionPad2d", (1,), {}, [_x(2, 3, 3)]),
    ("ReflectionPad3d", (1,), {}, [_x(1, 2, 2, 3, 2)]),
    ("ReplicationPad1d", (3,), {}, [_x(2, 3)]),
    ("ReplicationPad2d", ((0, 1, 2, 3),), {}, [_x(1, 2, 3, 3)]),
    ("ReplicationPad3d", (2,), {}, [_x(2, 2, 2, 2)]),
    ("CircularPad1d", ((1, 2),), {}, [_x(2, 3, 4)]),
    ("CircularPad2d", (1,), {}, [_x(2, 3, 3)]),
    ("CircularPad3d", (1,), {}, [_x(1, 1, 2, 2, 2)]),
    ("PixelShuffle", (2,), {}, [_x(1, 8, 2, 3)]),
    ("PixelUnshuffle", (2,), {}, [_x(1, 2, 4, 2)]),
    ("ChannelShuffle", (2,), {}, [_x(2, 4, 3)]),
    ("Flatten", (), {}, [_x(2, 3, 4)]),
    ("Flatten", (0, 1), {}, [_x(2, 3, 4)]),
    ("Unflatten", (1, (2, 3)), {}, [_x(4, 6)]),
    ("RMSNorm", ([3, 4],), {"eps": 1e-3}, [_x(2, 3, 4)]),
    ("RMSNorm", (4,), {"elementwise_affine": False}, [_x(2, 3, 4)]),
    ("GroupNorm", (2, 4), {}, [_x(3, 4, 5)]),
    ("GroupNorm", (4, 4), {"affine": False, "eps": 1e-3}, [_x(3, 4, 5)]),
    ("GroupNorm", (1, 4), {"bias": False}, [_x(3, 4, 5)]),
    ("Bilinear", (3, 2, 4), {}, [_x(5, 3), _x(5, 2, seed=1)]),
    ("Bilinear", (3, 2, 4), {"bias": False}, [_x(5, 3), _x(5, 2, seed=1)]),
    ("Dropout1d", (0.3,), {}, [_x(2, 3, 4)]),  # eval mode: the identity
    ("AlphaDropout", (), {"p": 0.2}, [_x(2, 3, 4)]),
    ("LocalResponseNorm", (3,), {"alpha": 0.1}, [_x(2, 5, 3)]),
    ("InstanceNorm1d", (3,), {}, [_x(2, 3, 5)]),
    ("InstanceNorm1d", (3,), {"affine": True}, [_x(3, 5)]),
    ("InstanceNorm2d", (2,), {"affine": True, "track_running_stats": True}, [_x(2, 2, 3, 3)]),
    ("InstanceNorm3d", (2,), {"eps": 1e-3, "momentum": None}, [_x(1, 2, 2, 3, 2)]),
    ("EmbeddingBag", (6, 3), {"mode": "sum", "padding_idx": 0},
     [np.array([1, 0, 3, 5, 2]), np.array([0, 2, 2])]),
    ("EmbeddingBag", (6, 3), {"mode": "max"}, [np.array([[1, 0], [3, 5]])]),
    ("MultiLabelMarginLoss", (), {}, [_x(2, 4), np.array([[3, 0, -1, 1], [1, 1, 2, 0]])]),
]  # fmt: skip

# Inputs of each module that are not differentiable (targets).
NO_GRAD_INPUTS = {
    "MarginRankingLoss": {2},
    "HingeEmbeddingLoss": {1},
    "SoftMarginLoss": {1},
    "CosineEmbeddingLoss": {2},
    "MultiLabelSoftMarginLoss": {1},
    "MultiMarginLoss": {1},
    "MultiLabelMarginLoss": {1},
}


@pytest.mark.parametrize(
    "name,args,kwargs,arrays", MODULES, ids=[f"{m[0]}-{i}" for i, m in enumerate(MODULES)]
)
def test_module_matches_torch(name, args, kwargs, arrays):
    gm = getattr(nn, name)(*args, **kwargs).double()
    tm = getattr(torch.nn, name)(*args, **kwargs).double()
    assert repr(gm) == repr(tm)
    gm.eval()
    tm.eval()
    sd = tm.state_dict()
    assert sorted(gm.state_dict()) == sorted(sd)
    gm.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in sd.items()})
    skip = NO_GRAD_INPUTS.get(name, set())
    g_in, t_in = [], []
    for i, a in enumerate(arrays):
        grad = a.dtype.kind == "f" and i not in skip
        g_in.append(gs.tensor(a, requires_grad=grad))
        t_in.append(torch.tensor(a, requires_grad=grad))
    # Through a copy, so that the in-place modules do not write into a leaf.
    g_out = gm(*(t * 1 if t.is_floating_point() else t for t in g_in))
    t_out = tm(*(t * 1 if t.is_floating_point() else t for t in t_in))
    # PyTorch's Hardsigmoid/Hardswish backward multiplies by float32 constants.
    tol = dict(rtol=1e-7 if name in ("Hardsigmoid", "Hardswish") else 1e-10, atol=1e-12)
    assert_close(g_out, t_out, **tol)
    if not t_out.requires_grad:
        return
    w = np.random.default_rng(4).standard_normal(tuple(t_out.shape))
    (g_out * gs.tensor(w)).sum().backward()
    (t_out * torch.tensor(w)).sum().backward()
    for g, t in zip(g_in, t_in, strict=True):
        if t.requires_grad:
            assert_close(g.grad, t.grad, **tol)
    g_params = dict(gm.named_parameters())
    for k, p in tm.named_parameters():
        assert_close(g_params[k].grad, p.grad, **tol)


@pytest.mark.parametrize(
    "name,args",
    [
        ("PReLU", ()),
        ("Bilinear", (3, 2, 4)),
        ("RMSNorm", (5,)),
        ("GroupNorm", (2, 6)),
        ("EmbeddingBag", (5, 3)),
    ],
)
def test_parameter_shapes_and_default_init(name, args):
    gm, tm = getattr(nn, name)(*args), getattr(torch.nn, name)(*args)
    g_params = dict(gm.named_parameters())
    t_params = dict(tm.named_parameters())
    assert sorted(g_params) == sorted(t_params)
    for k, p in t_params.items():
        assert tuple(g_params[k].shape) == tuple(p.shape)
        assert g_params[k].dtype == gs.float32
    if name == "Bilinear":
        bound = 1 / np.sqrt(3)
        for p in g_params.values():
            v = p.detach().numpy()
            assert np.abs(v).max() <= bound and v.std() > 0.1 * bound
    elif name == "PReLU":
        np.testing.assert_array_equal(g_params["weight"].detach().numpy(), [0.25])


def test_training_mode_randomness_and_errors():
    x = gs.ones(8, 16, 5)
    m = nn.Dropout1d(0.5)
    y = m(x).numpy()
    assert ((y == 0) | (y == 2)).all() and (y == 0).any() and (y == 2).any()
    assert (y == y[..., :1]).all()
    m.eval()
    assert m(x) is x
    r = nn.RReLU(0.1, 0.3)
    assert r.training
    neg = -gs.ones(1000, dtype=gs.float64)
    slopes = -r(neg).numpy()
    assert 0.1 <= slopes.min() and slopes.max() <= 0.3 and slopes.std() > 0.03
    for lib in (gs, torch):
        with pytest.raises(AssertionError, match="must be greater than min_val"):
            lib.nn.Hardtanh(1.0, -1.0)
        with pytest.raises(ValueError):
            lib.nn.Dropout2d(1.5)
        with pytest.raises(ValueError):
            lib.nn.TripletMarginWithDistanceLoss(margin=0.0)
        with pytest.raises(ValueError):
            lib.nn.MultiMarginLoss(p=3)
        with pytest.raises(ValueError):
            lib.nn.GroupNorm(3, 4)
        with pytest.raises(NotImplementedError):
            lib.nn.ReflectionPad2d(1)(lib.ones(4, 4, 4, 4, 4))
        with pytest.raises(ValueError):
            lib.nn.Softmax2d()(lib.ones(4, 4))


def _describe(lib_repr: str) -> str:
    return lib_repr.replace("gradstream.", "torch.")


def test_parameter_dict_describes_types():
    g = nn.ParameterDict({"x": gs.ones(2, dtype=gs.float64)})
    t = torch.nn.ParameterDict({"x": torch.ones(2, dtype=torch.float64)})
    assert _describe(repr(g)) == repr(t)


def test_parameter_list():
    arrays = [_x(2, 3), _x(3, seed=1)]
    gl = nn.ParameterList([gs.tensor(a) for a in arrays])
    tl = torch.nn.ParameterList([torch.tensor(a) for a in arrays])
    assert _describe(repr(gl)) == repr(tl)
    assert len(gl) == 2 and isinstance(gl[0], nn.Parameter) and gl[0].requires_grad
    assert [k for k, _ in gl.named_parameters()] == [k for k, _ in tl.named_parameters()]
    assert list(gl.state_dict()) == list(tl.state_dict())
    gl.append(nn.Parameter(gs.zeros(4)))
    gl.extend([gs.ones(1)])
    assert len(gl) == 4 and len(list(gl.parameters())) == 4
    assert tuple(gl[-1].shape) == (1,) and tuple(gl[2].shape) == (4,)
    assert [tuple(p.shape) for p in gl[1:3]] == [(3,), (4,)]
    gl[0] = gs.ones(5)
    assert tuple(gl[0].shape) == (5,) and isinstance(gl[0], nn.Parameter)
    with pytest.raises(IndexError):
        gl[4]
    with pytest.raises(TypeError):
        gl.extend(gs.ones(2))
    # Parameters reach an optimizer through the owning module.
    owner = nn.Module()
    owner.ps = gl
    assert len(list(owner.parameters())) == 4


def test_parameter_dict():
    g = nn.ParameterDict({"b": gs.ones(2), "a": gs.zeros(3)})
    t = torch.nn.ParameterDict({"b": torch.ones(2), "a": torch.zeros(3)})
    assert _describe(repr(g)) == repr(t)
    assert list(g.keys()) == list(t.keys())
    assert list(g.state_dict()) == list(t.state_dict())
    assert "a" in g and len(g) == 2 and isinstance(g["a"], nn.Parameter)
    g["c"] = nn.Parameter(gs.ones(1))
    g.update([("d", gs.ones(4))])
    assert list(g) == ["a", "b", "c", "d"]
    assert len(list(g.parameters())) == 4
    assert tuple(g.pop("d").shape) == (4,) and "d" not in g
    assert g.get("zz") is None and g.get("c") is g["c"]
    del g["c"]
    assert list(g.keys()) == ["a", "b"] and len(list(g.parameters())) == 2
    assert [k for k, _ in g.items()] == ["a", "b"]
    g.clear()
    assert len(g) == 0 and not list(g.parameters())
    with pytest.raises(TypeError):
        g[1] = gs.ones(1)


def test_nll_loss_2d_is_a_deprecated_nll_loss():
    with pytest.warns(FutureWarning, match="NLLLoss2d` has been deprecated"):
        g = nn.NLLLoss2d(ignore_index=1)
    x = _x(2, 3, 2, 2)
    y = np.array([[[0, 1], [2, 1]], [[1, 1], [0, 2]]])
    with pytest.warns(FutureWarning):
        t = torch.nn.NLLLoss2d(ignore_index=1)
    assert_close(g(gs.tensor(x), gs.tensor(y)), t(torch.tensor(x), torch.tensor(y)))


def test_buffer_assignment_registers_a_buffer():
    for lib in (gs, torch):
        m = lib.nn.Module()
        m.w = lib.nn.Parameter(lib.ones(1))
        m.a = lib.nn.Buffer(lib.ones(2))
        m.b = lib.nn.Buffer(lib.zeros(3), persistent=False)
        assert isinstance(m.a, lib.nn.Buffer) and not isinstance(lib.ones(1), lib.nn.Buffer)
        assert list(m.state_dict()) == ["w", "a"]
        assert [k for k, _ in m.named_buffers()] == ["a", "b"]
        # A plain tensor assigned to a buffer's name replaces the buffer.
        m.a = lib.ones(4)
        assert tuple(m.a.shape) == (4,) and "a" in dict(m.named_buffers())
        # A parameter's name takes only a Parameter (or None).
        with pytest.raises(TypeError, match="as parameter 'w'"):
            m.w = lib.nn.Buffer(lib.ones(5))
        g = lib.ones(2, requires_grad=True)
        assert lib.nn.Buffer(g).requires_grad and lib.nn.Buffer(g).grad_fn is None


@pytest.mark.parametrize("momentum", [0.1, None])
def test_instance_norm_running_stats_in_training(momentum):
    kw = dict(affine=True, track_running_stats=True, momentum=momentum)
    gm, tm = nn.InstanceNorm2d(3, **kw).double(), torch.nn.InstanceNorm2d(3, **kw).double()
    assert sorted(gm.state_dict()) == sorted(tm.state_dict())
    for seed in range(3):
        x = _x(2, 3, 4, 4, seed=seed)
        assert_close(gm(gs.tensor(x)), tm(torch.tensor(x)), rtol=1e-10, atol=1e-12)
    assert_close(gm.running_mean, tm.running_mean, rtol=1e-10, atol=1e-12)
    assert_close(gm.running_var, tm.running_var, rtol=1e-10, atol=1e-12)
    gm.eval()
    tm.eval()
    x = _x(2, 3, 4, 4, seed=9)
    assert_close(gm(gs.tensor(x)), tm(torch.tensor(x)), rtol=1e-10, atol=1e-12)
    for lib in (gs, torch):
        with pytest.raises(ValueError, match="expected 3D or 4D input"):
            lib.nn.InstanceNorm2d(3)(lib.ones(2, 3))
        with pytest.raises(ValueError, match="to match num_features"):
            lib.nn.InstanceNorm1d(4, affine=True)(lib.ones(2, 3, 5))
        with pytest.warns(UserWarning, match="does not match num_features"):
            lib.nn.InstanceNorm1d(4)(lib.ones(2, 3, 5))


def test_ctc_loss_module():
    x = np.log(_unit(6, 2, 4))
    targets = np.array([[1, 2], [3, 3]])
    g = nn.CTCLoss(blank=0, zero_infinity=True)
    t = torch.nn.CTCLoss(blank=0, zero_infinity=True)
    assert repr(g) == repr(t)
    args = ([6, 5], [2, 2])
    assert_close(g(gs.tensor(x), gs.tensor(targets), *args),
                 t(torch.tensor(x), torch.tensor(targets), *args), rtol=1e-10)  # fmt: skip
