"""How tensors print (PyTorch's layout, NumPy's number formatting) and unpickle."""

import numpy as np

from . import _core


def _format_data(t) -> str:
    if t.dtype == _core.bfloat16:
        t = t.float()
    arr = t.detach().numpy()
    if arr.dtype == np.bool_:
        body = np.array2string(arr, separator=", ", formatter={"bool": lambda v: str(bool(v))})
    elif np.issubdtype(arr.dtype, np.floating):
        finite = arr[np.isfinite(arr)]
        big = finite.size and (
            np.abs(finite).max() >= 1e8 or (np.abs(finite[finite != 0]).min(initial=1) < 1e-4)
        )
        integral = finite.size and np.all(finite == np.round(finite)) and not big
        if integral:
            fmt = lambda v: f"{v:.0f}." if np.isfinite(v) else str(v)  # noqa: E731
        elif big:
            fmt = lambda v: f"{v:.4e}"  # noqa: E731
        else:
            fmt = lambda v: f"{v:.4f}"  # noqa: E731
        body = np.array2string(
            arr, separator=", ", formatter={"float_kind": fmt}, threshold=1000, edgeitems=3
        )
    else:
        body = np.array2string(arr, separator=", ", threshold=1000, edgeitems=3)
    return body.replace("\n", "\n" + " " * len("tensor("))


def tensor_repr(t) -> str:
    extras = []
    default = {_core.get_default_dtype(), _core.int64, _core.bool}
    if t.numel() == 0:
        body = "[]"
        extras.append(f"size={tuple(t.shape)}")
    else:
        body = _format_data(t)
    if t.dtype not in default:
        extras.append(f"dtype=gradstream.{t.dtype.__repr__().split('.')[-1]}")
    if t.grad_fn is not None:
        extras.append(f"grad_fn=<{t.grad_fn.name()}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    suffix = "".join(", " + e for e in extras)
    return f"tensor({body}{suffix})"


def rebuild_tensor(array, dtype, requires_grad):
    t = _core.tensor(array).to(dtype)
    if requires_grad:
        t.requires_grad_(True)
    return t
