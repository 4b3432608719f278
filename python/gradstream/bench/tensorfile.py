"""The shared weights and inputs of a benchmark run, as one safetensors file.

Every system loads the same file (the candle program through `candle_core::safetensors`), so all
of them start from the same weights and inputs and their losses must agree. The format is the
`safetensors` package's; this module only limits the dtypes to those every system reads.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from safetensors import safe_open
from safetensors.numpy import save_file

# The dtypes the benchmark's systems (PyTorch, gradstream, the candle program) all read.
SUPPORTED = (np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64))


def save(path: str | Path, tensors: dict[str, np.ndarray]) -> None:
    """Write `tensors` to `path` in the safetensors format."""
    arrays = {}
    for name, arr in tensors.items():
        arr = np.asarray(arr)
        arr = arr if arr.flags.c_contiguous else arr.copy(order="C")  # keeps 0-d arrays 0-d
        if arr.dtype not in SUPPORTED:
            raise TypeError(f"tensorfile.save: {name} has unsupported dtype {arr.dtype}")
        arrays[name] = arr
    save_file(arrays, str(path))


def load(path: str | Path) -> dict[str, np.ndarray]:
    """Read a safetensors file into writable NumPy arrays, one allocation each (the systems
    take them over without copying, so no array may be a read-only view of the file)."""
    with safe_open(str(path), framework="np") as f:
        return {name: np.array(f.get_tensor(name)) for name in f.keys()}
