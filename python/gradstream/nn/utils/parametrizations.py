"""`weight_norm`, `spectral_norm` and `orthogonal` as parametrizations, as PyTorch's
``torch.nn.utils.parametrizations``: each registers a small module with
`parametrize.register_parametrization`, so the originals live under
``module.parametrizations.<name>`` with PyTorch's state_dict keys.
"""

from __future__ import annotations

from enum import Enum, auto

import numpy as np

from ... import _core, linalg
from ..._core import Tensor
from ...autograd.grad_mode import no_grad
from ...comparison import allclose
from .. import functional as F
from ..modules.module import Module
from . import parametrize
from .spectral_norm import _is_conv_transpose, weight_matrix
from .weight_norm import _weight_norm, norm_except_dim

__all__ = ["orthogonal", "spectral_norm", "weight_norm"]


# Machine epsilon per floating dtype (torch.finfo(dtype).eps); NumPy has no bfloat16.
_EPS = {"float64": 2.0**-52, "float32": 2.0**-23, "float16": 2.0**-10, "bfloat16": 2.0**-7}


def _is_orthogonal(Q: Tensor) -> bool:
    n, k = Q.shape[-2], Q.shape[-1]
    eye = _core.eye(k, dtype=Q.dtype, device=Q.device)
    eps = 10.0 * n * _EPS[str(Q.dtype).split(".")[-1]]
    return bool(allclose(Q.mT @ Q, eye.expand(*Q.shape[:-2], k, k), atol=eps))


def _make_orthogonal(A: Tensor) -> Tensor:
    """The Q of A's QR decomposition with R's diagonal made non-negative: unique for a full
    rank A, and the Q that PyTorch's geqrf + householder_product gives."""
    Q, R = linalg.qr(A)
    return Q * R.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _geqrf(A: Tensor) -> tuple[Tensor, Tensor]:
    """LAPACK's geqrf (``torch.geqrf``): R on and above the diagonal, the Householder
    vectors below it, and their scales; through NumPy's LAPACK, for a no-grad use only."""
    h, tau = np.linalg.qr(A.detach().cpu().numpy(), mode="raw")
    a = _core.tensor(np.ascontiguousarray(np.swapaxes(h, -1, -2)))
    return a.to(A.device), _core.tensor(np.ascontiguousarray(tau)).to(A.device)


class _OrthMaps(Enum):
    matrix_exp = auto()
    cayley = auto()
    householder = auto()


class _Orthogonal(Module):
    base: Tensor

    def __init__(self, weight: Tensor, orthogonal_map: _OrthMaps, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X: Tensor) -> Tensor:
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in (_OrthMaps.matrix_exp, _OrthMaps.cayley):
            # The skew-symmetric matrix from X's lower triangle, padded to square.
            X = X.tril()
            if n != k:
                pad = X.new_zeros((n, n - k)).expand(*X.shape[:-2], n, n - k)
                X = _core.cat([X, pad], dim=-1)
            A = X - X.mT
            if self.orthogonal_map == _OrthMaps.matrix_exp:
                Q = linalg.matrix_exp(A)
            else:
                eye = _core.eye(n, dtype=A.dtype, device=A.device)
                Q = linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(dim=-2))
            Q = linalg.householder_product(A, tau)
            # The diagonal of X holds the signs (±1) of the columns; it gets no gradient.
            Q = Q * X.diagonal(dim1=-2, dim2=-1).detach().trunc().unsqueeze(-2)
        if hasattr(self, "base"):
            Q = self.base @ Q
        if transposed:
            Q = Q.mT
        return Q

    def right_inverse(self, Q: Tensor) -> Tensor:
        with no_grad():
            if Q.shape != self.shape:
                raise ValueError(
                    f"Expected a matrix or batch of matrices of shape {self.shape}. "
                    f"Got a tensor of shape {Q.shape}."
                )
            Q_init = Q
            n, k = Q.shape[-2], Q.shape[-1]
            transpose = n < k
            if transpose:
                Q = Q.mT
                n, k = k, n
            if not hasattr(self, "base"):
                if self.orthogonal_map in (_OrthMaps.cayley, _OrthMaps.matrix_exp):
                    raise NotImplementedError(
                        "It is not possible to assign to the matrix exponential "
                        "or the Cayley parametrizations when use_trivialization=False."
                    )
                # X with Q's Householder vectors below the diagonal and ±1 on it.
                A, tau = _geqrf(Q)
                a = A.numpy().copy()
                d = np.sign(np.diagonal(a, axis1=-2, axis2=-1)).copy()
                d[tau.numpy() == 0.0] *= -1
                idx = np.arange(d.shape[-1])
                a[..., idx, idx] = d
                A = _core.tensor(a).to(Q.device)
                return A.mT if transpose else A
            if n == k:
                Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()
            else:
                # Complete Q to an orthogonal square matrix with random columns.
                N = _core.randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype, device=Q.device)
                Q = _make_orthogonal(_core.cat([Q, N], dim=-1))
            self.base = Q
            rows, cols = Q_init.shape[-2], Q_init.shape[-1]
            neg_eye = -_core.eye(rows, cols, dtype=Q_init.dtype, device=Q_init.device)
            return neg_eye.expand(*Q_init.shape).clone()


