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


def _bound(params: int, state: int, saved: int, grad: int) -> dict[str, int]:
    return {
        "parameters": params,
        "optimizer_state": state,
        "saved_activations": saved,
        "largest_gradient": grad,
        "total": params + state + saved + grad,
    }


WORKLOADS = {"mlp": MLP, "nerf": NeRF}

PRESETS: dict[str, dict[str, dict]] = {
    "default": {"mlp": {}, "nerf": {}},
    # Small sizes: the whole matrix in well under two minutes.
    "quick": {
        "mlp": {"depth": 6, "width": 1024, "batch": 64},
        "nerf": {"width": 128, "rays": 256, "samples": 32},
    },
    # For the tests: seconds.
    "tiny": {
        "mlp": {"depth": 2, "width": 256, "batch": 16},
        "nerf": {"depth": 6, "width": 32, "skip": 2, "freqs": 2, "rays": 32, "samples": 16},
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
        kwargs[key] = float(value) if key == "lr" else int(value)
    return cls(**kwargs)


def sizes(workload) -> dict:
    return dataclasses.asdict(workload)
