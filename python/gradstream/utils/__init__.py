"""`gradstream.utils`: interop helpers."""

from .interop import from_torch_state_dict, to_torch_state_dict

__all__ = ["from_torch_state_dict", "to_torch_state_dict"]
