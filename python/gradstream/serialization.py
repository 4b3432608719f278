"""`save` and `load`: write objects holding tensors (state dicts, checkpoints) to a file.

The format is a pickle; a Tensor pickles as a NumPy array plus its dtype. Like
`torch.load`, `load` defaults to ``weights_only=True``: it rebuilds only tensors, NumPy
arrays and plain containers and refuses any other global, so loading a file from
elsewhere cannot run its code. Pass ``weights_only=False`` for files you trust.
"""

from __future__ import annotations

import io
import os
import pickle
from typing import IO, Any

__all__ = ["save", "load"]

DEFAULT_PROTOCOL = pickle.HIGHEST_PROTOCOL

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


class _WeightsUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):
        if (module, name) in _SAFE_GLOBALS or module in _SAFE_MODULES:
            if module in ("gradstream", "gradstream._core") and not _is_dtype(module, name):
                raise pickle.UnpicklingError(_refusal(module, name))
            return super().find_class(module, name)
        raise pickle.UnpicklingError(_refusal(module, name))


def _is_dtype(module: str, name: str) -> bool:
    from . import _core

    obj = getattr(__import__(module, fromlist=[name]), name, None)
    return isinstance(obj, _core.dtype)


def _refusal(module: str, name: str) -> str:
    return (
        f"gradstream.load: weights_only=True refuses the global {module}.{name}; load a file "
        "you trust with weights_only=False"
    )


def save(obj: Any, f: str | os.PathLike | IO[bytes], pickle_protocol: int = DEFAULT_PROTOCOL):
    """Write ``obj`` (e.g. ``model.state_dict()``) to the path or binary file ``f``."""
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            pickle.dump(obj, fh, protocol=pickle_protocol)
    else:
        pickle.dump(obj, f, protocol=pickle_protocol)


def load(
    f: str | os.PathLike | IO[bytes],
    map_location=None,
    *,
    weights_only: bool | None = None,
    **pickle_load_args,
) -> Any:
    """Read an object written by `save` from the path or binary file ``f``.

    ``map_location`` is accepted for PyTorch compatibility (tensors load on the CPU).
    ``weights_only`` (default True) allows only tensors, arrays and plain containers.
    """
    del map_location
    if weights_only is None:
        weights_only = True
    if isinstance(f, (str, os.PathLike)):
        with open(f, "rb") as fh:
            return _load(fh, weights_only, pickle_load_args)
    if isinstance(f, (bytes, bytearray)):
        f = io.BytesIO(f)
    return _load(f, weights_only, pickle_load_args)


def _load(fh: IO[bytes], weights_only: bool, kwargs: dict) -> Any:
    if weights_only:
        return _WeightsUnpickler(fh, **kwargs).load()
    return pickle.load(fh, **kwargs)
