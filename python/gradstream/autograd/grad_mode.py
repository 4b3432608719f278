"""Grad-mode switches, usable as context managers and as decorators."""

import functools

from .. import _core

is_grad_enabled = _core.is_grad_enabled


class _GradMode:
    """Sets grad mode on entry and restores the previous mode on exit."""

    _enabled: bool

    def __enter__(self):
        self._prev = _core.is_grad_enabled()
        _core._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _core._set_grad_enabled(self._prev)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.__class__.__new__(self.__class__).__init_from(self):
                return fn(*args, **kwargs)

        return wrapper

    def __init_from(self, other):
        self.__dict__.update(other.__dict__)
        return self

    def clone(self):
        return self.__class__.__new__(self.__class__).__init_from(self)


class no_grad(_GradMode):  # noqa: N801  (PyTorch's name)
    """Disable recording: ops inside build no graph and save nothing."""

    def __init__(self):
        self._enabled = False


class enable_grad(_GradMode):  # noqa: N801
    """Re-enable recording inside a `no_grad` block."""

    def __init__(self):
        self._enabled = True


class set_grad_enabled(_GradMode):  # noqa: N801
    """Set recording on or off; takes effect immediately, like PyTorch's."""

    def __init__(self, mode: bool):
        self._prev = _core.is_grad_enabled()
        self._enabled = bool(mode)
        _core._set_grad_enabled(self._enabled)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        _core._set_grad_enabled(self._prev)
        return False


class inference_mode(_GradMode):  # noqa: N801
    """Like `no_grad` (gradstream has no separate inference tensors)."""

    def __init__(self, mode: bool = True):
        self._enabled = not mode
