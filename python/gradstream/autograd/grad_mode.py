"""Grad-mode switches, usable as context managers and as decorators.

The mode itself lives in the Rust core, per thread (as in PyTorch): a `no_grad` block in
one thread leaves recording on in the others.
"""

from __future__ import annotations

import functools
import inspect

from .. import _core

is_grad_enabled = _core.is_grad_enabled


class _GradMode:
    """Sets grad mode on entry and restores the previous mode on exit.

    As a decorator, each call of the wrapped function gets its own scope, so the
    decorated function is reentrant and safe to call from several threads.
    """

    _enabled: bool

    def __enter__(self):
        self._prev = _core.is_grad_enabled()
        _core._set_grad_enabled(self._enabled)
        return self

    def __exit__(self, *exc):
        _core._set_grad_enabled(self._prev)
        return False

    def clone(self) -> _GradMode:
        return _Scope(self._enabled)

    def __call__(self, fn):
        if inspect.isclass(fn):
            raise TypeError(f"{type(self).__name__} cannot decorate a class")
        enabled = self._enabled

        if inspect.isgeneratorfunction(fn):

            @functools.wraps(fn)
            def gen_wrapper(*args, **kwargs):
                # The mode holds while the generator body runs, not while it is suspended.
                gen = fn(*args, **kwargs)
                try:
                    with _Scope(enabled):
                        value = next(gen)
                    while True:
                        try:
                            sent = yield value
                        except BaseException as e:  # thrown into the generator
                            with _Scope(enabled):
                                value = gen.throw(e)
                        else:
                            with _Scope(enabled):
                                value = gen.send(sent)
                except StopIteration as stop:
                    return stop.value

            return gen_wrapper

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with _Scope(enabled):
                return fn(*args, **kwargs)

        return wrapper


class _Scope(_GradMode):
    def __init__(self, enabled: bool):
        self._enabled = enabled


class _BareDecorator(_GradMode):
    """`@no_grad` works without parentheses too, as in PyTorch."""

    def __new__(cls, orig_func=None):
        if orig_func is None:
            return super().__new__(cls)
        return cls()(orig_func)


class no_grad(_BareDecorator):  # noqa: N801  (PyTorch's name)
    """Disable recording: ops inside build no graph and save nothing."""

    def __init__(self, orig_func=None):
        self._enabled = False


class enable_grad(_BareDecorator):  # noqa: N801
    """Re-enable recording inside a `no_grad` block."""

    def __init__(self, orig_func=None):
        self._enabled = True


class inference_mode(_BareDecorator):  # noqa: N801
    """Like `no_grad` (gradstream has no separate inference tensors).

    `inference_mode(False)` leaves the current mode as it is, as in PyTorch.
    """

    def __init__(self, mode: bool = True):
        self._mode = bool(mode)
        self._enabled = False

    def __new__(cls, mode=True):
        if callable(mode):
            return cls()(mode)
        return object.__new__(cls)

    def __enter__(self):
        self._prev = _core.is_grad_enabled()
        if self._mode:
            _core._set_grad_enabled(False)
        return self

    def clone(self) -> _GradMode:
        return inference_mode(self._mode)

    def __call__(self, fn):
        if self._mode:
            return super().__call__(fn)
        return fn


class set_grad_enabled(_GradMode):  # noqa: N801
    """Set recording on or off. Takes effect immediately, like PyTorch's; as a context
    manager the previous mode comes back on exit, as a decorator the mode applies to
    each call of the function and the current mode is left untouched."""

    def __init__(self, mode: bool):
        self._prev = _core.is_grad_enabled()
        self._enabled = bool(mode)
        _core._set_grad_enabled(self._enabled)

    def __enter__(self):
        return self

    def __call__(self, fn):
        _core._set_grad_enabled(self._prev)
        return super().__call__(fn)

    def clone(self) -> _GradMode:
        return _Scope(self._enabled)


class set_multithreading_enabled:
    """Whether backward may run on worker threads. gradstream's engine always runs the
    backward on the calling thread (its kernels use their own thread pool), so the switch
    is recorded and restored but changes nothing."""

    _enabled = True

    def __init__(self, mode):
        self.prev = set_multithreading_enabled._enabled
        set_multithreading_enabled._enabled = bool(mode)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        set_multithreading_enabled._enabled = self.prev
