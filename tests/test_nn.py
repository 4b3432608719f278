"""gradstream.nn against torch.nn: the same weights (through state_dict) give the same
outputs and gradients; Module's API and errors behave like PyTorch's."""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import assert_close, to_numpy, to_torch

import gradstream as gs
import gradstream.nn.functional as F


def pair(arr, requires_grad=True):
    """The same data as a gradstream and a torch leaf."""
    import torch

    arr = np.asarray(arr)
    return gs.tensor(arr, requires_grad=requires_grad), torch.tensor(
        arr, requires_grad=requires_grad
    )


def check_grads(gs_model, t_model, rtol=1e-5, atol=1e-6):
    for (n, p), (tn, tp) in zip(
        gs_model.named_parameters(), t_model.named_parameters(), strict=True
    ):
        assert n == tn
        assert_close(p.grad, tp.grad, rtol=rtol, atol=atol)


def build_both(torch, make):
    gs.manual_seed(0)
    g, t = make(gs), make(torch)
    t.load_state_dict(gs.utils.to_torch_state_dict(g.state_dict()))
    return g, t


# ---- module parity: forward and backward with copied weights ----

MODELS = [
    lambda nn: nn.Linear(5, 3),
    lambda nn: nn.Linear(5, 3, bias=False),
    lambda nn: nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 3), nn.Sigmoid()),
    lambda nn: nn.Sequential(nn.Linear(5, 8), nn.GELU(), nn.LayerNorm(8), nn.Linear(8, 3)),
    lambda nn: nn.Sequential(nn.Linear(5, 8), nn.GELU("tanh"), nn.SiLU(), nn.Linear(8, 3)),
    lambda nn: nn.Sequential(nn.Linear(5, 6), nn.Softplus(beta=2.0), nn.Tanh(), nn.Identity()),
    lambda nn: nn.Sequential(nn.LayerNorm(5, elementwise_affine=False), nn.Linear(5, 2)),
    lambda nn: nn.Sequential(nn.Linear(5, 4), nn.Dropout(0.3)).eval(),
]


@pytest.mark.parametrize("make", MODELS)
def test_module_forward_backward_matches_torch(torch_ref, make):
    g, t = build_both(torch_ref, lambda lib: make(lib.nn))
    x = np.random.randn(4, 5).astype(np.float32) * 2
    gx, tx = pair(x)
    gy, ty = g(gx), t(tx)
    assert_close(gy, ty)
    w = np.random.randn(*ty.shape).astype(np.float32)
    (gy * gs.tensor(w)).sum().backward()
    (ty * torch_ref.tensor(w)).sum().backward()
    check_grads(g, t)
    assert_close(gx.grad, tx.grad)


def test_layernorm_multi_dim_and_batched(torch_ref):
    g, t = build_both(torch_ref, lambda lib: lib.nn.LayerNorm((3, 4), eps=1e-3))
    with gs.no_grad():
        g.weight.copy_(gs.randn(3, 4))
        g.bias.copy_(gs.randn(3, 4))
    t.load_state_dict(gs.utils.to_torch_state_dict(g.state_dict()))
    gx, tx = pair(np.random.randn(2, 5, 3, 4).astype(np.float32))
    gy, ty = g(gx), t(tx)
    assert_close(gy, ty, atol=1e-5)
    (gy * gy).sum().backward()
    (ty * ty).sum().backward()
    check_grads(g, t, atol=1e-4)
    assert_close(gx.grad, tx.grad, atol=1e-4)


def test_embedding_matches_torch(torch_ref):
    g, t = build_both(torch_ref, lambda lib: lib.nn.Embedding(10, 4, padding_idx=2))
    assert np.all(to_numpy(g.weight)[2] == 0)
    idx = np.array([[1, 2, 3], [3, 9, 0]])
    gy, ty = g(gs.tensor(idx)), t(torch_ref.tensor(idx))
    assert_close(gy, ty)
    (gy * gy).sum().backward()
    (ty * ty).sum().backward()
    check_grads(g, t)
    assert np.all(to_numpy(g.weight.grad)[2] == 0)


