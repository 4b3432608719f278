"""Objects an unpickler hands to the pickle it reads, made read-only.

A pickle's BUILD opcode sets attributes on whatever object it is given: on a module-level
function (a builder's ``__defaults__``) or a shared table entry (a storage type's dtype), the
change would outlive the load and alter later ones. What the unpickler returns for a global
is therefore one of these, which refuse any attribute write.
"""

from __future__ import annotations


class ReadOnly:
    """Attributes are set once, in ``__init__`` through `_init`; any later write raises."""

    __slots__ = ()

    def _init(self, **attrs) -> None:
        for name, value in attrs.items():
            object.__setattr__(self, name, value)

    def __setattr__(self, name, value):
        raise AttributeError(f"{type(self).__name__} objects are read-only")

    def __delattr__(self, name):
        raise AttributeError(f"{type(self).__name__} objects are read-only")


class ReadOnlyCall(ReadOnly):
    """A function, callable as itself, with nothing a pickle could change."""

    __slots__ = ("_fn",)

    def __init__(self, fn):
        self._init(_fn=fn)

    def __call__(self, *args, **kwargs):
        return self._fn(*args, **kwargs)
