"""The PyTorch systems: the models, and three ways to take a training step.

- `standard` (`torch`): forward, backward, `optimizer.step()`, `zero_grad(set_to_none=True)`.
- `hook` (`torch-hook`): one Adam per parameter, stepped from
  `register_post_accumulate_grad_hook`, which then frees the gradient: PyTorch's tutorial
  "How to save memory by fusing the optimizer step into the backward pass".
- `checkpoint` (`torch-checkpoint`, nerf): the MLP recomputed per chunk of points in backward
  (`torch.utils.checkpoint`, non-reentrant).

The cnn and lora models are shared with gradstream (`convnet`, `lora_gpt`). `device` ("cpu",
"cuda") is where the model, its inputs and its optimizer state live.
"""

from __future__ import annotations

from . import RunState, Unsupported, convnet, lora_gpt

try:
    import torch
    import torch.utils.checkpoint
    from torch import nn
except ImportError:  # pragma: no cover - the harness lists the system as skipped
    torch = None


def setup(threads: int, device: str = "cpu") -> None:
    if torch is None:
        raise Unsupported("PyTorch is not installed")
    if device != "cpu" and not torch.cuda.is_available():
        raise Unsupported(f"this PyTorch ({torch.__version__}) sees no CUDA device")
    if device != "cpu":
        # float32 as gradstream and candle compute it: no TensorFloat-32 in cuDNN's
        # convolutions (on by default) or cuBLAS's matmuls (off by default), so that the
        # losses agree to LOSS_RTOL and the step times compare the same arithmetic.
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.set_num_threads(threads)
    # Start the runtime (thread pool, kernels, Adam) on tiny tensors before the baseline; on a
    # GPU also its context, cuBLAS and the optimizer's kernels there.
    for dev in dict.fromkeys(("cpu", device)):
        w = torch.ones(16, 16, requires_grad=True, device=dev)
        opt = torch.optim.Adam([w])
        (w @ w).sum().backward()
        opt.step()
        del w, opt
    synchronize(device)


def synchronize(device: str) -> None:
    if device != "cpu":
        torch.cuda.synchronize()


class Counter:
    """PyTorch's own count of the bytes its tensors hold on a GPU (the caching allocator's)."""

    def __init__(self, device: str):
        self.device = torch.device(device)

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device)

    def reset_peak(self) -> None:
        torch.cuda.reset_peak_memory_stats(self.device)

    def peak(self) -> int:
        return torch.cuda.max_memory_allocated(self.device)

    def extra(self) -> dict:
        return {"max_memory_reserved_bytes": torch.cuda.max_memory_reserved(self.device)}


def cap_fraction(device: str, cap: int) -> None:
    """`--max-batch --cap-rule fraction`: PyTorch's own cap on its caching allocator, at
    `cap` bytes (the fraction `cap` is of the device's memory)."""
    dev = torch.device(device)
    torch.cuda.set_per_process_memory_fraction(cap / torch.cuda.mem_get_info(dev)[1], dev)


def _linear(tensors: dict, name: str, device: str = "cpu") -> nn.Linear:
    w = torch.from_numpy(tensors[f"{name}.weight"])
    layer = nn.Linear(w.shape[1], w.shape[0])
    with torch.no_grad():
        layer.weight.copy_(w)
        layer.bias.copy_(torch.from_numpy(tensors[f"{name}.bias"]))
    return layer.to(device)


class MLP(nn.Module if torch else object):
    def __init__(self, workload, tensors, device: str = "cpu"):
        super().__init__()
        self.layers = nn.ModuleList(
            _linear(tensors, n, device) for n, _, _ in workload.layer_shapes()
        )

    def forward(self, x):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return x


def encode(pts, freqs: int):
    """[p, sin(2^0 p), cos(2^0 p), ..., sin(2^(L-1) p), cos(2^(L-1) p)]."""
    parts = [pts]
    for k in range(freqs):
        parts += [torch.sin(pts * 2.0**k), torch.cos(pts * 2.0**k)]
    return torch.cat(parts, dim=-1)


class NeRFMLP(nn.Module if torch else object):
    """Encoded points -> (sigma, rgb); the encoding re-enters at layer skip + 1."""

    def __init__(self, workload, tensors, device: str = "cpu"):
        super().__init__()
        shapes = workload.layer_shapes()
        self.skip = workload.skip
        self.layers = nn.ModuleList(_linear(tensors, n, device) for n, _, _ in shapes[:-2])
        self.sigma = _linear(tensors, "sigma", device)
        self.rgb = _linear(tensors, "rgb", device)

    def forward(self, enc):
        h = enc
        for i, layer in enumerate(self.layers):
            if i == self.skip + 1:
                h = torch.cat([h, enc], dim=-1)
            h = torch.relu(layer(h))
        return torch.relu(self.sigma(h)), torch.sigmoid(self.rgb(h))