def test_load_torch_state_dict_through_numpy(torch_ref):
    torch = torch_ref
    t = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4), torch.nn.Linear(4, 2))
    g = gs.nn.Sequential(gs.nn.Linear(3, 4), gs.nn.LayerNorm(4), gs.nn.Linear(4, 2))
    res = g.load_state_dict({k: gs.tensor(v.numpy()) for k, v in t.state_dict().items()})
    assert res.missing_keys == [] and res.unexpected_keys == []
    assert list(g.state_dict()) == list(t.state_dict())
    x = np.random.randn(2, 3).astype(np.float32)
    assert_close(g(gs.tensor(x)), t(torch.tensor(x)))
    # torch tensors and NumPy arrays are accepted directly too
    g.load_state_dict(t.state_dict())
    g.load_state_dict({k: v.numpy() for k, v in t.state_dict().items()})
    back = gs.utils.to_torch_state_dict(g.state_dict())
    for k, v in t.state_dict().items():
        assert torch.equal(back[k], v)


# ---- functional parity ----


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("log", [False, True])
def test_softmax(torch_ref, dim, log):
    x = np.random.randn(3, 4, 5).astype(np.float32) * 3
    gx, tx = pair(x)
    gf, tf = (F.log_softmax, torch_ref.log_softmax) if log else (F.softmax, torch_ref.softmax)
    gy, ty = gf(gx.transpose(0, 2), dim), tf(tx.transpose(0, 2), dim)  # non-contiguous input
    assert_close(gy, ty)
    w = np.random.randn(*ty.shape).astype(np.float32)
    (gy * gs.tensor(w)).sum().backward()
    (ty * torch_ref.tensor(w)).sum().backward()
    assert_close(gx.grad, tx.grad)


def test_softmax_extremes_and_0d(torch_ref):
    x = np.array([[1000.0, 0.0, -1000.0], [-np.inf, 0.0, 1.0]], dtype=np.float32)
    assert_close(F.softmax(gs.tensor(x), 1), torch_ref.softmax(torch_ref.tensor(x), 1))
    assert_close(F.log_softmax(gs.tensor(x), 1), torch_ref.log_softmax(torch_ref.tensor(x), 1))
    assert F.softmax(gs.tensor(2.0), 0).item() == 1.0
    assert tuple(F.softmax(gs.zeros(0, 3), 1).shape) == (0, 3)


@pytest.mark.parametrize(
    "name,kwargs",
    [
        ("sigmoid", {}),
        ("tanh", {}),
        ("relu", {}),
        ("silu", {}),
        ("gelu", {}),
        ("gelu", {"approximate": "tanh"}),
        ("softplus", {}),
        ("softplus", {"beta": 0.5}),
    ],
)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_activations(torch_ref, name, kwargs, dtype):
    x = (np.random.randn(6, 7) * 4).astype(dtype)
    x[0, :3] = [-100.0, 100.0, 0.0]
    gx, tx = pair(x)
    gy = getattr(F, name)(gx, **kwargs)
    ty = getattr(torch_ref.nn.functional, name)(tx, **kwargs)
    assert_close(gy, ty, rtol=1e-5, atol=1e-6)
    gy.sum().backward()
    ty.sum().backward()
    assert_close(gx.grad, tx.grad, rtol=1e-5, atol=1e-6)


