"""Storages: the flat arrays of elements that PyTorch's checkpoints hold, one per record, and
the tensors (views: offset, sizes, strides) rebuilt from them.

A storage's element type is named by PyTorch's legacy storage classes (``torch.FloatStorage``
and so on). NumPy has no bfloat16, so bfloat16 elements travel as their raw 16 bits.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _core
from .readonly import ReadOnly


class StorageType(ReadOnly):
    """A PyTorch storage class (``torch.FloatStorage``) as the loader sees it: its dtype."""

    __slots__ = ("name", "torch_dtype", "dtype", "np_dtype")

    def __init__(self, name: str, torch_dtype: str, dtype, np_dtype):
        # dtype: the gradstream dtype, None where gradstream has none
        self._init(name=name, torch_dtype=torch_dtype, dtype=dtype, np_dtype=np.dtype(np_dtype))

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    def check_supported(self) -> None:
        if self.dtype is None:
            raise RuntimeError(
                f"gradstream.load: the file holds a {self!r} (torch.{self.torch_dtype}); "
                f"gradstream has no {self.torch_dtype} dtype"
            )


# (storage class, torch dtype, gradstream dtype, NumPy element type of the raw data)
_TABLE = [
    ("FloatStorage", "float32", _core.float32, "<f4"),
    ("DoubleStorage", "float64", _core.float64, "<f8"),
    ("HalfStorage", "float16", _core.float16, "<f2"),
    ("BFloat16Storage", "bfloat16", _core.bfloat16, "<u2"),
    ("LongStorage", "int64", _core.int64, "<i8"),
    ("IntStorage", "int32", _core.int32, "<i4"),
    ("ByteStorage", "uint8", _core.uint8, "u1"),
    ("BoolStorage", "bool", _core.bool, "?"),
    ("ShortStorage", "int16", None, "<i2"),
    ("CharStorage", "int8", None, "i1"),
    ("ComplexFloatStorage", "complex64", None, "<c8"),
    ("ComplexDoubleStorage", "complex128", None, "<c16"),
    ("QInt8Storage", "qint8", None, "i1"),
    ("QUInt8Storage", "quint8", None, "u1"),
    ("QInt32Storage", "qint32", None, "<i4"),
    ("QUInt4x2Storage", "quint4x2", None, "u1"),
    ("QUInt2x4Storage", "quint2x4", None, "u1"),
]
STORAGE_TYPES = {name: StorageType(name, tdt, dt, npdt) for name, tdt, dt, npdt in _TABLE}
# `torch.UntypedStorage` (bytes) rebuilds tensors through `_rebuild_tensor_v3`, which names
# the dtype itself.
UNTYPED = StorageType("UntypedStorage", "uint8", _core.uint8, "u1")
STORAGE_NAME = {st.dtype: name for name, st in STORAGE_TYPES.items() if st.dtype is not None}
TORCH_DTYPE_NAME = {st.dtype: st.torch_dtype for st in STORAGE_TYPES.values() if st.dtype}


class LoadedStorage(ReadOnly):
    """A storage read from a checkpoint: its elements as a 1-d NumPy array (read-only, maybe
    memory-mapped) and the device its tensors go to. It is also what a callable
    ``map_location(storage, location)`` receives and may return moved (``.cpu()``,
    ``.cuda()``, ``.to(device)``)."""

    __slots__ = ("stype", "elements", "device")

    def __init__(self, stype: StorageType, elements: np.ndarray, device):
        self._init(stype=stype, elements=elements, device=device)

    @property
    def dtype(self):
        return self.stype.dtype

    def size(self) -> int:
        return len(self.elements)

    def nbytes(self) -> int:
        return self.elements.nbytes

    def to(self, device) -> LoadedStorage:
        return LoadedStorage(self.stype, self.elements, _core.device(str(device)))

    def cpu(self) -> LoadedStorage:
        return self.to("cpu")

    def cuda(self, device=None) -> LoadedStorage:
        if device is None:
            return self.to("cuda")
        return self.to(device if isinstance(device, str) else f"cuda:{int(device)}")

    def retyped(self, stype: StorageType) -> LoadedStorage:
        """The same bytes read as elements of another type (`_rebuild_tensor_v3`)."""
        raw = self.elements.view(np.uint8)
        if len(raw) % stype.np_dtype.itemsize:
            raise RuntimeError(
                f"gradstream.load: a storage of {len(raw)} bytes cannot hold "
                f"torch.{stype.torch_dtype} elements of {stype.np_dtype.itemsize} bytes"
            )
        return LoadedStorage(stype, raw.view(stype.np_dtype), self.device)

    def tensor(self, offset: int, size: tuple[int, ...], stride: tuple[int, ...]):
        """The view ``(offset, size, stride)`` of this storage as a gradstream tensor."""
        self.stype.check_supported()
        elements = self.elements
        if math.prod(size) > 0:
            needed = offset + sum((n - 1) * s for n, s in zip(size, stride, strict=True)) + 1
            if needed > len(elements):
                item = elements.itemsize
                raise RuntimeError(
                    f"gradstream.load: setStorage: sizes {list(size)}, strides {list(stride)}, "
                    f"storage offset {offset}, and itemsize {item} requiring a storage size of "
                    f"{needed * item} are out of bounds for storage of size {elements.nbytes}"
                )
        view = np.lib.stride_tricks.as_strided(
            elements[min(offset, len(elements)) :],
            shape=size,
            strides=[s * elements.itemsize for s in stride],
            writeable=False,
        )
        t = from_elements(np.array(view, order="C"), self.stype.dtype)
        if t.device != self.device:
            t = t.to(self.device)
        return t


def from_elements(array: np.ndarray, dtype):
    """A gradstream tensor of ``dtype`` from its elements (bfloat16: their raw bits)."""
    if dtype is _core.bfloat16:
        widened = np.left_shift(array.astype(np.uint32), 16, out=np.empty(array.shape, np.uint32))
        widened = widened.view(np.float32)
        return _core.from_numpy(widened).to(_core.bfloat16)
    return _core.from_numpy(array.astype(array.dtype.newbyteorder("="), copy=False))


def to_elements(t) -> np.ndarray:
    """A tensor's elements in C order, as a contiguous NumPy array (bfloat16: raw bits)."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    if t.dtype is _core.bfloat16:
        bits = np.ascontiguousarray(t.float().numpy()).view(np.uint32) >> 16
        return bits.astype(np.uint16)
    return np.ascontiguousarray(t.numpy())


def contiguous_strides(size) -> tuple[int, ...]:
    strides = []
    step = 1
    for n in reversed(size):
        strides.append(step)
        step *= max(n, 1)
    return tuple(reversed(strides))
