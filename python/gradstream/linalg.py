"""`gradstream.linalg`: the part of `torch.linalg` that gradstream provides.

The decompositions and solves (LU, Cholesky, QR, SVD, eigh, triangular solves) run in the
Rust core on faer, with their backward rules there; this module names them as PyTorch
does, wraps multi-output results in PyTorch's named tuples, and composes the rest (pinv,
lstsq, matrix_norm, cond, matrix_rank, matrix_power, cross, vander...) from them, so their
gradients follow from the parts'.
"""

from __future__ import annotations

import math
from collections import namedtuple

from . import _core
from ._core import LinAlgError
from ._core import _vector_norm as vector_norm

__all__ = [
    "LinAlgError",
    "cholesky",
    "cholesky_ex",
    "cond",
    "cross",
    "det",
    "diagonal",
    "eigh",
    "eigvalsh",
    "householder_product",
    "inv",
    "inv_ex",
    "lstsq",
    "lu",
    "lu_factor",
    "lu_factor_ex",
    "lu_solve",
    "matmul",
    "matrix_norm",
    "matrix_exp",
    "matrix_power",
    "matrix_rank",
    "multi_dot",
    "norm",
    "pinv",
    "qr",
    "slogdet",
    "solve",
    "solve_ex",
    "solve_triangular",
    "svd",
    "svdvals",
    "tensorinv",
    "tensorsolve",
    "vander",
    "vecdot",
    "vector_norm",
]


def _named(name, fields):
    return namedtuple(name, fields, module="gradstream.return_types")


linalg_inv_ex = _named("linalg_inv_ex", ("inverse", "info"))
linalg_solve_ex = _named("linalg_solve_ex", ("result", "info"))
linalg_slogdet = _named("linalg_slogdet", ("sign", "logabsdet"))
linalg_cholesky_ex = _named("linalg_cholesky_ex", ("L", "info"))
linalg_qr = _named("linalg_qr", ("Q", "R"))
linalg_svd = _named("linalg_svd", ("U", "S", "Vh"))
linalg_eigh = _named("linalg_eigh", ("eigenvalues", "eigenvectors"))
linalg_lstsq = _named("linalg_lstsq", ("solution", "residuals", "rank", "singular_values"))
linalg_lu_factor = _named("linalg_lu_factor", ("LU", "pivots"))
linalg_lu_factor_ex = _named("linalg_lu_factor_ex", ("LU", "pivots", "info"))
linalg_lu = _named("linalg_lu", ("P", "L", "U"))


def inv(A):
    """The inverse of each square matrix of `A` `(*, n, n)`; LinAlgError if one is singular."""
    return _core._linalg_inv(A)


def inv_ex(A, *, check_errors=False):
    """`(inverse, info)`: `info` is 0, or the 1-based index of U's first zero pivot."""
    if check_errors:
        out = _core._linalg_inv(A)
        return linalg_inv_ex(out, _core.zeros(tuple(A.shape[:-2]), dtype=_core.int32))
    return linalg_inv_ex(*_core._linalg_inv_ex(A))


def solve(A, B, *, left=True):
    """`X` with `A X = B` (`left`) or `X A = B`; batch dims broadcast, `B` may be a vector."""
    return _core._linalg_solve(A, B, left=left)


def solve_ex(A, B, *, left=True, check_errors=False):
    """`(result, info)` of `solve`, without raising for a singular `A`."""
    if check_errors:
        x = _core._linalg_solve(A, B, left=left)
        return linalg_solve_ex(x, _core.zeros(tuple(A.shape[:-2]), dtype=_core.int32))
    return linalg_solve_ex(*_core._linalg_solve_ex(A, B, left=left))


def det(A):
    """The determinant of each square matrix."""
    return _core._linalg_det(A)


def slogdet(A):
    """`(sign, logabsdet)`: the determinant is `sign * exp(logabsdet)`."""
    return linalg_slogdet(*_core._linalg_slogdet(A))


