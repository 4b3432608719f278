"""`gradstream.cuda.amp`: PyTorch's older spelling of `gradstream.amp` for CUDA."""

from __future__ import annotations

import functools

from ..amp import GradScaler as _GradScaler
from ..amp import autocast as _autocast


class autocast(_autocast):  # noqa: N801  (PyTorch's name)
    """`gradstream.autocast("cuda", ...)`."""

    def __init__(self, enabled: bool = True, dtype=None, cache_enabled=None):
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)


class GradScaler(_GradScaler):
    """`gradstream.amp.GradScaler("cuda", ...)`."""

    def __init__(self, *args, **kwargs):
        super().__init__("cuda", *args, **kwargs)


def custom_fwd(fwd=None, *, cast_inputs=None):
    """Accepted for compatibility: runs `fwd` as it is."""
    if fwd is None:
        return functools.partial(custom_fwd, cast_inputs=cast_inputs)
    return fwd


def custom_bwd(bwd):
    return bwd
