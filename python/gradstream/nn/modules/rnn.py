"""Recurrent layers (`RNN`, `LSTM`, `GRU`) and their single-step cells, composed from
``linear`` and the pointwise activations; the time loop runs in Python."""

from __future__ import annotations

import math
import warnings

from ... import _core
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

__all__ = ["RNNCellBase", "RNNCell", "LSTMCell", "GRUCell", "RNNBase", "RNN", "LSTM", "GRU"]

# Gate blocks stacked in the weights, in PyTorch's order: LSTM (i, f, g, o), GRU (r, z, n).
_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _rnn_step(mode, x_proj, h, w_hh, b_hh):
    """One step of a plain RNN; ``x_proj`` is the input's projection with its bias."""
    pre = x_proj + F.linear(h, w_hh, b_hh)
    return pre.tanh() if mode == "RNN_TANH" else F.relu(pre)


def _lstm_step(x_proj, state, w_hh, b_hh):
    h, c = state
    i, f, g, o = (x_proj + F.linear(h, w_hh, b_hh)).chunk(4, -1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    return o.sigmoid() * c.tanh(), c


def _gru_step(x_proj, h, w_hh, b_hh):
    xr, xz, xn = x_proj.chunk(3, -1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, -1)
    r = (xr + hr).sigmoid()
    z = (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return (1 - z) * n + z * h


def _step(mode, x_proj, state, w_hh, b_hh):
    if mode == "LSTM":
        return _lstm_step(x_proj, state, w_hh, b_hh)
    if mode == "GRU":
        return _gru_step(x_proj, state, w_hh, b_hh)
    return _rnn_step(mode, x_proj, state, w_hh, b_hh)


def _dtype(dtype):
    return dtype if dtype is not None else _core.float32


class RNNCellBase(Module):
    _mode = "RNN_TANH"

    def __init__(self, input_size: int, hidden_size: int, bias: bool, num_chunks: int,
                 device=None, dtype=None):  # fmt: skip
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        dt = _dtype(dtype)
        self.weight_ih = Parameter(
            _core.empty(num_chunks * hidden_size, input_size, dtype=dt, device=device)
        )
        self.weight_hh = Parameter(
            _core.empty(num_chunks * hidden_size, hidden_size, dtype=dt, device=device)
        )
        if bias:
            self.bias_ih = Parameter(_core.empty(num_chunks * hidden_size, dtype=dt, device=device))
            self.bias_hh = Parameter(_core.empty(num_chunks * hidden_size, dtype=dt, device=device))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _check_input(self, input, hx):
        name = type(self).__name__
        if input.dim() not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1D or 2D, got {input.dim()}D instead")
        for h in hx if isinstance(hx, tuple) else (hx,):
            if h is not None and h.dim() != input.dim():
                raise ValueError(
                    f"{name}: Expected hidden to be {input.dim()}D, got {h.dim()}D instead"
                )
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input has inconsistent input_size: got {input.shape[-1]} expected "
                f"{self.input_size}"
            )

    def _zeros(self, input):
        shape = (input.shape[0], self.hidden_size) if input.dim() == 2 else (self.hidden_size,)
        return _core.zeros(*shape, dtype=input.dtype, device=input.device)

    def _forward(self, input, hx):
        x_proj = F.linear(input, self.weight_ih, self.bias_ih)
        return _step(self._mode, x_proj, hx, self.weight_hh, self.bias_hh)


class RNNCell(RNNCellBase):
    """``h' = tanh(x W_ih^T + b_ih + h W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True,
                 nonlinearity: str = "tanh", device=None, dtype=None):  # fmt: skip
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity: {nonlinearity}")
        self.nonlinearity = nonlinearity
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self._mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"

    def forward(self, input, hx=None):
        self._check_input(input, hx)
        return self._forward(input, self._zeros(input) if hx is None else hx)


class LSTMCell(RNNCellBase):
    """One LSTM step; ``hx = (h, c)``, returns ``(h', c')``."""

    _mode = "LSTM"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):  # fmt: skip
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        self._check_input(input, hx)
        if hx is None:
            hx = (self._zeros(input), self._zeros(input))
        return self._forward(input, tuple(hx))


class GRUCell(RNNCellBase):
    """One GRU step: reset and update gates, then ``h' = (1 - z) n + z h``."""

    _mode = "GRU"

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device=None,
                 dtype=None):  # fmt: skip
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        self._check_input(input, hx)
        return self._forward(input, self._zeros(input) if hx is None else hx)