def cholesky(A, *, upper=False):
    """The Cholesky factor `L` (`A = L Lᵀ`), or `U` (`A = Uᵀ U`) with `upper=True`."""
    return _core._linalg_cholesky(A, upper=upper)


def cholesky_ex(A, *, upper=False, check_errors=False):
    """`(L, info)`: `info` is the order of the first leading minor that is not PD, or 0."""
    if check_errors:
        lower = _core._linalg_cholesky(A, upper=upper)
        return linalg_cholesky_ex(lower, _core.zeros(tuple(A.shape[:-2]), dtype=_core.int32))
    return linalg_cholesky_ex(*_core._linalg_cholesky_ex(A, upper=upper))


def qr(A, mode="reduced"):
    """`(Q, R)` with `A = Q R`; `mode` is 'reduced', 'complete' or 'r' (Q empty)."""
    return linalg_qr(*_core._linalg_qr(A, mode))


def svd(A, full_matrices=True, *, driver=None):
    """`(U, S, Vh)` with `A = U diag(S) Vh`, `S` descending."""
    return linalg_svd(*_core._linalg_svd(A, full_matrices))


def svdvals(A, *, driver=None):
    """The singular values of each matrix, descending."""
    return _core._linalg_svdvals(A)


def eigh(A, UPLO="L"):
    """`(eigenvalues, eigenvectors)` of symmetric matrices, eigenvalues ascending."""
    return linalg_eigh(*_core._linalg_eigh(A, UPLO))


def eigvalsh(A, UPLO="L"):
    """The eigenvalues of symmetric matrices, ascending."""
    return _core._linalg_eigvalsh(A, UPLO)


def solve_triangular(A, B, *, upper, left=True, unitriangular=False):
    """`X` with `A X = B` (or `X A = B`) for triangular `A`."""
    return _core._linalg_solve_triangular(A, B, upper=upper, left=left, unitriangular=unitriangular)


def lu_factor(A, *, pivot=True):
    """`(LU, pivots)`: LAPACK's packed LU and 1-based int32 row swaps."""
    _no_pivot("linalg.lu_factor", pivot)
    return linalg_lu_factor(*_core._linalg_lu_factor(A))


def lu_factor_ex(A, *, pivot=True, check_errors=False):
    """`(LU, pivots, info)` of `lu_factor`, without raising for a singular U."""
    _no_pivot("linalg.lu_factor_ex", pivot)
    if check_errors:
        lu_, piv = _core._linalg_lu_factor(A)
        return linalg_lu_factor_ex(lu_, piv, _core.zeros(tuple(A.shape[:-2]), dtype=_core.int32))
    return linalg_lu_factor_ex(*_core._linalg_lu_factor_ex(A))


def _no_pivot(op, pivot):
    if not pivot:
        raise RuntimeError(f"{op}: LU without pivoting is not implemented on the CPU")


def lu_solve(LU, pivots, B, *, left=True, adjoint=False):
    """`X` with `A X = B` (`left`, `adjoint` for `Aᵀ`) from `lu_factor`'s output."""
    return _core._linalg_lu_solve(LU, pivots, B, left=left, adjoint=adjoint)


def _permutation(pivots, m, dtype):
    """The matrices `P` of LAPACK's row swaps `pivots` `(*, k)`, as `(*, m, m)`."""
    batch = tuple(pivots.shape[:-1])
    rows = pivots.reshape(-1, pivots.shape[-1]).tolist() if pivots.numel() else []
    mats = []
    for swaps in rows:
        perm = list(range(m))
        for i, p in enumerate(swaps):
            perm[i], perm[p - 1] = perm[p - 1], perm[i]
        p_mat = [[0.0] * m for _ in range(m)]
        for i, r in enumerate(perm):
            p_mat[r][i] = 1.0
        mats.append(p_mat)
    if not mats:
        return _core.zeros((*batch, m, m), dtype=dtype)
    return _core.tensor(mats, dtype=dtype).reshape(*batch, m, m)


