"""`gradstream.distributed`: data-parallel training across processes and machines.

The process groups and collectives are PyTorch's (``torch.distributed``: gloo on CPU), an
optional extra (``pip install ".[distributed]"``); gradstream tensors travel to them by
DLPack, without copies. Launch with ``torchrun --nproc_per_node N script.py``.
"""

from .collectives import (
    ReduceOp,
    Work,
    all_gather,
    all_reduce,
    barrier,
    broadcast,
    destroy_process_group,
    get_backend,
    get_rank,
    get_world_size,
    init_process_group,
    is_available,
    is_initialized,
    reduce_scatter,
)

__all__ = [
    "ReduceOp",
    "Work",
    "all_gather",
    "all_reduce",
    "barrier",
    "broadcast",
    "destroy_process_group",
    "get_backend",
    "get_rank",
    "get_world_size",
    "init_process_group",
    "is_available",
    "is_initialized",
    "reduce_scatter",
]
