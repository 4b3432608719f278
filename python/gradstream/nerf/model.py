"""TinyNeRF: the MLP from a point's encoding to a density and a colour."""

from __future__ import annotations

from .. import _core, nn
from .._core import Tensor
from .encoding import encoded_size, positional_encoding

__all__ = ["TinyNeRF"]


class TinyNeRF(nn.Module):
    """``depth`` ReLU layers of ``width`` units; the encoded input is concatenated to the
    output of layer ``skip`` (0-based; -1: no skip); then a density head (1) and a colour
    head (3). The defaults are tiny NeRF's: 8 x 256, skip after layer 4, 6 octaves.

    ``forward(x)`` takes (..., 3) points (or, with ``encode=False``, already encoded
    features of size ``in_features``) and returns raw (..., 4) outputs: rgb logits then the
    density before its ReLU, the layout `volume_render` reads.
    """

    def __init__(
        self,
        depth: int = 8,
        width: int = 256,
        num_freqs: int = 6,
        skip: int = 4,
        include_input: bool = True,
        in_dims: int = 3,
    ):
        super().__init__()
        if depth < 1 or width < 1:
            raise ValueError(f"TinyNeRF: depth and width must be >= 1, got {depth}, {width}")
        if not -1 <= skip <= depth - 2:
            raise ValueError(
                f"TinyNeRF: skip must be -1 (none) or a layer in [0, {depth - 2}] for depth "
                f"{depth}, got {skip}"
            )
        self.depth, self.width, self.skip = depth, width, skip
        self.num_freqs, self.include_input, self.in_dims = num_freqs, include_input, in_dims
        self.in_features = encoded_size(in_dims, num_freqs, include_input)
        layers = []
        for i in range(depth):
            n_in = self.in_features if i == 0 else width
            if i == skip + 1 and skip >= 0:
                n_in += self.in_features
            layers.append(nn.Linear(n_in, width))
        self.layers = nn.ModuleList(layers)
        self.sigma_head = nn.Linear(width, 1)
        self.rgb_head = nn.Linear(width, 3)

    def encode(self, x: Tensor) -> Tensor:
        return positional_encoding(x, self.num_freqs, self.include_input)

    def forward(self, x: Tensor, encode: bool = True) -> Tensor:
        features = self.encode(x) if encode else x
        h = features
        for i, layer in enumerate(self.layers):
            h = _core.relu(layer(h))
            if i == self.skip:
                h = _core.cat([h, features], -1)
        return _core.cat([self.rgb_head(h), self.sigma_head(h)], -1)

    def extra_repr(self) -> str:
        return (
            f"depth={self.depth}, width={self.width}, skip={self.skip}, "
            f"num_freqs={self.num_freqs}, include_input={self.include_input}"
        )
