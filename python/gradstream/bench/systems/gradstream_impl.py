"""The gradstream systems: the same models on `gradstream.nn` and `gradstream.optim`.

- `standard` (`gradstream`): forward, backward, `optimizer.step()`, `zero_grad(set_to_none=True)`.
- `in_backward` (`gradstream-in-backward`): `Adam(..., in_backward=True)` steps each parameter
  inside the backward pass the moment its gradient is final, and frees it.
- `checkpoint` (`gradstream-checkpoint`, nerf): in-backward Adam, and the MLP recomputed per
  chunk of points (`gradstream.utils.checkpoint.checkpoint_chunks`).
- `low_bit:<state_dtype>` (`gradstream-8bit`, `-4bit`, `-fp8`): in-backward Adam with its
  moments coded (`state_dtype`).

The mlp and nerf code mirrors `torch_impl` line for line with `import gradstream as torch`;
the cnn and lora models are the same code as torch's (`convnet`, `lora_gpt`). `device` ("cpu",
"cuda") is where the model, its inputs and its optimizer state live.
"""

from __future__ import annotations

import inspect
from typing import Any

from ..workloads import WORKLOADS
from . import RunState, Unsupported, convnet, lora_gpt

try:
    import gradstream as torch
except ImportError:  # pragma: no cover
    torch = None


# What each workload's model uses beyond Linear and its optimizer: (where, name).
NEEDS: dict[str, list[tuple[str, str]]] = {
    "cnn": [
        ("nn", "Conv2d"),
        ("nn", "ConvTranspose2d"),
        ("nn", "BatchNorm2d"),
        ("nn", "MaxPool2d"),
        ("nn", "ReLU"),
        ("nn", "Sequential"),
        ("nn.functional", "cross_entropy"),
    ],
    "lora": [
        ("nn.functional", "scaled_dot_product_attention"),
        ("nn.functional", "layer_norm"),
        ("nn.functional", "embedding"),
        ("nn.functional", "gelu"),
        ("nn.functional", "cross_entropy"),
    ],
}


def _lookup(dotted: str):
    obj: Any = torch
    for part in dotted.split("."):
        obj = getattr(obj, part, None)
    return obj


def missing(variant: str, workload: str | None = None) -> str | None:
    """What this gradstream build lacks for `variant` (on `workload`, when given), or None when
    it has what the step uses."""
    if torch is None:
        return "gradstream is not built"
    nn, optim = getattr(torch, "nn", None), getattr(torch, "optim", None)
    if not hasattr(nn, "Linear"):
        return "needs gradstream.nn.Linear (not built yet)"
    for where, name in NEEDS.get(workload or "", []):
        if not hasattr(_lookup(where), name):
            return f"needs gradstream.{where}.{name} (not built yet)"
    adamw = getattr(WORKLOADS.get(workload or ""), "optimizer", "adam") == "adamw"
    adam_name = "AdamW" if adamw else "Adam"
    adam = getattr(optim, adam_name, None)
    if adam is None:
        return f"needs gradstream.optim.{adam_name} (not built yet)"
    if variant == "in_backward" or variant.startswith("low_bit:"):
        try:
            params = inspect.signature(adam).parameters
        except (TypeError, ValueError):
            params = {}
        if "in_backward" not in params:
            return f"needs gradstream.optim.{adam_name}(..., in_backward=True) (not built yet)"
        if variant.startswith("low_bit:") and "state_dtype" not in params:
            return f"needs gradstream.optim.{adam_name}(..., state_dtype=...) (not built yet)"
    if variant == "autocast" and not hasattr(torch, "autocast"):
        return "needs gradstream.autocast (not built yet)"
    if variant == "checkpoint":
        ckpt = getattr(getattr(torch, "utils", None), "checkpoint", None)
        if ckpt is None or not hasattr(ckpt, "checkpoint_chunks"):
            return "needs gradstream.utils.checkpoint (not built yet)"
    return None


def setup(threads: int, device: str = "cpu") -> None:
    reason = missing("standard")
    if reason:
        raise Unsupported(reason)
    if device != "cpu" and not torch.cuda.is_available():
        raise Unsupported("gradstream sees no CUDA device (the CPU build, or no driver)")
    if hasattr(torch, "set_num_threads"):
        torch.set_num_threads(threads)
    # On a GPU also its context, cuBLAS and the optimizer's kernels there.
    for dev in dict.fromkeys(("cpu", device)):
        w = torch.ones(16, 16, requires_grad=True, device=dev)
        opt = torch.optim.Adam([w])
        torch.matmul(w, w).sum().backward()
        opt.step()
        del w, opt
    synchronize(device)


def synchronize(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


class Counter:
    """gradstream's exact count of the bytes its tensors hold on a GPU."""

    def __init__(self, device: str):
        self.device = device

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def extra(self) -> dict:
        return {}


def cap_fraction(device: str, cap: int) -> None:
    """`--max-batch --cap-rule fraction`: gradstream's own cap on its tensors' bytes, at
    `cap` bytes (the fraction `cap` is of the device's memory)."""
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.mem_get_info(device)[1], device)


def _tensor(array, device: str = "cpu"):
    t = torch.from_numpy(array) if hasattr(torch, "from_numpy") else torch.tensor(array)
    return t.to(device)


def _linear(tensors: dict, name: str, device: str = "cpu"):
    w = tensors[f"{name}.weight"]
    layer = torch.nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(_tensor(w))
        layer.bias.copy_(_tensor(tensors[f"{name}.bias"]))
    return layer.to(device)


def _mse(a, b):
    return ((a - b) * (a - b)).mean()


def encode(pts, freqs: int):
    parts = [pts]
    for k in range(freqs):
        parts += [torch.sin(pts * 2.0**k), torch.cos(pts * 2.0**k)]
    return torch.cat(parts, dim=-1)