def lu(A, *, pivot=True):
    """`(P, L, U)` with `A = P L U`, L unit lower trapezoidal, U upper trapezoidal."""
    _no_pivot("linalg.lu", pivot)
    packed, piv, _ = _core._linalg_lu_factor_ex(A)
    m, n = A.shape[-2], A.shape[-1]
    k = min(m, n)
    lower = packed[..., :, :k].tril(-1) + _core.eye(m, k, dtype=A.dtype)
    upper = packed[..., :k, :].triu()
    return linalg_lu(_permutation(piv, m, A.dtype), lower, upper)


def matmul(input, other):
    """`input @ other` (the same as `gradstream.matmul`)."""
    return _core.matmul(input, other)


def vecdot(x, y, *, dim=-1):
    """The dot product of `x` and `y` along `dim`, broadcasting the others."""
    return (x * y).sum(dim)


def multi_dot(tensors):
    """The product of a chain of matrices; the first and last may be vectors."""
    n = len(tensors)
    if n < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {n}")
    for i, t in enumerate(tensors):
        ok = t.dim() == 2 or (t.dim() == 1 and i in (0, n - 1))
        if not ok:
            which = "first" if i == 0 else "last" if i == n - 1 else None
            need = f"{which} tensor must be 1D or 2D" if which else f"tensor {i} must be 2D"
            raise RuntimeError(f"multi_dot(): {need} but got {t.dim()}D")
    out = tensors[0]
    for t in tensors[1:]:
        out = _core.matmul(out, t)
    return out


def cross(input, other, *, dim=-1):
    """The cross product of 3-vectors along `dim`."""
    if input.dim() != other.dim():
        raise RuntimeError(
            f"linalg.cross: inputs must have the same number of dimensions, got "
            f"{input.dim()} and {other.dim()}"
        )
    a, b = input.shape[dim], other.shape[dim]
    if a != 3 or b != 3:
        raise RuntimeError(
            f"linalg.cross: inputs dimension {dim} must have length 3. Got {a} and {b}"
        )
    x1, x2 = input.roll(-1, dim), input.roll(-2, dim)
    y1, y2 = other.roll(-1, dim), other.roll(-2, dim)
    return x1 * y2 - x2 * y1


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """The diagonal `offset` of the matrices spanned by `dim1` and `dim2`, as a last dim."""
    x = A.movedim((dim1, dim2), (-2, -1))
    rows, cols = x.shape[-2], x.shape[-1]
    r0, c0 = (0, offset) if offset >= 0 else (-offset, 0)
    k = max(0, min(rows - r0, cols - c0))
    i = _core.arange(r0, r0 + k)
    j = _core.arange(c0, c0 + k)
    return x[..., i, j]


def vander(x, *, N=None):
    """The Vandermonde matrix of `x` `(*, n)`: columns `x**0, x**1, ..., x**(N-1)`."""
    if x.dim() < 1:
        raise RuntimeError("linalg.vander: x must have at least one dimension")
    n = x.shape[-1] if N is None else N
    if n < 1:
        raise RuntimeError(f"linalg.vander: N must be greater than 1, got {n}")
    ones = _core.ones_like(x).unsqueeze(-1)
    if n == 1:
        return ones
    powers = x.unsqueeze(-1).expand(*x.shape, n - 1).cumprod(-1)
    return _core.cat([ones, powers], -1)


def matrix_power(A, n):
    """`A` to the integer power `n` (negative powers invert first)."""
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            "linalg.matrix_power: A must be batches of square matrices, but they are "
            f"{tuple(A.shape)[-2:]} matrices"
        )
    if n == 0:
        return _core.eye(A.shape[-1], dtype=A.dtype).expand(*A.shape).clone()
    if n < 0:
        A = inv(A)
        n = -n
    result = None
    base = A
    while n:
        if n & 1:
            result = base if result is None else _core.matmul(result, base)
        n >>= 1
        if n:
            base = _core.matmul(base, base)
    return result


