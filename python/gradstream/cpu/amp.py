"""`gradstream.cpu.amp`: PyTorch's deprecated CPU spellings of `autocast` and `GradScaler`."""

from __future__ import annotations

from .. import amp as _amp


class autocast(_amp.autocast):  # noqa: N801  (PyTorch's name)
    def __init__(self, enabled: bool = True, dtype=None, cache_enabled: bool = True):
        from .. import _core

        super().__init__(
            "cpu",
            dtype=_core.bfloat16 if dtype is None else dtype,
            enabled=enabled,
            cache_enabled=cache_enabled,
        )


class GradScaler(_amp.GradScaler):
    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        super().__init__("cpu", init_scale, growth_factor, backoff_factor, growth_interval, enabled)