def render(sigma, rgb, dists):
    rays, samples = dists.shape
    sigma = sigma.reshape(rays, samples)
    rgb = rgb.reshape(rays, samples, 3)
    alpha = 1.0 - torch.exp(-sigma * dists)
    ones = torch.ones(rays, 1, device=alpha.device)
    trans = torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], dim=-1), dim=-1)[:, :-1]
    weights = alpha * trans
    return torch.sum(weights[..., None] * rgb, dim=-2)


MODELS = {"cnn": convnet, "lora": lora_gpt}


def optimizer(workload, params, in_backward: bool = False, state_dtype: str | None = None):
    """The workload's optimizer: Adam, or AdamW with its weight decay."""
    kwargs: dict[str, Any] = {"in_backward": True} if in_backward else {}
    if state_dtype is not None:
        kwargs["state_dtype"] = state_dtype
    if workload.optimizer == "adamw":
        return torch.optim.AdamW(
            params, lr=workload.lr, weight_decay=workload.weight_decay, **kwargs
        )
    return torch.optim.Adam(params, lr=workload.lr, **kwargs)


def build(workload, tensors: dict, variant: str, device: str = "cpu") -> RunState:
    reason = missing(variant, workload.name)
    if reason:
        raise Unsupported(reason)
    try:
        return _build(workload, tensors, variant, device)
    except (AttributeError, NotImplementedError) as e:
        raise Unsupported(f"gradstream lacks an op this step uses: {e}") from e


def loss_and_params(
    workload, tensors: dict, variant: str = "standard", device: str = "cpu"
) -> tuple:
    """`(loss_fn, params)`: the workload's model on the shared weights, on `device`;
    `loss_fn()` runs the forward pass and the loss (also what benches/profile_step.py times
    phase by phase)."""

    def tensor(array):
        return _tensor(array, device)

    if workload.model == "mlp":
        layers = [_linear(tensors, n, device) for n, _, _ in workload.layer_shapes()]
        x = tensor(tensors["x"])
        target = tensor(tensors["target"])

        def loss_fn():
            h = x
            for layer in layers:
                h = torch.relu(layer(h))
            return _mse(h, target)

    elif workload.model == "nerf":
        shapes = workload.layer_shapes()
        layers = [_linear(tensors, n, device) for n, _, _ in shapes[:-2]]
        layers += [_linear(tensors, "sigma", device), _linear(tensors, "rgb", device)]
        enc = encode(tensor(tensors["pts"]), workload.freqs)
        dists = tensor(tensors["dists"])
        target = tensor(tensors["target"])
        skip = workload.skip

        def mlp(e):
            h = e
            for i, layer in enumerate(layers[:-2]):
                if i == skip + 1:
                    h = torch.cat([h, e], dim=-1)
                h = torch.relu(layer(h))
            return torch.relu(layers[-2](h)), torch.sigmoid(layers[-1](h))

        def loss_fn():
            if variant == "checkpoint":
                chunks = torch.utils.checkpoint.checkpoint_chunks
                sigma, rgb = chunks(mlp, enc, chunks=workload.chunks)
            else:
                sigma, rgb = mlp(enc)
            return _mse(render(sigma, rgb, dists), target)

    elif workload.name in MODELS:
        loss_fn, params = MODELS[workload.name].build(
            torch, workload, tensors, tensor, device=device
        )

    else:
        raise Unsupported(f"gradstream has no {workload.name} model")

    if workload.model in ("mlp", "nerf"):
        params = [p for layer in layers for p in layer.parameters()]
    return loss_fn, params


def _build(workload, tensors: dict, variant: str, device: str = "cpu") -> RunState:
    loss_fn, params = loss_and_params(workload, tensors, variant, device)

    if variant == "autocast":
        full_precision_loss = loss_fn
        device_type = torch.device(device).type

        def loss_fn():
            with torch.autocast(device_type, dtype=torch.bfloat16):
                return full_precision_loss()

    if variant in ("in_backward", "checkpoint", "autocast") or variant.startswith("low_bit:"):
        state_dtype = variant.partition(":")[2] or None
        opt = optimizer(workload, params, in_backward=True, state_dtype=state_dtype)

        def step(opt=opt):  # the optimizer lives as long as the step; backward steps it
            loss = loss_fn()
            loss.backward()
            return loss.item()

    elif variant.startswith("budget:"):  # `--budget-sweep`: the step within a memory budget
        opt = optimizer(workload, params)
        budget = int(variant.partition(":")[2])

        def step():
            with torch.memory.budget(budget):
                loss = loss_fn()
                loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            return loss.item()

    else:
        opt = optimizer(workload, params)

        def step():
            loss = loss_fn()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

    on_host = device == "cpu"

    def after_warmup():
        torch.memory.reset_peak_memory_stats(None if on_host else device)
        if hasattr(torch.memory, "reset_budget_stats"):
            torch.memory.reset_budget_stats()

    def extra():
        if on_host:
            out = {"exact_peak_bytes": torch.memory.max_memory_allocated()}
        else:
            # The peak of each category on the device: "gradient" is the most bytes of
            # `.grad`s alive at once (with the optimizer in backward, those not yet stepped).
            out = {"peak_by_category": torch.memory.max_memory_by_category(device)}
            sizes = [p.numel() * p.element_size() for p in params]
            out["trained_param_bytes"] = sum(sizes)
            out["largest_param_bytes"] = max(sizes, default=0)
        if hasattr(torch.memory, "budget_stats"):
            out["budget_stats"] = torch.memory.budget_stats()
        return out

    return RunState(step=step, after_warmup=after_warmup, extra=extra)
