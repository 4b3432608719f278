"""The workloads: sizes, the shared deterministic weights and inputs, and the analytic lower bound.

A workload is a frozen dataclass of sizes. `tensors(seed)` draws the weights and inputs every
system starts from; `lower_bound()` is the memory a training step needs at the least without
recomputation: parameters + optimizer state + the saved activations at their peak (with the
step's inputs) + the largest single gradient, all float32.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

F32 = 4  # bytes


def _linear(rng: np.random.Generator, n_in: int, n_out: int) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's default Linear init: U(-1/sqrt(in), 1/sqrt(in)) for weight (out, in) and bias."""
    bound = 1.0 / np.sqrt(n_in)
    w = rng.uniform(-bound, bound, size=(n_out, n_in)).astype(np.float32)
    b = rng.uniform(-bound, bound, size=(n_out,)).astype(np.float32)
    return w, b


@dataclass(frozen=True)
class MLP:
    """`depth` × (Linear(width, width) + ReLU) on a batch, MSE loss, Adam: parameter-heavy."""

    depth: int = 6
    width: int = 2048
    batch: int = 64
    lr: float = 1e-3

    name = "mlp"
    model = "mlp"  # the model the systems build (and the candle program's --workload)
    optimizer = "adam"
    weight_decay = 0.0
    default_steps = 5

    def layer_shapes(self) -> list[tuple[str, int, int]]:
        return [(f"layers.{i}", self.width, self.width) for i in range(self.depth)]

    def tensors(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for name, n_in, n_out in self.layer_shapes():
            out[f"{name}.weight"], out[f"{name}.bias"] = _linear(rng, n_in, n_out)
        out["x"] = rng.standard_normal((self.batch, self.width)).astype(np.float32)
        out["target"] = rng.uniform(0.0, 0.5, (self.batch, self.width)).astype(np.float32)
        return out

    def num_params(self) -> int:
        return sum(n_out * (n_in + 1) for _, n_in, n_out in self.layer_shapes())

    def lower_bound(self) -> dict[str, int]:
        p = self.num_params() * F32
        act = self.batch * self.width * F32
        # Each Linear's input (x, then the ReLU outputs, which also give ReLU its mask), the
        # network's output (for the MSE backward) and the target.
        saved = (self.depth + 2) * act
        largest_grad = max(self.width * self.width * F32, act)
        return _bound(p, 2 * p, saved, largest_grad)

    def bound_text(self) -> str:
        return (
            "parameters P = depth·width·(width+1) floats; Adam state 2P; saved activations = "
            "(depth + 2) × batch × width floats (the input of each Linear, from which ReLU's mask "
            "is also read, the network output for the MSE backward, and the target); largest "
            "single gradient = one weight gradient, width² floats"
        )

    def candle_args(self) -> list[str]:
        return ["--depth", str(self.depth)]


@dataclass(frozen=True)
class Small(MLP):
    """The mlp model at a size where a step is a few hundred microseconds: the time is the
    per-op overhead (Python, bindings, engine, allocation), not the arithmetic. Many measured
    steps make the median steady against the load of the machine."""

    depth: int = 4
    width: int = 256
    batch: int = 32

    name = "small"
    default_steps = 300


@dataclass(frozen=True)
class NeRF:
    """The tiny NeRF: `depth` × `width` MLP with a skip, positional encoding, volume rendering.

    Points: `rays` × `samples`, each encoded as [p, sin(2^k p), cos(2^k p) for k < freqs]
    (3 + 6·freqs features); the encoding is concatenated again to the input of layer skip + 1;
    heads sigma = relu(Linear(width, 1)) and rgb = sigmoid(Linear(width, 3)); alpha = 1 -
    exp(-sigma·dist), transmittance the exclusive cumulative product of (1 - alpha), the ray's
    colour the weighted sum over samples; MSE against a target colour per ray. Activation-heavy.
    """

    depth: int = 8
    width: int = 256
    skip: int = 4
    freqs: int = 6
    rays: int = 1024
    samples: int = 64
    chunks: int = 16  # torch-checkpoint: the MLP is recomputed per chunk of points
    lr: float = 5e-4

    name = "nerf"
    model = "nerf"
    optimizer = "adam"
    weight_decay = 0.0
    default_steps = 5

    @property
    def features(self) -> int:
        return 3 + 6 * self.freqs

    @property
    def points(self) -> int:
        return self.rays * self.samples

    def layer_shapes(self) -> list[tuple[str, int, int]]:
        shapes = []
        for i in range(self.depth):
            n_in = self.features if i == 0 else self.width
            if i == self.skip + 1:
                n_in += self.features
            shapes.append((f"layers.{i}", n_in, self.width))
        shapes += [("sigma", self.width, 1), ("rgb", self.width, 3)]
        return shapes

    def tensors(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for name, n_in, n_out in self.layer_shapes():
            out[f"{name}.weight"], out[f"{name}.bias"] = _linear(rng, n_in, n_out)
        # With the default init the sigma head's pre-activation is negative at every point, so
        # ReLU zeroes the density and no gradient flows; a positive bias gives every ray density.
        out["sigma.bias"] += np.float32(0.5)
        origins = rng.normal(0.0, 0.5, (self.rays, 1, 3))
        dirs = rng.standard_normal((self.rays, 1, 3))
        dirs /= np.linalg.norm(dirs, axis=-1, keepdims=True)
        near, far = 2.0, 6.0
        step = (far - near) / self.samples
        z = near + step * (np.arange(self.samples) + rng.uniform(0, 1, (self.rays, self.samples)))
        pts = 0.25 * (origins + dirs * z[..., None])
        dists = np.concatenate([np.diff(z, axis=1), np.full((self.rays, 1), step)], axis=1)
        out["pts"] = pts.reshape(self.points, 3).astype(np.float32)
        out["dists"] = dists.astype(np.float32)
        out["target"] = rng.uniform(0.0, 1.0, (self.rays, 3)).astype(np.float32)
        return out

    def num_params(self) -> int:
        return sum(n_out * (n_in + 1) for _, n_in, n_out in self.layer_shapes())

    def lower_bound(self) -> dict[str, int]:
        p = self.num_params() * F32
        n = self.points
        per_point = self.features + self.depth * self.width + 7
        saved = (n * per_point + 2 * 3 * self.rays) * F32
        largest_param = max(n_in * n_out for _, n_in, n_out in self.layer_shapes())
        largest_grad = max(n * self.width, largest_param) * F32
        return _bound(p, 2 * p, saved, largest_grad)

    def bound_text(self) -> str:
        return (
            "parameters P from the layer shapes; Adam state 2P; saved activations = points × "
            "(features + depth·width + 7) floats (the encoding, each hidden ReLU output, which is "
            "the next Linear's input and ReLU's own mask, and per point sigma, rgb (3), alpha, "
            "transmittance and the distance) + the rendered and target colours; largest single "
            "gradient = the gradient of one hidden activation, points × width floats"
        )

    def candle_args(self) -> list[str]:
        return ["--depth", str(self.depth), "--freqs", str(self.freqs), "--skip", str(self.skip)]


def _conv(rng: np.random.Generator, fan_in: int, shape: tuple[int, ...]) -> np.ndarray:
    """PyTorch's default Conv2d/ConvTranspose2d init: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), where
    fan_in is weight.size(1) × kernel area (in_channels for Conv2d, out_channels for
    ConvTranspose2d, whose weight is (in, out, kh, kw))."""
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


@dataclass(frozen=True)
class CNN:
    """An FCN-like encoder/decoder for per-pixel classification, AdamW. Activation-heavy.

    Encoder: `stages` × [2 × (conv3×3 without bias + BatchNorm2d + ReLU), MaxPool2d(2)] at
    width, 2·width, 4·width… channels. Decoder, per stage from the deepest: ConvTranspose2d(k=2,
    stride=2, with bias) halving the channels (to `width` at the last) and doubling the
    resolution, then conv3×3 + BatchNorm2d + ReLU. Head: a 1×1 conv (with bias) to `classes`;
    cross-entropy per pixel against an integer target map.
    """

    batch: int = 8
    size: int = 128
    in_channels: int = 3
    width: int = 32
    stages: int = 3
    classes: int = 8
    lr: float = 1e-3
    weight_decay: float = 1e-2

    name = "cnn"
    model = "cnn"
    optimizer = "adamw"
    default_steps = 5

    def channels(self, stage: int) -> int:
        return self.width * 2**stage

    def layers(self) -> list[tuple]:
        """The forward pass in order: (kind, name, in_channels, out_channels, resolution in)."""
        out: list[tuple] = []
        res, c = self.size, self.in_channels
        for i in range(self.stages):
            co = self.channels(i)
            for j in range(2):
                out += [
                    ("conv", f"enc{i}.conv{j}", c, co, res),
                    ("bn", f"enc{i}.bn{j}", co, co, res),
                ]
                out += [("relu", "", co, co, res)]
                c = co
            out.append(("pool", "", c, c, res))
            res //= 2
        for i in reversed(range(self.stages)):
            co = self.channels(i - 1) if i > 0 else self.width
            out.append(("up", f"dec{i}.up", c, co, res))
            res *= 2
            out += [("conv", f"dec{i}.conv", co, co, res), ("bn", f"dec{i}.bn", co, co, res)]
            out.append(("relu", "", co, co, res))
            c = co
        out.append(("head", "head", c, self.classes, res))
        return out

    def tensors(self, seed: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for kind, name, ci, co, _ in self.layers():
            if kind == "conv":
                out[f"{name}.weight"] = _conv(rng, ci * 9, (co, ci, 3, 3))
            elif kind == "bn":
                out[f"{name}.weight"] = np.ones(co, np.float32)
                out[f"{name}.bias"] = np.zeros(co, np.float32)
            elif kind == "up":
                out[f"{name}.weight"] = _conv(rng, co * 4, (ci, co, 2, 2))
                out[f"{name}.bias"] = _conv(rng, co * 4, (co,))
            elif kind == "head":
                out[f"{name}.weight"] = _conv(rng, ci, (co, ci, 1, 1))
                out[f"{name}.bias"] = _conv(rng, ci, (co,))
        hw = (self.size, self.size)
        out["x"] = rng.standard_normal((self.batch, self.in_channels, *hw)).astype(np.float32)
        out["target"] = rng.integers(0, self.classes, (self.batch, *hw), dtype=np.int64)
        return out

    def num_params(self) -> int:
        total = 0
        for kind, _, ci, co, _ in self.layers():
            total += {"conv": co * ci * 9, "bn": 2 * co, "up": ci * co * 4 + co}.get(kind, 0)
            total += co * ci + co if kind == "head" else 0
        return total

    def lower_bound(self) -> dict[str, int]:
        """Parameters P; AdamW state 2P; the saved activations at their peak (the end of the
        forward pass): every conv, transposed conv and the head keep their input; batch norm its
        input and 2C floats (mean, inverse std); a ReLU whose output the next layer keeps reads
        its mask from it, the ReLU before a max pool keeps a 1-bit mask; max pool one byte per
        output (the argmax within its window); cross-entropy its logits and the int64 target.
        The largest single gradient is the largest activation's (a width × size² map)."""
        p = self.num_params() * F32
        layers = self.layers()
        saved_bits = 0
        n = self.batch
        pixels = n * self.size * self.size
        largest = pixels * self.classes  # the logits
        for k, (kind, _, ci, _, res) in enumerate(layers):
            elems_in = n * ci * res * res
            largest = max(largest, elems_in)
            if kind in ("conv", "up", "head"):
                saved_bits += elems_in * F32 * 8
            elif kind == "bn":
                saved_bits += (elems_in + 2 * ci) * F32 * 8
            elif kind == "relu" and layers[k + 1][0] == "pool":
                saved_bits += elems_in
            elif kind == "pool":
                saved_bits += elems_in // 4 * 8
        saved = saved_bits // 8 + pixels * self.classes * F32 + pixels * 8
        return _bound(p, 2 * p, saved, largest * F32)

    def bound_text(self) -> str:
        return (
            "parameters P from the layer shapes; AdamW state 2P; saved activations = each conv's, "
            "transposed conv's and the head's input, each batch norm's input + 2C floats, a 1-bit "
            "mask for the ReLU before each max pool (the other ReLUs' outputs are the next "
            "layer's saved input), 1 byte per max-pool output, the logits and the int64 target; "
            "largest single gradient = that of the largest activation (width × size² per image)"
        )

    def candle_args(self) -> list[str]:
        return ["--stages", str(self.stages), "--width", str(self.width)]


@dataclass(frozen=True)
class LoRA:
    """LoRA fine-tuning of a GPT-2-small-shaped decoder, AdamW on the adapters only.

    Token + learned position embedding; `layers` pre-LayerNorm blocks of causal self-attention
    (a fused qkv Linear split into `heads` heads, `F.scaled_dot_product_attention(...,
    is_causal=True)`, an output Linear) and a 4× GELU MLP; a final LayerNorm and the head tied
    to the token embedding; next-token cross-entropy. Every base weight is frozen; rank-`rank`
    adapters (x Aᵀ Bᵀ · alpha/rank) are added to the q, k, v and output projections.
    """

    layers: int = 12
    width: int = 768
    heads: int = 12
    seq: int = 512
    batch: int = 2
    vocab: int = 1024
    rank: int = 8
    alpha: float = 16.0
    lr: float = 1e-3
    weight_decay: float = 1e-2

    name = "lora"
    model = "lora"
    optimizer = "adamw"
    # A step of the default size takes seconds on two cores for every system: three measured
    # steps keep the whole lora matrix within about ten minutes.
    default_steps = 3

    @property
    def scale(self) -> float:
        return self.alpha / self.rank

    def base_shapes(self) -> dict[str, tuple[int, ...]]:
        d = self.width
        shapes: dict[str, tuple[int, ...]] = {"wte": (self.vocab, d), "wpe": (self.seq, d)}
        for i in range(self.layers):
            b = f"h.{i}."
            shapes |= {b + "ln1.weight": (d,), b + "ln1.bias": (d,)}
            shapes |= {b + "qkv.weight": (3 * d, d), b + "qkv.bias": (3 * d,)}
            shapes |= {b + "proj.weight": (d, d), b + "proj.bias": (d,)}
            shapes |= {b + "ln2.weight": (d,), b + "ln2.bias": (d,)}
            shapes |= {b + "fc.weight": (4 * d, d), b + "fc.bias": (4 * d,)}
            shapes |= {b + "out.weight": (d, 4 * d), b + "out.bias": (d,)}
        return shapes | {"ln_f.weight": (d,), "ln_f.bias": (d,)}

    def adapter_names(self) -> list[str]:
        return [f"h.{i}.lora_{p}" for i in range(self.layers) for p in ("q", "k", "v", "proj")]

    def tensors(self, seed: int) -> dict[str, np.ndarray]:
        """GPT-2's init for the base (weights N(0, 0.02), biases 0, LayerNorms 1 and 0); the
        adapters' A with PyTorch's Linear init, B small and non-zero so that A's gradient is
        not zero at the first step."""
        rng = np.random.default_rng(seed)
        out: dict[str, np.ndarray] = {}
        for name, shape in self.base_shapes().items():
            if name.endswith("bias"):
                value = np.zeros(shape, np.float32)
            elif ".ln" in name or name.startswith("ln_f"):
                value = np.ones(shape, np.float32)
            else:
                value = rng.standard_normal(shape, np.float32) * np.float32(0.02)
            out[name] = value
        a_bound = 1.0 / np.sqrt(self.width)
        b_bound = 0.01 / np.sqrt(self.rank)
        for name in self.adapter_names():
            out[f"{name}.A"] = rng.uniform(-a_bound, a_bound, (self.rank, self.width)).astype(
                np.float32
            )
            out[f"{name}.B"] = rng.uniform(-b_bound, b_bound, (self.width, self.rank)).astype(
                np.float32
            )
        out["tokens"] = rng.integers(0, self.vocab, (self.batch, self.seq + 1), dtype=np.int64)
        return out

    def num_base_params(self) -> int:
        return sum(int(np.prod(s)) for s in self.base_shapes().values())

    def num_adapter_params(self) -> int:
        return len(self.adapter_names()) * 2 * self.rank * self.width

    def num_params(self) -> int:
        return self.num_base_params() + self.num_adapter_params()

    def lower_bound(self) -> dict[str, int]:
        """All parameters (the frozen base and the adapters); AdamW state for the adapters only;
        the saved activations the adapters' gradients need at their peak (the end of the
        forward pass), per token and block: LayerNorm 1's output (which A_q, A_k, A_v also read)
        and its inverse std, x·Aᵀ of the q, k, v adapters (rank each, B's input), attention's
        q, k, v, output (A_proj's input) and per-head logsumexp, y·A_projᵀ, LayerNorm 2's output
        and inverse std, the GELU's input (4·width); the frozen Linears keep nothing (their
        input gradient needs only the weight). Then the final LayerNorm's output and inverse
        std, the logits for cross-entropy and the int64 tokens. The largest single gradient is
        the largest activation's: the GELU input's or the logits'."""
        d, r = self.width, self.rank
        p = self.num_params() * F32
        state = 2 * self.num_adapter_params() * F32
        tokens = self.batch * self.seq
        per_block = (d + 1) + 3 * r + (4 * d + self.heads) + r + (d + 1) + 4 * d
        saved = tokens * (self.layers * per_block + d + 1 + self.vocab) * F32
        saved += self.batch * (self.seq + 1) * 8
        largest = tokens * max(4 * d, self.vocab) * F32
        return _bound(p, state, saved, largest)

    def bound_text(self) -> str:
        return (
            "parameters = frozen base + adapters; AdamW state 2 × adapters only; saved "
            "activations per token and block = LayerNorm outputs and inverse stds (ln1's output is "
            "the q/k/v adapters' input), 4 × rank adapter intermediates, attention q, k, v, output "
            "and per-head logsumexp, the GELU input (4·width); frozen Linears keep nothing; then "
            "the final LayerNorm's output, the logits and the tokens; largest single gradient = "
            "the GELU input's or the logits'"
        )

    def candle_args(self) -> list[str]:
        return [
            "--layers", str(self.layers),
            "--heads", str(self.heads),
            "--alpha", repr(self.alpha),
        ]  # fmt: skip


def _bound(params: int, state: int, saved: int, grad: int) -> dict[str, int]:
    return {
        "parameters": params,
        "optimizer_state": state,
        "saved_activations": saved,
        "largest_gradient": grad,
        "total": params + state + saved + grad,
    }


WORKLOADS = {"mlp": MLP, "small": Small, "nerf": NeRF, "cnn": CNN, "lora": LoRA}

PRESETS: dict[str, dict[str, dict]] = {
    "default": {"mlp": {}, "small": {}, "nerf": {}, "cnn": {}, "lora": {}},
    # Small sizes: the whole matrix in well under two minutes.
    "quick": {
        "mlp": {"depth": 6, "width": 1024, "batch": 64},
        "small": {},
        "nerf": {"width": 128, "rays": 256, "samples": 32},
        "cnn": {"batch": 4, "size": 64},
        "lora": {"layers": 4, "seq": 256},
    },
    # For the tests: seconds.
    "tiny": {
        "mlp": {"depth": 2, "width": 256, "batch": 16},
        "small": {"depth": 2, "width": 32, "batch": 8},
        "nerf": {"depth": 6, "width": 32, "skip": 2, "freqs": 2, "rays": 32, "samples": 16},
        # 8 channels at 8×8: the shape where the candle program works around candle's conv2d.
        "cnn": {"batch": 2, "size": 16, "width": 4, "stages": 2, "classes": 3},
        "lora": {"layers": 2, "width": 32, "heads": 2, "seq": 16, "vocab": 64, "rank": 4},
    },
}


def make(name: str, preset: str = "default", overrides: dict[str, str] | None = None):
    """The workload `name` at `preset` sizes, with `field=value` overrides."""
    if name not in WORKLOADS:
        raise ValueError(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
    cls = WORKLOADS[name]
    kwargs = dict(PRESETS[preset].get(name, {}))
    fields = {f.name: f.type for f in dataclasses.fields(cls)}
    for key, value in (overrides or {}).items():
        if key not in fields:
            raise ValueError(f"{name} has no size {key!r}; sizes: {', '.join(fields)}")
        kwargs[key] = float(value) if fields[key] in (float, "float") else int(value)
    return cls(**kwargs)


def sizes(workload) -> dict:
    return dataclasses.asdict(workload)
