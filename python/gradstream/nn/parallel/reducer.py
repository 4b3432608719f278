"""The gradient reducer of `DistributedDataParallel`: buckets filled as backward produces
gradients, each all-reduced asynchronously the moment it is full.

Every parameter has a post-accumulate hook. When a parameter's gradient is final, the
hook copies it into its bucket (a flat buffer) and frees it; when the bucket's last
gradient is in, an asynchronous all-reduce starts while backward goes on. Finished
buckets are collected at each later hook and, at the last gradient, all are waited for.

A finished bucket then becomes, per parameter:
- standard mode: ``p.grad``, a view of the bucket (``gradient_as_bucket_view=True``) or a
  copy of it (``False``, PyTorch's default; the bucket is freed);
- in-backward mode (an ``in_backward=True`` optimizer over these parameters): ``p.grad``
  for the moment of ``optimizer.step_param(p)``, then freed with the bucket, so only the
  buckets in flight are alive.

Buckets follow the reverse order of the parameters for the first backward (as PyTorch
does), then the order in which that backward produced the gradients. Every rank runs the
same graph through gradstream's deterministic engine, so every rank fills and launches
its buckets in the same order, which the collectives need.
"""

from __future__ import annotations

import math
import time
import weakref

from ... import _core
from ...distributed import collectives


class Bucket:
    """Parameters whose gradients travel in one all-reduce."""

    __slots__ = ("arrived", "dtype", "flat", "numel", "offsets", "params", "work")

    def __init__(self, params: list):
        self.params = params
        self.offsets = []
        n = 0
        for p in params:
            self.offsets.append(n)
            n += p.numel()
        self.numel = n
        self.dtype = params[0].dtype
        self.flat = None
        self.work = None
        self.arrived = 0

    def slot(self, i: int):
        p = self.params[i]
        return self.flat.narrow(0, self.offsets[i], p.numel()).view(p.shape)


def plan_buckets(params: list, cap_bytes: int) -> list[Bucket]:
    """Consecutive parameters of one dtype, up to ``cap_bytes`` a bucket."""
    buckets: list[Bucket] = []
    by_dtype: dict = {}
    for p in params:
        cur = by_dtype.get(p.dtype)
        nbytes = p.numel() * p.element_size()
        if cur is None or (cur[1] + nbytes > cap_bytes and cur[0]):
            cur = by_dtype[p.dtype] = [[], 0]
            buckets.append(cur)  # type: ignore[arg-type]
        cur[0].append(p)
        cur[1] += nbytes
    return [Bucket(b[0]) for b in buckets]  # type: ignore[index]


class _OptimizerHandle:
    """What an in-backward optimizer keeps to leave the DDP stream (``remove_hooks``)."""

    def __init__(self, reducer: Reducer, p):
        self._reducer = reducer
        self._key = id(p)

    def remove(self) -> None:
        self._reducer.optimizers.pop(self._key, None)


def _norm(g, norm_type: float) -> float:
    if math.isinf(norm_type):
        return float(g.abs().max()) if g.numel() else 0.0
    return float((g.abs() ** norm_type).sum()) ** (1.0 / norm_type)


def _hook(reducer: weakref.ref):
    def on_grad(p) -> None:
        r = reducer()
        if r is not None:
            r._on_grad(p)

    return on_grad


