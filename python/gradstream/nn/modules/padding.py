"""Padding modules: constant, zero, reflection, replication and circular, in 1, 2 and 3 d."""

from __future__ import annotations

from .. import functional as F
from .module import Module

__all__ = [
    "ConstantPad1d", "ConstantPad2d", "ConstantPad3d", "ZeroPad1d", "ZeroPad2d", "ZeroPad3d",
    "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d", "ReplicationPad1d",
    "ReplicationPad2d", "ReplicationPad3d", "CircularPad1d", "CircularPad2d", "CircularPad3d",
]  # fmt: skip


def _padding(padding, n: int) -> tuple[int, ...]:
    """An int pads every side; otherwise ``2 * n`` values ``(left, right, top, ...)``."""
    if isinstance(padding, int):
        return (padding,) * (2 * n)
    padding = tuple(padding)
    if len(padding) != 2 * n:
        raise ValueError(f"padding must be an int or a {2 * n}-tuple, got {padding}")
    return padding


class _PadNd(Module):
    _n = 1
    _mode = "constant"

    def __init__(self, padding):
        super().__init__()
        self.padding = _padding(padding, self._n)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value: float):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self) -> str:
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    _n = 1


class ConstantPad2d(_ConstantPadNd):
    _n = 2


class ConstantPad3d(_ConstantPadNd):
    _n = 3


class _ZeroPadNd(_ConstantPadNd):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self) -> str:
        return f"{self.padding}"


class ZeroPad1d(_ZeroPadNd):
    _n = 1


class ZeroPad2d(_ZeroPadNd):
    _n = 2


class ZeroPad3d(_ZeroPadNd):
    _n = 3


class ReflectionPad1d(_PadNd):
    _n, _mode = 1, "reflect"


class ReflectionPad2d(_PadNd):
    _n, _mode = 2, "reflect"


class ReflectionPad3d(_PadNd):
    _n, _mode = 3, "reflect"


class ReplicationPad1d(_PadNd):
    _n, _mode = 1, "replicate"


class ReplicationPad2d(_PadNd):
    _n, _mode = 2, "replicate"


class ReplicationPad3d(_PadNd):
    _n, _mode = 3, "replicate"


class CircularPad1d(_PadNd):
    _n, _mode = 1, "circular"


class CircularPad2d(_PadNd):
    _n, _mode = 2, "circular"


class CircularPad3d(_PadNd):
    _n, _mode = 3, "circular"
