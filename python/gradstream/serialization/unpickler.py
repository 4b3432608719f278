"""The unpickler of a PyTorch checkpoint's pickle: torch's rebuild functions, storage classes,
dtypes, ``torch.Size`` and ``torch.device`` map to gradstream's own, so a file ``torch.save``
wrote loads as gradstream tensors without torch.

With ``weights_only=True`` (the default) nothing else is called but plain containers and
a few builtins, each checking its arguments, as in PyTorch's weights-only unpickler: any
other global is refused with a `pickle.UnpicklingError` naming it, before anything runs.
"""

from __future__ import annotations

import _compat_pickle
import codecs
import collections
import pickle
from collections.abc import Callable

from .. import _core
from ..nn.parameter import Parameter
from ..size import Size
from .plain_pickle import _SAFE_GLOBALS, _checked_collection, _is_dtype
from .readonly import ReadOnly, ReadOnlyCall
from .storages import STORAGE_NAME, STORAGE_TYPES, UNTYPED, LoadedStorage, StorageType

# torch's dtype names (canonical and aliases) for the dtypes gradstream has.
_DTYPES = {
    "float32": _core.float32,
    "float": _core.float32,
    "float64": _core.float64,
    "double": _core.float64,
    "float16": _core.float16,
    "half": _core.float16,
    "bfloat16": _core.bfloat16,
    "int64": _core.int64,
    "long": _core.int64,
    "int32": _core.int32,
    "int": _core.int32,
    "uint8": _core.uint8,
    "bool": _core.bool,
}
# torch dtypes gradstream lacks: named in the error instead of being refused as unknown.
_MISSING_DTYPES = set(
    "int16 short int8 uint16 uint32 uint64 complex32 chalf complex64 cfloat complex128 cdouble "
    "float8_e4m3fn float8_e5m2 float8_e4m3fnuz float8_e5m2fnuz float8_e8m0fnu float4_e2m1fn_x2 "
    "qint8 quint8 qint32 quint4x2 quint2x4 bits8 bits16 bits1x8 bits2x4 bits4x2".split()
    + [f"int{n}" for n in range(1, 8)]
    + [f"uint{n}" for n in range(1, 8)]
)
# Tensors torch rebuilds in ways gradstream has no tensor for.
_UNSUPPORTED_REBUILDS = {
    "_rebuild_sparse_tensor": "a sparse tensor",
    "_rebuild_qtensor": "a quantized tensor",
    "_rebuild_nested_tensor": "a nested tensor",
    "_rebuild_wrapper_subclass": "a tensor subclass",
    "_rebuild_meta_tensor_no_storage": "a tensor on the meta device",
    "_rebuild_device_tensor_from_numpy": "a tensor of a device without storages",
    "_rebuild_device_tensor_from_cpu_tensor": "a tensor of a device without storages",
}


class _TypeName(ReadOnly):
    """``torch.Tensor`` / ``torch.nn.Parameter`` as `_rebuild_from_type_v2` receives them:
    a name, not a class the pickle could call."""

    __slots__ = ("name",)

    def __init__(self, name: str):
        self._init(name=name)


_TENSOR = _TypeName("torch.Tensor")
_PARAMETER = _TypeName("torch.nn.Parameter")


