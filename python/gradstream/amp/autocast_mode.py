"""`autocast`: run the products of a region in a lower-precision dtype, as PyTorch does.

Inside ``with gradstream.autocast("cpu", dtype=gradstream.bfloat16):`` the ops on PyTorch's
CPU lower-precision list (``matmul``, ``mm``, ``bmm``, ``addmm``, ``linear``, convolutions,
``scaled_dot_product_attention``) cast their float32 operands to ``dtype`` with recorded
casts, so the activations saved from there on take half the bytes; the losses (PyTorch's
CPU float32 list) cast their operands back to float32. float64 tensors are never cast.
Gradients reach float32 leaves in float32. The state is per thread, as in PyTorch; the
casts themselves happen in the Rust ops.
"""

from __future__ import annotations

import functools
import threading
import warnings

from .. import _core

# The lower-precision dtypes autocast runs in, on the CPU as on CUDA.
_CPU_DTYPES = (_core.bfloat16, _core.float16)


class _Settings(threading.local):
    """Per thread: the dtype each device type's autocast uses, and whether it is on."""

    def __init__(self) -> None:
        self.dtype = {"cpu": _core.bfloat16, "cuda": _core.float16}
        self.enabled = {"cpu": False, "cuda": False}


_settings = _Settings()


def _check_device_type(device_type) -> str:
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type not in _settings.dtype:
        _core.device(device_type)  # an unknown device type: the device parser's error
        raise RuntimeError(f"User specified an unsupported autocast device_type '{device_type}'")
    return device_type


def _apply() -> None:
    """Push this thread's state to the Rust ops, which cast by each tensor's device type."""

    def on(d):
        return _settings.dtype[d] if _settings.enabled[d] else None

    _core._set_autocast_dtypes(on("cpu"), on("cuda"))


def _cuda_available() -> bool:
    return _core._cuda_device_count() > 0


def is_autocast_available(device_type: str) -> bool:
    return device_type == "cpu" or (device_type == "cuda" and _cuda_available())


def is_autocast_enabled(device_type: str = "cuda") -> bool:
    return _settings.enabled[_check_device_type(device_type)]


def set_autocast_enabled(device_type: str, enabled: bool) -> None:
    _settings.enabled[_check_device_type(device_type)] = bool(enabled)
    _apply()


def get_autocast_dtype(device_type: str):
    return _settings.dtype[_check_device_type(device_type)]


def set_autocast_dtype(device_type: str, dtype) -> None:
    _settings.dtype[_check_device_type(device_type)] = dtype
    _apply()


def is_autocast_cpu_enabled() -> bool:
    return is_autocast_enabled("cpu")


def get_autocast_cpu_dtype():
    return get_autocast_dtype("cpu")


class autocast:  # noqa: N801  (PyTorch's name)
    """A context manager (or decorator) that turns autocast on for ``device_type``."""

    def __init__(self, device_type: str, dtype=None, enabled: bool = True, cache_enabled=None):
        self.device = _check_device_type(device_type)
        self.fast_dtype = get_autocast_dtype(self.device) if dtype is None else dtype
        self._cache_enabled = True if cache_enabled is None else bool(cache_enabled)
        if self.device == "cuda" and enabled and not _cuda_available():
            warnings.warn(
                "User provided device_type of 'cuda', but CUDA is not available. Disabling",
                stacklevel=2,
            )
            enabled = False
        if self.device == "cpu" and enabled and self.fast_dtype not in _CPU_DTYPES:
            warnings.warn(
                "In CPU autocast, but the target dtype is not supported. Disabling autocast.\n"
                "CPU Autocast only supports dtype of torch.bfloat16, torch.float16 currently.",
                stacklevel=2,
            )
            enabled = False
        if self.device == "cuda" and enabled and self.fast_dtype not in _CPU_DTYPES:
            warnings.warn(
                "In CUDA autocast, but the target dtype is not supported. Disabling autocast.\n"
                "CUDA Autocast only supports dtypes of torch.float16 and torch.bfloat16 "
                "currently.",
                stacklevel=2,
            )
            enabled = False
        self._enabled = bool(enabled)
        self._saved: list[tuple[bool, object]] = []

    def __enter__(self):
        self._saved.append((_settings.enabled[self.device], _settings.dtype[self.device]))
        _settings.enabled[self.device] = self._enabled
        _settings.dtype[self.device] = self.fast_dtype
        _apply()
        return self

    def __exit__(self, exc_type, exc, tb) -> bool:
        _settings.enabled[self.device], _settings.dtype[self.device] = self._saved.pop()
        _apply()
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def decorated(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return decorated


def float32_under_autocast(fn):
    """Run `fn` with its lower-precision floating tensor arguments cast to float32 while an
    autocast region is active (PyTorch's float32 list: the losses)."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if not _core._autocast_active():
            return fn(*args, **kwargs)
        return fn(*(_up(a) for a in args), **{k: _up(v) for k, v in kwargs.items()})

    return wrapper


def _up(value):
    if isinstance(value, _core.Tensor) and value.dtype in _CPU_DTYPES:
        return value.float()
    return value
