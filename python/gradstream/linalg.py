"""`gradstream.linalg`: the part of `torch.linalg` that gradstream provides."""

from __future__ import annotations

from ._core import _vector_norm as vector_norm

__all__ = ["norm", "vector_norm"]


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None):
    """`torch.linalg.norm` for the cases that reduce to a vector 2-norm or p-norm.

    `ord=None` is the 2-norm of the flattened input (for a matrix: Frobenius); `ord="fro"`
    over two dims likewise; a number with a single `dim` (or a 1-D input) is `vector_norm`.
    Spectral and nuclear matrix norms need an SVD, which gradstream does not have.
    """
    if isinstance(dim, int):
        dim = (dim,)
    if ord is None or (ord == "fro" and (dim is None or len(dim) == 2)):
        if ord == "fro" and dim is None and A.dim() != 2:
            raise RuntimeError(
                f"linalg.norm: 'fro' with dim=None needs a 2-D input, got {A.dim()}-D "
                f"{list(A.shape)}"
            )
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if isinstance(ord, str):
        raise NotImplementedError(f"linalg.norm: ord={ord!r} (needs an SVD) is not supported")
    if (dim is not None and len(dim) == 1) or (dim is None and A.dim() == 1):
        return vector_norm(A, ord, dim, keepdim, dtype=dtype)
    raise NotImplementedError(
        f"linalg.norm: matrix norm ord={ord!r} over {A.dim()}-D input {list(A.shape)} is not "
        "supported; use vector_norm for a vector norm over several dims"
    )
