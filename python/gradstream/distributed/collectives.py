"""Process groups and collectives on gradstream tensors, run by ``torch.distributed``.

Each gradstream tensor is handed to c10d as a PyTorch tensor that shares its memory
(``torch.from_dlpack``: DLPack export is zero-copy), so a collective reads and writes
gradstream's own buffers. A non-contiguous tensor (which gloo refuses) goes through a
contiguous copy that is written back when the collective is done.
"""

from __future__ import annotations

import enum
from typing import Any

from .._core import Tensor

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


def _dist():
    try:
        import torch.distributed as dist
    except ImportError as e:  # pragma: no cover - torch is the optional extra
        raise ImportError(
            "gradstream.distributed runs on torch.distributed: install PyTorch "
            '(`pip install ".[distributed]"` after its CPU wheel)'
        ) from e
    return dist


class ReduceOp(enum.Enum):
    """The reductions of ``all_reduce`` / ``reduce_scatter`` (``torch.distributed.ReduceOp``)."""

    SUM = "SUM"
    PRODUCT = "PRODUCT"
    MIN = "MIN"
    MAX = "MAX"
    BAND = "BAND"
    BOR = "BOR"
    BXOR = "BXOR"
    AVG = "AVG"


def _torch_op(op):
    if isinstance(op, ReduceOp):
        return getattr(_dist().ReduceOp, op.value)
    return op  # torch's own ReduceOp (or RedOpType) passes through


def _check_tensor(op: str, name: str, t) -> None:
    if not isinstance(t, Tensor):
        raise TypeError(f"{op}: {name} must be a gradstream Tensor, got {type(t).__name__}")


class _Shared:
    """A gradstream tensor as a PyTorch tensor over the same memory (or, for a
    non-contiguous one, over a contiguous copy that ``finish`` writes back)."""

    __slots__ = ("copied", "dst", "src", "torch")

    def __init__(self, t: Tensor):
        import torch

        self.dst = t
        self.copied = not t.is_contiguous()
        self.src = t.detach().contiguous() if self.copied else t.detach()
        self.torch = torch.from_dlpack(self.src)

    def finish(self) -> None:
        if self.torch.is_cuda:
            # NCCL wrote on PyTorch's stream; gradstream's kernels read on its own.
            import torch

            torch.cuda.current_stream(self.torch.device).synchronize()
        if self.copied:
            self.dst.detach().copy_(self.src)


def _share(t: Tensor) -> _Shared:
    return _Shared(t)


class Work:
    """The handle of an asynchronous collective (``async_op=True``): ``wait()`` blocks until
    its results are in the gradstream tensors."""

    def __init__(self, work, shared: list[_Shared]):
        self._work = work
        self._shared = shared
        self._done = False

    def is_completed(self) -> bool:
        return self._done or bool(self._work.is_completed())

    def is_success(self) -> bool:
        return bool(self._work.is_success())

    def exception(self):
        return self._work.exception()

    def wait(self, timeout=None) -> bool:
        if self._done:
            return True
        if timeout is None:
            self._work.wait()
        else:
            self._work.wait(timeout)
        for s in self._shared:
            s.finish()
        self._shared = []
        self._done = True
        return True

    def __repr__(self) -> str:
        return f"Work(completed={self.is_completed()})"


def _run(work, shared: list[_Shared], async_op: bool):
    if async_op:
        return Work(work, shared)
    for s in shared:
        s.finish()
    return None


def is_available() -> bool:
    """Whether torch.distributed can be imported and is built in."""
    try:
        return bool(_dist().is_available())
    except ImportError:
        return False


def init_process_group(backend: str | None = None, init_method: str | None = None, **kwargs):
    """``torch.distributed.init_process_group``; the backend defaults to gloo for CPU tensors
    and, where gradstream sees a GPU, NCCL for CUDA tensors (PyTorch's default). Under
    ``torchrun`` the rank, world size and rendezvous come from the environment."""
    from .. import cuda

    default = "cpu:gloo,cuda:nccl" if cuda.is_available() else "gloo"
    return _dist().init_process_group(backend or default, init_method=init_method, **kwargs)


def destroy_process_group(group=None) -> None:
    _dist().destroy_process_group(group)


def is_initialized() -> bool:
    try:
        return bool(_dist().is_initialized())
    except ImportError:
        return False


def get_rank(group=None) -> int:
    return int(_dist().get_rank(group))


def get_world_size(group=None) -> int:
    return int(_dist().get_world_size(group))


def get_backend(group=None) -> str:
    return str(_dist().get_backend(group))


def barrier(group=None, async_op: bool = False):
    work = _dist().barrier(group=group, async_op=async_op)
    return _run(work, [], async_op)


def all_reduce(tensor: Tensor, op: Any = ReduceOp.SUM, group=None, async_op: bool = False):
    """Reduce ``tensor`` across the group, in place on every rank."""
    _check_tensor("all_reduce", "tensor", tensor)
    s = _share(tensor)
    work = _dist().all_reduce(s.torch, op=_torch_op(op), group=group, async_op=async_op)
    return _run(work, [s], async_op)


def broadcast(tensor: Tensor, src: int, group=None, async_op: bool = False):
    """Copy rank ``src``'s ``tensor`` into ``tensor`` on every other rank, in place."""
    _check_tensor("broadcast", "tensor", tensor)
    s = _share(tensor)
    work = _dist().broadcast(s.torch, src=src, group=group, async_op=async_op)
    return _run(work, [s], async_op)


def all_gather(tensor_list: list, tensor: Tensor, group=None, async_op: bool = False):
    """Every rank's ``tensor`` into ``tensor_list`` (one tensor per rank), on every rank."""
    _check_tensor("all_gather", "tensor", tensor)
    for i, t in enumerate(tensor_list):
        _check_tensor("all_gather", f"tensor_list[{i}]", t)
    outs = [_share(t) for t in tensor_list]
    s = _share(tensor)
    work = _dist().all_gather([o.torch for o in outs], s.torch, group=group, async_op=async_op)
    return _run(work, outs, async_op)


def reduce_scatter(
    output: Tensor, input_list: list, op: Any = ReduceOp.SUM, group=None, async_op: bool = False
):
    """Reduce ``input_list[r]`` across ranks into rank ``r``'s ``output``."""
    _check_tensor("reduce_scatter", "output", output)
    for i, t in enumerate(input_list):
        _check_tensor("reduce_scatter", f"input_list[{i}]", t)
    out = _share(output)
    ins = [_share(t) for t in input_list]
    work = _dist().reduce_scatter(
        out.torch, [i.torch for i in ins], op=_torch_op(op), group=group, async_op=async_op
    )
    return _run(work, [out], async_op)
