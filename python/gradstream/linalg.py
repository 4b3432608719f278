"""`gradstream.linalg`: the part of `torch.linalg` that gradstream provides."""

from ._core import _vector_norm as vector_norm

__all__ = ["vector_norm"]