def matrix_exp(A):
    """The matrix exponential: scaling and squaring over a Taylor series.

    The batch is scaled by one power of two so that every matrix's 1-norm is at most 1/2;
    the degree-18 series is then exact to float64 rounding, and the gradient is that of
    the matmuls that compute it.
    """
    if A.dim() < 2 or A.shape[-1] != A.shape[-2]:
        raise RuntimeError(
            "linalg.matrix_exp: A must be batches of square matrices, but they are "
            f"{tuple(A.shape)[-2:]} matrices"
        )
    if not A.is_floating_point():
        raise RuntimeError(f"linalg.matrix_exp: Expected a floating point tensor, got {A.dtype}")
    n = A.shape[-1]
    eye = _core.eye(n, dtype=A.dtype)
    if A.numel() == 0:
        return A * 0
    norm = float(A.detach().abs().sum(-2).amax().item())
    if not math.isfinite(norm):
        return A * math.nan
    squarings = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    x = A / float(2**squarings)
    term = eye.expand(*A.shape)
    out = term
    for k in range(1, 19):
        term = _core.matmul(term, x) / float(k)
        out = out + term
    for _ in range(squarings):
        out = _core.matmul(out, out)
    return out


def householder_product(A, tau):
    """The first n columns of `H_1 ... H_k`, `H_i = I - tau_i v_i v_iᵀ`, with the Householder
    vectors `v_i` below the diagonal of `A` `(*, m, n)` (an implicit 1 on it)."""
    m, n, k = A.shape[-2], A.shape[-1], tau.shape[-1]
    if m < n:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-2] must be greater than or equal "
            "to input.shape[-1]"
        )
    if n < k:
        raise RuntimeError(
            "torch.linalg.householder_product: input.shape[-1] must be greater than or equal "
            "to tau.shape[-1]"
        )
    if tuple(tau.shape[:-1]) != tuple(A.shape[:-2]):
        raise RuntimeError(
            "torch.linalg.householder_product: Expected batch dimensions of tau to be equal "
            f"to input.shape[:-2], but got {tuple(tau.shape[:-1])}"
        )
    v = A.tril(-1) + _core.eye(m, n, dtype=A.dtype)
    q = _core.eye(m, dtype=A.dtype).expand(*A.shape[:-2], m, m)
    for i in range(k):
        vi = v[..., :, i : i + 1]
        q = q - _core.matmul(_core.matmul(q, vi) * tau[..., i : i + 1].unsqueeze(-1), vi.mT)
    return q[..., :, :n]


def _to_last(A, dim):
    return A.movedim(tuple(dim), (-2, -1))


_MATRIX_ORDS = ("fro", "nuc", math.inf, -math.inf, 1, -1, 2, -2)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None):
    """The matrix norm `ord` ('fro', 'nuc', ±inf, ±1, ±2) over the two dims `dim`."""
    if dtype is not None:
        A = A.to(dtype)
    if ord not in _MATRIX_ORDS:
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    if A.dim() < 2:
        raise RuntimeError(
            "linalg.matrix_norm: The input tensor A must have at least 2 dimensions."
        )
    d0, d1 = (d % A.dim() for d in dim)
    if d0 == d1:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({d0}, {d1})")
    if ord == "fro":
        return vector_norm(A, 2, (d0, d1), keepdim)
    if ord in ("nuc", 2, -2):
        s = svdvals(_to_last(A, (d0, d1)))
        out = s.sum(-1) if ord == "nuc" else (s.amax(-1) if ord == 2 else s.amin(-1))
        if keepdim:
            for d in sorted((d0, d1)):
                out = out.unsqueeze(d)
        return out
    # 1-norms sum over rows (dim d0) then take the max over columns; inf-norms the reverse.
    s_dim, m_dim = (d0, d1) if ord in (1, -1) else (d1, d0)
    sums = A.abs().sum(s_dim, keepdim=True)
    out = sums.amax(m_dim, keepdim=True) if ord > 0 else sums.amin(m_dim, keepdim=True)
    if not keepdim:
        out = out.squeeze((d0, d1))
    return out


