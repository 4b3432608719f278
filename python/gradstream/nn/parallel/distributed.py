"""`DistributedDataParallel`: one model replica per process, gradients averaged across the
process group while backward runs (see `reducer.py` for the stream)."""

from __future__ import annotations

import contextlib

from ...autograd.grad_mode import no_grad
from ...distributed import collectives
from ..modules.module import Module
from .reducer import Reducer

__all__ = ["DistributedDataParallel"]


class DistributedDataParallel(Module):
    """Data-parallel training over ``torch.distributed`` (gloo on CPU), as PyTorch's DDP.

    At construction every rank takes rank 0's parameters and buffers. Each backward
    averages the gradients across the group: they stream into buckets of ``bucket_cap_mb``
    in the order backward produces them, and each full bucket is all-reduced
    asynchronously while backward continues. ``no_sync()`` accumulates locally.

    With an ``in_backward=True`` optimizer built over these parameters (after this
    wrapper), each parameter steps as soon as its bucket's averaged gradient is back, and
    the bucket is then freed. Exact global-norm clipping in that mode runs as in one
    process, in two passes: ``opt.clip_grad(max_norm=..., global_norm=True)`` then
    ``opt.backward(loss)`` (the first pass reduces and measures, the second steps).
    LR schedulers change ``param_groups``, which ``step_param`` reads.

    ``gradient_as_bucket_view=True`` makes each ``p.grad`` a view of its bucket, so the
    averaged gradients take no memory beyond the buckets. Every parameter that requires
    grad must take part in each loss (``find_unused_parameters`` is not supported).
    """

    def __init__(
        self,
        module: Module,
        device_ids=None,
        output_device=None,
        dim: int = 0,
        broadcast_buffers: bool = True,
        process_group=None,
        bucket_cap_mb: float | None = None,
        find_unused_parameters: bool = False,
        gradient_as_bucket_view: bool = False,
        static_graph: bool = False,
    ) -> None:
        super().__init__()
        if find_unused_parameters:
            raise ValueError(
                "DistributedDataParallel: find_unused_parameters=True is not supported; every "
                "parameter that requires grad must take part in the loss"
            )
        if bucket_cap_mb is None:
            bucket_cap_mb = 25
        if bucket_cap_mb <= 0:
            raise ValueError(
                f"DistributedDataParallel: bucket_cap_mb must be positive, got {bucket_cap_mb}"
            )
        if not collectives.is_initialized():
            raise RuntimeError(
                "DistributedDataParallel: the default process group has not been initialized; "
                "call gradstream.distributed.init_process_group first"
            )
        self.module = module
        self.process_group = process_group
        self.broadcast_buffers = broadcast_buffers
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.require_backward_grad_sync = True
        self._sync_state(module.state_dict(keep_vars=True).values())
        params = []
        seen: set[int] = set()
        for p in module.parameters():
            if p.requires_grad and id(p) not in seen:
                seen.add(id(p))
                params.append(p)
        if not params:
            raise RuntimeError(
                "DistributedDataParallel is not needed when a module doesn't have any "
                "parameter that requires a gradient."
            )
        stepped = [p for p in params if getattr(p, "_in_backward_steps", 0) > 0]
        if stepped:
            raise RuntimeError(
                "DistributedDataParallel: an in_backward=True optimizer is already attached to "
                f"{len(stepped)} parameter(s) (first of shape {tuple(stepped[0].shape)}); it "
                "would step with this rank's gradient before the all-reduce. Build the "
                "optimizer after DistributedDataParallel, or call its remove_hooks() first"
            )
        self.reducer = Reducer(
            params, int(bucket_cap_mb * 1024 * 1024), gradient_as_bucket_view, process_group
        )

    def _sync_state(self, tensors) -> None:
        works = [
            collectives.broadcast(t, 0, group=self.process_group, async_op=True) for t in tensors
        ]
        with no_grad():
            for w in works:
                w.wait()

    def forward(self, *args, **kwargs):
        self.reducer.prepare(sync=self.require_backward_grad_sync)
        if self.broadcast_buffers:
            buffers = list(self.module.buffers())
            if buffers:
                self._sync_state(buffers)
        return self.module(*args, **kwargs)

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards inside accumulate into ``p.grad`` without communication; the first
        backward after it averages the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    def __del__(self):
        try:
            self.reducer.remove()
        except Exception:
            pass
