"""PyTorch's checkpoint format before the zip archive (``torch.save(...,
_use_new_zipfile_serialization=False)``): pickles one after another in one stream, the
magic number, the protocol version, a dict of system facts, the object (its storages as
persistent ids), the list of storage keys; then each storage's data in that order, an int64
element count followed by the elements.

The data comes after the object, whose pickle alone says each storage's element type, so the
object's pickle is read twice: once calling nothing, to learn the storages, then for real.
"""

from __future__ import annotations

import os
import pickle
import struct

import numpy as np

from .location import CPU
from .storages import LoadedStorage, StorageType
from .unpickler import CheckpointUnpickler

MAGIC_NUMBER = 0x1950A86A20F9469CFC6C
PROTOCOL_VERSION = 1001
# How each pickle protocol writes the magic number: how a legacy file starts.
_MAGIC_PICKLES = tuple(pickle.dumps(MAGIC_NUMBER, protocol=p) for p in range(6))


def is_legacy(f) -> bool:
    start = f.tell()
    head = f.read(max(len(m) for m in _MAGIC_PICKLES))
    f.seek(start)
    return any(head.startswith(m) for m in _MAGIC_PICKLES)


def load(f, restore, weights_only: bool, kwargs: dict):
    """The object in the legacy file ``f``; ``restore(storage, location)`` places storages."""

    def no_storages(*args):
        raise pickle.UnpicklingError("gradstream.load: a storage in a legacy file's header")

    def small_pickle():
        return CheckpointUnpickler(f, no_storages, weights_only=True, **kwargs).load()

    if small_pickle() != MAGIC_NUMBER:
        raise RuntimeError("gradstream.load: invalid magic number; corrupt file?")
    version = small_pickle()
    if version != PROTOCOL_VERSION:
        raise RuntimeError(f"gradstream.load: invalid protocol version: {version!r}")
    sys_info = small_pickle()
    little_endian = sys_info.get("little_endian", True) if isinstance(sys_info, dict) else True

    # First pass: which storages, of which types and sizes.
    types: dict[str, tuple[StorageType, int]] = {}
    views: list[tuple[str, str, int, int]] = []

    def note(stype, key, location, numel, view):
        types.setdefault(key, (stype, numel))
        if view is not None:
            views.append(_view_metadata(key, view))

    start = f.tell()
    CheckpointUnpickler(f, note, weights_only=weights_only, dry_run=True, **kwargs).load()
    keys = small_pickle()
    if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
        raise pickle.UnpicklingError("gradstream.load: a legacy file's storage keys are corrupt")

    # The data, in the order of `keys`.
    data_start = f.tell()
    data_size = f.seek(0, os.SEEK_END) - data_start
    f.seek(data_start)
    elements: dict[str, np.ndarray] = {}
    for key in keys:
        if key not in types:
            raise RuntimeError(f"gradstream.load: storage {key!r} has data but no tensor")
        stype, _ = types[key]
        stype.check_supported()
        head = f.read(8)
        if len(head) != 8:
            raise pickle.UnpicklingError("gradstream.load: cannot read the data: it ends early")
        (count,) = struct.unpack("<q", head)
        nbytes = count * stype.np_dtype.itemsize
        raw = f.read(nbytes) if 0 <= nbytes <= data_size else b""
        if count < 0 or len(raw) != nbytes:
            raise pickle.UnpicklingError(
                f"gradstream.load: cannot read storage {key!r}: it ends early (truncated?)"
            )
        dtype = stype.np_dtype if little_endian else stype.np_dtype.newbyteorder(">")
        elements[key] = np.frombuffer(raw, dtype).astype(stype.np_dtype.newbyteorder("="))
    for view_key, root, offset, numel in views:
        elements[view_key] = elements[root][offset : offset + numel]

    placed: dict[str, LoadedStorage] = {}

    def load_storage(stype, key, location, numel, view):
        if view is not None:
            key = _view_metadata(key, view)[0]
        if key not in placed:
            if key not in elements:
                raise RuntimeError(f"gradstream.load: the file has no data for storage {key!r}")
            data = elements[key]
            if len(data) < numel:
                raise RuntimeError(
                    f"gradstream.load: storage {key!r} holds {len(data)} elements; "
                    f"its tensor needs {numel}"
                )
            placed[key] = restore(LoadedStorage(stype, data, CPU), location)
        return placed[key]

    end = f.tell()
    f.seek(start)
    result = CheckpointUnpickler(f, load_storage, weights_only=weights_only, **kwargs).load()
    f.seek(end)
    return result


def _view_metadata(root: str, view) -> tuple[str, str, int, int]:
    if not (isinstance(view, tuple) and len(view) == 3):
        raise pickle.UnpicklingError("gradstream.load: a storage view's metadata is corrupt")
    key, offset, numel = view
    if not (isinstance(key, str) and isinstance(offset, int) and isinstance(numel, int)):
        raise pickle.UnpicklingError("gradstream.load: a storage view's metadata is corrupt")
    return key, root, offset, numel