def cond(A, p=None):
    """The condition number in the norm `p` (None or 2: the ratio of singular values)."""
    if p is None or p in (2, -2):
        s = svdvals(A)
        big, small = s[..., 0], s[..., -1]
        return big / small if p != -2 else small / big
    return matrix_norm(A, p) * matrix_norm(inv(A), p)


def _tolerance(s_max, m, n, dtype, atol, rtol):
    eps = 2.220446049250313e-16 if dtype == _core.float64 else 1.1920928955078125e-07
    if rtol is None:
        rtol = 0.0 if atol is not None and atol > 0 else eps * max(m, n)
    atol = 0.0 if atol is None else atol
    tol = s_max * rtol
    return tol.clamp(min=atol) if atol > 0 else tol


def matrix_rank(A, *, atol=None, rtol=None, hermitian=False):
    """The number of singular values above `max(atol, rtol * σ₁)`, as int64."""
    if hermitian:
        s = eigvalsh(A).abs()
        s_max = s.amax(-1, keepdim=True)
    else:
        s = svdvals(A)
        s_max = s[..., :1] if s.shape[-1] else s.sum(-1, keepdim=True)
    tol = _tolerance(s_max, A.shape[-2], A.shape[-1], A.dtype, atol, rtol)
    return (s > tol).sum(-1)


def pinv(A, *, atol=None, rtol=None, hermitian=False):
    """The Moore-Penrose pseudo-inverse, dropping singular values below the tolerance."""
    if hermitian:
        w, v = eigh(A)
        s = w.abs()
        tol = _tolerance(s.amax(-1, keepdim=True), A.shape[-1], A.shape[-1], A.dtype, atol, rtol)
        w_inv = _core.where(s > tol, 1.0 / w, _core.zeros_like(w))
        return _core.matmul(v * w_inv.unsqueeze(-2), v.mT)
    u, s, vh = svd(A, full_matrices=False)
    s_max = s[..., :1] if s.shape[-1] else s.sum(-1, keepdim=True)
    tol = _tolerance(s_max, A.shape[-2], A.shape[-1], A.dtype, atol, rtol)
    s_inv = _core.where(s > tol, 1.0 / s, _core.zeros_like(s))
    return _core.matmul(vh.mT * s_inv.unsqueeze(-2), u.mT)


_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A, B, rcond=None, *, driver=None):
    """The least-squares solution of `A X = B`, with PyTorch's named tuple.

    The solution is `pinv(A) @ B` (the minimum-norm solution every driver returns for
    full-rank input); `residuals`, `rank` and `singular_values` are filled in as the
    chosen driver fills them.
    """
    if driver is not None and driver not in _DRIVERS:
        raise RuntimeError(
            "torch.linalg.lstsq: parameter `driver` should be one of (gels, gelsy, gelsd, gelss)"
        )
    driver = driver or "gelsy"
    if A.dtype != B.dtype:
        raise RuntimeError(
            "torch.linalg.lstsq: Expected input and other to have the same dtype, but got "
            f"input's dtype {A.dtype} and other's dtype {B.dtype}"
        )
    if A.dim() < 2:
        raise RuntimeError("torch.linalg.lstsq: input must have at least 2 dimensions.")
    vector = B.dim() == A.dim() - 1
    b2 = B.unsqueeze(-1) if vector else B
    if b2.shape[-2] != A.shape[-2]:
        raise RuntimeError(
            f"torch.linalg.lstsq: input.size(-2) should match other.size(-2). Got "
            f"{A.shape[-2]} and {b2.shape[-2]}"
        )
    m, n = A.shape[-2], A.shape[-1]
    s = svdvals(A)
    if rcond is None:
        rcond = (
            2.220446049250313e-16 if A.dtype == _core.float64 else 1.1920928955078125e-07
        ) * max(m, n)
    x = _core.matmul(pinv(A, rtol=rcond), b2)
    rank = (s > rcond * s[..., :1]).sum(-1) if s.shape[-1] else s.sum(-1).long()
    full_rank = bool((rank == min(m, n)).all()) if rank.numel() else True
    if m > n and driver != "gelsy" and full_rank:
        residuals = ((_core.matmul(A, x) - b2) ** 2).sum(-2)
    else:
        residuals = _core.zeros(0, dtype=A.dtype)
    if driver == "gels":
        rank = _core.zeros(0, dtype=_core.int64)
    sv = s.detach() if driver in ("gelsd", "gelss") else _core.zeros(0, dtype=A.dtype)
    if vector:
        x = x.squeeze(-1)
    return linalg_lstsq(x, residuals, rank, sv)


