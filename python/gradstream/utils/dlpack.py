"""`gradstream.utils.dlpack`: DLPack capsules, as ``torch.utils.dlpack``.

``to_dlpack(t)`` exports ``t``'s memory without a copy (the consumer reads and writes
gradstream's buffer); ``from_dlpack(obj)`` imports an object with ``__dlpack__`` (or a
capsule) by copying it, since gradstream's CPU storage cannot adopt a foreign allocation.
"""

from .._core import from_dlpack, to_dlpack

__all__ = ["from_dlpack", "to_dlpack"]