def render(sigma, rgb, dists):
    """Volume rendering: alpha, exclusive cumprod transmittance, weighted colour sum per ray."""
    rays, samples = dists.shape
    sigma = sigma.reshape(rays, samples)
    rgb = rgb.reshape(rays, samples, 3)
    alpha = 1.0 - torch.exp(-sigma * dists)
    ones = torch.ones(rays, 1, dtype=alpha.dtype, device=alpha.device)
    trans = torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], dim=-1), dim=-1)[:, :-1]
    weights = alpha * trans
    return torch.sum(weights[..., None] * rgb, dim=-2)


def _relu_layer(layer):
    return lambda h: torch.relu(layer(h))


def nerf_stages(model, enc) -> list:
    """The NeRF MLP as a chain of one-input stages for `checkpoint_sequential`: the skip
    layer takes the encoding from the closure, the last stage returns [sigma | rgb]."""
    stages = []
    for i, layer in enumerate(model.layers):
        if i == model.skip + 1:
            stages.append(lambda h, layer=layer: torch.relu(layer(torch.cat([h, enc], dim=-1))))
        else:
            stages.append(_relu_layer(layer))
    stages.append(
        lambda h: torch.cat([torch.relu(model.sigma(h)), torch.sigmoid(model.rgb(h))], dim=-1)
    )
    return stages


def _sequential(variant: str, stages: list, x):
    """`sequential:<segments>` (`--budget-sweep`): `checkpoint_sequential` over the stages."""
    segments = int(variant.partition(":")[2])
    return torch.utils.checkpoint.checkpoint_sequential(stages, segments, x, use_reentrant=False)


MODELS = {"cnn": convnet, "lora": lora_gpt}


def optimizer(workload, params):
    """The workload's optimizer: Adam, or AdamW with its weight decay."""
    if workload.optimizer == "adamw":
        return torch.optim.AdamW(params, lr=workload.lr, weight_decay=workload.weight_decay)
    return torch.optim.Adam(params, lr=workload.lr)


def loss_and_params(
    workload, tensors: dict, variant: str = "standard", device: str = "cpu"
) -> tuple:
    """`(loss_fn, params)`: the workload's model on the shared weights, on `device`;
    `loss_fn()` runs the forward pass and the loss (also what benches/profile_step.py times
    phase by phase)."""

    def tensor(array):
        return torch.from_numpy(array).to(device)

    if workload.model == "mlp":
        model = MLP(workload, tensors, device)
        params = list(model.parameters())
        x = tensor(tensors["x"])
        target = tensor(tensors["target"])

        def loss_fn():
            if variant.startswith("sequential:"):
                out = _sequential(variant, [_relu_layer(m) for m in model.layers], x)
                return torch.nn.functional.mse_loss(out, target)
            return torch.nn.functional.mse_loss(model(x), target)

    elif workload.model == "nerf":
        model = NeRFMLP(workload, tensors, device)
        params = list(model.parameters())
        enc = encode(tensor(tensors["pts"]), workload.freqs)
        dists = tensor(tensors["dists"])
        target = tensor(tensors["target"])
        chunks = workload.chunks

        def loss_fn():
            if variant == "checkpoint":
                outs = [
                    torch.utils.checkpoint.checkpoint(model, c, use_reentrant=False)
                    for c in enc.chunk(chunks)
                ]
                sigma = torch.cat([o[0] for o in outs])
                rgb = torch.cat([o[1] for o in outs])
            elif variant.startswith("sequential:"):
                out = _sequential(variant, nerf_stages(model, enc), enc)
                sigma, rgb = out[:, :1], out[:, 1:]
            else:
                sigma, rgb = model(enc)
            return torch.nn.functional.mse_loss(render(sigma, rgb, dists), target)

    elif workload.name in MODELS:
        segments = int(variant.partition(":")[2]) if variant.startswith("sequential:") else None
        loss_fn, params = MODELS[workload.name].build(
            torch, workload, tensors, tensor, segments=segments, device=device
        )

    else:
        raise Unsupported(f"torch has no {workload.name} model")
    return loss_fn, params


def build(workload, tensors: dict, variant: str, device: str = "cpu") -> RunState:
    loss_fn, params = loss_and_params(workload, tensors, variant, device)
    if variant == "autocast":
        full_precision_loss = loss_fn
        device_type = torch.device(device).type

        def loss_fn():
            with torch.autocast(device_type, dtype=torch.bfloat16):
                return full_precision_loss()

    if variant == "hook":
        optimizers = {p: optimizer(workload, [p]) for p in params}

        def optimizer_hook(p):
            optimizers[p].step()
            optimizers[p].zero_grad(set_to_none=True)

        for p in params:
            p.register_post_accumulate_grad_hook(optimizer_hook)

        def step():
            loss = loss_fn()
            loss.backward()
            return loss.item()

    else:
        opt = optimizer(workload, params)

        def step():
            loss = loss_fn()
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            return loss.item()

    return RunState(step=step)
