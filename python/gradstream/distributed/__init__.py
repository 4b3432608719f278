"""`gradstream.distributed`: data-parallel training across processes and machines.

The process groups and collectives are PyTorch's (``torch.distributed``: gloo on CPU), an
optional extra (``pip install ".[distributed]"``); gradstream tensors travel to them by
DLPack, without copies. Launch with ``torchrun --nproc_per_node N script.py``.
"""

from .collectives import *  # noqa: F403  (its __all__: the process group and collectives)
from .collectives import __all__ as __all__
