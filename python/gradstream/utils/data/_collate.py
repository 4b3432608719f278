"""`default_collate` (a list of samples -> one batch) and `default_convert` (one sample, as is,
with NumPy arrays made tensors)."""

from __future__ import annotations

import copy
from collections.abc import Mapping, MutableMapping, Sequence

import numpy as np

import gradstream

__all__ = ["default_collate", "default_convert"]

_COLLATE_ERROR = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; found {}"
)


def _is_namedtuple(obj) -> bool:
    return isinstance(obj, tuple) and hasattr(obj, "_fields")


def _has_strings(array: np.ndarray) -> bool:
    return array.dtype.kind in "SaUO"


def _rebuild_mapping(elem: Mapping, values: dict):
    """A mapping of `elem`'s type holding `values`, or a plain dict when that type can't be
    made from one."""
    if isinstance(elem, MutableMapping):
        clone = copy.copy(elem)
        clone.update(values)
        return clone
    try:
        return type(elem)(values)
    except TypeError:
        return values


def default_collate(batch):
    """Merges a list of samples into a batch, recursively, as PyTorch's `default_collate`.

    Tensors are stacked along a new first dimension; NumPy arrays become tensors and are
    stacked; Python floats, ints and bools become float64, int64 and bool tensors; strings stay
    a sequence; mappings, named tuples and sequences are collated field by field (a tuple's
    fields come back as a list).
    """
    elem = batch[0]
    if isinstance(elem, gradstream.Tensor):
        return gradstream.stack(list(batch), 0)
    if isinstance(elem, np.ndarray | np.memmap):
        if _has_strings(elem):
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return default_collate([gradstream.as_tensor(b) for b in batch])
    if isinstance(elem, np.generic) and not isinstance(elem, np.str_ | np.bytes_):
        return gradstream.as_tensor(np.asarray(batch))
    if isinstance(elem, bool):
        return gradstream.tensor(list(batch), dtype=gradstream.bool)
    if isinstance(elem, float):
        return gradstream.tensor(list(batch), dtype=gradstream.float64)
    if isinstance(elem, int):
        return gradstream.tensor(list(batch), dtype=gradstream.int64)
    if isinstance(elem, str | bytes):
        return batch
    if isinstance(elem, Mapping):
        return _rebuild_mapping(elem, {k: default_collate([d[k] for d in batch]) for k in elem})
    if _is_namedtuple(elem):
        return type(elem)(*(default_collate(field) for field in zip(*batch, strict=True)))
    if isinstance(elem, Sequence):
        size = len(elem)
        if any(len(e) != size for e in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(field) for field in zip(*batch, strict=True)]
        if isinstance(elem, tuple):
            return fields
        try:
            return type(elem)(fields)
        except TypeError:
            return fields
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def default_convert(data):
    """One sample as is, with NumPy arrays and scalars made tensors (recursively through
    mappings, named tuples and sequences; a tuple comes back as a list). What `DataLoader`
    applies when `batch_size=None`."""
    if isinstance(data, gradstream.Tensor):
        return data
    if isinstance(data, np.ndarray | np.generic) and not isinstance(data, np.str_ | np.bytes_):
        if isinstance(data, np.ndarray) and _has_strings(data):
            return data
        return gradstream.as_tensor(np.asarray(data))
    if isinstance(data, str | bytes):
        return data
    if isinstance(data, Mapping):
        return _rebuild_mapping(data, {k: default_convert(v) for k, v in data.items()})
    if _is_namedtuple(data):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, Sequence):
        try:
            return type(data)([default_convert(d) for d in data])
        except TypeError:
            return [default_convert(d) for d in data]
    return data
