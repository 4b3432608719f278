"""`gradstream.nn.parallel`: data-parallel training (`DistributedDataParallel`)."""

from .distributed import DistributedDataParallel

__all__ = ["DistributedDataParallel"]
