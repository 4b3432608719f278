"""``MultiheadAttention`` with PyTorch's parameters (``in_proj_weight``, ``in_proj_bias``,
``out_proj``, or ``q/k/v_proj_weight`` when ``kdim``/``vdim`` differ), so a PyTorch
state_dict loads. ``need_weights=True`` computes the weights explicitly (PyTorch's math
path); ``need_weights=False`` runs the FlashAttention kernel, which stores no L×S matrix."""

from __future__ import annotations

import math

from ... import _core
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .linear import Linear
from .module import Module

__all__ = ["MultiheadAttention"]


def _float_mask(name: str, mask, dtype):
    """A bool mask (True = masked out) as an additive float mask; a float one as is."""
    if mask is None:
        return None
    if mask.dtype == _core.bool:
        return _core.zeros(*mask.shape, dtype=dtype).masked_fill(mask, float("-inf"))
    if not mask.dtype.is_floating_point:
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


class MultiheadAttention(Module):
    """``nn.MultiheadAttention`` (without ``add_bias_kv`` and ``add_zero_attn``)."""

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        add_bias_kv: bool = False,
        add_zero_attn: bool = False,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = False,
        device=None,
        dtype=None,
    ):
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"embed_dim and num_heads must be greater than 0, got embed_dim={embed_dim} "
                f"and num_heads={num_heads} instead"
            )
        if add_bias_kv or add_zero_attn:
            raise NotImplementedError(
                "MultiheadAttention: add_bias_kv and add_zero_attn are not supported"
            )
        super().__init__()
        dt = dtype if dtype is not None else _core.get_default_dtype()
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(
                _core.empty(3 * embed_dim, embed_dim, dtype=dt, device=device)
            )
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(
                _core.empty(embed_dim, embed_dim, dtype=dt, device=device)
            )
            self.k_proj_weight = Parameter(
                _core.empty(embed_dim, self.kdim, dtype=dt, device=device)
            )
            self.v_proj_weight = Parameter(
                _core.empty(embed_dim, self.vdim, dtype=dt, device=device)
            )
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(_core.empty(3 * embed_dim, dtype=dt, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, device=device, dtype=dt)
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.constant_(self.in_proj_bias, 0.0)
            init.constant_(self.out_proj.bias, 0.0)

    def _project(self, query, key, value):
        e = self.embed_dim
        b = self.in_proj_bias
        bq, bk, bv = (None, None, None) if b is None else (b[:e], b[e : 2 * e], b[2 * e :])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            if query is key and key is value:
                q, k, v = F.linear(query, w, b).split(e, -1)
                return q, k, v
            wq, wk, wv = w[:e], w[e : 2 * e], w[2 * e :]
        else:
            wq, wk, wv = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, wq, bq), F.linear(key, wk, bk), F.linear(value, wv, bv)

    def forward(
        self,
        query,
        key,
        value,
        key_padding_mask=None,
        need_weights: bool = True,
        attn_mask=None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ):
        unbatched = query.dim() == 2
        if unbatched:
            query, key, value = query.unsqueeze(1), key.unsqueeze(1), value.unsqueeze(1)
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        elif self.batch_first:
            if key is value:
                if query is key:
                    query = key = value = query.transpose(1, 0)
                else:
                    query, key = query.transpose(1, 0), key.transpose(1, 0)
                    value = key
            else:
                query, key, value = (x.transpose(1, 0) for x in (query, key, value))
        if query.dim() != 3 or key.dim() != 3 or value.dim() != 3:
            raise AssertionError(
                "query, key and value should be 2-D (unbatched) or 3-D (batched), got "
                f"{tuple(query.shape)}, {tuple(key.shape)}, {tuple(value.shape)}"
            )
        out, weights = self._attend(
            query, key, value, key_padding_mask, need_weights, attn_mask, average_attn_weights,
            is_causal,
        )  # fmt: skip
        if unbatched:
            out = out.squeeze(1)
            if weights is not None:
                weights = weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(1, 0)
        return out, weights

    def _attend(self, query, key, value, key_padding_mask, need_weights, attn_mask,
                average_attn_weights, is_causal):  # fmt: skip
        tgt_len, bsz, e = query.shape
        src_len = key.shape[0]
        h, hd = self.num_heads, self.head_dim
        if e != self.embed_dim:
            raise AssertionError(
                f"was expecting embedding dimension of {self.embed_dim}, but got {e}"
            )
        if is_causal and attn_mask is None:
            raise RuntimeError(
                "Need attn_mask if specifying the is_causal hint. You may use the Transformer "
                "module method `generate_square_subsequent_mask` to create this mask."
            )
        causal = is_causal and key_padding_mask is None and not need_weights
        mask = None if causal else _float_mask("attn_mask", attn_mask, query.dtype)
        if mask is not None:
            if mask.dim() == 2:
                if tuple(mask.shape) != (tgt_len, src_len):
                    raise RuntimeError(
                        f"The shape of the 2D attn_mask is {tuple(mask.shape)}, but should be "
                        f"{(tgt_len, src_len)}."
                    )
                mask = mask.view(1, 1, tgt_len, src_len)
            elif mask.dim() == 3:
                if tuple(mask.shape) != (bsz * h, tgt_len, src_len):
                    raise RuntimeError(
                        f"The shape of the 3D attn_mask is {tuple(mask.shape)}, but should be "
                        f"{(bsz * h, tgt_len, src_len)}."
                    )
                mask = mask.view(bsz, h, tgt_len, src_len)
            else:
                raise RuntimeError(f"attn_mask's dimension {mask.dim()} is not supported")
        kpm = _float_mask("key_padding_mask", key_padding_mask, query.dtype)
        if kpm is not None:
            if tuple(kpm.shape) != (bsz, src_len):
                raise AssertionError(
                    f"expecting key_padding_mask shape of {(bsz, src_len)}, but got "
                    f"{tuple(kpm.shape)}"
                )
            kpm = kpm.view(bsz, 1, 1, src_len)
            mask = kpm if mask is None else mask + kpm
        q, k, v = self._project(query, key, value)
        # (len, batch, embed) -> (batch, heads, len, head_dim)
        q = q.reshape(tgt_len, bsz, h, hd).permute(1, 2, 0, 3)
        k = k.reshape(src_len, bsz, h, hd).permute(1, 2, 0, 3)
        v = v.reshape(src_len, bsz, h, hd).permute(1, 2, 0, 3)
        p = self.dropout if self.training else 0.0
        weights = None
        if need_weights:
            scores = (q * math.sqrt(1.0 / hd)) @ k.transpose(-2, -1)
            if mask is not None:
                scores = scores + mask
            weights = F.softmax(scores, dim=-1)
            if p > 0.0:
                weights = F.dropout(weights, p=p)
            out = weights @ v
            if average_attn_weights:
                weights = weights.mean(dim=1)
        else:
            out = F.scaled_dot_product_attention(q, k, v, mask, p, causal)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len * bsz, e)
        out = F.linear(out, self.out_proj.weight, self.out_proj.bias)
        return out.view(tgt_len, bsz, e), weights
