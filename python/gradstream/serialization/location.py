"""`map_location`: where `load` puts each storage, given the location the file names for it.

The forms are PyTorch's: None (the saved location), a string or device (every storage
there), a dict from saved locations to others, or a callable ``f(storage, location)`` that
returns a storage (moved with ``.cpu()``/``.cuda()``/``.to()``) or None for the default.
gradstream builds every tensor on the CPU and moves it where this says. With no
``map_location``, a saved location gradstream has no device for here (a CUDA checkpoint on a
machine without CUDA) loads on the CPU; a device named by ``map_location`` must exist.
"""

from __future__ import annotations

from collections.abc import Callable

from .. import _core
from .storages import LoadedStorage

CPU = _core.device("cpu")


def restorer(map_location) -> Callable[[LoadedStorage, str], LoadedStorage]:
    """The function that places a storage loaded for ``location``."""
    if map_location is None:
        return lambda storage, location: storage.to(_saved_device(location))
    if isinstance(map_location, dict):
        table = {str(k): v for k, v in map_location.items()}

        def mapped(storage, location):
            target = table.get(location)
            if target is None:
                return storage.to(_saved_device(location))
            return storage.to(_named_device(target))

        return mapped
    if isinstance(map_location, (str, bytes, _core.device)) or _is_device(map_location):
        target = _named_device(map_location)
        return lambda storage, location: storage.to(target)
    if callable(map_location):

        def called(storage, location):
            result = map_location(storage, location)
            if result is None:
                return storage.to(_saved_device(location))
            if not isinstance(result, LoadedStorage):
                raise TypeError(
                    "gradstream.load: map_location(storage, location) returned a "
                    f"{type(result).__name__}; it must return the storage (moved with .cpu(), "
                    ".cuda() or .to(device)) or None"
                )
            _check_available(result.device)
            return result

        return called
    raise TypeError(
        "gradstream.load: map_location must be None, a string, a device, a dict or a callable, "
        f"not {type(map_location).__name__}"
    )


def _is_device(obj) -> bool:
    # A torch.device, recognised without importing torch.
    return type(obj).__name__ == "device" and hasattr(obj, "type") and hasattr(obj, "index")


def _named_device(spec) -> _core.device:
    if isinstance(spec, bytes):
        spec = spec.decode("ascii")
    device = _core.device(str(spec))
    _check_available(device)
    return device


def _saved_device(location: str) -> _core.device:
    try:
        device = _core.device(location)
    except (ValueError, RuntimeError, TypeError):
        return CPU
    return device if _available(device) else CPU


def _available(device: _core.device) -> bool:
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        from .. import cuda

        return cuda.is_available() and (device.index or 0) < cuda.device_count()
    return False


def _check_available(device: _core.device) -> None:
    if _available(device):
        return
    if device.type == "cuda":
        raise RuntimeError(
            f"gradstream.load: attempting to deserialize object on {str(device)!r} but "
            "gradstream.cuda.is_available() is False or there is no such device. If you are "
            "running on a CPU-only machine, please use gradstream.load with "
            "map_location='cpu' to map your storages to the CPU."
        )
    raise RuntimeError(
        f"gradstream.load: map_location names {str(device)!r}, a device gradstream cannot place "
        "tensors on; use map_location='cpu'"
    )
