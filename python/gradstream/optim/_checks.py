"""PyTorch's argument checks for the optimizers, with its messages and exception classes."""

from __future__ import annotations

_COMMON = frozenset({"lr", "weight_decay", "maximize", "foreach", "differentiable", "capturable"})


def keys(*names: str) -> frozenset:
    """The param-group keys an optimizer accepts: its own and the common ones."""
    return _COMMON | frozenset(names)


def lr(g: dict) -> None:
    v = g["lr"]
    if not isinstance(v, (int, float)) and not hasattr(v, "__float__"):
        raise TypeError(f"Invalid learning rate type: {type(v).__name__}")
    if not 0.0 <= float(v):
        raise ValueError(f"Invalid learning rate: {v}")


def nonneg(g: dict, key: str, what: str | None = None) -> None:
    """``ValueError("Invalid {what} value: v")`` unless ``g[key] >= 0``."""
    if not 0.0 <= g[key]:
        raise ValueError(f"Invalid {what or key} value: {g[key]}")


def eps(g: dict) -> None:
    if not 0.0 <= g["eps"]:
        raise ValueError(f"Invalid epsilon value: {g['eps']}")


def pair(g: dict, key: str) -> tuple[float, float]:
    v = g[key]
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise TypeError(f"{key} must be a pair of floats, got {v!r}")
    for i in range(2):
        if isinstance(v[i], bool) or not isinstance(v[i], (int, float)):
            raise TypeError(f"Invalid {key} value at index {i}: {v[i]!r} is not a float")
    g[key] = (float(v[0]), float(v[1]))
    return g[key]


def betas(g: dict) -> None:
    b = pair(g, "betas")
    for i in range(2):
        if not 0.0 <= b[i] < 1.0:
            raise ValueError(f"Invalid beta parameter at index {i}: {b[i]}")
