"""`GradScaler`: dynamic loss scaling for float16 training, PyTorch's `torch.amp.GradScaler`.

`scale(loss)` multiplies the loss by the current scale so small float16 gradients do not
flush to zero; `step(optimizer)` unscales the gradients (once, also through an explicit
`unscale_` for clipping) and skips the step when any of them is inf or NaN; `update()`
backs the scale off after a skipped step and grows it after `growth_interval` clean ones.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from enum import Enum

from .. import _core


class _OptState(Enum):
    READY = 0
    UNSCALED = 1
    STEPPED = 2


class GradScaler:
    def __init__(
        self,
        device: str = "cuda",
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        enabled: bool = True,
    ) -> None:
        self._device = device
        if device == "cuda" and enabled and _core._cuda_device_count() == 0:
            warnings.warn(
                "torch.cuda.amp.GradScaler is enabled, but CUDA is not available.  Disabling.",
                stacklevel=2,
            )
            enabled = False
        self._enabled = bool(enabled)
        if self._enabled:
            if growth_factor <= 1.0:
                raise AssertionError("The growth factor must be > 1.0.")
            if backoff_factor >= 1.0:
                raise AssertionError("The backoff factor must be < 1.0.")
        self._scale = float(init_scale)
        self._growth_factor = float(growth_factor)
        self._backoff_factor = float(backoff_factor)
        self._growth_interval = int(growth_interval)
        self._growth_tracker = 0
        self._per_optimizer: dict[int, dict] = {}

    # -- scaling ------------------------------------------------------------------------

    def scale(self, outputs):
        """`outputs` (a tensor or nested lists/tuples of them) times the current scale."""
        if not self._enabled:
            return outputs
        if isinstance(outputs, _core.Tensor):
            return outputs * self._scale
        if isinstance(outputs, Iterable) and not isinstance(outputs, (str, bytes)):
            scaled = [self.scale(o) for o in outputs]
            return type(outputs)(scaled) if isinstance(outputs, (list, tuple)) else scaled
        raise ValueError("outputs must be a Tensor or an iterable of Tensors")

    def _state(self, optimizer) -> dict:
        return self._per_optimizer.setdefault(
            id(optimizer), {"stage": _OptState.READY, "found_inf": False}
        )

    def unscale_(self, optimizer) -> None:
        """Divide `optimizer`'s gradients by the scale in place, and note any inf or NaN."""
        if not self._enabled:
            return
        if getattr(optimizer, "in_backward", False):
            raise RuntimeError(
                "GradScaler.unscale_: this optimizer steps inside backward (in_backward=True), "
                "so its gradients are consumed before they can be unscaled; use a plain "
                "optimizer with GradScaler"
            )
        state = self._state(optimizer)
        if state["stage"] is _OptState.UNSCALED:
            raise RuntimeError(
                "unscale_() has already been called on this optimizer since the last update()."
            )
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("unscale_() is being called after step().")
        inv_scale = 1.0 / self._scale
        found_inf = False
        for group in optimizer.param_groups:
            for p in group["params"]:
                g = p.grad
                if g is None:
                    continue
                if g.dtype == _core.float16:
                    raise ValueError("Attempting to unscale FP16 gradients.")
                if not bool(_core.isfinite(g).all()):
                    found_inf = True
                g.mul_(inv_scale)
        state["found_inf"] = found_inf
        state["stage"] = _OptState.UNSCALED

    def step(self, optimizer, *args, **kwargs):
        """Unscale (unless `unscale_` already did) and step, unless a gradient was not finite."""
        if not self._enabled:
            return optimizer.step(*args, **kwargs)
        if "closure" in kwargs:
            raise RuntimeError("Closure use is not currently supported if GradScaler is enabled.")
        state = self._state(optimizer)
        if state["stage"] is _OptState.STEPPED:
            raise RuntimeError("step() has already been called since the last update().")
        if state["stage"] is _OptState.READY:
            self.unscale_(optimizer)
        result = None if state["found_inf"] else optimizer.step(*args, **kwargs)
        state["stage"] = _OptState.STEPPED
        return result

    def update(self, new_scale=None) -> None:
        """Back off after a skipped step, grow after `growth_interval` clean ones."""
        if not self._enabled:
            return
        if new_scale is not None:
            if isinstance(new_scale, _core.Tensor):
                new_scale = new_scale.item()
            self._scale = float(new_scale)
        else:
            if not self._per_optimizer:
                raise AssertionError("No inf checks were recorded prior to update.")
            if any(s["found_inf"] for s in self._per_optimizer.values()):
                self._scale *= self._backoff_factor
                self._growth_tracker = 0
            else:
                self._growth_tracker += 1
                if self._growth_tracker == self._growth_interval:
                    self._scale *= self._growth_factor
                    self._growth_tracker = 0
        self._per_optimizer = {}

    # -- settings and state ---------------------------------------------------------------

    def get_scale(self) -> float:
        return self._scale if self._enabled else 1.0

    def get_growth_factor(self) -> float:
        return self._growth_factor

    def set_growth_factor(self, new_factor: float) -> None:
        self._growth_factor = float(new_factor)

    def get_backoff_factor(self) -> float:
        return self._backoff_factor

    def set_backoff_factor(self, new_factor: float) -> None:
        self._backoff_factor = float(new_factor)

    def get_growth_interval(self) -> int:
        return self._growth_interval

    def set_growth_interval(self, new_interval: int) -> None:
        self._growth_interval = int(new_interval)

    def is_enabled(self) -> bool:
        return self._enabled

    def state_dict(self) -> dict:
        if not self._enabled:
            return {}
        return {
            "scale": self._scale,
            "growth_factor": self._growth_factor,
            "backoff_factor": self._backoff_factor,
            "growth_interval": self._growth_interval,
            "_growth_tracker": self._growth_tracker,
        }

    def load_state_dict(self, state_dict: dict) -> None:
        if not self._enabled:
            return
        if len(state_dict) == 0:
            raise RuntimeError(
                "The source state dict is empty, possibly because it was saved "
                "from a disabled instance of GradScaler."
            )
        self._scale = float(state_dict["scale"])
        self._growth_factor = float(state_dict["growth_factor"])
        self._backoff_factor = float(state_dict["backoff_factor"])
        self._growth_interval = int(state_dict["growth_interval"])
        self._growth_tracker = int(state_dict["_growth_tracker"])
