"""`gradstream.utils`: checkpointing and interop helpers."""

from . import checkpoint
from .interop import from_torch_state_dict, to_torch_state_dict

__all__ = ["checkpoint", "from_torch_state_dict", "to_torch_state_dict"]
