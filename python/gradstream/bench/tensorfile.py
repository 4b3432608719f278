"""The shared weights and inputs, as a safetensors file written and read with NumPy alone.

Every system loads the same file (the candle program through `candle_core::safetensors`), so all
of them start from the same weights and inputs and their losses must agree.
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

_DTYPES = {np.dtype(np.float32): "F32", np.dtype(np.float64): "F64", np.dtype(np.int64): "I64"}
_NUMPY = {v: k for k, v in _DTYPES.items()}


def save(path: str | Path, tensors: dict[str, np.ndarray]) -> None:
    """Write `tensors` (C-contiguous little-endian arrays) in the safetensors format."""
    header: dict[str, dict] = {}
    offset = 0
    arrays = []
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")
        if arr.dtype not in _DTYPES:
            raise TypeError(f"tensorfile.save: {name} has unsupported dtype {arr.dtype}")
        header[name] = {
            "dtype": _DTYPES[arr.dtype],
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + arr.nbytes],
        }
        offset += arr.nbytes
        arrays.append(arr)
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # keep the data 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for arr in arrays:
            f.write(arr.astype(arr.dtype.newbyteorder("<"), copy=False).tobytes())


def load(path: str | Path) -> dict[str, np.ndarray]:
    """Read a safetensors file into freshly allocated NumPy arrays (one allocation each)."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        start = 8 + n
        out = {}
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            dtype = _NUMPY[info["dtype"]]
            f.seek(start + begin)
            count = (end - begin) // dtype.itemsize
            out[name] = np.fromfile(f, dtype=dtype, count=count).reshape(tuple(info["shape"]))
    return out
