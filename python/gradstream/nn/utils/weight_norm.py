"""Weight normalization, the older hook-based API: ``weight = g * v / ||v||`` from the
parameters ``weight_g`` and ``weight_v``, recomputed before each forward, as PyTorch's
``torch.nn.utils.weight_norm`` (deprecated there in favour of
`gradstream.nn.utils.parametrizations.weight_norm`, which keeps the same arithmetic).
"""

from __future__ import annotations

import warnings

from ..._core import Tensor
from ..modules.module import Module
from ..parameter import Parameter

__all__ = ["WeightNorm", "weight_norm", "remove_weight_norm"]


def norm_except_dim(v: Tensor, pow: float = 2, dim: int = 0) -> Tensor:
    """The `pow`-norm of `v` over every dimension but `dim`, kept as size-1 dimensions
    (PyTorch's ``torch.norm_except_dim``); ``dim=-1`` means the norm of the whole tensor."""
    if dim == -1:
        return v.norm(pow)
    if not -v.dim() <= dim < v.dim():
        raise IndexError(
            f"Dimension out of range (expected to be in range of [{-v.dim()}, {v.dim() - 1}], "
            f"but got {dim})"
        )
    dim %= v.dim()
    others = tuple(d for d in range(v.dim()) if d != dim)
    if not others:
        return v.abs()
    return v.norm(pow, dim=others, keepdim=True)


def _weight_norm(v: Tensor, g: Tensor, dim: int = 0) -> Tensor:
    """``v * (g / norm_except_dim(v, 2, dim))`` (PyTorch's ``torch._weight_norm``)."""
    return v * (g / norm_except_dim(v, 2, dim))


class WeightNorm:
    """The forward pre-hook that recomputes ``module.<name>`` from ``<name>_g`` and
    ``<name>_v``."""

    name: str
    dim: int

    def __init__(self, name: str, dim: int | None) -> None:
        self.name = name
        self.dim = -1 if dim is None else dim

    def compute_weight(self, module: Module) -> Tensor:
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return _weight_norm(v, g, self.dim)

    @staticmethod
    def apply(module: Module, name: str, dim: int | None) -> WeightNorm:
        warnings.warn(
            "`torch.nn.utils.weight_norm` is deprecated in favor of "
            "`torch.nn.utils.parametrizations.weight_norm`.",
            FutureWarning,
            stacklevel=3,
        )
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, WeightNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two weight_norm hooks on the same parameter {name}"
                )
        fn = WeightNorm(name, dim)
        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(
            name + "_g", Parameter(norm_except_dim(weight, 2, fn.dim).detach())
        )
        module.register_parameter(name + "_v", Parameter(weight.detach()))
        setattr(module, name, fn.compute_weight(module))
        module.register_forward_pre_hook(fn)
        return fn

    def remove(self, module: Module) -> None:
        weight = self.compute_weight(module)
        delattr(module, self.name)
        del module._parameters[self.name + "_g"]
        del module._parameters[self.name + "_v"]
        setattr(module, self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module))


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """Replace ``module.<name>`` by ``<name>_g * <name>_v / ||<name>_v||`` (norm over every
    dimension but `dim`; over all of them when ``dim=None``), recomputed before each
    forward. Deprecated, as in PyTorch: prefer `parametrizations.weight_norm`."""
    WeightNorm.apply(module, name, dim)
    return module


def remove_weight_norm(module: Module, name: str = "weight") -> Module:
    """Undo `weight_norm`: ``module.<name>`` becomes a plain parameter with its current value."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, WeightNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"weight_norm of '{name}' not found in {module}")