def test_fused_ops_gradcheck():
    from gradstream.autograd import gradcheck

    x = gs.tensor(np.random.randn(3, 4), requires_grad=True)
    w = gs.tensor(np.random.randn(4), requires_grad=True)
    b = gs.tensor(np.random.randn(4), requires_grad=True)
    assert gradcheck(lambda t: F.softmax(t, 1), (x,))
    assert gradcheck(lambda t: F.log_softmax(t, 0), (x,))
    assert gradcheck(lambda t: F.sigmoid(t), (x,))
    assert gradcheck(lambda t: F.silu(t), (x,))
    assert gradcheck(lambda t: F.gelu(t), (x,))
    assert gradcheck(lambda t, w_, b_: F.layer_norm(t, (4,), w_, b_), (x, w, b))
    emb = gs.tensor(np.random.randn(5, 3), requires_grad=True)
    assert gradcheck(lambda e: F.embedding(gs.tensor([[0, 4], [4, 1]]), e), (emb,))
    assert gradcheck(lambda t: F.cross_entropy(t, gs.tensor([1, 0, 3])), (x,))


def test_double_backward_through_softmax_and_layer_norm(torch_ref):
    torch = torch_ref
    x = np.random.randn(3, 4)
    for gf, tf in [
        (lambda t: F.softmax(t, 1), lambda t: torch.softmax(t, 1)),
        (lambda t: F.layer_norm(t, (4,)), lambda t: torch.nn.functional.layer_norm(t, (4,))),
    ]:
        gx, tx = pair(x)
        gy, ty = gf(gx), tf(tx)
        (gg,) = gs.autograd.grad((gy * gy * gy).sum(), gx, create_graph=True)
        (tg,) = torch.autograd.grad((ty * ty * ty).sum(), tx, create_graph=True)
        (gg * gg).sum().backward()
        (tg * tg).sum().backward()
        assert_close(gx.grad, tx.grad, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_regression_losses(torch_ref, reduction):
    a, b = np.random.randn(4, 5).astype(np.float32), np.random.randn(4, 5).astype(np.float32)
    cases = [("mse_loss", {}), ("l1_loss", {}), ("smooth_l1_loss", {})]
    cases += [("smooth_l1_loss", {"beta": 0.5}), ("smooth_l1_loss", {"beta": 0.0})]
    for name, kw in cases:
        ga, ta = pair(a)
        gb, tb = pair(b)
        gl = getattr(F, name)(ga, gb, reduction=reduction, **kw)
        tl = getattr(torch_ref.nn.functional, name)(ta, tb, reduction=reduction, **kw)
        assert_close(gl, tl)
        gl.sum().backward()
        tl.sum().backward()
        assert_close(ga.grad, ta.grad)
        assert_close(gb.grad, tb.grad)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"label_smoothing": 0.1},
        {"ignore_index": 1},
        {"weight": [0.5, 1.0, 2.0, 0.1]},
        {"weight": [0.5, 1.0, 2.0, 0.1], "label_smoothing": 0.2, "ignore_index": 0},
    ],
)
def test_cross_entropy_and_nll(torch_ref, reduction, kw):
    torch = torch_ref
    x = np.random.randn(6, 4).astype(np.float32)
    tgt = np.array([0, 1, 3, 2, 1, 0])
    gkw = {k: (gs.tensor(v) if k == "weight" else v) for k, v in kw.items()}
    tkw = {k: (torch.tensor(v) if k == "weight" else v) for k, v in kw.items()}
    gx, tx = pair(x)
    gl = F.cross_entropy(gx, gs.tensor(tgt), reduction=reduction, **gkw)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(tgt), reduction=reduction, **tkw)
    assert_close(gl, tl)
    gl.sum().backward()
    tl.sum().backward()
    assert_close(gx.grad, tx.grad)
    if "label_smoothing" not in kw:
        gx2, tx2 = pair(x)
        gn = F.nll_loss(F.log_softmax(gx2, 1), gs.tensor(tgt), reduction=reduction, **gkw)
        tn = torch.nn.functional.nll_loss(
            torch.log_softmax(tx2, 1), torch.tensor(tgt), reduction=reduction, **tkw
        )
        assert_close(gn, tn)