class _Anything:
    """What every global is in the first, metadata-only pass over a legacy file: calling,
    building or filling it does nothing."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        return _Anything()

    def __setstate__(self, state):
        pass

    def __setitem__(self, key, value):
        pass

    def append(self, item):
        pass

    def extend(self, items):
        pass


def _expect(what: str, value, types) -> None:
    if not isinstance(value, types):
        raise pickle.UnpicklingError(
            f"gradstream.load: {what} was rebuilt from a {type(value).__name__}; the "
            "checkpoint is corrupted"
        )


def _expect_ints(what: str, values) -> tuple[int, ...]:
    _expect(what, values, (tuple, list))
    for v in values:
        _expect(f"an element of {what}", v, int)
        if v < 0:
            raise pickle.UnpicklingError(f"gradstream.load: {what} holds {v}, below 0")
    return tuple(values)


def _checked_ordered_dict(kind):
    def build(items=()):
        _expect(f"a {kind.__name__}'s items", items, (list, tuple, dict))
        return kind(items)

    return build


def _checked_encode(text, encoding="utf-8"):
    # Protocol 2 pickles bytes as `_codecs.encode(text, "latin1")`.
    _expect("bytes", text, str)
    if encoding not in ("latin1", "latin-1"):
        raise pickle.UnpicklingError(
            f"gradstream.load: bytes encoded as {encoding!r}; the checkpoint is corrupted"
        )
    return codecs.encode(text, encoding)


def _checked_bytearray(data=b"", encoding=None):
    _expect("a bytearray's data", data, (bytes, str))
    return bytearray(data) if encoding is None else bytearray(data, encoding)


def _checked_size(dims=()):
    return Size(_expect_ints("a torch.Size", dims))


def _checked_device(kind, index=None):
    _expect("a device's type", kind, str)
    if index is not None:
        _expect("a device's index", index, int)
    return _core.device(kind) if index is None else _core.device(kind, index)


_CONTAINERS = {
    ("collections", "OrderedDict"): _checked_ordered_dict(collections.OrderedDict),
    ("collections", "Counter"): _checked_ordered_dict(collections.Counter),
    ("builtins", "set"): _checked_collection(set),
    ("builtins", "frozenset"): _checked_collection(frozenset),
    ("builtins", "bytearray"): _checked_bytearray,
    ("_codecs", "encode"): _checked_encode,
}
_BUILTINS = {("builtins", "complex"), ("builtins", "slice"), ("builtins", "range")}
# NumPy arrays and scalars, as the plain-pickle format of earlier gradstream versions allowed.
_NUMPY = {g for g in _SAFE_GLOBALS if g[0].startswith("numpy")}


def refusal(module: str, name: str) -> pickle.UnpicklingError:
    return pickle.UnpicklingError(
        f"gradstream.load: weights_only=True refuses the global {module}.{name}; load a file "
        "you trust with weights_only=False"
    )


def _py3_name(module: str, name: str) -> tuple[str, str]:
    # Protocol 2 pickles name Python 2's modules (`__builtin__.set`).
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


# (storage type, key, location, numel, view metadata or None) -> the storage
LoadStorage = Callable[[StorageType, str, str, int, object], LoadedStorage]


class CheckpointUnpickler(pickle.Unpickler):
    """Reads the pickle of a torch checkpoint; ``load_storage`` resolves its persistent ids.

    ``dry_run``: call nothing (every global is `_Anything`), only pass the storages it names
    to ``load_storage``; the legacy format needs their types before it can read their data.
    """

    def __init__(self, file, load_storage: LoadStorage, *, weights_only: bool, dry_run=False,
                 **kwargs):  # fmt: skip
        super().__init__(file, **kwargs)
        self._load_storage = load_storage
        self._weights_only = weights_only
        self._dry_run = dry_run
        # A class of this load's own, so that a BUILD on it changes no other load's.
        self._anything = type("_Anything", (_Anything,), {})
        self._rebuilds = {
            ("torch._utils", "_rebuild_tensor"): self._rebuild_tensor,
            ("torch._utils", "_rebuild_tensor_v2"): self._rebuild_tensor_v2,
            ("torch._utils", "_rebuild_tensor_v3"): self._rebuild_tensor_v3,
            ("torch._utils", "_rebuild_parameter"): self._rebuild_parameter,
            ("torch._utils", "_rebuild_parameter_with_state"): self._rebuild_parameter_with_state,
            ("torch._tensor", "_rebuild_from_type_v2"): self._rebuild_from_type_v2,
        }

    def find_class(self, module: str, name: str):
        if not (isinstance(module, str) and isinstance(name, str)):
            raise pickle.UnpicklingError("gradstream.load: a global's name is not a string")
        module, name = _py3_name(module, name)
        found = self._torch_global(module, name)
        if found is None:
            found = self._other_global(module, name)
        if self._dry_run and not isinstance(found, StorageType):
            return self._anything
        return found

    def _torch_global(self, module: str, name: str):
        rebuild = self._rebuilds.get((module, name))
        if rebuild is not None:
            return rebuild
        if module == "torch._utils" and name in _UNSUPPORTED_REBUILDS:
            raise RuntimeError(
                f"gradstream.load: the file holds {_UNSUPPORTED_REBUILDS[name]} (rebuilt by "
                f"torch._utils.{name}), which gradstream cannot load"
            )
        if name.endswith("Storage") and module in ("torch", "torch.cuda", "torch.storage"):
            if name == "UntypedStorage":
                return UNTYPED
            stype = STORAGE_TYPES.get(name)
            if stype is None:
                raise RuntimeError(f"gradstream.load: the file holds a {module}.{name}, unknown")
            return stype
        if module == "torch":
            if name in _DTYPES:
                return _DTYPES[name]
            if name in _MISSING_DTYPES:
                raise RuntimeError(
                    f"gradstream.load: the file holds torch.{name}; gradstream has no such dtype"
                )
            if name == "Size":
                return ReadOnlyCall(_checked_size)
            if name == "device":
                return ReadOnlyCall(_checked_device)
            if name == "Tensor":
                return _TENSOR
        if (module, name) == ("torch.nn.parameter", "Parameter"):
            return _PARAMETER
        return None

    def _other_global(self, module: str, name: str):
        checked = _CONTAINERS.get((module, name))
        if self._weights_only:
            if checked is not None:
                return ReadOnlyCall(checked)
            if (module, name) in _BUILTINS or (module, name) in _NUMPY:
                return super().find_class(module, name)
            if module == "numpy.dtypes" and "." not in name and _is_dtype(module, name):
                return super().find_class(module, name)
            raise refusal(module, name)
        return super().find_class(module, name)

    def persistent_load(self, pid):
        _expect("a persistent id", pid, tuple)
        if not pid:
            raise pickle.UnpicklingError("gradstream.load: an empty persistent id")
        typename = _ascii(pid[0])
        if typename == "module" and not self._weights_only and len(pid) > 1:
            return pid[1]  # legacy files of whole modules: the class itself
        if typename != "storage" or len(pid) not in (5, 6):
            raise pickle.UnpicklingError(
                f"gradstream.load: unknown persistent id {typename!r} of {len(pid)} fields"
            )
        stype, key, location, numel = pid[1:5]
        view = pid[5] if len(pid) == 6 else None
        _expect("a storage's type", stype, StorageType)
        key, location = _ascii(key), _ascii(location)
        _expect("a storage's key", key, str)
        _expect("a storage's location", location, str)
        _expect("a storage's size", numel, int)
        if numel < 0:
            raise pickle.UnpicklingError(f"gradstream.load: storage {key} has size {numel}")
        storage = self._load_storage(stype, key, location, numel, view)
        return _Anything() if self._dry_run else storage

    # torch._utils' rebuild functions, over gradstream storages and tensors.

    def _rebuild_tensor(self, storage, storage_offset, size, stride):
        _expect("a tensor's storage", storage, LoadedStorage)
        _expect("a tensor's storage offset", storage_offset, int)
        if storage_offset < 0:
            raise pickle.UnpicklingError(f"gradstream.load: storage offset {storage_offset}")
        size = _expect_ints("a tensor's size", size)
        stride = _expect_ints("a tensor's stride", stride)
        if len(size) != len(stride):
            raise pickle.UnpicklingError(
                f"gradstream.load: a tensor of size {list(size)} has strides {list(stride)}"
            )
        return storage.tensor(storage_offset, size, stride)

    def _rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad,
                           backward_hooks=None, metadata=None):  # fmt: skip
        t = self._rebuild_tensor(storage, storage_offset, size, stride)
        if metadata:
            raise RuntimeError(
                f"gradstream.load: a tensor carries torch metadata {sorted(metadata)!r} "
                "(conjugate or negative bits), which gradstream has no tensor for"
            )
        _expect("a tensor's requires_grad", requires_grad, bool)
        return t.requires_grad_(True) if requires_grad else t

    def _rebuild_tensor_v3(self, storage, storage_offset, size, stride, requires_grad,
                           backward_hooks, dtype, metadata=None):  # fmt: skip
        _expect("a tensor's storage", storage, LoadedStorage)
        _expect("a tensor's dtype", dtype, _core.dtype)
        storage = storage.retyped(STORAGE_TYPES[STORAGE_NAME[dtype]])
        return self._rebuild_tensor_v2(
            storage, storage_offset, size, stride, requires_grad, backward_hooks, metadata
        )

    def _rebuild_parameter(self, data, requires_grad, backward_hooks=None):
        _expect("a parameter's data", data, _core.Tensor)
        _expect("a parameter's requires_grad", requires_grad, bool)
        return Parameter(data, requires_grad)

    def _rebuild_parameter_with_state(self, data, requires_grad, backward_hooks, state):
        return _with_state(self._rebuild_parameter(data, requires_grad), state)

    def _rebuild_from_type_v2(self, func, new_type, args, state):
        if func not in self._rebuilds.values():
            raise pickle.UnpicklingError(
                f"gradstream.load: _rebuild_from_type_v2 of a {type(func).__name__}"
            )
        _expect("a tensor's type", new_type, _TypeName)
        _expect("a tensor's rebuild arguments", args, tuple)
        t = func(*args)
        if new_type is _PARAMETER and not isinstance(t, Parameter):
            t = Parameter(t, t.requires_grad)
        return _with_state(t, state)


def _with_state(t, state):
    """Python attributes a tensor carried (torch's `_set_obj_state`)."""
    if isinstance(state, tuple) and len(state) == 2:
        state, slots = state
        if slots:
            _expect("a tensor's slot state", slots, dict)
            state = {**(state or {}), **slots}
    if state:
        _expect("a tensor's state", state, dict)
        for key in state:
            _expect("a tensor attribute's name", key, str)
        vars(t).update(state)
    return t


def _ascii(value):
    # Python 2 pickles read with encoding="bytes" give these as bytes.
    return value.decode("ascii") if isinstance(value, bytes) else value
