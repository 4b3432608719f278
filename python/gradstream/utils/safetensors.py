"""`gradstream.utils.safetensors`: dicts of tensors to and from the safetensors format, with
the functions of ``safetensors.torch`` (`save_file`, `load_file`, `save`, `load`).

The format's reading and writing is the ``safetensors`` package's (its raw-bytes API, which,
unlike its NumPy one, carries bfloat16); this module only converts gradstream tensors.
"""

from __future__ import annotations

import os

import numpy as np
import safetensors

from .. import _core
from .._core import Tensor
from ..serialization.storages import TORCH_DTYPE_NAME, from_elements, to_elements

__all__ = ["save_file", "load_file", "save", "load"]

# The format's dtype names -> (gradstream dtype, NumPy type of the raw little-endian elements)
_DTYPES = {
    "F64": (_core.float64, "<f8"),
    "F32": (_core.float32, "<f4"),
    "F16": (_core.float16, "<f2"),
    "BF16": (_core.bfloat16, "<u2"),
    "I64": (_core.int64, "<i8"),
    "I32": (_core.int32, "<i4"),
    "U8": (_core.uint8, "u1"),
    "BOOL": (_core.bool, "?"),
}


def save(tensors: dict[str, Tensor], metadata: dict[str, str] | None = None) -> bytes:
    """The safetensors bytes of ``tensors`` (contiguous, each its own) and ``metadata``."""
    keep: list[np.ndarray] = []
    return bytes(safetensors.serialize(_specs(tensors, keep), metadata=metadata))


def save_file(
    tensors: dict[str, Tensor], filename: str | os.PathLike, metadata: dict[str, str] | None = None
) -> None:
    """Write ``tensors`` (contiguous, each its own) and ``metadata`` to ``filename``."""
    keep: list[np.ndarray] = []
    safetensors.serialize_file(_specs(tensors, keep), os.fspath(filename), metadata=metadata)


def load(data: bytes) -> dict[str, Tensor]:
    """The tensors of safetensors bytes, on the CPU."""
    out = {}
    for name, view in sorted(safetensors.deserialize(data)):
        if view["dtype"] not in _DTYPES:
            raise TypeError(
                f"gradstream.utils.safetensors: tensor {name!r} has dtype {view['dtype']}, "
                "which gradstream has no tensor for"
            )
        dtype, elements = _DTYPES[view["dtype"]]
        array = np.frombuffer(view["data"], elements).reshape(view["shape"])
        out[name] = from_elements(array, dtype)
    return out


def load_file(filename: str | os.PathLike, device: str | int | _core.device = "cpu"):
    """The tensors of the safetensors file ``filename``, on ``device``."""
    with open(filename, "rb") as fh:
        tensors = load(fh.read())
    if isinstance(device, int):
        device = f"cuda:{device}"
    device = _core.device(str(device))
    if device.type == "cpu":
        return tensors
    return {name: t.to(device) for name, t in tensors.items()}


def _specs(tensors: dict[str, Tensor], keep: list[np.ndarray]) -> dict:
    if not isinstance(tensors, dict):
        raise ValueError(
            f"Expected a dict of [str, gradstream.Tensor] but received {type(tensors)}"
        )
    specs = {}
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise ValueError(
                f"Key `{name}` is invalid, expected gradstream.Tensor but received {type(t)}"
            )
        if not t.is_contiguous():
            raise ValueError(
                f"You are trying to save a non contiguous tensor: `{name}` which is not allowed. "
                "Call `.contiguous()` on it before saving."
            )
        elements = to_elements(t)
        elements = elements.astype(elements.dtype.newbyteorder("<"), copy=False)
        keep.append(elements)  # the raw API reads through the pointer while it writes
        dtype, shape = TORCH_DTYPE_NAME[t.dtype], tuple(t.shape)
        if hasattr(safetensors, "TensorSpec"):  # safetensors >= 0.8
            specs[name] = safetensors.TensorSpec(
                dtype=dtype, shape=shape, data_ptr=elements.ctypes.data, data_len=elements.nbytes
            )
        else:
            specs[name] = {"dtype": dtype, "shape": list(shape), "data": elements.tobytes()}
    return specs