def test_cross_entropy_spatial_and_probabilities(torch_ref):
    torch = torch_ref
    x = np.random.randn(2, 3, 4, 5).astype(np.float32)
    tgt = np.random.randint(0, 3, size=(2, 4, 5))
    gx, tx = pair(x)
    module = gs.nn.CrossEntropyLoss(label_smoothing=0.05)
    gl = module(gx, gs.tensor(tgt))
    tl = torch.nn.CrossEntropyLoss(label_smoothing=0.05)(tx, torch.tensor(tgt))
    assert_close(gl, tl)
    gl.backward()
    tl.backward()
    assert_close(gx.grad, tx.grad)
    probs = np.random.rand(4, 3).astype(np.float32)
    probs /= probs.sum(1, keepdims=True)
    gx, tx = pair(np.random.randn(4, 3).astype(np.float32))
    gl = F.cross_entropy(gx, gs.tensor(probs), label_smoothing=0.1)
    tl = torch.nn.functional.cross_entropy(tx, torch.tensor(probs), label_smoothing=0.1)
    assert_close(gl, tl)
    gl.backward()
    tl.backward()
    assert_close(gx.grad, tx.grad)
    # 1-D input with a 0-d target
    g1 = F.cross_entropy(gs.tensor([0.5, 1.0, -1.0]), gs.tensor(2))
    t1 = torch.nn.functional.cross_entropy(torch.tensor([0.5, 1.0, -1.0]), torch.tensor(2))
    assert g1.item() == pytest.approx(t1.item(), rel=1e-6)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_binary_cross_entropy(torch_ref, reduction):
    torch = torch_ref
    logits = np.random.randn(5, 3).astype(np.float32) * 3
    target = (np.random.rand(5, 3) > 0.5).astype(np.float32)
    weight = np.random.rand(5, 3).astype(np.float32)
    pw = np.array([0.5, 1.0, 3.0], dtype=np.float32)
    gx, tx = pair(logits)
    gl = F.binary_cross_entropy_with_logits(
        gx, gs.tensor(target), gs.tensor(weight), reduction=reduction, pos_weight=gs.tensor(pw)
    )
    tl = torch.nn.functional.binary_cross_entropy_with_logits(
        tx, torch.tensor(target), torch.tensor(weight), reduction=reduction,
        pos_weight=torch.tensor(pw),
    )  # fmt: skip
    assert_close(gl, tl)
    gl.sum().backward()
    tl.sum().backward()
    assert_close(gx.grad, tx.grad)
    p = 1 / (1 + np.exp(-logits))
    gp, tp = pair(p)
    gl = F.binary_cross_entropy(gp, gs.tensor(target), reduction=reduction)
    tl = torch.nn.functional.binary_cross_entropy(tp, torch.tensor(target), reduction=reduction)
    assert_close(gl, tl, rtol=1e-5, atol=1e-5)
    gl.sum().backward()
    tl.sum().backward()
    assert_close(gp.grad, tp.grad, rtol=1e-4, atol=1e-5)


def test_normalize(torch_ref):
    x = np.random.randn(4, 6).astype(np.float32)
    for p, dim in [(2, 1), (1, 0), (2, -1)]:
        gx, tx = pair(x)
        gy = F.normalize(gx, p=p, dim=dim)
        ty = torch_ref.nn.functional.normalize(tx, p=p, dim=dim)
        assert_close(gy, ty)
        gy.sum().backward()
        ty.sum().backward()
        assert_close(gx.grad, tx.grad, atol=1e-5)


def test_dropout():
    x = gs.ones(200, 50, requires_grad=True)
    gs.manual_seed(3)
    y = F.dropout(x, 0.25)
    arr = to_numpy(y)
    kept = arr != 0
    assert 0.2 < 1 - kept.mean() < 0.3
    np.testing.assert_allclose(arr[kept], 1 / 0.75, rtol=1e-6)
    y.sum().backward()
    np.testing.assert_array_equal(to_numpy(x.grad) != 0, kept)
    gs.manual_seed(3)
    np.testing.assert_array_equal(to_numpy(F.dropout(x, 0.25)), arr)
    assert F.dropout(x, 0.25, training=False) is x
    d = gs.nn.Dropout(0.5).eval()
    assert d(x) is x
    assert to_numpy(F.dropout(x, 1.0)).max() == 0


