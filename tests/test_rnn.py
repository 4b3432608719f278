"""`RNN`, `LSTM`, `GRU` and their cells against PyTorch with the same weights: outputs,
final states and the gradients of inputs, initial states and every weight."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("hypothesis")

from helpers import assert_close  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import gradstream as gs  # noqa: E402
import gradstream.nn as nn  # noqa: E402
from gradstream.autograd import gradcheck  # noqa: E402

TOL = dict(rtol=1e-9, atol=1e-11)


def _copy_weights(gm, tm):
    gm.load_state_dict({k: gs.tensor(v.detach().numpy()) for k, v in tm.state_dict().items()})


def _flat(out):
    return list(out) if isinstance(out, tuple) else [out]


def _flatten(outs):
    flat = []
    for o in outs:
        flat += _flat(o)
    return flat


def _compare(gm, tm, g_args, t_args):
    g_out, t_out = _flatten(_flat(gm(*g_args))), _flatten(_flat(tm(*t_args)))
    assert len(g_out) == len(t_out)
    rng = np.random.default_rng(2)
    g_loss, t_loss = 0, 0
    for a, b in zip(g_out, t_out, strict=True):
        assert_close(a, b, **TOL)
        w = rng.standard_normal(tuple(b.shape))
        g_loss = g_loss + (a * gs.tensor(w)).sum()
        t_loss = t_loss + (b * torch.tensor(w)).sum()
    g_loss.backward()
    t_loss.backward()
    for a, b in zip(_flatten(g_args), _flatten(t_args), strict=True):
        if b is not None and b.requires_grad:
            assert_close(a.grad, b.grad, **TOL)
    g_params = dict(gm.named_parameters())
    for k, p in tm.named_parameters():
        assert_close(g_params[k].grad, p.grad, **TOL)


def _pair(shape, seed):
    a = np.random.default_rng(seed).standard_normal(shape)
    return gs.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


@settings(max_examples=20, deadline=None)
@given(
    kind=st.sampled_from(["RNN", "LSTM", "GRU", "RNN_relu"]), seq=st.integers(1, 4),
    batch=st.one_of(st.none(), st.integers(1, 3)), i=st.integers(1, 3), h=st.integers(1, 3),
    layers=st.integers(1, 2), bidirectional=st.booleans(), bias=st.booleans(),
    batch_first=st.booleans(), with_hx=st.booleans(), seed=st.integers(0, 1000),
)  # fmt: skip
def test_recurrent_layers_match_torch(kind, seq, batch, i, h, layers, bidirectional, bias,
                                      batch_first, with_hx, seed):  # fmt: skip
    name, extra = (kind, {}) if kind != "RNN_relu" else ("RNN", {"nonlinearity": "relu"})
    kw = dict(num_layers=layers, bidirectional=bidirectional, bias=bias,
              batch_first=batch_first, **extra)  # fmt: skip
    torch.manual_seed(seed)
    tm = getattr(torch.nn, name)(i, h, **kw).double()
    gm = getattr(nn, name)(i, h, **kw).double()
    assert repr(gm) == repr(tm)
    _copy_weights(gm, tm)
    if batch is None:
        shape = (seq, i)
    else:
        shape = (batch, seq, i) if batch_first else (seq, batch, i)
    gx, tx = _pair(shape, seed)
    g_args, t_args = [gx], [tx]
    if with_hx:
        d = 2 if bidirectional else 1
        hshape = (layers * d, h) if batch is None else (layers * d, batch, h)
        g0, t0 = _pair(hshape, seed + 1)
        if name == "LSTM":
            gc, tc = _pair(hshape, seed + 2)
            g_args.append((g0, gc))
            t_args.append((t0, tc))
        else:
            g_args.append(g0)
            t_args.append(t0)
    _compare(gm, tm, g_args, t_args)


@pytest.mark.parametrize("name", ["RNNCell", "LSTMCell", "GRUCell"])
@pytest.mark.parametrize("batched", [True, False])
@pytest.mark.parametrize("with_hx", [True, False])
@pytest.mark.parametrize("bias", [True, False])
def test_cells_match_torch(name, batched, with_hx, bias):
    torch.manual_seed(0)
    tm = getattr(torch.nn, name)(3, 4, bias=bias).double()
    gm = getattr(nn, name)(3, 4, bias=bias).double()
    assert repr(gm) == repr(tm)
    _copy_weights(gm, tm)
    gx, tx = _pair((2, 3) if batched else (3,), 1)
    g_args, t_args = [gx], [tx]
    if with_hx:
        hshape = (2, 4) if batched else (4,)
        gh, th = _pair(hshape, 2)
        if name == "LSTMCell":
            gc, tc = _pair(hshape, 3)
            g_args.append((gh, gc))
            t_args.append((th, tc))
        else:
            g_args.append(gh)
            t_args.append(th)
    _compare(gm, tm, g_args, t_args)


def test_rnn_cell_relu_and_default_init():
    tm, gm = torch.nn.RNNCell(3, 5, nonlinearity="relu"), nn.RNNCell(3, 5, nonlinearity="relu")
    assert repr(gm) == repr(tm)
    assert sorted(dict(gm.named_parameters())) == sorted(dict(tm.named_parameters()))
    bound = 1 / np.sqrt(5)
    for p in gm.parameters():
        v = p.detach().numpy()
        assert np.abs(v).max() <= bound and v.std() > 0.2 * bound
    lstm, tlstm = nn.LSTM(3, 4, 2, bidirectional=True), torch.nn.LSTM(3, 4, 2, bidirectional=True)
    g_shapes = {k: tuple(p.shape) for k, p in lstm.named_parameters()}
    t_shapes = {k: tuple(p.shape) for k, p in tlstm.named_parameters()}
    assert g_shapes == t_shapes
    assert list(g_shapes) == list(t_shapes)  # registration order, as state_dict keys


def test_gru_gradcheck():
    gm = nn.GRU(2, 3, num_layers=2, bidirectional=True).double()
    x = gs.tensor(np.random.default_rng(0).standard_normal((3, 2, 2)), requires_grad=True)
    h = gs.tensor(np.random.default_rng(1).standard_normal((4, 2, 3)), requires_grad=True)
    assert gradcheck(lambda a, b: gm(a, b)[0], (x, h))


def test_lstm_dropout_between_layers():
    gm = nn.LSTM(3, 4, num_layers=3, dropout=0.5)
    x = gs.randn(5, 2, 3)
    a = gm(x)[0].detach().numpy()
    gm.eval()
    b, c = gm(x)[0].detach().numpy(), gm(x)[0].detach().numpy()
    np.testing.assert_array_equal(b, c)
    assert not np.allclose(a, b)


def test_recurrent_errors():
    for lib in (gs, torch):
        with pytest.raises(ValueError):
            lib.nn.LSTM(3, 4)(lib.zeros(1, 2, 3, 4))
        with pytest.raises(RuntimeError):
            lib.nn.GRU(3, 4)(lib.zeros(2, 2, 5))
        with pytest.raises(RuntimeError):
            lib.nn.RNN(3, 4)(lib.zeros(2, 2, 3), lib.zeros(2, 2, 4))
        with pytest.raises(ValueError):
            lib.nn.RNN(3, 4, nonlinearity="gelu")
        with pytest.raises(ValueError):
            lib.nn.GRUCell(3, 4)(lib.zeros(1, 2, 3))
        with pytest.raises(ValueError):
            lib.nn.LSTM(3, 4, dropout=1.5)
    with pytest.warns(UserWarning, match="dropout"):
        nn.GRU(3, 4, dropout=0.2)
