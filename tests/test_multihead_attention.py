"""`nn.MultiheadAttention` against PyTorch's after loading its state_dict: outputs, attention
weights, input and parameter gradients, with masks, batch_first, kdim/vdim and unbatched
input; need_weights=False runs the flash kernel."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import assert_close  # noqa: E402

import gradstream as gs  # noqa: E402
from gradstream import nn  # noqa: E402

TOL = dict(rtol=1e-4, atol=1e-5)


def _modules(e, h, **kw):
    torch.manual_seed(0)
    tm = torch.nn.MultiheadAttention(e, h, **kw)
    gm = nn.MultiheadAttention(e, h, **kw)
    gm.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})
    return gm, tm


def _leaf(arr):
    return gs.tensor(arr, requires_grad=True), torch.tensor(arr, requires_grad=True)


CASES = [
    dict(),
    dict(need_weights=False),
    dict(average_attn_weights=False),
    dict(kpm=True),
    dict(kpm=True, need_weights=False),
    dict(mask="bool"),
    dict(mask="float", need_weights=False),
    dict(mask="3d"),
    dict(mask="causal", is_causal=True, need_weights=False),
    dict(mask="causal", is_causal=True),
    dict(batch_first=True),
    dict(batch_first=True, need_weights=False, kpm=True),
    dict(kdim=5, vdim=3),
    dict(kdim=5, vdim=3, need_weights=False),
    dict(bias=False),
    dict(self_attention=True, need_weights=False),
    dict(unbatched=True),
]


@pytest.mark.parametrize("case", CASES, ids=[str(c) for c in CASES])
def test_matches_torch(case):
    case = dict(case)
    e, h, n, length, s = 8, 2, 3, 6, 7
    mod_kw = {k: case.pop(k) for k in ("batch_first", "kdim", "vdim", "bias") if k in case}
    gm, tm = _modules(e, h, **mod_kw)
    rng = np.random.default_rng(1)
    kdim, vdim = mod_kw.get("kdim", e), mod_kw.get("vdim", e)
    unbatched = case.pop("unbatched", False)
    if case.pop("self_attention", False):
        s = length
    bf = mod_kw.get("batch_first", False)

    def shape(t, d):
        if unbatched:
            return (t, d)
        return (n, t, d) if bf else (t, n, d)

    q = rng.standard_normal(shape(length, e)).astype(np.float32)
    (gq, tq) = _leaf(q)
    if s == length and kdim == e and vdim == e and "kpm" not in case and not unbatched:
        gk, tk, gv, tv = gq, tq, gq, tq
    else:
        gk, tk = _leaf(rng.standard_normal(shape(s, kdim)).astype(np.float32))
        gv, tv = _leaf(rng.standard_normal(shape(s, vdim)).astype(np.float32))
    kw_g, kw_t = {}, {}
    if case.pop("kpm", False):
        kpm = rng.random((n, s)) < 0.3
        kpm[:, 0] = False
        kw_g["key_padding_mask"], kw_t["key_padding_mask"] = gs.tensor(kpm), torch.tensor(kpm)
    mask = case.pop("mask", None)
    if mask is not None:
        if mask == "bool":
            m = rng.random((length, s)) < 0.3
            m[:, 0] = False
        elif mask == "float":
            m = rng.standard_normal((length, s)).astype(np.float32)
        elif mask == "3d":
            m = rng.standard_normal((n * h, length, s)).astype(np.float32)
        else:
            m = np.triu(np.ones((length, s), bool), 1)
        kw_g["attn_mask"], kw_t["attn_mask"] = gs.tensor(m), torch.tensor(m)
    kw_g.update(case)
    kw_t.update(case)
    out_g, w_g = gm(gq, gk, gv, **kw_g)
    out_t, w_t = tm(tq, tk, tv, **kw_t)
    assert_close(out_g, out_t, **TOL)
    if w_t is None:
        assert w_g is None
    else:
        assert_close(w_g, w_t, **TOL)
    g = rng.standard_normal(tuple(out_t.shape)).astype(np.float32)
    (out_g * gs.tensor(g)).sum().backward()
    (out_t * torch.tensor(g)).sum().backward()
    assert_close(gq.grad, tq.grad, **TOL)
    if gk is not gq:
        assert_close(gk.grad, tk.grad, **TOL)
        assert_close(gv.grad, tv.grad, **TOL)
    gp, tp = dict(gm.named_parameters()), dict(tm.named_parameters())
    assert gp.keys() == tp.keys()
    for name, p in tp.items():
        assert_close(gp[name].grad, p.grad, rtol=1e-4, atol=1e-4)


def test_parameters_and_errors_like_torch():
    gm, tm = _modules(8, 2)
    assert [k for k, _ in gm.named_parameters()] == [k for k, _ in tm.named_parameters()]
    with pytest.raises(AssertionError):
        nn.MultiheadAttention(7, 2)
    with pytest.raises(AssertionError):
        torch.nn.MultiheadAttention(7, 2)
    x = gs.randn(3, 2, 8)
    with pytest.raises(RuntimeError):
        gm(x, x, x, is_causal=True)
    with pytest.raises(RuntimeError):
        tm(*(torch.randn(3, 2, 8),) * 3, is_causal=True)


def _load(gmod, tmod):
    gmod.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in tmod.state_dict().items()})


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("batch_first", [False, True])
def test_transformer_encoder_and_decoder_match_torch(norm_first, activation, batch_first):
    kw = dict(dim_feedforward=16, dropout=0.0, activation=activation, batch_first=batch_first,
              norm_first=norm_first)  # fmt: skip
    torch.manual_seed(0)
    t_enc = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(8, 2, **kw), 2,
                                        enable_nested_tensor=False)  # fmt: skip
    t_dec = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(8, 2, **kw), 2)
    g_enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(8, 2, **kw), 2)
    g_dec = nn.TransformerDecoder(nn.TransformerDecoderLayer(8, 2, **kw), 2)
    _load(g_enc, t_enc)
    _load(g_dec, t_dec)
    rng = np.random.default_rng(2)
    shape = (3, 5, 8) if batch_first else (5, 3, 8)
    gsrc, tsrc = _leaf(rng.standard_normal(shape).astype(np.float32))
    gtgt, ttgt = _leaf(rng.standard_normal(shape).astype(np.float32))
    kpm = rng.random((3, 5)) < 0.3
    kpm[:, 0] = False
    causal = np.triu(np.ones((5, 5), bool), 1)
    gm, tm = (
        g_enc(gsrc, src_key_padding_mask=gs.tensor(kpm)),
        t_enc(tsrc, src_key_padding_mask=torch.tensor(kpm)),
    )
    assert_close(gm, tm, **TOL)
    go = g_dec(gtgt, gm, tgt_mask=gs.tensor(causal), tgt_is_causal=True)
    to = t_dec(ttgt, tm, tgt_mask=torch.tensor(causal), tgt_is_causal=True)
    assert_close(go, to, **TOL)
    go.pow(2).sum().backward()
    to.pow(2).sum().backward()
    assert_close(gsrc.grad, tsrc.grad, rtol=1e-4, atol=1e-4)
    assert_close(gtgt.grad, ttgt.grad, rtol=1e-4, atol=1e-4)
    for gmod, tmod in ((g_enc, t_enc), (g_dec, t_dec)):
        tp = dict(tmod.named_parameters())
        for name, p in gmod.named_parameters():
            assert_close(p.grad, tp[name].grad, rtol=1e-3, atol=1e-4)
