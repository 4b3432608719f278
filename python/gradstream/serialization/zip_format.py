"""PyTorch's checkpoint archive: a zip of uncompressed records under one folder,
``<name>/data.pkl`` (the pickle), ``<name>/data/<key>`` (one storage's bytes each, aligned to
64 bytes in the file so they can be memory-mapped), and small records naming the format
version, the storage alignment and the byte order.
"""

from __future__ import annotations

import io
import mmap
import os
import secrets
import struct
import sys
import zipfile
from collections.abc import Iterable

import numpy as np

ALIGNMENT = 64
_LOCAL_HEADER = struct.Struct("<IHHHHHIIIHH")  # the zip format's local file header
_PADDING_ID = b"FB"  # the extra field PyTorch's writer pads with


def archive_name(f) -> str:
    """The folder of the records: the file's name without its extension, as PyTorch names it."""
    if isinstance(f, (str, os.PathLike)):
        stem = os.path.splitext(os.path.basename(os.fspath(f)))[0]
        if stem:
            return stem
    return "archive"


def write(f, name: str, pickle_bytes: bytes, storages: Iterable[tuple[str, np.ndarray]]) -> None:
    """Write the archive to the binary file ``f``; each storage is ``(key, elements)``."""
    with zipfile.ZipFile(f, "w", zipfile.ZIP_STORED) as zf:
        _write_record(zf, f"{name}/data.pkl", pickle_bytes)
        _write_record(zf, f"{name}/.format_version", b"1")
        _write_record(zf, f"{name}/.storage_alignment", str(ALIGNMENT).encode())
        _write_record(zf, f"{name}/byteorder", sys.byteorder.encode())
        for key, elements in storages:
            raw = memoryview(elements.reshape(-1).view(np.uint8))
            _write_record(zf, f"{name}/data/{key}", raw)
        _write_record(zf, f"{name}/version", b"3\n")
        serialization_id = f"{secrets.randbits(128):040d}".encode()
        _write_record(zf, f"{name}/.data/serialization_id", serialization_id)


def _write_record(zf: zipfile.ZipFile, name: str, data) -> None:
    info = zipfile.ZipInfo(name)  # stored, dated 1980-01-01 as PyTorch's records are
    encoded = name.encode("utf-8")
    # zipfile adds a zip64 field to the local header past this size (its own rule).
    zip64 = 20 if len(data) * 1.05 > zipfile.ZIP64_LIMIT else 0
    start = zf.fp.tell() + _LOCAL_HEADER.size + len(encoded) + 4 + zip64
    pad = -start % ALIGNMENT
    info.extra = _PADDING_ID + struct.pack("<H", pad) + b"Z" * pad
    zf.writestr(info, data)


class Archive:
    """The records of a checkpoint archive, read from the binary file ``f``.

    ``mmap_path``: storages are memory-mapped from this file instead of read.
    """

    def __init__(self, f, mmap_path: str | None = None):
        self._file = f
        self._zip = zipfile.ZipFile(f)
        names = self._zip.namelist()
        if not names or "/" not in names[0]:
            raise zipfile.BadZipFile("the archive has no records in a folder")
        self.name = names[0].split("/", 1)[0]
        self._names = set(names)
        self._map = None
        if mmap_path is not None:
            with open(mmap_path, "rb") as fh:
                self._map = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)

    def has(self, record: str) -> bool:
        return f"{self.name}/{record}" in self._names

    def read(self, record: str) -> bytes:
        return self._zip.read(self._info(record))

    def storage(self, record: str, nbytes: int) -> np.ndarray:
        """The record's bytes, which must be ``nbytes`` long, as a read-only uint8 array."""
        info = self._info(record)
        if info.file_size != nbytes:
            raise RuntimeError(
                f"gradstream.load: record {info.filename!r} holds {info.file_size} bytes; "
                f"its storage needs {nbytes}"
            )
        if nbytes == 0:
            return np.empty(0, np.uint8)
        if self._map is not None and info.compress_type == zipfile.ZIP_STORED:
            offset = self._data_offset(info)
            if offset + nbytes > len(self._map):
                raise RuntimeError(f"gradstream.load: record {info.filename!r} ends past the file")
            return np.frombuffer(self._map, np.uint8, count=nbytes, offset=offset)
        return np.frombuffer(self._zip.read(info), np.uint8)

    def _info(self, record: str) -> zipfile.ZipInfo:
        full = f"{self.name}/{record}"
        if full not in self._names:
            raise RuntimeError(
                f"gradstream.load: the checkpoint has no record {full!r} (truncated, or a "
                "storage is missing)"
            )
        return self._zip.getinfo(full)

    def _data_offset(self, info: zipfile.ZipInfo) -> int:
        self._file.seek(info.header_offset)
        header = self._file.read(_LOCAL_HEADER.size)
        if len(header) != _LOCAL_HEADER.size or header[:4] != b"PK\x03\x04":
            raise zipfile.BadZipFile(f"bad local header for {info.filename!r}")
        fields = _LOCAL_HEADER.unpack(header)
        name_len, extra_len = fields[9], fields[10]
        return info.header_offset + _LOCAL_HEADER.size + name_len + extra_len


def is_zip(f) -> bool:
    """Whether the binary file ``f`` starts (at its position) as a zip archive does."""
    start = f.tell()
    magic = f.read(4)
    f.seek(start)
    return magic == b"PK\x03\x04"


def seekable(f):
    """``f`` itself if it can seek, else its remaining bytes in memory."""
    try:
        if f.seekable():
            return f
    except AttributeError:
        pass
    return io.BytesIO(f.read())
