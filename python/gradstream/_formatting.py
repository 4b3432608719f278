"""How tensors print (PyTorch's layout and number formatting) and unpickle."""

import math

import numpy as np

from . import _core

# PyTorch's default print options: 4 decimals, summarize past 1000 elements keeping 3 at
# each edge, lines of at most 80 characters.
_PRECISION = 4
_THRESHOLD = 1000
_EDGEITEMS = 3
_LINEWIDTH = 80
_PREFIX = "tensor("


def _summarized(arr: np.ndarray) -> np.ndarray:
    """Only the elements a summarized print shows: the first and last few along each axis."""
    for axis, n in enumerate(arr.shape):
        if n > 2 * _EDGEITEMS:
            keep = np.r_[0:_EDGEITEMS, n - _EDGEITEMS : n]
            arr = np.take(arr, keep, axis=axis)
    return arr


class _Formatter:
    """One number format for every element, and the width they are all padded to."""

    def __init__(self, arr: np.ndarray) -> None:
        self.floating = np.issubdtype(arr.dtype, np.floating)
        self.int_mode, self.sci_mode, self.width = True, False, 1
        flat = arr.reshape(-1)
        if not self.floating:
            self.width = max([1, *(len(str(v)) for v in flat.tolist())])
            return
        shown = flat[np.isfinite(flat) & (flat != 0)].astype(np.float64)
        if shown.size == 0:
            return
        lo, hi = float(np.abs(shown).min()), float(np.abs(shown).max())
        self.int_mode = bool(np.all(shown == np.ceil(shown)))
        self.sci_mode = hi / lo > 1000.0 or hi > 1.0e8 or lo < 1.0e-4
        values = shown.tolist()
        if self.sci_mode:
            self.width = max(len(f"{v:.{_PRECISION}e}") for v in values)
        elif self.int_mode:
            self.width = max(len(f"{v:.0f}") + 1 for v in values)  # + 1 for the "."
        else:
            self.width = max(len(f"{v:.{_PRECISION}f}") for v in values)

    def format(self, value) -> str:
        if not self.floating:
            text = str(value)
        elif self.sci_mode:
            text = f"{value:.{_PRECISION}e}"
        elif self.int_mode:
            text = f"{value:.0f}" + ("" if math.isinf(value) or math.isnan(value) else ".")
        else:
            text = f"{value:.{_PRECISION}f}"
        return text.rjust(self.width)


def _vector_str(arr, indent, summarize, fmt) -> str:
    per_line = max(1, (_LINEWIDTH - indent) // (fmt.width + 2))
    if summarize and arr.shape[0] > 2 * _EDGEITEMS:
        items = [fmt.format(v) for v in arr[:_EDGEITEMS].tolist()]
        items += [" ..."] + [fmt.format(v) for v in arr[-_EDGEITEMS:].tolist()]
    else:
        items = [fmt.format(v) for v in arr.tolist()]
    lines = [", ".join(items[i : i + per_line]) for i in range(0, len(items), per_line)]
    return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"


def _array_str(arr, indent, summarize, fmt) -> str:
    if arr.ndim == 0:
        return fmt.format(arr.item())
    if arr.ndim == 1:
        return _vector_str(arr, indent, summarize, fmt)
    rows = range(arr.shape[0])
    if summarize and arr.shape[0] > 2 * _EDGEITEMS:
        rows = [*range(_EDGEITEMS), None, *range(arr.shape[0] - _EDGEITEMS, arr.shape[0])]
    parts = ["..." if i is None else _array_str(arr[i], indent + 1, summarize, fmt) for i in rows]
    # blocks of a 3-d (and higher) tensor are set apart by blank lines
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _format_data(t) -> str:
    if t.dtype in (_core.bfloat16, _core.float16):
        t = t.float()  # every half value is exact in float32, and prints the same
    arr = t.detach().numpy()
    summarize = arr.size > _THRESHOLD
    fmt = _Formatter(_summarized(arr) if summarize else arr)
    return _array_str(arr, len(_PREFIX), summarize, fmt)


def _with_suffixes(body: str, suffixes: list[str]) -> str:
    """`, suffix` after the data, or on a line of its own where the line would pass 80."""
    out = [_PREFIX + body]
    line = len(out[0]) - out[0].rfind("\n") + 1
    for suffix in suffixes:
        if line + len(suffix) + 2 > _LINEWIDTH:
            out.append(",\n" + " " * len(_PREFIX) + suffix)
            line = len(_PREFIX) + len(suffix)
        else:
            out.append(", " + suffix)
            line += len(suffix) + 2
    return "".join(out) + ")"


def tensor_repr(t) -> str:
    extras = []
    dtype = f"dtype=gradstream.{t.dtype.__repr__().split('.')[-1]}"
    if t.numel() == 0:
        body = "[]"
        if t.dim() != 1:
            extras.append(f"size={tuple(t.shape)}")
        # no element tells an empty tensor's dtype: only the default float one goes unsaid
        if t.dtype != _core.get_default_dtype():
            extras.append(dtype)
    else:
        body = _format_data(t)
        if t.dtype not in {_core.get_default_dtype(), _core.int64, _core.bool}:
            extras.append(dtype)
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    return _with_suffixes(body, extras)


def rebuild_tensor(array, dtype, requires_grad):
    t = _core.tensor(array).to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t