class RNNBase(Module):
    """Stacked, optionally bidirectional recurrent layers over a ``(L, N, H_in)`` sequence
    (``(N, L, H_in)`` with ``batch_first``, ``(L, H_in)`` unbatched)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None):  # fmt: skip
        super().__init__()
        if not (0 <= dropout <= 1) or isinstance(dropout, bool):
            raise ValueError(
                "dropout should be a number in range [0, 1] representing the probability of an "
                "element being zeroed"
            )
        if dropout > 0 and num_layers == 1:
            warnings.warn(
                "dropout option adds dropout after all but last recurrent layer, so non-zero "
                f"dropout expects num_layers greater than 1, but got dropout={dropout} and "
                f"num_layers={num_layers}",
                stacklevel=2,
            )
        if not isinstance(hidden_size, int) or hidden_size <= 0:
            raise ValueError("hidden_size must be an integer greater than zero")
        if not isinstance(num_layers, int) or num_layers <= 0:
            raise ValueError("num_layers must be an integer greater than zero")
        if proj_size != 0:
            raise NotImplementedError(f"{type(self).__name__}: proj_size is not supported")
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        gate = _GATES[mode] * hidden_size
        dt = _dtype(dtype)
        self._flat_weights_names = []
        for layer in range(num_layers):
            for suffix in ("", "_reverse") if bidirectional else ("",):
                layer_in = input_size if layer == 0 else hidden_size * (2 if bidirectional else 1)
                shapes = {"weight_ih": (gate, layer_in), "weight_hh": (gate, hidden_size)}
                if bias:
                    shapes.update(bias_ih=(gate,), bias_hh=(gate,))
                for kind, shape in shapes.items():
                    name = f"{kind}_l{layer}{suffix}"
                    setattr(self, name, Parameter(_core.empty(*shape, dtype=dt, device=device)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for w in self.parameters():
            init.uniform_(w, -stdv, stdv)

    def flatten_parameters(self) -> None:
        """A no-op: there is no fused cuDNN weight buffer to compact."""

    @property
    def all_weights(self) -> list:
        per_layer = 4 if self.bias else 2
        ws = [getattr(self, n) for n in self._flat_weights_names]
        return [ws[i : i + per_layer] for i in range(0, len(ws), per_layer)]

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _layer_params(self, layer: int, suffix: str):
        names = ("weight_ih", "weight_hh", "bias_ih", "bias_hh")
        return [getattr(self, f"{n}_l{layer}{suffix}", None) for n in names]

    def _run(self, input, states):
        """``input``: ``(L, N, H_in)``; ``states``: per (layer, direction) an initial state.
        Returns the last layer's outputs and the final states in the same order."""
        directions = ("", "_reverse") if self.bidirectional else ("",)
        finals = []
        x = input
        for layer in range(self.num_layers):
            outs = []
            for d, suffix in enumerate(directions):
                w_ih, w_hh, b_ih, b_hh = self._layer_params(layer, suffix)
                x_proj = F.linear(x, w_ih, b_ih)  # all time steps in one product
                state = states[layer * len(directions) + d]
                steps = range(x.shape[0] - 1, -1, -1) if suffix else range(x.shape[0])
                seq = [None] * x.shape[0]
                for t in steps:
                    state = _step(self.mode, x_proj[t], state, w_hh, b_hh)
                    seq[t] = state[0] if self.mode == "LSTM" else state
                finals.append(state)
                outs.append(_core.stack(seq, 0))
            x = outs[0] if len(outs) == 1 else _core.cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, finals

    def _check_hidden(self, h, expected, what="hidden"):
        if tuple(h.shape) != tuple(expected):
            raise RuntimeError(f"Expected {what} size {tuple(expected)}, got {list(h.shape)}")

    def forward(self, input, hx=None):
        if not isinstance(input, _core.Tensor):
            raise NotImplementedError(f"{type(self).__name__}: PackedSequence is not supported")
        if input.dim() not in (2, 3):
            raise ValueError(
                f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.dim()}D instead"
            )
        batched = input.dim() == 3
        if not batched:
            input = input.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        if input.shape[-1] != self.input_size:
            raise RuntimeError(
                f"input.size(-1) must be equal to input_size. Expected {self.input_size}, got "
                f"{input.shape[-1]}"
            )
        if input.shape[0] == 0:
            raise RuntimeError(
                f"{type(self).__name__}: Expected sequence length to be larger than 0"
            )
        n = input.shape[1]
        layers = self.num_layers * (2 if self.bidirectional else 1)
        shape = (layers, n, self.hidden_size)
        is_lstm = self.mode == "LSTM"
        if hx is None:
            zeros = _core.zeros(*shape, dtype=input.dtype, device=input.device)
            hx = (zeros, zeros) if is_lstm else zeros
        else:
            if not batched:
                hx = tuple(h.unsqueeze(1) for h in hx) if is_lstm else hx.unsqueeze(1)
            for h in hx if is_lstm else (hx,):
                self._check_hidden(h, shape)
        if is_lstm:
            states = list(zip(hx[0].unbind(0), hx[1].unbind(0), strict=True))
        else:
            states = list(hx.unbind(0))
        out, finals = self._run(input, states)
        if is_lstm:
            h_n = (_core.stack([s[0] for s in finals], 0), _core.stack([s[1] for s in finals], 0))
        else:
            h_n = _core.stack(finals, 0)
        if not batched:
            out = out.squeeze(1)
            h_n = tuple(h.squeeze(1) for h in h_n) if is_lstm else h_n.squeeze(1)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, h_n


class RNN(RNNBase):
    """Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False, device=None,
                 dtype=None):  # fmt: skip
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(
                f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'."
            )
        self.nonlinearity = nonlinearity
        mode = "RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU"
        super().__init__(mode, input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)  # fmt: skip


class LSTM(RNNBase):
    """Long short-term memory; ``hx = (h_0, c_0)``, returns ``output, (h_n, c_n)``."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0, device=None,
                 dtype=None):  # fmt: skip
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)  # fmt: skip


class GRU(RNNBase):
    """Gated recurrent unit."""

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, device=None, dtype=None):  # fmt: skip
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)  # fmt: skip