def orthogonal(
    module: Module,
    name: str = "weight",
    orthogonal_map: str | None = None,
    *,
    use_trivialization: bool = True,
) -> Module:
    """Make ``module.<name>`` an orthogonal matrix (or batch of them), as PyTorch's
    ``orthogonal``: ``orthogonal_map`` is "matrix_exp", "cayley" or "householder" (the
    default: "matrix_exp" for square matrices, else "householder")."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.dim() < 2:
        raise ValueError(
            f"Expected a matrix or batch of matrices. Got a tensor of {weight.dim()} dimensions."
        )
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    orth_enum = getattr(_OrthMaps, orthogonal_map, None)
    if orth_enum is None:
        raise ValueError(
            'orthogonal_map has to be one of "matrix_exp", "cayley", "householder". '
            f"Got: {orthogonal_map}"
        )
    orth = _Orthogonal(weight, orth_enum, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module


class _WeightNorm(Module):
    def __init__(self, dim: int | None = 0) -> None:
        super().__init__()
        self.dim = -1 if dim is None else dim

    def forward(self, weight_g: Tensor, weight_v: Tensor) -> Tensor:
        return _weight_norm(weight_v, weight_g, self.dim)

    def right_inverse(self, weight: Tensor) -> tuple[Tensor, Tensor]:
        return norm_except_dim(weight, 2, self.dim), weight


def weight_norm(module: Module, name: str = "weight", dim: int | None = 0) -> Module:
    """``module.<name> = g * v / ||v||`` (norm over every dimension but `dim`; over all of
    them when ``dim=None``), with ``g`` and ``v`` stored as
    ``parametrizations.<name>.original0`` and ``original1``, as PyTorch's. A state_dict
    from the older `gradstream.nn.utils.weight_norm` (``<name>_g``, ``<name>_v``) loads too."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)

    def load_old_keys(state_dict, prefix, local_metadata, strict, missing, unexpected, errors):
        g_key, v_key = f"{prefix}{name}_g", f"{prefix}{name}_v"
        if g_key in state_dict and v_key in state_dict:
            state_dict[f"{prefix}parametrizations.{name}.original0"] = state_dict.pop(g_key)
            state_dict[f"{prefix}parametrizations.{name}.original1"] = state_dict.pop(v_key)

    module._register_load_state_dict_pre_hook(load_old_keys)
    return module


class _SpectralNorm(Module):
    def __init__(
        self, weight: Tensor, n_power_iterations: int = 1, dim: int = 0, eps: float = 1e-12
    ) -> None:
        super().__init__()
        ndim = weight.dim()
        if dim >= ndim or dim < -ndim:
            raise IndexError(
                "Dimension out of range (expected to be in range of "
                f"[-{ndim}, {ndim - 1}] but got {dim})"
            )
        if n_power_iterations <= 0:
            raise ValueError(
                "Expected n_power_iterations to be positive, but "
                f"got n_power_iterations={n_power_iterations}"
            )
        self.dim = dim if dim >= 0 else dim + ndim
        self.eps = eps
        if ndim > 1:
            self.n_power_iterations = n_power_iterations
            weight_mat = self._reshape_weight_to_matrix(weight.detach())
            h, w = weight_mat.shape
            u = weight_mat.new_empty((h,)).normal_(0, 1)
            v = weight_mat.new_empty((w,)).normal_(0, 1)
            self.register_buffer("_u", F.normalize(u, dim=0, eps=self.eps))
            self.register_buffer("_v", F.normalize(v, dim=0, eps=self.eps))
            self._power_method(weight_mat, 15)

    def _reshape_weight_to_matrix(self, weight: Tensor) -> Tensor:
        return weight_matrix(weight, self.dim)

    def _power_method(self, weight_mat: Tensor, n_power_iterations: int) -> None:
        # The buffers are updated in place, so a state_dict(keep_vars=True) keeps seeing them.
        with no_grad():
            for _ in range(n_power_iterations):
                self._u.copy_(F.normalize(weight_mat @ self._v, dim=0, eps=self.eps))
                self._v.copy_(F.normalize(weight_mat.mT @ self._u, dim=0, eps=self.eps))

    def forward(self, weight: Tensor) -> Tensor:
        if weight.dim() == 1:
            return F.normalize(weight, dim=0, eps=self.eps)
        weight_mat = self._reshape_weight_to_matrix(weight)
        if self.training:
            self._power_method(weight_mat, self.n_power_iterations)
        # Clones: the next power iteration updates the buffers in place before backward.
        u, v = self._u.clone(), self._v.clone()
        sigma = (u * (weight_mat @ v)).sum()
        return weight / sigma

    def right_inverse(self, value: Tensor) -> Tensor:
        return value


def spectral_norm(
    module: Module,
    name: str = "weight",
    n_power_iterations: int = 1,
    eps: float = 1e-12,
    dim: int | None = None,
) -> Module:
    """Divide ``module.<name>`` by its largest singular value, estimated by power iteration
    (one step per training-mode forward, none in eval mode), as PyTorch's ``spectral_norm``.
    `dim` is the output dimension: 1 for transposed convolutions, else 0."""
    weight = getattr(module, name, None)
    if not isinstance(weight, Tensor):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if dim is None:
        dim = 1 if _is_conv_transpose(module) else 0
    parametrize.register_parametrization(
        module, name, _SpectralNorm(weight, n_power_iterations, dim, eps)
    )
    return module
