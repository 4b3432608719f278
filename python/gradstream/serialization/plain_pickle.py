"""The checkpoints earlier gradstream versions wrote: a plain pickle, in which a Tensor is a
NumPy array plus its dtype. `gradstream.load` still reads them; with ``weights_only=True`` it
rebuilds only tensors, NumPy arrays and plain containers and refuses any other global.
"""

from __future__ import annotations

import pickle
from typing import IO, Any

import numpy as np

from .readonly import ReadOnlyCall

_SAFE_GLOBALS = {
    ("collections", "OrderedDict"),
    ("builtins", "set"),
    ("builtins", "frozenset"),
    ("builtins", "complex"),
    ("builtins", "slice"),
    ("builtins", "range"),
    ("gradstream._formatting", "rebuild_tensor"),
    ("gradstream.nn.parameter", "_rebuild_parameter"),
    ("numpy", "ndarray"),
    ("numpy", "dtype"),
    ("numpy.core.multiarray", "_reconstruct"),
    ("numpy._core.multiarray", "_reconstruct"),
    ("numpy.core.multiarray", "scalar"),
    ("numpy.core.numeric", "_frombuffer"),
    ("numpy._core.numeric", "_frombuffer"),
    ("numpy._core.multiarray", "scalar"),
}
_SAFE_MODULES = {"gradstream", "gradstream._core", "numpy.dtypes"}


def _checked_tensor(array, dtype, requires_grad):
    from .. import _core
    from .._formatting import rebuild_tensor

    _expect("a tensor", array, np.ndarray)
    _expect("a tensor's dtype", dtype, _core.dtype)
    _expect("a tensor's requires_grad", requires_grad, bool)
    return rebuild_tensor(array, dtype, requires_grad)


def _checked_parameter(data, requires_grad):
    from .. import _core
    from ..nn.parameter import _rebuild_parameter

    _expect("a parameter", data, _core.Tensor)
    _expect("a parameter's requires_grad", requires_grad, bool)
    return _rebuild_parameter(data, requires_grad)


def _checked_collection(kind):
    def build(items=()):
        # Only what `save` writes (a list), never an iterator that could run for ever.
        _expect(f"a {kind.__name__}'s items", items, (list, tuple))
        return kind(items)

    return build


def _expect(what: str, value, types) -> None:
    if not isinstance(value, types):
        raise pickle.UnpicklingError(
            f"gradstream.load: {what} was rebuilt from a {type(value).__name__}; the file is "
            "corrupted or was not written by gradstream.save"
        )


# Globals whose arguments come from the file: checked before they build anything.
_CHECKED = {
    ("gradstream._formatting", "rebuild_tensor"): _checked_tensor,
    ("gradstream.nn.parameter", "_rebuild_parameter"): _checked_parameter,
    ("builtins", "set"): _checked_collection(set),
    ("builtins", "frozenset"): _checked_collection(frozenset),
}


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        checked = _CHECKED.get((module, name))
        if checked is not None:
            return ReadOnlyCall(checked)
        if (module, name) in _SAFE_GLOBALS or (
            module in _SAFE_MODULES and "." not in name and _is_dtype(module, name)
        ):
            return super().find_class(module, name)
        raise pickle.UnpicklingError(_refusal(module, name))

    def persistent_load(self, pid):
        raise pickle.UnpicklingError(
            "gradstream.load: weights_only=True refuses persistent ids (this is not a file "
            "written by gradstream.save)"
        )


def _is_dtype(module: str, name: str) -> bool:
    """A dtype object: a gradstream dtype, or one of NumPy's ``numpy.dtypes`` classes."""
    from .. import _core

    obj = getattr(__import__(module, fromlist=[name]), name, None)
    if module == "numpy.dtypes":
        return isinstance(obj, type) and issubclass(obj, np.dtype)
    return isinstance(obj, _core.dtype)


def _refusal(module: str, name: str) -> str:
    return (
        f"gradstream.load: weights_only=True refuses the global {module}.{name}; load a file "
        "you trust with weights_only=False"
    )


def _load(fh: IO[bytes], weights_only: bool, kwargs: dict) -> Any:
    if not weights_only:
        try:
            return pickle.load(fh, **kwargs)
        except EOFError as e:
            raise pickle.UnpicklingError(_unreadable(fh, "it ends too early (truncated?)")) from e
        except pickle.UnpicklingError as e:
            raise pickle.UnpicklingError(_unreadable(fh, str(e))) from e
    try:
        return _WeightsUnpickler(fh, **kwargs).load()
    except pickle.UnpicklingError as e:
        if str(e).startswith("gradstream.load"):
            raise
        raise pickle.UnpicklingError(_unreadable(fh, str(e))) from e
    except EOFError as e:
        raise pickle.UnpicklingError(_unreadable(fh, "it ends too early (truncated?)")) from e
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError,
            MemoryError, OverflowError, RecursionError) as e:  # fmt: skip
        # A corrupted or hand-made pickle that the allowed globals choke on.
        raise pickle.UnpicklingError(_unreadable(fh, f"{type(e).__name__}: {e}")) from e


def _unreadable(fh: IO[bytes], why: str) -> str:
    name = getattr(fh, "name", None)
    what = f"{name!r}" if isinstance(name, str) else "the data"
    return f"gradstream.load: cannot read {what} as a file written by gradstream.save: {why}"
