"""``scaled_dot_product_attention``: the Rust FlashAttention-2 kernel (``_core``), which
saves q, k, v, the output and one log-sum-exp per query row, never the L×S weights."""

from __future__ import annotations

from ... import _core
from ..._core import Tensor
from .._reduction import _check_tensor

__all__ = ["scaled_dot_product_attention"]


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """Attention of ``query`` (..., L, E) over ``key`` (..., S, E) and ``value`` (..., S,
    Ev), as ``torch.nn.functional.scaled_dot_product_attention``. ``attn_mask``: bool
    (True = attend) or float (added to the scores); dropout draws from the global
    generator (``gradstream.manual_seed``)."""
    _check_tensor("scaled_dot_product_attention", "query", query)
    _check_tensor("scaled_dot_product_attention", "key", key)
    _check_tensor("scaled_dot_product_attention", "value", value)
    if attn_mask is not None:
        _check_tensor("scaled_dot_product_attention", "attn_mask", attn_mask)
    return _core._scaled_dot_product_attention(
        query,
        key,
        value,
        attn_mask,
        float(dropout_p),
        bool(is_causal),
        None if scale is None else float(scale),
        bool(enable_gqa),
    )
