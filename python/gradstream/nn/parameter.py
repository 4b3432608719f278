"""`Parameter`: a tensor that a `Module` registers as learnable."""

from __future__ import annotations

from .. import _core
from .._core import Tensor

__all__ = ["Parameter"]


def _rebuild_parameter(data, requires_grad):
    return Parameter(data, requires_grad)


class Parameter(Tensor):
    """A leaf tensor sharing ``data``'s buffer, counted as a parameter in memory accounting."""

    def __new__(cls, data=None, requires_grad: bool = True):
        if data is None:
            data = _core.empty(0)
        t = Tensor.__new__(cls, data, requires_grad=requires_grad)
        t._mark_parameter()
        return t

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __reduce_ex__(self, protocol):
        return (_rebuild_parameter, (self.detach(), self.requires_grad))
