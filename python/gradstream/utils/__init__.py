"""`gradstream.utils`: checkpointing, data loading and interop helpers."""

from . import checkpoint, data
from .interop import from_torch_state_dict, to_torch_state_dict

__all__ = ["checkpoint", "data", "from_torch_state_dict", "to_torch_state_dict"]
