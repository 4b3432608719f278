"""`gradstream.utils`: checkpointing, data loading and interop helpers."""

from . import checkpoint, data, dlpack, safetensors
from .interop import from_torch_state_dict, to_torch_state_dict

__all__ = [
    "checkpoint",
    "data",
    "dlpack",
    "safetensors",
    "from_torch_state_dict",
    "to_torch_state_dict",
]
