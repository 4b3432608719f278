"""`gradstream.cuda`: the CUDA devices this process sees, their memory, and waiting for them.

A build without CUDA (the default `pip install .`), or a machine without a driver or a GPU,
sees none: `is_available()` is False, the memory counters read 0 as PyTorch's do before CUDA
is used, and tensors live on the CPU. The CUDA wheel (`tools/build-cuda-wheel.sh`) sees the
machine's GPUs.

Memory: `memory_allocated` and `max_memory_allocated` are gradstream's exact count of the
bytes its tensors hold on the device (by category in `gradstream.memory`);
`memory_reserved` is what the device's memory pool holds (in use and cached), from which
every allocation is served; `mem_get_info` is the driver's view of the whole device.
"""

import time as _time  # private: `dir(gradstream.cuda)` is its API

from .. import _core
from . import amp as amp

# one class with gradstream.OutOfMemoryError, as torch.cuda's is torch's
OutOfMemoryError = _core.OutOfMemoryError

__all__ = [
    "Event",
    "OutOfMemoryError",
    "amp",
    "current_device",
    "device",
    "device_count",
    "empty_cache",
    "get_device_capability",
    "get_device_name",
    "is_available",
    "manual_seed",
    "manual_seed_all",
    "max_memory_allocated",
    "max_memory_reserved",
    "mem_get_info",
    "memory_allocated",
    "memory_reserved",
    "memory_stats",
    "reset_max_memory_allocated",
    "reset_peak_memory_stats",
    "set_device",
    "set_per_process_memory_fraction",
    "synchronize",
]


def is_available() -> bool:
    return _core._cuda_device_count() > 0


def device_count() -> int:
    return _core._cuda_device_count()


def current_device() -> int:
    return _core._cuda_current_device()


def _index(device) -> int:
    """The index a `device=` argument names (None: the current device)."""
    if device is None:
        return current_device()
    if isinstance(device, int):
        return device
    d = _core.device(device)
    if d.type != "cuda":
        raise ValueError(f"Expected a cuda device, but got: {d}")
    return current_device() if d.index is None else d.index


def _device(device):
    return _core.device("cuda", _index(device))


def set_device(device) -> None:
    _core._cuda_set_device(_index(device))


class device:  # noqa: N801  (PyTorch's name)
    """A context manager that makes `device` the current CUDA device inside it."""

    def __init__(self, device) -> None:
        self.idx = -1 if device is None else _index(device)
        self.prev = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc) -> bool:
        if self.prev >= 0:
            set_device(self.prev)
        return False


def get_device_name(device=None) -> str:
    return _core._cuda_device_name(_index(device))


def get_device_capability(device=None) -> tuple[int, int]:
    return tuple(_core._cuda_capability(_index(device)))


def synchronize(device=None) -> None:
    """Wait for every kernel queued on the device (nothing to wait for without CUDA)."""
    if is_available():
        _core._cuda_synchronize(_index(device))


def manual_seed(seed: int) -> None:
    """Seed the generator every draw is made with: gradstream's generators draw on the
    host for every device, so one seed makes CPU and CUDA draws repeatable alike."""
    _core.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


# ---------------------------------------------------------------- memory


def memory_allocated(device=None) -> int:
    """Exact bytes of gradstream tensors on the device (0 without CUDA)."""
    return _core._memory_allocated(_device(device)) if is_available() else 0


def max_memory_allocated(device=None) -> int:
    return _core._max_memory_allocated(_device(device)) if is_available() else 0


def reset_peak_memory_stats(device=None) -> None:
    if is_available():
        _core._reset_peak_memory_stats(_device(device))


def reset_max_memory_allocated(device=None) -> None:
    reset_peak_memory_stats(device)


def memory_reserved(device=None) -> int:
    """Bytes the device's memory pool holds, in use and cached."""
    return _core._cuda_reserved(_index(device)) if is_available() else 0


def max_memory_reserved(device=None) -> int:
    """The pool's high-water mark is not tracked: its current size."""
    return memory_reserved(device)


def empty_cache() -> None:
    """Give the pool's cached, unused memory back to the driver."""
    if is_available():
        _core._cuda_empty_cache(current_device())


def mem_get_info(device=None) -> tuple[int, int]:
    """`(free, total)` bytes of the device, as the driver sees them."""
    return tuple(_core._cuda_mem_get_info(_index(device)))


def memory_stats(device=None) -> dict[str, int]:
    """`gradstream.memory.memory_stats` for the device ({} without CUDA, as PyTorch's before
    CUDA is used)."""
    if not is_available():
        return {}
    from .. import memory

    return memory.memory_stats(_device(device))


def set_per_process_memory_fraction(fraction: float, device=None) -> None:
    """Cap gradstream's tensors on the device at `fraction` of its memory: a tensor that
    would pass the cap raises `OutOfMemoryError` (as PyTorch's caching allocator does)."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    _, total = mem_get_info(device)
    _core._set_memory_limit(_device(device), int(fraction * total))


class Event:
    """A point in the device's stream, for timing: `record()` waits for the device first,
    so `elapsed_time` measures the work between two records (with the waits)."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess=False):
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream=None) -> None:
        synchronize()
        self._time = _time.perf_counter()

    def synchronize(self) -> None:
        synchronize()

    def wait(self, stream=None) -> None:
        synchronize()

    def query(self) -> bool:
        return True

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event's record to `end_event`'s."""
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._time - self._time) * 1000.0