# ---- Module API ----


class Net(gs.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = gs.nn.Linear(3, 4)
        self.blocks = gs.nn.ModuleList([gs.nn.Linear(4, 4) for _ in range(2)])
        self.heads = gs.nn.ModuleDict({"a": gs.nn.Linear(4, 1), "b": gs.nn.Identity()})
        self.scale = gs.nn.Parameter(gs.ones(1))
        self.register_buffer("running", gs.zeros(4))
        self.register_buffer("tmp", gs.zeros(2), persistent=False)

    def forward(self, x):
        h = self.fc(x)
        for b in self.blocks:
            h = b(h).relu()
        return self.heads["a"](h) * self.scale


def test_module_registration_and_traversal():
    net = Net()
    names = [n for n, _ in net.named_parameters()]
    expected = ["scale", "fc.weight", "fc.bias", "blocks.0.weight", "blocks.0.bias"]
    expected += ["blocks.1.weight", "blocks.1.bias", "heads.a.weight", "heads.a.bias"]
    assert names == expected
    assert len(list(net.parameters())) == 9
    assert [n for n, _ in net.named_buffers()] == ["running", "tmp"]
    assert list(net.state_dict()) == ["scale", "running"] + names[1:]
    assert [n for n, _ in net.named_children()] == ["fc", "blocks", "heads"]
    mods = [n for n, _ in net.named_modules()]
    assert mods == ["", "fc", "blocks", "blocks.0", "blocks.1", "heads", "heads.a", "heads.b"]
    assert net.get_submodule("blocks.1") is net.blocks[1]
    assert net.get_parameter("heads.a.bias") is net.heads["a"].bias
    assert net.blocks[-1] is net.blocks[1] and len(net.blocks) == 2 and "a" in net.heads
    out = net(gs.randn(2, 3))
    assert tuple(out.shape) == (2, 1)
    assert gs.memory.memory_by_category()["parameter"] > 0


def test_module_repr_matches_torch(torch_ref):
    torch = torch_ref
    for make in [
        lambda nn: nn.Sequential(
            nn.Linear(2, 3),
            nn.ReLU(),
            nn.Dropout(0.1),
            nn.LayerNorm(3),
            nn.GELU(),
            nn.Embedding(5, 2, padding_idx=0),
            nn.Softplus(),
            nn.SiLU(),
            nn.Sigmoid(),
            nn.Tanh(),
            nn.MSELoss(),
            nn.CrossEntropyLoss(),
            nn.Identity(),
        ),  # fmt: skip
        lambda nn: nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU()]),
        lambda nn: nn.ModuleDict({"x": nn.Linear(1, 1, bias=False)}),
    ]:
        assert repr(make(gs.nn)) == repr(make(torch.nn))
    assert repr(gs.nn.Parameter(gs.ones(2))).startswith("Parameter containing:\ntensor(")


def test_train_eval_to_zero_grad_requires_grad():
    net = Net()
    assert net.training and net.fc.training
    net.eval()
    assert not net.training and not net.blocks[0].training
    net.train()
    assert net.heads["a"].training
    with pytest.raises(ValueError, match="boolean"):
        net.train("yes")
    w = net.fc.weight
    net.to(gs.float64)
    assert net.fc.weight is w and w.dtype == gs.float64 and net.running.dtype == gs.float64
    net.float()
    net(gs.randn(2, 3)).sum().backward()
    assert w.grad is not None
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())
    net.requires_grad_(False)
    assert not any(p.requires_grad for p in net.parameters())
    seen = []
    net.apply(lambda m: seen.append(type(m).__name__))
    assert seen[-1] == "Net" and seen[0] == "Linear"


