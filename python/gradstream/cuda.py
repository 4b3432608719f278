"""`gradstream.cuda`: the CUDA devices this process sees.

A build without CUDA (the default `pip install .`), or a machine without a driver or a GPU,
sees none: `is_available()` is False and tensors live on the CPU.
"""

from . import _core


def is_available() -> bool:
    return _core._cuda_device_count() > 0


def device_count() -> int:
    return _core._cuda_device_count()


def current_device() -> int:
    return _core._cuda_current_device()


def set_device(device) -> None:
    d = _core.device(device)
    _core._cuda_set_device(0 if d.index is None else d.index)


def manual_seed(seed: int) -> None:
    """Seeds the generator every draw is made with (gradstream's generators draw on the
    host for every device)."""
    _core.manual_seed(seed)


def manual_seed_all(seed: int) -> None:
    manual_seed(seed)


def synchronize(device=None) -> None:
    """Nothing to wait for without a CUDA device."""
