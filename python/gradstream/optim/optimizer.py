"""`Optimizer`: PyTorch's base class, with Rust kernels and an in-backward mode.

Built-in optimizers (SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta,
Rprop, ASGD) keep each param group's hyperparameters in a Rust struct that the Python
``param_groups`` dicts write through to, and each parameter's state in Rust. ``step()``
runs one fused in-place kernel per parameter. LBFGS is written in Python.

``in_backward=True`` installs a Rust post-accumulate hook on every parameter: the
parameter is stepped the moment its gradient is final and the gradient is freed, so
``loss.backward()`` is the whole update and at most a few gradients are alive at once.
``step()`` and ``zero_grad()`` are then harmless no-ops. When that backward raises (a
hook's or a consumer's exception, a failed ``save_to_disk`` read, Ctrl-C), every
parameter was stepped once or not at all, and ``stepped_in_backward()`` says which.

Exact global-norm clipping in that mode needs every gradient before any step, so it runs
in two passes (``clip_grad(max_norm=..., global_norm=True)`` then ``opt.backward(loss)``):
pass 1 measures each gradient's norm as it arrives and frees it; pass 2 steps with the
exact clipping factor. It costs a second backward, not memory.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping
from typing import Any

from .. import _core
from .._core import Tensor

__all__ = ["Optimizer", "required"]


class _RequiredParameter:
    def __repr__(self) -> str:
        return "<required parameter>"


required: Any = _RequiredParameter()

# Keys that schedulers and PyTorch itself put in param groups besides hyperparameters.
_EXTRA_GROUP_KEYS = {
    "params",
    "name",
    "param_names",
    "initial_lr",
    "max_lr",
    "min_lr",
    "max_momentum",
    "base_momentum",
    "swa_lr",
}


class ParamGroup(dict):
    """A param group dict; writing a hyperparameter also updates the Rust kernels' copy."""

    __slots__ = ("_core",)

    def __init__(self, data: Mapping, core=None):
        super().__init__(data)
        self._core = core
        if core is not None:
            for k, v in data.items():
                if k != "params":
                    core.set(k, v)

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        if self._core is not None and key != "params":
            self._core.set(key, value)

    def update(self, *args, **kwargs):
        for k, v in dict(*args, **kwargs).items():
            self[k] = v

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def __reduce__(self):
        return (dict, (dict(self),))


def _key(p) -> int:
    """A parameter's identity: its tensor's, so the plain ``Tensor`` a hook receives and the
    ``Parameter`` object it wraps map to the same key (never ``==``, which is element-wise)."""
    return hash(p)


def _find(params: list, p):
    k = _key(p)
    for q in params:
        if _key(q) == k:
            return q
    return None


class _StateView(Mapping):
    """``optimizer.state`` of a Rust-backed optimizer: param -> PyTorch-layout dict whose
    tensors are the live state buffers."""

    def __init__(self, opt: Optimizer):
        self._opt = opt

    def _entries(self):
        for g in self._opt.param_groups:
            for p in g["params"]:
                s = self._opt._rust_states.get(_key(p))
                if s is not None and not s.is_empty():
                    yield p, s

    def __getitem__(self, p):
        s = self._opt._rust_states.get(_key(p))
        if s is None:
            raise KeyError("parameter is not optimized by this optimizer")
        return s.to_dict()

    def __iter__(self):
        return (p for p, _ in self._entries())

    def __len__(self):
        return sum(1 for _ in self._entries())

    def __contains__(self, p):
        s = self._opt._rust_states.get(_key(p))
        return s is not None and not s.is_empty()

    def __repr__(self):
        return f"OptimizerState({len(self)} parameters)"