def tensorinv(A, ind=2):
    """The inverse of `A` seen as a linear map from its last dims to its first `ind` dims."""
    if ind <= 0:
        raise RuntimeError(f"Expected a strictly positive integer for 'ind', but got {ind}")
    out_shape, in_shape = tuple(A.shape[ind:]), tuple(A.shape[:ind])
    rows = math.prod(in_shape)
    cols = math.prod(out_shape)
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[ind:]) == "
            f"prod(self.shape[:ind]), but got {cols} != {rows}"
        )
    return inv(A.reshape(rows, cols)).reshape(*out_shape, *in_shape)


def tensorsolve(A, B, dims=None):
    """`X` with `tensordot(A, X, X.ndim) = B`."""
    if dims is not None:
        nd = A.dim()
        src = tuple(d % nd for d in dims)
        A = A.movedim(src, tuple(range(nd - len(src), nd)))
    x_shape = tuple(A.shape[B.dim() :])
    rows = math.prod(tuple(B.shape))
    cols = math.prod(x_shape)
    if rows != cols:
        raise RuntimeError(
            "Expected self to satisfy the requirement prod(self.shape[other.ndim:]) == "
            f"prod(self.shape[:other.ndim]), but got {cols} != {rows}"
        )
    return solve(A.reshape(rows, cols), B.reshape(rows)).reshape(*x_shape)


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """`torch.linalg.norm`: a vector norm over one dim (or a flattened input), a matrix norm
    over two dims (or a 2-D input with `dim=None`)."""
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None:
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if A.dim() == 2:
            return matrix_norm(A, ord, (-2, -1), keepdim, dtype=dtype)
        if A.dim() == 1 and not isinstance(ord, str):
            return vector_norm(A, ord, None, keepdim, dtype=dtype)
        raise RuntimeError(
            f"linalg.norm: If dim is not specified but ord is, the input must be 1D or 2D. "
            f"Got {A.dim()}D."
        )
    if len(dim) == 2:
        return matrix_norm(A, ord, dim, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.vector_norm: ord={ord!r} is not a vector norm")
    return vector_norm(A, ord, dim, keepdim, dtype=dtype)


# PyTorch's top-level spellings and Tensor methods of the same ops (`torch.inverse`,
# `Tensor.det`, ...), exported by `gradstream/__init__.py`.


def logdet(A):
    """`log(det(A))`: NaN for a negative determinant, -inf for a zero one."""
    sign, logabs = _core._linalg_slogdet(A)
    return logabs + sign.log()


def _top_slogdet(A):
    return _named_slogdet(*_core._linalg_slogdet(A))


_named_slogdet = _named("slogdet", ("sign", "logabsdet"))


def _top_cholesky(A, upper=False):
    return _core._linalg_cholesky(A, upper=upper)


def _top_diagonal(A, offset=0, dim1=0, dim2=1):
    return diagonal(A, offset=offset, dim1=dim1, dim2=dim2)


TOP_LEVEL = {
    "inverse": inv,
    "det": det,
    "logdet": logdet,
    "slogdet": _top_slogdet,
    "cholesky": _top_cholesky,
    "diagonal": _top_diagonal,
}

for _name, _fn in TOP_LEVEL.items():
    setattr(_core.Tensor, _name, _fn)
_core.Tensor.mH = property(lambda self: self.mT)