def test_forward_hooks():
    lin = gs.nn.Linear(2, 2)
    calls = []
    h1 = lin.register_forward_pre_hook(lambda m, args: (args[0] * 0,))
    h2 = lin.register_forward_hook(lambda m, args, out: calls.append(out) or out + 1)
    y = lin(gs.ones(1, 2))
    np.testing.assert_allclose(to_numpy(y), to_numpy(lin.bias.detach()).reshape(1, 2) + 1)
    assert len(calls) == 1
    h1.remove()
    h2.remove()
    y2 = lin(gs.ones(1, 2))
    assert len(calls) == 1 and not np.allclose(to_numpy(y2), to_numpy(y))
    kw_hook = lin.register_forward_pre_hook(lambda m, a, k: ((a[0] * 2,), k), with_kwargs=True)
    expected = gs.nn.functional.linear(gs.ones(1, 2) * 2, lin.weight, lin.bias)
    np.testing.assert_allclose(to_numpy(lin(gs.ones(1, 2))), to_numpy(expected), rtol=1e-6)
    kw_hook.remove()


def test_setattr_errors_like_torch(torch_ref):
    torch = torch_ref

    def both(fn, exc):
        for lib in (gs, torch):
            with pytest.raises(exc) as e:
                fn(lib)
            msgs.append(str(e.value))

    msgs: list[str] = []
    both(lambda lib: setattr(lib.nn.Linear(1, 1), "weight", lib.zeros(1, 1)), TypeError)
    assert "cannot assign" in msgs[0] and "'weight'" in msgs[0]
    both(lambda lib: lib.nn.Linear(1, 1).register_buffer("a.b", lib.zeros(1)), KeyError)
    both(lambda lib: lib.nn.Linear(1, 1).register_buffer("weight", lib.zeros(1)), KeyError)
    both(lambda lib: lib.nn.Linear(1, 1).register_buffer("x", 3), TypeError)
    both(lambda lib: lib.nn.Linear(1, 1).register_parameter("x", lib.zeros(1)), TypeError)
    both(lambda lib: lib.nn.Linear(1, 1).nope, AttributeError)
    both(lambda lib: lib.nn.Module()(1), NotImplementedError)

    class Early(gs.nn.Module):
        def __init__(self):
            self.w = gs.nn.Parameter(gs.ones(1))

    with pytest.raises(AttributeError, match="before Module.__init__"):
        Early()
    m = gs.nn.Linear(1, 1)
    m.bias = None
    assert m.bias is None and "bias" in dict(m._parameters)
    m.extra = gs.nn.ReLU()
    assert "extra" in m._modules
    m.extra = None
    assert m.extra is None


def test_load_state_dict_errors_like_torch(torch_ref):
    torch = torch_ref
    for lib in (gs, torch):
        m = lib.nn.Linear(2, 3)
        sd = dict(m.state_dict())
        sd.pop("bias")
        sd["extra"] = lib.zeros(1)
        with pytest.raises(RuntimeError) as e:
            m.load_state_dict(sd)
        msg = str(e.value)
        assert 'Missing key(s) in state_dict: "bias"' in msg
        assert 'Unexpected key(s) in state_dict: "extra"' in msg
        r = m.load_state_dict(sd, strict=False)
        assert r.missing_keys == ["bias"] and r.unexpected_keys == ["extra"]
        with pytest.raises(RuntimeError, match="size mismatch for weight"):
            m.load_state_dict({"weight": lib.zeros(3, 3), "bias": lib.zeros(3)})
    m = gs.nn.Linear(2, 3)
    with pytest.raises(RuntimeError, match="received <class 'str'>"):
        m.load_state_dict({"weight": "x", "bias": gs.zeros(3)})


