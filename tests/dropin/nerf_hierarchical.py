"""NeRF with coarse and fine networks and hierarchical sampling: rays come from a Dataset
through a DataLoader, the fine samples are drawn from the coarse weights (sample_pdf:
cumsum, searchsorted, gather), merged by sort, and the learning rate follows MultiStepLR.

    python nerf_hierarchical.py --data tiny_nerf_data.npz --steps 200
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset, Subset


class RayDataset(Dataset):
    """Every pixel of every image: (origin, direction, colour)."""

    def __init__(self, images, poses, focal):
        h, w = images.shape[1], images.shape[2]
        rays = [torch.stack(get_rays(h, w, focal, p[:3, :4]), 0) for p in poses]
        rays = torch.cat([torch.stack(rays, 0), images[:, None]], 1)  # [N, 3, H, W, 3]
        self.rays = rays.permute(0, 2, 3, 1, 4).reshape(-1, 3, 3)

    def __len__(self):
        return self.rays.shape[0]

    def __getitem__(self, i):
        r = self.rays[i]
        return r[0], r[1], r[2]


def get_rays(h, w, focal, c2w):
    i, j = torch.meshgrid(torch.arange(w).float(), torch.arange(h).float(), indexing="xy")
    dirs = torch.stack([(i - w * 0.5) / focal, -(j - h * 0.5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    return c2w[:3, 3].expand(rays_d.shape), rays_d


def positional_encoding(x, n_freqs):
    out = [x]
    for k in range(n_freqs):
        out += [torch.sin((2.0**k) * x), torch.cos((2.0**k) * x)]
    return torch.cat(out, -1)


class NeRF(nn.Module):
    def __init__(self, n_freqs=5, width=32, depth=4):
        super().__init__()
        self.n_freqs = n_freqs
        in_ch = 3 * (1 + 2 * n_freqs)
        layers = [nn.Linear(in_ch, width)] + [nn.Linear(width, width) for _ in range(depth - 1)]
        self.layers = nn.ModuleList(layers)
        self.out = nn.Linear(width, 4)

    def forward(self, pts):
        h = positional_encoding(pts, self.n_freqs)
        for layer in self.layers:
            h = F.relu(layer(h))
        return self.out(h)

    def init_from_numpy(self, rng):
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("weight"):
                    bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                    value = rng.uniform(-bound, bound, size=tuple(p.shape))
                else:
                    value = rng.normal(0.0, 0.01, size=tuple(p.shape))
                p.copy_(torch.from_numpy(value.astype(np.float32)))


def render(raw, z_vals, rays_d):
    dists = z_vals[..., 1:] - z_vals[..., :-1]
    dists = torch.cat([dists, torch.full_like(dists[..., :1], 1e10)], -1)
    dists = dists * torch.norm(rays_d[..., None, :], dim=-1)
    rgb = torch.sigmoid(raw[..., :3])
    alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
    trans = torch.cumprod(torch.cat([torch.ones_like(alpha[..., :1]), 1.0 - alpha + 1e-10], -1), -1)
    weights = alpha * trans[..., :-1]
    return torch.sum(weights[..., None] * rgb, -2), weights


def sample_pdf(bins, weights, n_samples, det):
    """Draw `n_samples` depths per ray from the piecewise-constant pdf of `weights` over
    `bins` (the midpoints of the coarse samples), by inverting its cdf."""
    pdf = (weights + 1e-5) / torch.sum(weights + 1e-5, -1, keepdim=True)
    cdf = torch.cat([torch.zeros_like(pdf[..., :1]), torch.cumsum(pdf, -1)], -1)
    shape = list(cdf.shape[:-1]) + [n_samples]
    if det:
        u = torch.linspace(0.0, 1.0, steps=n_samples).expand(shape).contiguous()
    else:
        u = torch.rand(shape)
    above_idx = torch.searchsorted(cdf, u, right=True)
    below = torch.max(torch.zeros_like(above_idx), above_idx - 1)
    above = torch.min(torch.full_like(above_idx, cdf.shape[-1] - 1), above_idx)
    idx = torch.stack([below, above], -1)  # [R, n, 2]
    grid = [idx.shape[0], idx.shape[1], cdf.shape[-1]]
    cdf_g = torch.gather(cdf.unsqueeze(1).expand(grid), 2, idx)
    bins_g = torch.gather(bins.unsqueeze(1).expand(grid), 2, idx)
    span = cdf_g[..., 1] - cdf_g[..., 0]
    span = torch.where(span < 1e-5, torch.ones_like(span), span)
    t = (u - cdf_g[..., 0]) / span
    return bins_g[..., 0] + t * (bins_g[..., 1] - bins_g[..., 0])


class Trainer:
    def __init__(self, npz_path, seed=0, n_coarse=12, n_fine=12, batch_size=48):
        data = np.load(npz_path)
        images = torch.from_numpy(data["images"])
        poses = torch.from_numpy(data["poses"])
        focal = float(data["focal"])
        rng = np.random.default_rng(seed)
        dataset = RayDataset(images, poses, focal)
        order = rng.permutation(len(dataset)).tolist()
        self.loader = DataLoader(Subset(dataset, order), batch_size=batch_size, drop_last=True)
        self.batches = iter(self.loader)
        self.coarse, self.fine = NeRF(), NeRF()
        self.coarse.init_from_numpy(rng)
        self.fine.init_from_numpy(rng)
        params = list(self.coarse.parameters()) + list(self.fine.parameters())
        self.optimizer = torch.optim.Adam(params, lr=5e-3)
        self.scheduler = torch.optim.lr_scheduler.MultiStepLR(
            self.optimizer, milestones=[2, 4], gamma=0.5
        )
        self.near, self.far = 2.0, 6.0
        self.n_coarse, self.n_fine = n_coarse, n_fine

    def next_batch(self):
        try:
            return next(self.batches)
        except StopIteration:
            self.batches = iter(self.loader)
            return next(self.batches)

    def train_step(self, perturb=False):
        rays_o, rays_d, target = self.next_batch()
        t = torch.linspace(0.0, 1.0, steps=self.n_coarse)
        z_vals = (self.near * (1.0 - t) + self.far * t).expand([rays_o.shape[0], self.n_coarse])
        if perturb:
            mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
            upper = torch.cat([mids, z_vals[..., -1:]], -1)
            lower = torch.cat([z_vals[..., :1], mids], -1)
            z_vals = lower + (upper - lower) * torch.rand(z_vals.shape)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        rgb_coarse, weights = render(self.coarse(pts), z_vals, rays_d)

        mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
        z_fine = sample_pdf(mids, weights[..., 1:-1], self.n_fine, det=not perturb).detach()
        z_all, _ = torch.sort(torch.cat([z_vals, z_fine], -1), -1)
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_all[..., :, None]
        rgb_fine, _ = render(self.fine(pts), z_all, rays_d)

        loss = F.mse_loss(rgb_coarse, target) + F.mse_loss(rgb_fine, target)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        psnr = -10.0 * math.log10(F.mse_loss(rgb_fine, target).item())
        return loss.item(), psnr

    def gradients(self):
        nets = {"coarse": self.coarse, "fine": self.fine}
        return {
            f"{k}.{n}": p.grad.clone().numpy()
            for k, net in nets.items()
            for n, p in net.named_parameters()
        }


def run(npz_path, steps=5, perturb=False, verbose=False):
    trainer = Trainer(npz_path)
    losses = []
    for it in range(steps):
        loss, psnr = trainer.train_step(perturb=perturb)
        losses.append(loss)
        if verbose:
            lr = trainer.optimizer.param_groups[0]["lr"]
            print(f"[step {it:4d}] loss={loss:.5f} psnr={psnr:.2f} lr={lr:.2e}")
    return losses, trainer.gradients()


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--data", default="tiny_nerf_data.npz")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--perturb", action="store_true")
    a = p.parse_args()
    run(a.data, steps=a.steps, perturb=a.perturb, verbose=True)
