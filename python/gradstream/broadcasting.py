"""`broadcast_shapes` and `broadcast_tensors`, PyTorch's names for NumPy's broadcasting rule."""

from __future__ import annotations

from ._core import Tensor
from .size import Size

__all__ = ["broadcast_shapes", "broadcast_tensors"]


def broadcast_shapes(*shapes) -> Size:
    """The shape every one of `shapes` broadcasts to (trailing dims aligned, 1 stretches)."""
    sizes = [(s,) if isinstance(s, int) else tuple(s) for s in shapes]
    ndim = max((len(s) for s in sizes), default=0)
    out = [1] * ndim
    for s in sizes:
        for i, d in enumerate(s, start=ndim - len(s)):
            if d < 0:
                raise RuntimeError(f"broadcast_shapes: negative size {d} in shape {list(s)}")
            if d != 1 and out[i] not in (1, d):
                raise RuntimeError(
                    "broadcast_shapes: shape mismatch: objects cannot be broadcast to a single "
                    f"shape; got {', '.join(str(list(x)) for x in sizes)}"
                )
            if d != 1:
                out[i] = d
    return Size(out)


def broadcast_tensors(*tensors) -> tuple:
    """Views of `tensors` expanded to their common shape (gradients sum back, as `expand`)."""
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    for i, t in enumerate(tensors):
        if not isinstance(t, Tensor):
            raise TypeError(
                f"broadcast_tensors(): expected Tensor as element {i}, got {type(t).__name__}"
            )
    shape = broadcast_shapes(*(t.shape for t in tensors))
    return tuple(t.expand(shape) for t in tensors)