class Reducer:
    def __init__(self, params: list, cap_bytes: int, gradient_as_bucket_view: bool, group):
        self.params = params
        self.group = group
        self.world = collectives.get_world_size(group)
        self.cap_bytes = cap_bytes
        self.as_view = gradient_as_bucket_view
        self.index = {id(p): i for i, p in enumerate(params)}
        self._set_plan(plan_buckets(list(reversed(params)), cap_bytes))
        self.rebuilt = False
        self.order: list[int] = []
        self.in_flight: list[Bucket] = []
        self.sync = True
        # in-backward optimizers by parameter, and the two-pass clipping state
        self.optimizers: dict[int, object] = {}
        self.measuring: float | None = None
        self.norm_type = 2.0
        self.scale = 1.0
        # time spent blocked on reductions: the communication backward did not hide
        self.wait_seconds = 0.0
        # The parameters' hooks and attributes hold the reducer weakly: a parameter is owned
        # by Rust, which Python's cycle collector cannot see through.
        me = weakref.ref(self)
        self.handles = [p.register_post_accumulate_grad_hook(_hook(me)) for p in params]
        self.proxy = weakref.proxy(self)
        for p in params:
            p._ddp_reducer = self.proxy

    def _set_plan(self, buckets: list[Bucket]) -> None:
        self.buckets = buckets
        self.where = {}
        for b in buckets:
            for i, p in enumerate(b.params):
                self.where[id(p)] = (b, i)

    # ---- the stream ----

    def prepare(self, sync: bool) -> None:
        """Before a forward: the previous backward must have reduced every gradient."""
        if self.order and self.sync:
            missing = len(self.params) - len(self.order)
            raise RuntimeError(
                "DistributedDataParallel: the previous backward left "
                f"{missing} of {len(self.params)} parameter gradients unreduced: every "
                "parameter must take part in the loss (find_unused_parameters is not supported)"
            )
        self.sync = sync

    def _on_grad(self, p) -> None:
        if not self.sync or p.grad is None:
            return  # no_sync(): the gradient accumulates in p.grad
        b, i = self.where[id(p)]
        if b.flat is None:
            b.flat = _core.zeros(b.numel, dtype=b.dtype, device=p.device)
        g = p.grad
        if self.world > 1:
            b.slot(i).copy_(g).div_(self.world)
        else:
            b.slot(i).copy_(g)
        if self.as_view or id(p) in self.optimizers:
            p.grad = None
        self.order.append(self.index[id(p)])
        b.arrived += 1
        if b.arrived == len(b.params):
            b.work = collectives.all_reduce(b.flat, group=self.group, async_op=True)
            self.in_flight.append(b)
        while self.in_flight and self.in_flight[0].work.is_completed():
            self._finish(self.in_flight.pop(0))
        if len(self.order) == len(self.params):
            self._end_of_backward()

    def _end_of_backward(self) -> None:
        while self.in_flight:
            self._finish(self.in_flight.pop(0))
        if not self.rebuilt:
            arrival = [self.params[i] for i in self.order]
            self._set_plan(plan_buckets(arrival, self.cap_bytes))
            self.rebuilt = True
        self.order = []

    def _finish(self, b: Bucket) -> None:
        t0 = time.perf_counter()
        b.work.wait()
        self.wait_seconds += time.perf_counter() - t0
        b.work = None
        b.arrived = 0
        for i, p in enumerate(b.params):
            opt = self.optimizers.get(id(p))
            g = b.slot(i)
            if opt is not None:
                self._step(opt, p, g)
            elif self.as_view:
                p.grad = g
            else:
                p.grad.copy_(g)
        # Views in p.grad (gradient_as_bucket_view) keep the buffer; the next step gets a new one.
        b.flat = None

    def _step(self, opt, p, g) -> None:
        if self.measuring is not None:
            if math.isinf(self.norm_type):
                self.measuring = max(self.measuring, _norm(g, self.norm_type))
            else:
                self.measuring += float((g.abs() ** self.norm_type).sum())
            return
        # as the Rust in-backward step does: the global factor, then per-parameter
        # clipping by norm, then by value
        scale = self.scale
        param_clip = getattr(opt, "_param_clip", None)
        if param_clip is not None:
            max_norm, norm_type = param_clip
            coef = max_norm / (_norm(g, norm_type) * scale + 1e-6)
            if coef < 1.0:
                scale *= coef
        if scale != 1.0:
            g.mul_(scale)
        clip_value = getattr(opt, "_clip_value", None)
        if clip_value is not None:
            g.clamp_(-clip_value, clip_value)
        p.grad = g
        opt.step_param(p)
        p.grad = None

    # ---- in-backward optimizers ----

    def attach_optimizer(self, p, opt) -> _OptimizerHandle:
        self.optimizers[id(p)] = opt
        return _OptimizerHandle(self, p)

    def clipped_backward(self, loss, max_norm: float, norm_type: float, **kwargs) -> float:
        """Exact global-norm clipping with in-backward steps, in two passes: the first
        reduces and measures every gradient (freeing each), the second steps with the
        clipping factor of the global norm of the averaged gradients."""
        self.norm_type = norm_type
        self.measuring = 0.0
        try:
            loss.backward(retain_graph=True, **kwargs)
            measured = self.measuring
        finally:
            self.measuring = None
        total = measured if math.isinf(norm_type) else measured ** (1.0 / norm_type)
        self.scale = min(max_norm / (total + 1e-6), 1.0)
        try:
            loss.backward(**kwargs)
        finally:
            self.scale = 1.0
        return total

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        for p in self.params:
            p.__dict__.pop("_ddp_reducer", None)
