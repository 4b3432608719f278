"""Train a NeRF on a scene's views and evaluate it on the held-out one.

`train(TrainConfig(...))` runs the whole program: data (a user file or the built-in scene),
the model and an Adam optimizer (stepping inside backward by default), optional activation
checkpointing over chunks of points, the training loop with a progress bar, then the
held-out render and the files: render.png, curves.png, model.pt, metrics.json.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from .. import _core, memory, optim
from ..autograd.grad_mode import no_grad
from ..nn import functional as F
from ..serialization import save
from ..utils.checkpoint import checkpoint_chunks
from .data import NerfData, load_data
from .model import TinyNeRF
from .rays import get_rays_np
from .render import volume_render
from .sampling import sample_stratified
from .scene import make_scene

__all__ = ["TrainConfig", "train", "render_rays", "render_view", "psnr"]


@dataclass
class TrainConfig:
    """Every option of a run. The defaults (a 4 x 64 TinyNeRF, 600 steps of 1024 rays x 32
    samples) train on the built-in 64 px scene in a few CPU minutes; tiny NeRF's own network
    is ``depth=8, width=256, skip=4``."""

    steps: int = 600
    rays: int = 1024
    samples: int = 32
    width: int = 64
    depth: int = 4
    skip: int = 2
    freqs: int = 6
    lr: float = 5e-3
    lr_decay: float = 0.1
    seed: int = 0
    out: str = "nerf-out"
    in_backward: bool = True
    chunks: int = 0
    near: float = 2.0
    far: float = 6.0
    data: str | None = None
    views: int = 40
    size: int = 64
    white_background: bool = False
    render_chunk: int = 4096
    log_every: int = 0
    plain_progress: bool = False


def psnr(mse: float) -> float:
    """Peak signal-to-noise ratio in dB of a mean squared error on [0, 1] images."""
    return float("inf") if mse <= 0 else -10.0 * math.log10(mse)


def _mlp(model: TinyNeRF, chunks: int):
    if chunks > 1:
        return lambda pts: checkpoint_chunks(model, pts, chunks=chunks)
    return model


def render_rays(
    model: TinyNeRF,
    rays_o,
    rays_d,
    near: float,
    far: float,
    samples: int,
    *,
    perturb: bool = False,
    chunks: int = 0,
    white_background: bool = False,
):
    """Sample, run the network and composite: a `RenderResult` for (R, 3) rays."""
    pts, z_vals = sample_stratified(rays_o, rays_d, near, far, samples, perturb=perturb)
    num_rays = rays_o.shape[0]
    raw = _mlp(model, chunks)(pts.reshape(-1, 3)).reshape(num_rays, samples, 4)
    return volume_render(raw, z_vals, rays_d, white_background=white_background)


def render_view(
    model: TinyNeRF,
    height: int,
    width: int,
    focal: float,
    pose: np.ndarray,
    cfg: TrainConfig,
) -> tuple[np.ndarray, np.ndarray]:
    """Render one view without gradients, ``cfg.render_chunk`` rays at a time: (H, W, 3)
    colours and (H, W) depths."""
    rays_o, rays_d = get_rays_np(height, width, focal, pose.astype(np.float32))
    rays_o = rays_o.reshape(-1, 3)
    rays_d = rays_d.reshape(-1, 3)
    rgb, depth = [], []
    with no_grad():
        for s in range(0, rays_o.shape[0], cfg.render_chunk):
            res = render_rays(
                model,
                _core.from_numpy(np.ascontiguousarray(rays_o[s : s + cfg.render_chunk])),
                _core.from_numpy(np.ascontiguousarray(rays_d[s : s + cfg.render_chunk])),
                cfg.near,
                cfg.far,
                cfg.samples,
                white_background=cfg.white_background,
            )
            rgb.append(res.rgb_map.numpy())
            depth.append(res.depth_map.numpy())
    return (
        np.concatenate(rgb).reshape(height, width, 3),
        np.concatenate(depth).reshape(height, width),
    )


class _Progress:
    """tqdm when it is installed, else a line every ``every`` steps (on stderr)."""

    def __init__(self, total: int, every: int, plain: bool):
        self.total, self.every = total, max(1, every)
        self.t0 = time.perf_counter()
        self._bar = None
        if not plain:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, unit="step", file=sys.stderr, dynamic_ncols=True)
            except ImportError:
                pass

    def update(self, step: int, loss: float, peak: int) -> None:
        text = f"loss {loss:.5f}  psnr {psnr(loss):5.2f} dB  peak {_mib(peak)}"
        if self._bar is not None:
            self._bar.set_postfix_str(text, refresh=False)
            self._bar.update(1)
        elif step % self.every == 0 or step == self.total:
            rate = (time.perf_counter() - self.t0) / step
            print(f"step {step}/{self.total}  {text}  {rate:.3f} s/step", file=sys.stderr)

    def write(self, text: str) -> None:
        if self._bar is not None:
            self._bar.write(text, file=sys.stderr)
        else:
            print(text, file=sys.stderr)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def _load(cfg: TrainConfig) -> NerfData:
    if cfg.data is not None:
        return load_data(cfg.data)
    return make_scene(cfg.views, cfg.size, seed=cfg.seed, white_background=cfg.white_background)


def train(cfg: TrainConfig, log=print) -> dict:
    """Run the whole program for ``cfg``; return the metrics it also writes to metrics.json.

    Raises `DataError` (a ValueError) for unusable data, before any training.
    """
    wall0 = time.perf_counter()
    data = _load(cfg)
    os.makedirs(cfg.out, exist_ok=True)
    _core.manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    log(
        f"data: {data.source}, {data.num_views - 1} training views + 1 held out, "
        f"{data.height}x{data.width}, focal {data.focal:.2f}"
    )

    rays_o, rays_d = get_rays_np(data.height, data.width, data.focal, data.train_poses)
    rays_o = np.ascontiguousarray(rays_o.reshape(-1, 3), dtype=np.float32)
    rays_d = np.ascontiguousarray(rays_d.reshape(-1, 3), dtype=np.float32)
    target = np.ascontiguousarray(data.train_images.reshape(-1, 3), dtype=np.float32)
    num_rays = min(cfg.rays, rays_o.shape[0])

    model = TinyNeRF(cfg.depth, cfg.width, cfg.freqs, cfg.skip)
    opt = optim.Adam(model.parameters(), lr=cfg.lr, in_backward=cfg.in_backward)
    sched = optim.lr_scheduler.ExponentialLR(opt, gamma=cfg.lr_decay ** (1.0 / cfg.steps))
    n_params = sum(p.numel() for p in model.parameters())
    log(
        f"model: TinyNeRF {cfg.depth}x{cfg.width}, skip {cfg.skip}, {cfg.freqs} freqs, "
        f"{n_params:,} parameters; {num_rays} rays x {cfg.samples} samples per step, "
        f"optimizer {'in backward' if cfg.in_backward else 'after backward'}, "
        f"checkpoint chunks {cfg.chunks if cfg.chunks > 1 else 'off'}"
    )

    memory.reset_peak_memory_stats()
    losses: list[float] = []
    step_times: list[float] = []
    every = cfg.log_every or max(1, cfg.steps // 20)
    bar = _Progress(cfg.steps, every, cfg.plain_progress)
    train0 = time.perf_counter()
    try:
        for step in range(1, cfg.steps + 1):
            t0 = time.perf_counter()
            idx = rng.integers(0, rays_o.shape[0], num_rays)
            res = render_rays(
                model,
                _core.from_numpy(rays_o[idx]),
                _core.from_numpy(rays_d[idx]),
                cfg.near,
                cfg.far,
                cfg.samples,
                perturb=True,
                chunks=cfg.chunks,
                white_background=cfg.white_background,
            )
            loss = F.mse_loss(res.rgb_map, _core.from_numpy(target[idx]))
            loss.backward()
            if not cfg.in_backward:
                opt.step()
                opt.zero_grad()
            sched.step()
            value = loss.item()
            del res, loss
            step_times.append(time.perf_counter() - t0)
            losses.append(value)
            if not math.isfinite(value):
                bar.write(f"step {step}: the loss is {value}; stopping (try a lower --lr)")
                break
            bar.update(step, value, memory.max_memory_allocated())
    finally:
        bar.close()
    train_s = time.perf_counter() - train0
    peak = memory.max_memory_allocated()

    render0 = time.perf_counter()
    pred, depth = render_view(model, data.height, data.width, data.focal, data.test_pose, cfg)
    render_s = time.perf_counter() - render0
    test = data.test_image.astype(np.float64)
    heldout = psnr(float(np.mean((pred.astype(np.float64) - test) ** 2)))
    mean_colour = data.train_images.reshape(-1, 3).astype(np.float64).mean(0)
    baseline = psnr(float(np.mean((mean_colour - test) ** 2)))

    save(model.state_dict(), os.path.join(cfg.out, "model.pt"))
    metrics = {
        "heldout_psnr_db": heldout,
        "baseline_psnr_db": baseline,
        "psnr_gain_db": heldout - baseline,
        "final_train_loss": losses[-1] if losses else None,
        "final_train_psnr_db": psnr(losses[-1]) if losses else None,
        "steps_run": len(losses),
        "step_time_median_s": statistics.median(step_times) if step_times else None,
        "step_time_mean_s": statistics.fmean(step_times) if step_times else None,
        "train_time_s": train_s,
        "render_time_s": render_s,
        "wall_time_s": time.perf_counter() - wall0,
        "peak_memory_bytes": peak,
        "parameters": n_params,
        "data": {
            "source": data.source,
            "views": data.num_views,
            "height": data.height,
            "width": data.width,
            "focal": data.focal,
        },
        "options": dataclasses.asdict(cfg),
        "loss_curve": losses,
    }
    wrote = _plots(cfg.out, pred, data.test_image, depth, losses, heldout, baseline, log)
    metrics["wall_time_s"] = time.perf_counter() - wall0
    with open(os.path.join(cfg.out, "metrics.json"), "w") as f:
        json.dump(metrics, f, indent=2)
    files = [*wrote, "model.pt", "metrics.json"]
    log(f"wrote {', '.join(files)} to {cfg.out}")
    log(
        f"held-out PSNR {heldout:.2f} dB vs mean-colour baseline {baseline:.2f} dB "
        f"({heldout - baseline:+.2f} dB) after {len(losses)} steps, "
        f"{metrics['step_time_median_s'] or 0:.3f} s/step, peak memory {_mib(peak)}"
    )
    return metrics


def _plots(out, pred, truth, depth, losses, heldout, baseline, log) -> list[str]:
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        log("matplotlib is not installed (pip install 'gradstream[plot]'): skipping the PNGs")
        return []

    fig = Figure(figsize=(9, 3.3), dpi=100)
    FigureCanvasAgg(fig)
    panels = [
        (np.clip(pred, 0, 1), f"NeRF ({heldout:.2f} dB)", None),
        (np.clip(truth, 0, 1), "ground truth", None),
        (depth, "NeRF depth", "viridis"),
    ]
    for k, (img, title, cmap) in enumerate(panels):
        ax = fig.add_subplot(1, 3, k + 1)
        shown = ax.imshow(img, cmap=cmap, interpolation="nearest")
        ax.set_title(title)
        ax.axis("off")
        if cmap is not None:  # the depth map: a colour bar as tall as the image, beside it
            bar = fig.colorbar(shown, cax=ax.inset_axes([1.04, 0.0, 0.05, 1.0]))
            bar.set_label("depth (scene units)", fontsize=8)
            bar.ax.tick_params(labelsize=8)
    fig.subplots_adjust(left=0.01, right=0.92, top=0.88, bottom=0.03, wspace=0.06)
    fig.savefig(os.path.join(out, "render.png"))

    fig = Figure(figsize=(9, 3.3), dpi=100)
    FigureCanvasAgg(fig)
    steps = np.arange(1, len(losses) + 1)
    ax = fig.add_subplot(1, 2, 1)
    ax.semilogy(steps, np.maximum(losses, 1e-12) if losses else losses)
    ax.set_xlabel("step")
    ax.set_ylabel("training loss (MSE)")
    ax.grid(alpha=0.3)
    ax = fig.add_subplot(1, 2, 2)
    ax.plot(steps, [psnr(v) for v in losses], label="training batch")
    ax.axhline(heldout, color="C2", linestyle="--", label=f"held-out view ({heldout:.1f} dB)")
    ax.axhline(baseline, color="C3", linestyle=":", label=f"mean colour ({baseline:.1f} dB)")
    ax.set_xlabel("step")
    ax.set_ylabel("PSNR (dB)")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(os.path.join(out, "curves.png"))
    return ["render.png", "curves.png"]
