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


#: The param-group keys of low-bit optimizer state (``Adam``, ``AdamW`` and ``SGD``).
STATE_KEYS = ("state_dtype", "block_size", "min_quantized_size")
STATE_DTYPES = (None, "float32", "bfloat16", "int8", "int4", "fp8")


def state_defaults(state_dtype, block_size, min_quantized_size) -> dict:
    """The low-bit state keys a param group gets: none for PyTorch's own (dense) state, so
    such an optimizer's ``param_groups`` and ``state_dict`` are PyTorch's."""
    if state_dtype is None and block_size is None and min_quantized_size is None:
        return {}
    return dict(
        state_dtype=state_dtype,
        block_size=block_size,
        min_quantized_size=4096 if min_quantized_size is None else min_quantized_size,
    )


def state(g: dict) -> None:
    """``state_dtype`` one of :data:`STATE_DTYPES` (a ``torch.dtype``'s name is accepted),
    ``block_size`` a positive even int or None, ``min_quantized_size`` a non-negative int."""
    if "state_dtype" not in g:
        return
    v = g["state_dtype"]
    if v is not None and not isinstance(v, str):
        v = str(v).removeprefix("torch.").removeprefix("gradstream.")
        g["state_dtype"] = v
    if v not in STATE_DTYPES:
        raise ValueError(
            f"Invalid state_dtype: {v!r}; expected one of None, 'float32', 'bfloat16', 'int8', "
            "'int4' or 'fp8'"
        )
    b = g.get("block_size")
    if b is not None and (isinstance(b, bool) or not isinstance(b, int) or b <= 0 or b % 2):
        raise ValueError(f"Invalid block_size: {b!r}; expected a positive even int or None")
    m = g.get("min_quantized_size", 4096)
    if isinstance(m, bool) or not isinstance(m, int) or m < 0:
        raise ValueError(f"Invalid min_quantized_size: {m!r}; expected a non-negative int")
    g["block_size"] = b
    g["min_quantized_size"] = m
