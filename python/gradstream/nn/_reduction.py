"""Argument checks and the ``reduction=`` handling shared by the functional losses."""

from __future__ import annotations

from .._core import Tensor

_REDUCTIONS = ("none", "mean", "sum")


def _check_tensor(op: str, name: str, x) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"{op}(): argument '{name}' must be Tensor, not {type(x).__name__}")


def _check_reduction(reduction: str) -> str:
    if reduction not in _REDUCTIONS:
        raise ValueError(f"{reduction} is not a valid value for reduction")
    return reduction


def _reduce(loss: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return loss.mean()
    if reduction == "sum":
        return loss.sum()
    if reduction == "none":
        return loss
    raise ValueError(f"{reduction} is not a valid value for reduction")


def _legacy_reduction(size_average, reduce, reduction: str) -> str:
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    if not reduce:
        return "none"
    return "mean" if size_average else "sum"