class Optimizer:
    """Base class of all optimizers, as in PyTorch.

    Subclasses written in Python (``step`` updating ``self.state[p]``) work as they do in
    PyTorch, including ``step_param`` and ``in_backward`` (driven by Python hooks). The
    built-in ones set ``_kind`` and run in Rust.
    """

    _kind: str | None = None
    #: Hyperparameters a param group may set (besides ``_EXTRA_GROUP_KEYS``).
    _hyper_keys: frozenset = frozenset()

    def __init__(self, params, defaults: dict, *, in_backward: bool = False):
        self.defaults = defaults
        self._in_backward = bool(in_backward)
        self._rust_states: dict[int, Any] = {}
        self._py_state: defaultdict = defaultdict(dict)
        self._hooks: list = []
        self._control = _core._StreamControl()
        self._accumulate = 1
        self._step_calls = 0
        self._global_clip: tuple[float, float] | None = None
        self.param_groups: list[ParamGroup] = []

        if isinstance(params, Tensor):
            raise TypeError(
                "params argument given to the optimizer should be an iterable of Tensors or "
                f"dicts, but got {type(params).__name__}"
            )
        param_groups = list(params)
        if len(param_groups) == 0:
            raise ValueError("optimizer got an empty parameter list")
        if not isinstance(param_groups[0], dict):
            param_groups = [{"params": param_groups}]
        for g in param_groups:
            self.add_param_group(g)

    # ---- construction ----

    def _validate_group(self, group: dict) -> None:
        """Check hyperparameter values (subclasses raise PyTorch's ValueErrors)."""

    def add_param_group(self, param_group: dict) -> None:
        if not isinstance(param_group, dict):
            raise TypeError(f"param_group must be a dict, but got {type(param_group).__name__}")
        params = param_group["params"]
        if isinstance(params, Tensor):
            params = [params]
        elif isinstance(params, set):
            raise TypeError(
                "optimizer parameters need to be organized in ordered collections, but the "
                "ordering of tensors in sets will change between runs. Please use a list instead."
            )
        else:
            params = list(params)
        for p in params:
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"optimizer can only optimize Tensors, but one of the params is "
                    f"{type(p).__module__}.{type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError("can't optimize a non-leaf Tensor")
            if self._in_backward and not p.requires_grad:
                raise ValueError(
                    f"in_backward=True: a parameter of shape {tuple(p.shape)} does not require "
                    "grad, so its gradient never arrives and it would never be stepped"
                )
        if self._hyper_keys:
            unknown = [
                k for k in param_group if k not in self._hyper_keys and k not in _EXTRA_GROUP_KEYS
            ]
            if unknown:
                raise ValueError(
                    f"{type(self).__name__}: unknown param group key(s) {sorted(unknown)}; "
                    f"valid keys are {sorted(self._hyper_keys)}"
                )
        group = dict(param_group)
        group["params"] = params
        for name, default in self.defaults.items():
            if default is required and name not in group:
                raise ValueError(
                    "parameter group didn't specify a value of required optimization "
                    f"parameter {name}"
                )
            group.setdefault(name, default)
        seen: set[int] = set()
        for g in self.param_groups:
            seen.update(_key(p) for p in g["params"])
        if any(_key(p) in seen for p in params):
            raise ValueError("some parameters appear in more than one parameter group")
        if len({_key(p) for p in params}) != len(params):
            raise ValueError(
                "optimizer contains a parameter group with duplicate parameters; "
                "each parameter may appear once"
            )
        self._validate_group(group)
        core = _core._OptimGroup(self._kind) if self._kind is not None else None
        pg = ParamGroup(group, core)
        self.param_groups.append(pg)
        for p in params:
            if self._kind is not None:
                self._rust_states[_key(p)] = _core._ParamState()
            if self._in_backward:
                self._attach(p, pg)

    # ---- in-backward mode ----

    def _attach(self, p, group: ParamGroup) -> None:
        reducer = getattr(p, "_ddp_reducer", None)
        if reducer is not None:
            # DistributedDataParallel steps p once its averaged gradient is back.
            self._hooks.append((p, None, reducer.attach_optimizer(p, self)))
            return
        # Seen by DistributedDataParallel, which must come first (it would average too late).
        p._in_backward_steps = getattr(p, "_in_backward_steps", 0) + 1
        if self._kind is not None:
            hook_id = _core._optim_attach(p, group._core, self._rust_states[_key(p)], self._control)
            self._hooks.append((p, hook_id, None))
        else:
            handle = p.register_post_accumulate_grad_hook(self._python_stream_hook)
            self._hooks.append((p, None, handle))

    def _python_stream_hook(self, p) -> None:
        """In-backward fallback for optimizers written in Python."""
        if p.grad is None:
            return
        counts = self._py_micro
        counts[_key(p)] = counts.get(_key(p), 0) + 1
        if counts[_key(p)] < self._accumulate:
            return
        counts[_key(p)] = 0
        self.step_param(p)
        self._py_stepped_in[_key(p)] = _core._backward_pass()
        p.grad = None

    @property
    def _py_micro(self) -> dict:
        d = self.__dict__.get("_py_micro_counts")
        if d is None:
            d = self.__dict__["_py_micro_counts"] = {}
        return d

    @property
    def _py_stepped_in(self) -> dict:
        d = self.__dict__.get("_py_stepped_in_passes")
        if d is None:
            d = self.__dict__["_py_stepped_in_passes"] = {}
        return d

    @property
    def in_backward(self) -> bool:
        return self._in_backward

    def stepped_in_backward(self) -> list:
        """The parameters that the last backward pass run on this thread stepped, in
        ``param_groups`` order (``in_backward=True``; always empty otherwise).

        Each parameter is stepped at most once per backward, as soon as its gradient is
        final. When the backward raises (a hook's or a gradient consumer's exception, a
        saved tensor that cannot be read back, ``KeyboardInterrupt``), the parameters
        listed here were stepped, with their full gradient, and every other one was left
        untouched (its value and state as before the backward, its ``.grad`` as the pass
        left it). A backward started inside another one (a hook, a checkpoint's
        recomputation) belongs to the outer pass. With ``accumulate(n)``, the passes that
        only accumulate step nothing.
        """
        if not self._in_backward:
            return []
        latest = _core._backward_pass()
        stepped = []
        for p in self._all_params():
            if self._kind is not None:
                when = _core._stepped_in_pass(self._rust_states[_key(p)])
            else:
                when = self._py_stepped_in.get(_key(p))
            if when is not None and when == latest:
                stepped.append(p)
        return stepped

    def remove_hooks(self) -> None:
        """Leave the in-backward mode: gradients accumulate in ``.grad`` again."""
        for p, hook_id, handle in self._hooks:
            if hook_id is not None:
                _core._optim_detach(p, hook_id)
            else:
                handle.remove()
            if getattr(p, "_in_backward_steps", 0) > 0:
                p._in_backward_steps -= 1
        self._hooks = []
        self._in_backward = False

    def __del__(self):
        try:
            if self._hooks:
                self.remove_hooks()
        except Exception:
            pass

    def accumulate(self, n: int) -> Optimizer:
        """Gradient accumulation over ``n`` micro-batches.

        In-backward mode: backward passes 1..n-1 accumulate into ``.grad``; the n-th steps
        each parameter inside its backward and frees its gradient. Standard mode: only every
        n-th ``step()`` steps (and the ``zero_grad()`` after it zeroes).
        """
        if isinstance(n, bool) or not isinstance(n, int):
            raise TypeError(f"accumulate(n): n must be an int, got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"accumulate(n): n must be a positive integer, got {n}")
        self._accumulate = n
        self._control.accumulate = n
        self._step_calls = 0
        for s in self._rust_states.values():
            s.reset_micro_batches()
        self._py_micro.clear()
        return self

    def clip_grad(
        self,
        max_value: float | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        global_norm: bool = False,
    ) -> Optimizer:
        """Gradient clipping inside the in-backward stream.

        ``max_value``: clamp every gradient element into ``[-max_value, max_value]``.
        ``max_norm`` with ``global_norm=False``: per parameter, scale its gradient so its
        norm is at most ``max_norm``. ``global_norm=True``: exact clipping by the norm over
        all parameters, as ``nn.utils.clip_grad_norm_`` does; run the backward through
        ``opt.backward(loss)`` (two passes). Call with no arguments to turn clipping off.
        """
        if max_value is not None and max_value < 0:
            raise ValueError(f"clip_grad: max_value must be non-negative, got {max_value}")
        if max_norm is not None and max_norm < 0:
            raise ValueError(f"clip_grad: max_norm must be non-negative, got {max_norm}")
        norm_type = float(norm_type)
        if global_norm:
            if max_norm is None:
                raise ValueError("clip_grad: global_norm=True needs max_norm")
            self._global_clip = (float(max_norm), norm_type)
            self._param_clip = None
            self._control.set_clipping(max_value, None, norm_type)
        else:
            self._global_clip = None
            self._param_clip = None if max_norm is None else (float(max_norm), norm_type)
            self._control.set_clipping(max_value, max_norm, norm_type)
        self._clip_value = max_value
        return self

    def backward(self, loss, **kwargs) -> None:
        """``loss.backward()``; with global-norm clipping in the in-backward mode, two passes:
        one that measures the total gradient norm (freeing each gradient), one that steps with
        the exact clipping factor."""
        if self._global_clip is None or not self._in_backward:
            loss.backward(**kwargs)
            return
        if self._accumulate != 1:
            raise NotImplementedError(
                "exact global-norm clipping in the in-backward mode does not combine with "
                "accumulate(n > 1); clip per parameter (clip_grad(max_norm=..., "
                "global_norm=False)) or use the standard mode"
            )
        max_norm, norm_type = self._global_clip
        owners = (getattr(p, "_ddp_reducer", None) for p in self._all_params())
        reducers = {id(r): r for r in owners if r is not None}
        if reducers:  # DistributedDataParallel's: the two passes reduce the gradients
            (reducer,) = reducers.values()
            self.last_total_norm = reducer.clipped_backward(loss, max_norm, norm_type, **kwargs)
            return
        self._control.begin_measure(norm_type)
        try:
            loss.backward(retain_graph=True, **kwargs)
        finally:
            measured = self._control.end_measure()
        total = measured if math.isinf(norm_type) else measured ** (1.0 / norm_type)
        coef = max_norm / (total + 1e-6)
        self._control.set_scale(min(coef, 1.0))
        try:
            loss.backward(**kwargs)
        finally:
            self._control.reset_phase()
        self.last_total_norm = total

    # ---- the step ----

    @property
    def state(self):
        if self._kind is not None:
            return _StateView(self)
        return self._py_state

    @state.setter
    def state(self, value):
        if self._kind is not None:
            raise AttributeError(
                "the state of a built-in optimizer lives in Rust; use load_state_dict"
            )
        self._py_state = value

    def zero_grad(self, set_to_none: bool = True) -> None:
        if self._in_backward:
            return
        if self._accumulate > 1 and self._step_calls % self._accumulate != 0:
            return
        for g in self.param_groups:
            for p in g["params"]:
                if p.grad is None:
                    continue
                if set_to_none:
                    p.grad = None
                else:
                    p.grad = p.grad.detach()
                    p.grad.zero_()

    def step(self, closure=None):
        loss = None
        if closure is not None:
            from ..autograd.grad_mode import enable_grad

            with enable_grad():
                loss = closure()
        if self._in_backward:
            return loss
        self._step_calls += 1
        if self._step_calls % self._accumulate != 0:
            return loss
        self._step_groups()
        return loss

    def _step_groups(self) -> None:
        if self._kind is None:
            raise NotImplementedError(f"{type(self).__name__} must implement step()")
        for g in self.param_groups:
            params = g["params"]
            _core._optim_step(params, g._core, [self._rust_states[_key(p)] for p in params])

    def step_param(self, p) -> None:
        """Step one parameter from its ``.grad`` (for a post-accumulate hook:
        ``p.register_post_accumulate_grad_hook(lambda p: (opt.step_param(p), setattr(p,
        'grad', None)))``). Works for optimizers written in Python too."""
        for g in self.param_groups:
            q = _find(g["params"], p)
            if q is not None:
                p = q
                break
        else:
            raise ValueError(
                f"step_param: the parameter of shape {tuple(p.shape)} is not optimized by this "
                "optimizer"
            )
        if self._kind is not None:
            _core._optim_step([p], g._core, [self._rust_states[_key(p)]])
            return
        # A Python optimizer: run its step() with every group narrowed to this parameter.
        saved = [grp["params"] for grp in self.param_groups]
        try:
            for grp in self.param_groups:
                dict.__setitem__(grp, "params", [p] if grp is g else [])
            in_bw, self._in_backward = self._in_backward, False
            acc, self._accumulate = self._accumulate, 1
            type(self).step(self)
        finally:
            self._in_backward = in_bw
            self._accumulate = acc
            for grp, ps in zip(self.param_groups, saved, strict=False):
                dict.__setitem__(grp, "params", ps)

    def dequantized_state(self, p) -> dict:
        """``optimizer.state[p]``'s buffers as float tensors: low-bit state
        (``state_dtype``) decoded to float32 and shaped like ``p``; dense state as it is.
        A copy: writing to it does not change the state."""
        if self._kind is None:
            return {k: v for k, v in self.state[p].items() if isinstance(v, Tensor)}
        s = self._rust_states.get(_key(p))
        if s is None:
            raise KeyError("parameter is not optimized by this optimizer")
        return dict(s.decoded(p))

    # ---- state dict ----

    def _all_params(self) -> list:
        return [p for g in self.param_groups for p in g["params"]]

    def state_dict(self) -> dict:
        """PyTorch's layout: ``{'state': {index: {...}}, 'param_groups': [{..., 'params':
        [indices]}]}``; indices follow the order of the parameters in ``param_groups``."""
        index = 0
        groups = []
        ids: dict[int, int] = {}
        for g in self.param_groups:
            packed = {k: v for k, v in g.items() if k != "params"}
            idx = []
            for p in g["params"]:
                ids[_key(p)] = index
                idx.append(index)
                index += 1
            packed["params"] = idx
            groups.append(packed)
        state = {}
        for p in self._all_params():
            if self._kind is not None:
                s = self._rust_states[_key(p)]
                if not s.is_empty():
                    state[ids[_key(p)]] = s.to_dict()
            else:
                for key, value in self._py_state.items():
                    if _key(key) == _key(p):
                        state[ids[_key(p)]] = value
                        break
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict) -> None:
        groups = self.param_groups
        saved_groups = state_dict["param_groups"]
        if len(groups) != len(saved_groups):
            raise ValueError(
                "loaded state dict has a different number of parameter groups "
                f"({len(saved_groups)} vs {len(groups)})"
            )
        for g, sg in zip(groups, saved_groups, strict=False):
            if len(g["params"]) != len(sg["params"]):
                raise ValueError(
                    "loaded state dict contains a parameter group that doesn't match the size "
                    f"of optimizer's group ({len(sg['params'])} vs {len(g['params'])})"
                )
        id_map = {}
        for g, sg in zip(groups, saved_groups, strict=False):
            for old, p in zip(sg["params"], g["params"], strict=False):
                id_map[old] = p
        for g, sg in zip(groups, saved_groups, strict=False):
            for k, v in sg.items():
                if k != "params":
                    g[k] = v
        saved_state = state_dict.get("state", {})
        if self._kind is not None:
            for s in self._rust_states.values():
                s.clear()
            for k, v in saved_state.items():
                p = id_map.get(k)
                if p is None:
                    continue
                self._rust_states[_key(p)].load(p, dict(v))
        else:
            new_state: defaultdict = defaultdict(dict)
            for k, v in saved_state.items():
                p = id_map.get(k)
                if p is not None:
                    new_state[p] = {
                        name: (t.detach().clone() if isinstance(t, Tensor) else t)
                        for name, t in v.items()
                    }
            self._py_state = new_state

    # ---- repr ----

    def __getstate__(self):
        raise TypeError(f"{type(self).__name__} cannot be pickled; save its state_dict()")

    def __repr__(self) -> str:
        s = type(self).__name__ + " ("
        for i, g in enumerate(self.param_groups):
            s += f"\nParameter Group {i}"
            for k in sorted(g.keys()):
                if k != "params":
                    s += f"\n    {k}: {g[k]}"
        return s + "\n)"
