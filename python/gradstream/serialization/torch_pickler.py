"""The pickler of `save`: an object holding gradstream tensors pickled as ``torch.save``
pickles one holding torch tensors, so that ``torch.load`` (weights-only included) reads it.

A tensor becomes ``torch._utils._rebuild_tensor_v2(storage, 0, size, stride, requires_grad,
OrderedDict())`` and a Parameter ``torch._utils._rebuild_parameter(tensor, requires_grad,
OrderedDict())``, whose storage is a persistent id ``('storage', torch.<X>Storage, key,
location, numel)`` naming an archive record. torch is not imported: its globals are written
by name. gradstream cannot tell whether two tensors view one buffer, so each tensor gets its
own storage, holding its elements in C order.
"""

from __future__ import annotations

import pickle
from collections import OrderedDict

from .. import _core
from ..nn.parameter import Parameter
from ..size import Size
from .storages import STORAGE_NAME, TORCH_DTYPE_NAME, contiguous_strides


class TorchName:
    """A global of torch's (a rebuild function, a storage class, a dtype), pickled by name."""

    def __init__(self, module: str, name: str):
        self.module = module
        self.name = name

    def __call__(self, *args, **kwargs):
        raise TypeError(f"{self.module}.{self.name} stands in for torch's in a pickle only")


_NAMES: dict[tuple[str, str], TorchName] = {}


def torch_name(module: str, name: str) -> TorchName:
    # One object per name, so the pickle's memo writes each global once.
    return _NAMES.setdefault((module, name), TorchName(module, name))


class StorageRef:
    """A storage in the pickle: written as its persistent id."""

    def __init__(self, key: str, storage_type: TorchName, location: str, numel: int):
        self.pid = ("storage", storage_type, key, location, numel)


def _save_torch_name(pickler: TorchPickler, obj: TorchName) -> None:
    if pickler.proto >= 4:
        pickler.save(obj.module)
        pickler.save(obj.name)
        pickler.write(pickle.STACK_GLOBAL)
    else:
        pickler.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode())
    pickler.memoize(obj)


def _save_dtype(pickler: TorchPickler, obj) -> None:
    _save_torch_name(pickler, torch_name("torch", TORCH_DTYPE_NAME[obj]))


class TorchPickler(pickle._Pickler):
    """Pickles ``obj``; the tensors' elements are left in ``storages`` (key -> tensor) for the
    archive. The Python pickler, since only it lets a global be written by name."""

    dispatch = pickle._Pickler.dispatch.copy()
    dispatch[TorchName] = _save_torch_name
    dispatch[_core.dtype] = _save_dtype

    def __init__(self, file, protocol: int):
        super().__init__(file, protocol)
        self.storages: dict[str, _core.Tensor] = {}

    def persistent_id(self, obj):
        return obj.pid if isinstance(obj, StorageRef) else None

    def reducer_override(self, obj):
        if isinstance(obj, Parameter):
            rebuild = torch_name("torch._utils", "_rebuild_parameter")
            return rebuild, (obj.detach(), obj.requires_grad, OrderedDict())
        if isinstance(obj, _core.Tensor):
            return self._reduce_tensor(obj)
        if isinstance(obj, Size):
            return torch_name("torch", "Size"), (tuple(obj),)
        if isinstance(obj, _core.device):
            args = (obj.type,) if obj.index is None else (obj.type, obj.index)
            return torch_name("torch", "device"), args
        return NotImplemented

    def _reduce_tensor(self, t):
        key = str(len(self.storages))
        self.storages[key] = t.detach()
        storage_type = torch_name("torch", STORAGE_NAME[t.dtype])
        ref = StorageRef(key, storage_type, str(t.device), t.numel())
        size = tuple(t.shape)
        args = (ref, 0, size, contiguous_strides(size), t.requires_grad, OrderedDict())
        return torch_name("torch._utils", "_rebuild_tensor_v2"), args
