"""Moving state dicts between PyTorch and gradstream (tensors travel through NumPy)."""

from __future__ import annotations

from collections import OrderedDict

from .. import _core
from .._core import Tensor

__all__ = ["from_torch_state_dict", "to_torch_state_dict"]


def from_torch_state_dict(state_dict) -> OrderedDict:
    """A PyTorch state_dict (or any mapping of arrays) as gradstream tensors, same keys."""
    out = OrderedDict()
    for k, v in state_dict.items():
        if isinstance(v, Tensor):
            out[k] = v
            continue
        if hasattr(v, "detach"):
            v = v.detach().cpu()
            if str(v.dtype) == "torch.bfloat16":
                out[k] = _core.tensor(v.float().numpy()).to(_core.bfloat16)
                continue
            v = v.numpy()
        out[k] = _core.tensor(v)
    return out


def to_torch_state_dict(state_dict) -> OrderedDict:
    """A gradstream state_dict as PyTorch tensors (needs torch installed)."""
    import torch

    out = OrderedDict()
    for k, v in state_dict.items():
        if isinstance(v, Tensor):
            if v.dtype == _core.bfloat16:
                out[k] = torch.from_numpy(v.detach().float().numpy()).to(torch.bfloat16)
            else:
                out[k] = torch.from_numpy(v.detach().numpy())
        else:
            out[k] = v
    return out
