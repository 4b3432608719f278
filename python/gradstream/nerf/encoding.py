"""Positional encoding: a point and its sines and cosines at octave frequencies."""

from __future__ import annotations

from .. import _core, nn
from .._core import Tensor

__all__ = ["positional_encoding", "encoded_size", "PositionalEncoding"]


def encoded_size(in_features: int, num_freqs: int, include_input: bool = True) -> int:
    """The number of features `positional_encoding` produces for `in_features` inputs."""
    return in_features * (2 * num_freqs + (1 if include_input else 0))


def positional_encoding(x: Tensor, num_freqs: int, include_input: bool = True) -> Tensor:
    """``[x, sin(x), cos(x), sin(2x), cos(2x), ..., sin(2^(L-1) x), cos(2^(L-1) x)]`` along
    the last dim (tiny NeRF's layout; ``x`` is dropped when ``include_input`` is False).

    Args:
        x: (..., C) points.
        num_freqs: L, the number of octaves (0 gives ``x`` alone).
        include_input: put ``x`` itself first.

    Returns:
        (..., C * (2L + include_input)) features.
    """
    if num_freqs < 0:
        raise ValueError(f"positional_encoding: num_freqs must be >= 0, got {num_freqs}")
    if not include_input and num_freqs == 0:
        raise ValueError("positional_encoding: no features (num_freqs=0 and include_input=False)")
    parts = [x] if include_input else []
    if num_freqs:
        freqs = _core.tensor([2.0**i for i in range(num_freqs)], dtype=x.dtype).unsqueeze(-1)
        scaled = x.unsqueeze(-2) * freqs  # (..., L, C)
        waves = _core.stack([_core.sin(scaled), _core.cos(scaled)], -2)  # (..., L, 2, C)
        parts.append(waves.reshape(*x.shape[:-1], -1))
    return parts[0] if len(parts) == 1 else _core.cat(parts, -1)


class PositionalEncoding(nn.Module):
    """`positional_encoding` as a module (no parameters)."""

    def __init__(self, num_freqs: int, include_input: bool = True, in_features: int = 3):
        super().__init__()
        self.num_freqs = num_freqs
        self.include_input = include_input
        self.in_features = in_features
        self.out_features = encoded_size(in_features, num_freqs, include_input)

    def forward(self, x: Tensor) -> Tensor:
        return positional_encoding(x, self.num_freqs, self.include_input)

    def extra_repr(self) -> str:
        return (
            f"num_freqs={self.num_freqs}, include_input={self.include_input}, "
            f"out_features={self.out_features}"
        )
