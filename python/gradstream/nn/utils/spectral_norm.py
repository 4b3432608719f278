"""Spectral normalization, the older hook-based API: ``weight = weight_orig / sigma`` with
the largest singular value ``sigma`` estimated by power iteration on the buffers ``weight_u``
and ``weight_v`` before each training-mode forward, as PyTorch's
``torch.nn.utils.spectral_norm`` (PyTorch recommends
`gradstream.nn.utils.parametrizations.spectral_norm` instead).
"""

from __future__ import annotations

from ... import _core, linalg
from ..._core import Tensor
from ...autograd.grad_mode import no_grad
from .. import functional as F
from ..modules.module import Module
from ..parameter import Parameter

__all__ = [
    "SpectralNorm",
    "SpectralNormLoadStateDictPreHook",
    "spectral_norm",
    "remove_spectral_norm",
]


class SpectralNorm:
    """The forward pre-hook that recomputes ``module.<name>`` from ``<name>_orig``."""

    _version: int = 1
    name: str
    dim: int
    n_power_iterations: int
    eps: float

    def __init__(
        self, name: str = "weight", n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        self.name = name
        self.dim = dim
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.n_power_iterations = n_power_iterations
        self.eps = eps

    def reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        return weight_matrix(weight, self.dim)

    def compute_weight(self, module: Module, do_power_iteration: bool) -> Tensor:
        weight = getattr(module, self.name + "_orig")
        u = getattr(module, self.name + "_u")
        v = getattr(module, self.name + "_v")
        weight_mat = self.reshape_weight_to_matrix(weight)
        if do_power_iteration:
            # In place on the buffers; the clones keep the values this forward used for its
            # backward, whatever the next power iteration writes.
            with no_grad():
                for _ in range(self.n_power_iterations):
                    v.copy_(F.normalize(weight_mat.mT @ u, dim=0, eps=self.eps))
                    u.copy_(F.normalize(weight_mat @ v, dim=0, eps=self.eps))
                u, v = u.clone(), v.clone()
        sigma = (u * (weight_mat @ v)).sum()
        return weight / sigma

    def remove(self, module: Module) -> None:
        with no_grad():
            weight = self.compute_weight(module, do_power_iteration=False)
        delattr(module, self.name)
        delattr(module, self.name + "_u")
        delattr(module, self.name + "_v")
        delattr(module, self.name + "_orig")
        module.register_parameter(self.name, Parameter(weight.detach()))

    def __call__(self, module: Module, inputs) -> None:
        setattr(module, self.name, self.compute_weight(module, module.training))

    def _solve_v_and_rescale(self, weight_mat: Tensor, u: Tensor, target_sigma: Tensor) -> Tensor:
        # The v with u = normalize(W v) and u·(W v) = target_sigma (for checkpoints from
        # before v was saved); rtol as torch.pinverse's default rcond.
        v = linalg.multi_dot(
            [linalg.pinv(weight_mat.mT @ weight_mat, rtol=1e-15), weight_mat.mT, u.unsqueeze(1)]
        ).squeeze(1)
        return v * (target_sigma / (u * (weight_mat @ v)).sum())

    @staticmethod
    def apply(
        module: Module, name: str, n_power_iterations: int, dim: int, eps: float
    ) -> SpectralNorm:
        for hook in module._forward_pre_hooks.values():
            if isinstance(hook, SpectralNorm) and hook.name == name:
                raise RuntimeError(
                    f"Cannot register two spectral_norm hooks on the same parameter {name}"
                )
        fn = SpectralNorm(name, n_power_iterations, dim, eps)
        weight = module._parameters[name]
        if weight is None:
            raise ValueError(f"`SpectralNorm` cannot be applied as parameter `{name}` is None")
        with no_grad():
            h, w = fn.reshape_weight_to_matrix(weight).shape
            u = F.normalize(
                _core.randn(h, dtype=weight.dtype, device=weight.device), dim=0, eps=eps
            )
            v = F.normalize(
                _core.randn(w, dtype=weight.dtype, device=weight.device), dim=0, eps=eps
            )
        delattr(module, name)
        module.register_parameter(name + "_orig", weight)
        setattr(module, name, weight.detach())
        module.register_buffer(name + "_u", u)
        module.register_buffer(name + "_v", v)
        module.register_forward_pre_hook(fn)
        module._register_load_state_dict_pre_hook(SpectralNormLoadStateDictPreHook(fn))
        return fn


class SpectralNormLoadStateDictPreHook:
    """Loads a checkpoint that has ``<name>`` and ``<name>_orig`` but no ``<name>_v``
    (PyTorch before 1.0): v is solved for from u and the saved weight."""

    def __init__(self, fn: SpectralNorm) -> None:
        self.fn = fn

    def __call__(
        self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, errors
    ) -> None:
        fn = self.fn
        version = local_metadata.get("spectral_norm", {}).get(fn.name + ".version", None)
        if version is not None and version >= 1:
            return
        weight_key = prefix + fn.name
        if (
            version is None
            and all(weight_key + s in state_dict for s in ("_orig", "_u", "_v"))
            and weight_key not in state_dict
        ):
            return  # a current checkpoint
        has_missing_keys = False
        for suffix in ("_orig", "", "_u"):
            if weight_key + suffix not in state_dict:
                has_missing_keys = True
                if strict:
                    missing_keys.append(weight_key + suffix)
        if has_missing_keys:
            return
        with no_grad():
            weight_orig = _as_tensor(state_dict[weight_key + "_orig"])
            weight = _as_tensor(state_dict.pop(weight_key))
            sigma = (weight_orig / weight).mean()
            weight_mat = fn.reshape_weight_to_matrix(weight_orig)
            u = _as_tensor(state_dict[weight_key + "_u"])
            state_dict[weight_key + "_v"] = fn._solve_v_and_rescale(weight_mat, u, sigma)


def _as_tensor(value) -> Tensor:
    if isinstance(value, Tensor):
        return value
    if hasattr(value, "detach"):  # a torch tensor from a PyTorch checkpoint
        value = value.detach().cpu().numpy()
    return _core.tensor(value)


def weight_matrix(weight: Tensor, dim: int) -> Tensor:
    """`weight` as a matrix whose rows run along `dim` (the output dimension)."""
    if dim != 0:
        weight = weight.permute(dim, *(d for d in range(weight.dim()) if d != dim))
    return weight.reshape(weight.shape[0], -1)


def _is_conv_transpose(module: Module) -> bool:
    from ..modules import conv

    names = ("ConvTranspose1d", "ConvTranspose2d", "ConvTranspose3d")
    return isinstance(module, tuple(getattr(conv, n) for n in names if hasattr(conv, n)))


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Replace ``module.<name>`` by ``<name>_orig / sigma`` (its largest singular value, by
    power iteration), recomputed before each forward. `dim`: the output dimension, 1 for
    transposed convolutions, else 0."""
    if dim is None:
        dim = 1 if _is_conv_transpose(module) else 0
    SpectralNorm.apply(module, name, n_power_iterations, dim, eps)
    return module


def remove_spectral_norm(module: Module, name: str = "weight") -> Module:
    """Undo `spectral_norm`: ``module.<name>`` becomes a plain parameter with its current
    value."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, SpectralNorm) and hook.name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            break
    else:
        raise ValueError(f"spectral_norm of '{name}' not found in {module}")
    hooks = module.__dict__.get("_load_state_dict_pre_hooks", {})
    for key, hook in hooks.items():
        if isinstance(hook, SpectralNormLoadStateDictPreHook) and hook.fn.name == name:
            del hooks[key]
            break
    return module
