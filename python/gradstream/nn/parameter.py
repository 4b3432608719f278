"""`Parameter`: a tensor that a `Module` registers as learnable; `Buffer`: one it registers
as a buffer when assigned as an attribute."""

from __future__ import annotations

from .. import _core
from .._core import Tensor

__all__ = ["Parameter", "Buffer"]


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


class _BufferMeta(type):
    # A Buffer is a plain tensor marked by Buffer(); isinstance tests the mark.
    def __instancecheck__(cls, instance) -> bool:
        if cls is Buffer:
            return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)
        return super().__instancecheck__(instance)


class Buffer(Tensor, metaclass=_BufferMeta):
    """Marks a tensor to be registered as a buffer when assigned to a ``Module`` attribute;
    ``persistent=False`` leaves it out of the ``state_dict``."""

    def __new__(cls, data=None, *, persistent: bool = True):
        if data is None:
            data = _core.empty(0)
        t = data.detach().requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t
