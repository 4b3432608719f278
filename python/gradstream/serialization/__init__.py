"""`save` and `load`: checkpoints (state dicts, training state) in PyTorch's file format.

`save` writes what ``torch.save`` writes, a zip archive of a pickle and one record per tensor,
so ``torch.load`` reads it (with its default ``weights_only=True``); `load` reads every file
``torch.save`` writes (the zip archive and the older non-zip format) as gradstream tensors,
and the plain pickles earlier gradstream versions wrote. Like `torch.load`, `load` defaults
to ``weights_only=True``: it rebuilds only tensors, parameters and plain containers and
refuses any other global, so loading a file from elsewhere cannot run its code. Pass
``weights_only=False`` for files you trust.
"""

from __future__ import annotations

import io
import os
import pickle
import struct
import sys
import zipfile
import zlib
from typing import IO, Any

from . import legacy_format, plain_pickle, zip_format
from .location import CPU, restorer
from .storages import LoadedStorage, to_elements
from .torch_pickler import TorchPickler
from .unpickler import CheckpointUnpickler

__all__ = ["save", "load"]

DEFAULT_PROTOCOL = 2  # torch.save's: the only one torch's weights-only unpickler reads

FileLike = str | os.PathLike | IO[bytes]


def save(
    obj: Any, f: FileLike, pickle_module=pickle, pickle_protocol: int = DEFAULT_PROTOCOL
) -> None:
    """Write ``obj`` (e.g. ``model.state_dict()``) to the path or binary file ``f`` in
    PyTorch's checkpoint format. Each tensor is written whole, in C order, with its own
    storage record (views of one tensor are not stored as sharing it)."""
    _standard_pickle("save", pickle_module)
    data = io.BytesIO()
    pickler = TorchPickler(data, pickle_protocol)
    pickler.dump(obj)
    storages = ((key, to_elements(t)) for key, t in pickler.storages.items())
    name = zip_format.archive_name(f)
    if isinstance(f, (str, os.PathLike)):
        with open(f, "wb") as fh:
            zip_format.write(fh, name, data.getvalue(), storages)
    else:
        zip_format.write(f, name, data.getvalue(), storages)


def load(
    f: FileLike | bytes,
    map_location=None,
    pickle_module=None,
    *,
    weights_only: bool | None = None,
    mmap: bool | None = None,
    **pickle_load_args,
) -> Any:
    """Read an object written by `save` or ``torch.save`` from the path or binary file ``f``.

    ``map_location`` (PyTorch's forms: a device, a string, a dict from saved locations to
    others, a callable ``f(storage, location)``) places the tensors; without it each goes to
    its saved device where gradstream has it here, else to the CPU. ``weights_only``
    (default True) allows only tensors and plain containers. ``mmap=True`` maps the storages
    of a zip checkpoint at path ``f`` from the file rather than reading it whole.
    """
    if weights_only is None:
        weights_only = True
    if pickle_module is not None:
        if weights_only:
            raise RuntimeError(
                "gradstream.load: can not safely load weights when explicit pickle_module is "
                "specified"
            )
        _standard_pickle("load", pickle_module)
    restore = restorer(map_location)
    if isinstance(f, (str, os.PathLike)):
        mmap_path = os.fspath(f) if mmap else None
        with open(f, "rb") as fh:
            return _load(fh, restore, weights_only, mmap_path, pickle_load_args)
    if mmap:
        raise ValueError("gradstream.load: f must be a file path in order to use the mmap argument")
    if isinstance(f, (bytes, bytearray)):
        f = io.BytesIO(f)
    return _load(zip_format.seekable(f), restore, weights_only, None, pickle_load_args)


def _standard_pickle(op: str, pickle_module) -> None:
    if pickle_module is not pickle:
        raise ValueError(f"gradstream.{op} supports the standard pickle module only")


# What a corrupted or hand-made file makes the readers raise: reported as unreadable.
_CORRUPT = (EOFError, zipfile.BadZipFile, zlib.error, struct.error, ValueError, TypeError,
            KeyError, IndexError, AttributeError, NotImplementedError, MemoryError,
            OverflowError, RecursionError)  # fmt: skip


def _load(fh, restore, weights_only: bool, mmap_path: str | None, kwargs: dict) -> Any:
    if zip_format.is_zip(fh):
        kwargs = {"encoding": "utf-8", **kwargs}
        return _reported(fh, lambda: _load_zip(fh, restore, weights_only, mmap_path, kwargs))
    if mmap_path is not None:
        raise RuntimeError(
            "gradstream.load: mmap can only be used with files saved with "
            f"`torch.save({mmap_path}, _use_new_zipfile_serialization=True)` or gradstream.save"
        )
    if legacy_format.is_legacy(fh):
        kwargs = {"encoding": "utf-8", **kwargs}
        return _reported(fh, lambda: legacy_format.load(fh, restore, weights_only, kwargs))
    return plain_pickle._load(fh, weights_only, kwargs)


def _reported(fh, read):
    try:
        return read()
    except pickle.UnpicklingError as e:
        if str(e).startswith("gradstream.load"):
            raise
        raise pickle.UnpicklingError(_unreadable(fh, str(e))) from e
    except _CORRUPT as e:
        if str(e).startswith("gradstream.load"):
            raise  # a refusal of ours, such as a bad map_location
        raise pickle.UnpicklingError(_unreadable(fh, f"{type(e).__name__}: {e}")) from e


def _unreadable(fh, why: str) -> str:
    name = getattr(fh, "name", None)
    what = f"{name!r}" if isinstance(name, str) else "the data"
    return f"gradstream.load: cannot read {what} as a checkpoint: {why}"


def _load_zip(fh, restore, weights_only: bool, mmap_path: str | None, kwargs: dict) -> Any:
    archive = zip_format.Archive(fh, mmap_path)
    if archive.has("constants.pkl"):
        raise RuntimeError(
            "gradstream.load: this is a TorchScript archive (torch.jit.save), which gradstream "
            "cannot load"
        )
    byteorder = archive.read("byteorder").decode() if archive.has("byteorder") else "little"
    if byteorder not in ("little", "big"):
        raise RuntimeError(f"gradstream.load: unknown endianness type: {byteorder!r}")
    loaded: dict[str, LoadedStorage] = {}

    def load_storage(stype, key, location, numel, view):
        if view is not None:
            raise pickle.UnpicklingError("gradstream.load: a storage view in a zip checkpoint")
        if key not in loaded:
            stype.check_supported()
            raw = archive.storage(f"data/{key}", numel * stype.np_dtype.itemsize)
            elements = raw.view(stype.np_dtype.newbyteorder("<" if byteorder == "little" else ">"))
            if byteorder != sys.byteorder:
                elements = elements.astype(stype.np_dtype.newbyteorder("="))
            loaded[key] = restore(LoadedStorage(stype, elements, CPU), location)
        return loaded[key]

    data = io.BytesIO(archive.read("data.pkl"))
    return CheckpointUnpickler(data, load_storage, weights_only=weights_only, **kwargs).load()
