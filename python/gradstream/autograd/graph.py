"""`gradstream.autograd.graph`: what the backward graph keeps, and where.

`saved_tensors_hooks(pack_hook, unpack_hook)` works as PyTorch's: under it, every
tensor an op saves for backward (including `Function.save_for_backward`) is passed to
`pack_hook` when it is saved, only what `pack_hook` returns is kept, and `unpack_hook`
gives the tensor back when backward needs it (once per saved tensor per backward). The
innermost context applies. Exceptions raised by a hook propagate unchanged: from the op
that saved (pack) or from `backward()` (unpack).

Built on it, opt-in policies:

- `save_in_bfloat16()`: float32/float64 saved tensors kept in bfloat16 (half the bytes
  of float32).
- `save_on_cpu()` / `offload_to_host()`: saved tensors moved into NumPy arrays.
- `save_to_disk(directory)`: saved tensors written to files, read back in backward.

And one default: relu and threshold save 1 bit per element (`set_relu_bitmask`).

What the hooks see. gradstream differs from PyTorch in two ways:

- `pack_hook` receives a tensor without history that shares the saved tensor's buffer
  (PyTorch passes the tensor itself). Its version counter is still checked in backward.
- relu and threshold save a bit mask, not their output: the hooks receive it as a
  uint8 tensor of shape `[ceil(n / 8)]` (bit `i % 8` of byte `i / 8` is element `i`).
  The policies below store it like any other saved tensor (bfloat16 leaves it as is).

`unpack_hook` must return a tensor of the saved tensor's shape and dtype, else backward
raises a RuntimeError naming both.

The built-in policies keep tensors whose buffer is a parameter's (the weight a Linear
saves) as they are: a parameter is alive anyway, a copy would add memory.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import _core

__all__ = [
    "saved_tensors_hooks",
    "save_in_bfloat16",
    "save_on_cpu",
    "offload_to_host",
    "save_to_disk",
    "set_relu_bitmask",
    "relu_bitmask_enabled",
    "relu_bitmask",
]


class saved_tensors_hooks:  # noqa: N801  (PyTorch's name)
    """Pack every tensor saved for backward with `pack_hook`, unpack with `unpack_hook`.

    Args:
        pack_hook: `pack_hook(tensor) -> Any`, called when an op saves `tensor`.
        unpack_hook: `unpack_hook(packed) -> Tensor`, called when backward needs it; must
            return a tensor of the saved tensor's shape and dtype.

    Example::

        with saved_tensors_hooks(lambda t: t.numpy(), gradstream.from_numpy):
            loss = model(x).sum()
        loss.backward()
    """

    def __init__(self, pack_hook: Callable[[Any], Any], unpack_hook: Callable[[Any], Any]):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def _push(self) -> None:
        _core._push_saved_tensors_hooks(self.pack_hook, self.unpack_hook)

    def __enter__(self):
        self._push()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        _core._pop_saved_tensors_hooks()
        if exc_type is None:
            # A pack hook that failed in an op whose result never reached Python.
            _core._raise_saved_tensors_pack_error()
        else:
            try:
                _core._raise_saved_tensors_pack_error()
            except BaseException:  # noqa: S110  (the exception already propagating wins)
                pass


class save_in_bfloat16(saved_tensors_hooks):  # noqa: N801
    """Keep float32/float64 saved tensors in bfloat16; backward converts them back.

    Saved activations take half the bytes of float32 (a quarter of float64). Gradients
    change: bfloat16 keeps 8 significant bits, so each saved value is off by up to
    2^-9 relative, and the gradients computed from them by about that much. Measured
    by `benches/saved_activations.py` (max over parameters of max|g16 - g32| /
    max|g32|): 1.5e-3 on an 8-layer ReLU MLP (width 1024, batch 256), 1.4e-3 on its
    residual variant, 2.2e-3 on a tiny NeRF-like MLP; PyTorch with bf16 pack hooks
    gives the same order (1.9e-3, 1.5e-3). Fine for training with SGD/Adam noise; not
    for gradient checks. On that MLP the saved activations drop from 8.25 MiB (masks)
    to 4.25 MiB. Half-precision, integer and bool saved tensors (and relu's bit
    masks) are kept as they are. Runs natively: no Python call per saved tensor.
    """

    def __init__(self):
        super().__init__(None, None)

    def _push(self) -> None:
        _core._push_saved_tensors_bf16()


def _to_host(t):
    if _core._holds_parameter(t):  # alive anyway: a copy would add memory, not save it
        return t
    if t.device.type != "cpu":  # a device's tensor moves to host memory, as in PyTorch
        return (t.to("cpu"), t.device)
    if t.dtype == _core.bfloat16:  # NumPy has no bfloat16: float32 holds it exactly
        return (t.float().numpy(), t.dtype)
    return (t.numpy(), t.dtype)


def _from_host(packed):
    if isinstance(packed, _core.Tensor):
        return packed
    if isinstance(packed[0], _core.Tensor):
        host, device = packed
        return host.to(device)
    arr, dtype = packed
    t = _core.from_numpy(arr)
    return t if t.dtype == dtype else t.to(dtype)


class save_on_cpu(saved_tensors_hooks):  # noqa: N801
    """Move saved tensors to host memory until backward needs them.

    A CUDA tensor moves to a CPU tensor (as PyTorch's hook does), so the device holds none
    of the saved activations. A CPU tensor's bytes stay in the same RAM: they are held by
    NumPy instead of gradstream, so `gradstream.memory` no longer counts them, and each one
    costs a copy at save and at backward; to really lower a CPU process's memory, use
    `save_to_disk`. `pin_memory` is accepted and ignored.
    """

    def __init__(self, pin_memory: bool = False):
        super().__init__(_to_host, _from_host)


offload_to_host = save_on_cpu


class _Directory:
    """A temporary directory removed once no saved tensor in it remains."""

    def __init__(self, path: str | None):
        self.owned = path is None
        self.path = tempfile.mkdtemp(prefix="gradstream-saved-") if path is None else path
        if self.owned:
            weakref.finalize(self, shutil.rmtree, self.path, True)
        else:
            os.makedirs(self.path, exist_ok=True)


class _FileTensor:
    """One saved tensor in a file, deleted when the graph releases it."""

    def __init__(self, directory: _Directory, t):
        self.directory = directory  # keeps the directory alive while the file exists
        self.dtype, self.device = t.dtype, t.device
        arr = t.float().numpy() if t.dtype == _core.bfloat16 else t.numpy()
        fd, self.path = tempfile.mkstemp(suffix=".npy", dir=directory.path)
        try:
            with os.fdopen(fd, "wb") as f:
                np.save(f, arr, allow_pickle=False)
        except BaseException:  # a full disk: no half-written file is left behind
            _remove(self.path)
            raise
        weakref.finalize(self, _remove, self.path)

    def load(self):
        t = _core.from_numpy(np.load(self.path, allow_pickle=False))
        return t.to(device=self.device, dtype=self.dtype)


def _to_file(directory: _Directory, t):
    if _core._holds_parameter(t):  # alive anyway: a copy would add memory, not save it
        return t
    return _FileTensor(directory, t)


def _from_file(packed):
    return packed if isinstance(packed, _core.Tensor) else packed.load()


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


class save_to_disk(saved_tensors_hooks):  # noqa: N801
    """Write each saved tensor to a `.npy` file; backward reads it back.

    The process's memory really drops by the saved activations (less the files' page
    cache, which the OS reclaims as needed), at the cost of a write per saved tensor in
    the forward and a read in the backward. A file is deleted when the graph releases
    its tensor (after its node's backward, unless `retain_graph=True`).

    Args:
        directory: where the files go; by default a fresh temporary directory, removed
            once the last of its files is.
    """

    def __init__(self, directory: str | os.PathLike | None = None):
        self.directory = _Directory(None if directory is None else os.fspath(directory))
        d = self.directory
        super().__init__(lambda t: _to_file(d, t), _from_file)


def set_relu_bitmask(enabled: bool) -> bool:
    """Whether relu and threshold save a 1-bit-per-element mask for backward (default
    True) or, as PyTorch does, their output (relu) or input (threshold). Process-wide;
    returns the previous setting."""
    return _core._set_relu_bitmask(bool(enabled))


def relu_bitmask_enabled() -> bool:
    return _core._relu_bitmask_enabled()


class relu_bitmask:  # noqa: N801
    """`with relu_bitmask(False): ...`: `set_relu_bitmask` for a block."""

    def __init__(self, enabled: bool):
        self.enabled = bool(enabled)

    def __enter__(self):
        self._prev = set_relu_bitmask(self.enabled)
        return self

    def __exit__(self, *exc) -> None:
        set_relu_bitmask(self._prev)
