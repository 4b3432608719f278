"""``TransformerEncoderLayer``, ``TransformerEncoder``, ``TransformerDecoderLayer`` and
``TransformerDecoder`` with PyTorch's arguments and parameter names, built on
``MultiheadAttention`` (whose need_weights=False path is the flash kernel)."""

from __future__ import annotations

import copy

from .. import functional as F
from .attention import MultiheadAttention
from .container import ModuleList
from .layers import Dropout, LayerNorm
from .linear import Linear
from .module import Module

__all__ = [
    "TransformerEncoderLayer",
    "TransformerEncoder",
    "TransformerDecoderLayer",
    "TransformerDecoder",
]


def _activation(activation):
    if activation == "relu":
        return F.relu
    if activation == "gelu":
        return F.gelu
    if callable(activation):
        return activation
    raise RuntimeError(f"activation should be relu/gelu, not {activation}")


class _FeedForward(Module):
    """What the encoder and decoder layers share: the feed-forward block and its norms."""

    def _init_ff(self, d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                 norm_first, device, dtype, norms):  # fmt: skip
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device, dtype=dtype)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device, dtype=dtype)
        self.norm_first = norm_first
        for i in range(1, norms + 1):
            setattr(
                self,
                f"norm{i}",
                LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device, dtype=dtype),
            )
        for i in range(1, norms + 1):
            setattr(self, f"dropout{i}", Dropout(dropout))
        self.activation = _activation(activation)

    def _ff_block(self, x, out_dropout):
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    @staticmethod
    def _attn(attn, x, mem, mask, kpm, is_causal, out_dropout):
        y = attn(x, mem, mem, attn_mask=mask, key_padding_mask=kpm, need_weights=False,
                 is_causal=is_causal)[0]  # fmt: skip
        return out_dropout(y)


class TransformerEncoderLayer(_FeedForward):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):  # fmt: skip
        super().__init__()
        self.self_attn = MultiheadAttention(
            d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first, device=device,
            dtype=dtype,
        )  # fmt: skip
        self._init_ff(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                      norm_first, device, dtype, 2)  # fmt: skip

    def forward(self, src, src_mask=None, src_key_padding_mask=None, is_causal: bool = False):
        x = src
        sa = lambda y: self._attn(  # noqa: E731
            self.self_attn, y, y, src_mask, src_key_padding_mask, is_causal, self.dropout1
        )
        if self.norm_first:
            x = x + sa(self.norm1(x))
            return x + self._ff_block(self.norm2(x), self.dropout2)
        x = self.norm1(x + sa(x))
        return self.norm2(x + self._ff_block(x, self.dropout2))


class TransformerDecoderLayer(_FeedForward):
    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048,
                 dropout: float = 0.1, activation="relu", layer_norm_eps: float = 1e-5,
                 batch_first: bool = False, norm_first: bool = False, bias: bool = True,
                 device=None, dtype=None):  # fmt: skip
        super().__init__()
        kw = dict(dropout=dropout, bias=bias, batch_first=batch_first, device=device, dtype=dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, **kw)
        self.multihead_attn = MultiheadAttention(d_model, nhead, **kw)
        self._init_ff(d_model, dim_feedforward, dropout, activation, layer_norm_eps, bias,
                      norm_first, device, dtype, 3)  # fmt: skip

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False,
                memory_is_causal: bool = False):  # fmt: skip
        x = tgt
        sa = lambda y: self._attn(  # noqa: E731
            self.self_attn, y, y, tgt_mask, tgt_key_padding_mask, tgt_is_causal, self.dropout1
        )
        ca = lambda y: self._attn(  # noqa: E731
            self.multihead_attn, y, memory, memory_mask, memory_key_padding_mask,
            memory_is_causal, self.dropout2,
        )  # fmt: skip
        if self.norm_first:
            x = x + sa(self.norm1(x))
            x = x + ca(self.norm2(x))
            return x + self._ff_block(self.norm3(x), self.dropout3)
        x = self.norm1(x + sa(x))
        x = self.norm2(x + ca(x))
        return self.norm3(x + self._ff_block(x, self.dropout3))


class TransformerEncoder(Module):
    def __init__(self, encoder_layer, num_layers: int, norm=None, enable_nested_tensor=True,
                 mask_check=True):  # fmt: skip
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(encoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src, mask=None, src_key_padding_mask=None, is_causal=None):
        x = src
        for layer in self.layers:
            x = layer(x, src_mask=mask, src_key_padding_mask=src_key_padding_mask,
                      is_causal=bool(is_causal))  # fmt: skip
        return self.norm(x) if self.norm is not None else x


class TransformerDecoder(Module):
    def __init__(self, decoder_layer, num_layers: int, norm=None):
        super().__init__()
        self.layers = ModuleList([copy.deepcopy(decoder_layer) for _ in range(num_layers)])
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt, memory, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal=None,
                memory_is_causal: bool = False):  # fmt: skip
        x = tgt
        for layer in self.layers:
            x = layer(x, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                      tgt_key_padding_mask=tgt_key_padding_mask,
                      memory_key_padding_mask=memory_key_padding_mask,
                      tgt_is_causal=bool(tgt_is_causal),
                      memory_is_causal=memory_is_causal)  # fmt: skip
        return self.norm(x) if self.norm is not None else x