def test_load_state_dict_pre_hook_like_torch(torch_ref):
    # A hook may rename the keys it is given (a copy: the caller's dict is untouched).
    torch = torch_ref
    seen = {}
    for name, lib in (("gs", gs), ("torch", torch)):
        calls = []

        def rename(
            module, state_dict, prefix, metadata, strict, missing, unexpected, errs, calls=calls
        ):
            calls.append((type(module).__name__, prefix))
            if prefix + "w" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")

        m = lib.nn.Sequential(lib.nn.Linear(2, 3))
        handle = m[0].register_load_state_dict_pre_hook(rename)
        sd = {"0.w": lib.ones(3, 2), "0.bias": lib.zeros(3)}
        m.load_state_dict(sd)
        assert list(sd) == ["0.w", "0.bias"]
        assert m[0].weight.detach().numpy().tolist() == [[1.0, 1.0]] * 3
        handle.remove()
        with pytest.raises(RuntimeError, match="Missing key"):
            m.load_state_dict(sd)
        seen[name] = calls
    assert seen["gs"] == seen["torch"] == [("Linear", "0.")]


def test_functional_bad_input():
    with pytest.raises(RuntimeError, match=r"\(4, 3\).*\(2, 5\)"):
        F.linear(gs.zeros(4, 3), gs.zeros(2, 5))
    with pytest.raises(RuntimeError, match=r"normalized_shape=\[4\].*size\[2, 3\]"):
        F.layer_norm(gs.zeros(2, 3), (4,))
    with pytest.raises(IndexError, match="index 7 out of range.*shape \\[5, 2\\]"):
        F.embedding(gs.tensor([7]), gs.zeros(5, 2))
    with pytest.raises(RuntimeError, match="Long"):
        F.nll_loss(gs.zeros(2, 3), gs.zeros(2))
    with pytest.raises(IndexError, match="target 5 is out of bounds for 3 classes"):
        F.cross_entropy(gs.zeros(2, 3), gs.tensor([0, 5]))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.mse_loss(gs.zeros(2), gs.zeros(2), reduction="avg")
    with pytest.raises(ValueError, match="between 0 and 1, but got 1.5"):
        F.dropout(gs.zeros(2), 1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        gs.nn.Dropout(-0.1)
    with pytest.raises(ValueError, match="target size"):
        F.binary_cross_entropy(gs.zeros(2), gs.zeros(3))
    with pytest.raises(RuntimeError, match="softmax.*not implemented for .int64"):
        F.softmax(gs.tensor([1, 2]), 0)
    with pytest.raises(TypeError, match="must be Tensor"):
        F.sigmoid([1.0])


# ---- init and clipping ----


def test_init_functions(torch_ref):
    torch = torch_ref
    w = gs.empty(300, 200)
    gs.nn.init.kaiming_uniform_(w, a=math.sqrt(5))
    bound = 1 / math.sqrt(200)
    arr = to_numpy(w)
    assert arr.min() >= -bound and arr.max() <= bound and arr.std() > bound / 2
    gs.nn.init.xavier_normal_(w)
    assert to_numpy(w).std() == pytest.approx(math.sqrt(2 / 500), rel=0.05)
    gs.nn.init.kaiming_normal_(w, mode="fan_out", nonlinearity="relu")
    assert to_numpy(w).std() == pytest.approx(math.sqrt(2 / 300), rel=0.05)
    gs.nn.init.xavier_uniform_(w, gain=2.0)
    assert np.abs(to_numpy(w)).max() <= 2 * math.sqrt(6 / 500)
    gs.nn.init.normal_(w, 3.0, 0.5)
    assert to_numpy(w).mean() == pytest.approx(3.0, abs=0.01)
    p = gs.nn.Parameter(gs.empty(3))
    gs.nn.init.zeros_(p)
    assert p.tolist() == [0, 0, 0]
    gs.nn.init.constant_(p, 0.5)
    gs.nn.init.uniform_(gs.nn.init.ones_(gs.empty(2, 2)), -1, 1)
    for nl, param in [("relu", None), ("tanh", None), ("leaky_relu", 0.2), ("selu", None),
                      ("linear", None), ("sigmoid", None)]:  # fmt: skip
        assert gs.nn.init.calculate_gain(nl, param) == pytest.approx(
            torch.nn.init.calculate_gain(nl, param)
        )
    with pytest.raises(ValueError, match="fewer than 2 dimensions"):
        gs.nn.init.xavier_uniform_(gs.empty(3))
    gs.manual_seed(5)
    a = to_numpy(gs.nn.Linear(4, 4).weight)
    gs.manual_seed(5)
    assert np.array_equal(a, to_numpy(gs.nn.Linear(4, 4).weight))


def test_clip_grad(torch_ref):
    torch = torch_ref
    g, t = build_both(
        torch, lambda lib: lib.nn.Sequential(lib.nn.Linear(4, 5), lib.nn.Linear(5, 2))
    )
    x = np.random.randn(3, 4).astype(np.float32)
    for norm_type in (2.0, 1.0, float("inf")):
        g.zero_grad()
        t.zero_grad()
        g(gs.tensor(x)).sum().backward()
        t(torch.tensor(x)).sum().backward()
        gn = gs.nn.utils.clip_grad_norm_(g.parameters(), 0.5, norm_type=norm_type)
        tn = torch.nn.utils.clip_grad_norm_(t.parameters(), 0.5, norm_type=norm_type)
        assert gn.item() == pytest.approx(tn.item(), rel=1e-5)
        check_grads(g, t)
    gs.nn.utils.clip_grad_value_(g.parameters(), 0.01)
    torch.nn.utils.clip_grad_value_(t.parameters(), 0.01)
    check_grads(g, t)
    assert gs.nn.utils.clip_grad_norm_([gs.zeros(2, requires_grad=True)], 1.0).item() == 0.0


def test_parameter_shares_buffer_and_deepcopies():
    import copy

    data = gs.ones(3)
    p = gs.nn.Parameter(data)
    assert p.requires_grad and p.is_leaf and isinstance(p, gs.Tensor)
    with gs.no_grad():
        p.fill_(2.0)
    assert data.tolist() == [2.0, 2.0, 2.0]
    q = copy.deepcopy(p)
    assert isinstance(q, gs.nn.Parameter) and q.requires_grad
    with gs.no_grad():
        q.fill_(5.0)
    assert p.tolist() == [2.0, 2.0, 2.0]
    assert not gs.nn.Parameter(gs.ones(1), requires_grad=False).requires_grad
    assert to_torch(p).shape == (3,)


@pytest.mark.parametrize("shape", [(64, 32), (4, 16, 32), (32,)])
def test_linear_adds_bias_into_the_product_buffer(torch_ref, shape):
    """One output buffer per layer (the bias goes into the product), same values and grads."""
    rng = np.random.default_rng(3)
    x_np = rng.standard_normal(shape).astype(np.float32)
    w_np = rng.standard_normal((24, 32)).astype(np.float32)
    b_np = rng.standard_normal(24).astype(np.float32)
    x, w, b = (gs.tensor(a, requires_grad=True) for a in (x_np, w_np, b_np))
    tx, tw, tb = (to_torch(t) for t in (x, w, b))
    with gs.memory.track() as m:
        out = F.linear(x, w, b)
    assert m.peak_increase == out.numel() * 4
    tout = torch_ref.nn.functional.linear(tx, tw, tb)
    assert_close(out, tout)
    g = rng.standard_normal(tuple(out.shape)).astype(np.float32)
    out.backward(gs.tensor(g))
    tout.backward(torch_ref.from_numpy(g))
    for a, ta in ((x, tx), (w, tw), (b, tb)):
        assert_close(a.grad, ta.grad, rtol=1e-5, atol=1e-5)
