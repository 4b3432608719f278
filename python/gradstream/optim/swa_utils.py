"""Stochastic weight averaging and exponential moving averages of a model's weights
(PyTorch's ``torch.optim.swa_utils``): `AveragedModel`, `SWALR`, `update_bn` and the
averaging functions."""

from __future__ import annotations

import itertools
import math
from copy import deepcopy

from .._core import div, tensor
from .._core import int64 as _long
from ..autograd.grad_mode import no_grad
from ..nn.modules.batchnorm import _BatchNorm
from ..nn.modules.module import Module
from .lr_scheduler import LRScheduler, _format_param

__all__ = [
    "AveragedModel",
    "update_bn",
    "SWALR",
    "get_ema_multi_avg_fn",
    "get_swa_multi_avg_fn",
    "get_ema_avg_fn",
    "get_swa_avg_fn",
]


def _check_decay(decay: float) -> None:
    if decay < 0.0 or decay > 1.0:
        raise ValueError(
            f"Invalid decay value {decay} provided. Please provide a value in [0,1] range."
        )


def get_ema_multi_avg_fn(decay: float = 0.999):
    """In place over lists: ``ema = decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    def ema_update(ema_param_list, current_param_list, _num_averaged) -> None:
        with no_grad():
            floating = ema_param_list[0].is_floating_point()
            for p_ema, p_model in zip(ema_param_list, current_param_list, strict=True):
                if floating:
                    p_ema.lerp_(p_model, 1 - decay)
                else:
                    p_ema.copy_(p_ema * decay + p_model * (1 - decay))

    return ema_update


def get_swa_multi_avg_fn():
    """In place over lists: the running mean ``avg += (current - avg) / (n + 1)``."""

    def swa_update(averaged_param_list, current_param_list, num_averaged) -> None:
        with no_grad():
            n = float(num_averaged)
            floating = averaged_param_list[0].is_floating_point()
            for p_avg, p_model in zip(averaged_param_list, current_param_list, strict=True):
                if floating:
                    p_avg.lerp_(p_model, 1 / (n + 1))
                else:
                    # PyTorch's integer addcdiv: C++ division, toward zero.
                    p_avg.add_(div(p_model - p_avg, int(n) + 1, rounding_mode="trunc"))

    return swa_update


def get_ema_avg_fn(decay: float = 0.999):
    """One tensor: ``decay * ema + (1 - decay) * current``."""
    _check_decay(decay)

    def ema_update(ema_param, current_param, num_averaged):
        with no_grad():
            return decay * ema_param + (1 - decay) * current_param

    return ema_update


def get_swa_avg_fn():
    """One tensor: the running mean ``avg + (current - avg) / (n + 1)``."""

    def swa_update(averaged_param, current_param, num_averaged):
        with no_grad():
            return averaged_param + (current_param - averaged_param) / (num_averaged + 1)

    return swa_update


def _by_dtype(mine: list, theirs: list) -> list[tuple[list, list]]:
    """The pairs grouped by dtype, as PyTorch hands them to a `multi_avg_fn`."""
    groups: dict = {}
    for a, b in zip(mine, theirs, strict=True):
        ga, gb = groups.setdefault(a.dtype, ([], []))
        ga.append(a)
        gb.append(b)
    return list(groups.values())


class AveragedModel(Module):
    """A copy of `model` whose parameters (and, with ``use_buffers=True``, buffers) are
    averaged over the models given to `update_parameters`: an equal-weight running mean
    by default (SWA), or `avg_fn` (one tensor at a time) / `multi_avg_fn` (lists, in place),
    such as `get_ema_multi_avg_fn(decay)`. The first update copies the model."""

    def __init__(
        self,
        model: Module,
        device=None,
        avg_fn=None,
        multi_avg_fn=None,
        use_buffers: bool = False,
    ) -> None:
        super().__init__()
        if avg_fn is not None and multi_avg_fn is not None:
            raise AssertionError("Only one of avg_fn and multi_avg_fn should be provided")
        self.module = deepcopy(model)
        if device is not None:
            self.module = self.module.to(device)
        self.register_buffer("n_averaged", tensor(0, dtype=_long))
        self.avg_fn = avg_fn
        self.multi_avg_fn = multi_avg_fn
        self.use_buffers = use_buffers

    def forward(self, *args, **kwargs):
        return self.module(*args, **kwargs)

    def _averaged(self, model: Module) -> tuple[list, list]:
        if self.use_buffers:
            mine = itertools.chain(self.module.parameters(), self.module.buffers())
            theirs = itertools.chain(model.parameters(), model.buffers())
        else:
            mine, theirs = self.parameters(), model.parameters()
        pairs = list(zip(mine, theirs, strict=False))
        return [a.detach() for a, _ in pairs], [b.detach() for _, b in pairs]

    def update_parameters(self, model: Module) -> None:
        mine, theirs = self._averaged(model)
        n = int(self.n_averaged.item())
        with no_grad():
            if n == 0:
                for a, b in zip(mine, theirs, strict=True):
                    a.copy_(b)
            elif self.multi_avg_fn is not None:
                for group_mine, group_theirs in _by_dtype(mine, theirs):
                    self.multi_avg_fn(group_mine, group_theirs, self.n_averaged)
            else:
                # PyTorch on the CPU: one tensor at a time, the equal-weight mean by default.
                average = self.avg_fn or get_swa_avg_fn()
                for a, b in zip(mine, theirs, strict=True):
                    a.copy_(average(a, b, self.n_averaged))
            if not self.use_buffers:
                for a, b in zip(self.module.buffers(), model.buffers(), strict=True):
                    a.copy_(b.detach())
            self.n_averaged += 1


def update_bn(loader, model: Module, device=None) -> None:
    """Recompute the batch-norm running statistics of `model` with one pass over `loader`
    (a batch is a tensor, or a list/tuple whose first item is), as a cumulative average."""
    momenta = {}
    for module in model.modules():
        if isinstance(module, _BatchNorm):
            module.reset_running_stats()
            momenta[module] = module.momentum
    if not momenta:
        return
    was_training = model.training
    model.train()
    for module in momenta:
        module.momentum = None
    for batch in loader:
        if isinstance(batch, (list, tuple)):
            batch = batch[0]
        if device is not None:
            batch = batch.to(device)
        model(batch)
    for module, momentum in momenta.items():
        module.momentum = momentum
    model.train(was_training)


class SWALR(LRScheduler):
    """Anneal each group's learning rate to `swa_lr` over `anneal_epochs` steps ("cos" or
    "linear"), then hold it there."""

    def __init__(
        self,
        optimizer,
        swa_lr,
        anneal_epochs: int = 10,
        anneal_strategy: str = "cos",
        last_epoch: int = -1,
    ) -> None:
        swa_lrs = _format_param("swa_lr", optimizer, swa_lr)
        for lr, group in zip(swa_lrs, optimizer.param_groups, strict=True):
            group["swa_lr"] = lr
        if anneal_strategy not in ["cos", "linear"]:
            raise ValueError(
                f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}"
            )
        self._set_anneal_func(anneal_strategy)
        if not isinstance(anneal_epochs, int) or anneal_epochs < 0:
            raise ValueError(f"anneal_epochs must be equal or greater than 0, got {anneal_epochs}")
        self.anneal_epochs = anneal_epochs
        super().__init__(optimizer, last_epoch)

    @staticmethod
    def _linear_anneal(t):
        return t

    @staticmethod
    def _cosine_anneal(t):
        return (1 - math.cos(math.pi * t)) / 2

    @staticmethod
    def _get_initial_lr(lr, swa_lr, alpha):
        if alpha == 1:
            return swa_lr
        return (lr - alpha * swa_lr) / (1 - alpha)

    def get_lr(self) -> list:
        step = self._step_count - 1
        if self.anneal_epochs == 0:
            step = max(1, step)
        prev_t = max(0, min(1, (step - 1) / max(1, self.anneal_epochs)))
        prev_alpha = self.anneal_func(prev_t)
        groups = self.optimizer.param_groups
        prev_lrs = [self._get_initial_lr(g["lr"], g["swa_lr"], prev_alpha) for g in groups]
        t = max(0, min(1, step / max(1, self.anneal_epochs)))
        alpha = self.anneal_func(t)
        pairs = zip(groups, prev_lrs, strict=True)
        return [g["swa_lr"] * alpha + lr * (1 - alpha) for g, lr in pairs]

    def _set_anneal_func(self, anneal_strategy: str) -> None:
        self._anneal_strategy = anneal_strategy
        self.anneal_func = self._cosine_anneal if anneal_strategy == "cos" else self._linear_anneal

    def state_dict(self) -> dict:
        return {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "anneal_func")}

    def load_state_dict(self, state_dict: dict) -> None:
        self.__dict__.update(state_dict)
        self._set_anneal_func(self._anneal_strategy)
