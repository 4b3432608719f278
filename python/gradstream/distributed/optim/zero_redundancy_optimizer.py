"""`ZeroRedundancyOptimizer` (ZeRO stage 1): each rank keeps the optimizer state of its
shard of the parameters only, steps that shard, and broadcasts the updated parameters."""

from __future__ import annotations

from typing import Any

from ... import _core
from ..._core import Tensor
from ...autograd.grad_mode import no_grad
from ...optim.optimizer import Optimizer
from .. import collectives

__all__ = ["ZeroRedundancyOptimizer"]


def _partition(params: list, world: int) -> list[int]:
    """The owning rank of each parameter: largest first, each to the least loaded rank
    (PyTorch's greedy partition)."""
    sizes = [0] * world
    owner = [0] * len(params)
    for i in sorted(range(len(params)), key=lambda i: -params[i].numel()):
        r = min(range(world), key=lambda r: sizes[r])
        owner[i] = r
        sizes[r] += params[i].numel()
    return owner


def _to_wire(v: Any) -> Any:
    return v.detach().numpy() if isinstance(v, Tensor) else v


def _from_wire(v: Any) -> Any:
    return _core.tensor(v) if hasattr(v, "__array__") and not isinstance(v, Tensor) else v


class ZeroRedundancyOptimizer(Optimizer):
    """``ZeroRedundancyOptimizer(params, optimizer_class, process_group=None, **defaults)``.

    The parameters are split across the ranks of the group (by size); each rank builds
    ``optimizer_class`` over its own shard, so it holds 1/world of the optimizer state.
    ``step()`` steps the local shard, then every parameter is broadcast from its owner.
    ``param_groups`` hold every parameter (LR schedulers work on them as usual; the
    hyperparameters are handed to the local optimizer at each step). ``state_dict()``
    needs ``consolidate_state_dict(to)`` on every rank first, as in PyTorch.
    """

    def __init__(
        self,
        params,
        optimizer_class: type,
        process_group=None,
        parameters_as_bucket_view: bool = False,
        overlap_with_ddp: bool = False,
        **defaults: Any,
    ) -> None:
        if overlap_with_ddp:
            raise ValueError(
                "ZeroRedundancyOptimizer: overlap_with_ddp=True is not supported; use "
                "DistributedDataParallel with an in_backward=True optimizer to step during "
                "backward"
            )
        self.process_group = process_group
        self.rank = collectives.get_rank(process_group)
        self.world_size = collectives.get_world_size(process_group)
        self.optimizer_class = optimizer_class
        self._consolidated: dict | None = None
        super().__init__(params, defaults)
        all_params = self._all_params()
        self._owner = dict(
            zip(map(id, all_params), _partition(all_params, self.world_size), strict=True)
        )
        local_groups = []
        for g in self.param_groups:
            local = {k: v for k, v in g.items() if k != "params"}
            local["params"] = [p for p in g["params"] if self._owner[id(p)] == self.rank]
            local_groups.append(local)
        self.optim = optimizer_class(local_groups, **defaults)

    def _sync_hyperparameters(self) -> None:
        for g, lg in zip(self.param_groups, self.optim.param_groups, strict=True):
            for k, v in g.items():
                if k != "params" and lg.get(k) != v:
                    lg[k] = v

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ...autograd.grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        self._sync_hyperparameters()
        self.optim.step()
        with no_grad():
            group = self.process_group
            works = [
                collectives.broadcast(p, self._owner[id(p)], group=group, async_op=True)
                for p in self._all_params()
            ]
            for w in works:
                w.wait()
        return loss

    # ---- state ----

    def _global_index(self) -> dict[int, int]:
        return {id(p): i for i, p in enumerate(self._all_params())}

    def consolidate_state_dict(self, to: int = 0) -> None:
        """Gather every rank's shard of the optimizer state on rank ``to`` (a collective:
        call it on every rank)."""
        index = self._global_index()
        local = self.optim.state_dict()
        local_params = [p for g in self.optim.param_groups for p in g["params"]]
        shard = {
            index[id(local_params[k])]: {name: _to_wire(v) for name, v in s.items()}
            for k, s in local["state"].items()
        }
        gathered: list = [None] * self.world_size
        collectives._dist().all_gather_object(gathered, shard, group=self.process_group)
        if self.rank == to:
            merged: dict = {}
            for part in gathered:
                merged.update(part)
            self._consolidated = merged
        else:
            self._consolidated = None

    def state_dict(self) -> dict:
        if self._consolidated is None:
            raise RuntimeError(
                "Optimizer state has not been consolidated on this rank. Please call "
                "`consolidate_state_dict(to=0)` on all ranks beforehand if you meant to save "
                "the global state."
            )
        self._sync_hyperparameters()
        groups = []
        n = 0
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            packed["params"] = list(range(n, n + len(g["params"])))
            n += len(g["params"])
            groups.append(packed)
        state = {
            k: {name: _from_wire(v) for name, v in s.items()}
            for k, s in sorted(self._consolidated.items())
        }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a consolidated state dict: each rank keeps the state of its own shard."""
        saved_groups = state_dict["param_groups"]
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                "loaded state dict has a different number of parameter groups "
                f"({len(saved_groups)} vs {len(self.param_groups)})"
            )
        index = self._global_index()
        for g, sg in zip(self.param_groups, saved_groups, strict=True):
            for k, v in sg.items():
                if k != "params":
                    g[k] = v
        local_state = {}
        local_groups = []
        k = 0
        saved = state_dict.get("state", {})
        for lg, sg in zip(self.optim.param_groups, saved_groups, strict=True):
            packed = {name: v for name, v in sg.items() if name != "params"}
            packed["params"] = []
            for p in lg["params"]:
                s = saved.get(index[id(p)])
                if s is not None:
                    local_state[k] = {name: _from_wire(v) for name, v in s.items()}
                packed["params"].append(k)
                k += 1
            local_groups.append(packed)
        self.optim.load_state_dict({"state": local_state, "param_groups": local_groups})

    def __repr__(self) -> str:
        where = f"rank={self.rank}, world_size={self.world_size}"
        return f"ZeroRedundancyOptimizer({where}, {self.optim!r})"
