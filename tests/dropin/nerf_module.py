"""NeRF with an nn.Module model: ray batches from a precomputed ray bank, a skip
connection, learning-rate decay by hand.

    python nerf_module.py --data tiny_nerf_data.npz --steps 200
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")


class Embedder:
    def __init__(self, num_freqs, include_input=True):
        self.freq_bands = 2.0 ** torch.linspace(0.0, num_freqs - 1, num_freqs)
        self.include_input = include_input
        self.out_dim = 3 * (2 * num_freqs + int(include_input))

    def __call__(self, x):
        feats = [x] if self.include_input else []
        for freq in self.freq_bands:
            feats += [torch.sin(x * freq), torch.cos(x * freq)]
        return torch.cat(feats, dim=-1)


class NeRF(nn.Module):
    def __init__(self, D=6, W=48, input_ch=39, output_ch=4, skips=(3,)):
        super().__init__()
        self.D, self.W, self.skips = D, W, list(skips)
        self.pts_linears = nn.ModuleList(
            [nn.Linear(input_ch, W)]
            + [
                nn.Linear(W + input_ch, W) if i in self.skips else nn.Linear(W, W)
                for i in range(1, D)
            ]
        )
        self.output_linear = nn.Linear(W, output_ch)

    def forward(self, x):
        h = x
        for i, layer in enumerate(self.pts_linears):
            if i in self.skips:
                h = torch.cat([x, h], -1)
            h = F.relu(layer(h))
        return self.output_linear(h)

    def init_from_numpy(self, seed):
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if name.endswith("weight"):
                    bound = math.sqrt(6.0 / (p.shape[0] + p.shape[1]))
                    value = rng.uniform(-bound, bound, size=tuple(p.shape))
                else:
                    value = rng.normal(0.0, 0.01, size=tuple(p.shape))
                p.copy_(torch.from_numpy(value.astype(np.float32)))


class Renderer:
    def __init__(self, near, far, n_samples, white_bkgd=False):
        self.near, self.far, self.n_samples = near, far, n_samples
        self.white_bkgd = white_bkgd

    def raw2outputs(self, raw, z_vals, rays_d):
        dists = z_vals[..., 1:] - z_vals[..., :-1]
        dists = torch.cat([dists, torch.tensor([1e10]).to(dists).expand(dists[..., :1].shape)], -1)
        dists = dists * torch.norm(rays_d[..., None, :], dim=-1)

        rgb = torch.sigmoid(raw[..., :3])
        alpha = 1.0 - torch.exp(-F.relu(raw[..., 3]) * dists)
        ones = torch.ones((alpha.shape[0], 1), device=alpha.device)
        T = torch.cumprod(torch.cat([ones, 1.0 - alpha + 1e-10], -1), -1)[:, :-1]
        weights = alpha * T
        rgb_map = torch.sum(weights[..., None] * rgb, -2)
        acc_map = torch.sum(weights, -1)
        if self.white_bkgd:
            rgb_map = rgb_map + (1.0 - acc_map[..., None])
        return rgb_map, weights

    def __call__(self, model, embed, rays_o, rays_d, perturb=False):
        n_rays = rays_o.shape[0]
        t_vals = torch.linspace(0.0, 1.0, steps=self.n_samples).to(rays_o)
        z_vals = self.near * (1.0 - t_vals) + self.far * t_vals
        z_vals = z_vals.expand([n_rays, self.n_samples])
        if perturb:
            mids = 0.5 * (z_vals[..., 1:] + z_vals[..., :-1])
            upper = torch.cat([mids, z_vals[..., -1:]], -1)
            lower = torch.cat([z_vals[..., :1], mids], -1)
            t_rand = torch.rand(z_vals.shape, device=rays_o.device)
            z_vals = lower + (upper - lower) * t_rand
        pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]
        raw = model(embed(pts.reshape(-1, 3))).reshape(n_rays, self.n_samples, 4)
        return self.raw2outputs(raw, z_vals, rays_d)


def get_rays(H, W, focal, c2w):
    i, j = torch.meshgrid(
        torch.linspace(0, W - 1, W, device=c2w.device),
        torch.linspace(0, H - 1, H, device=c2w.device),
        indexing="xy",
    )
    dirs = torch.stack([(i - W / 2) / focal, -(j - H / 2) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., None, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, 3].expand(rays_d.shape)
    return rays_o, rays_d


def mse2psnr(x):
    return -10.0 * torch.log(x) / torch.log(torch.tensor([10.0]).to(x))


class Trainer:
    def __init__(self, npz_path, lr=5e-4, decay_steps=3, seed=0):
        data = np.load(npz_path)
        self.images = torch.from_numpy(data["images"]).to(device)
        self.poses = torch.from_numpy(data["poses"]).to(device)
        self.focal = torch.from_numpy(data["focal"])
        self.H, self.W = int(self.images.shape[1]), int(self.images.shape[2])

        rays = [torch.stack(get_rays(self.H, self.W, self.focal, p[:3, :4]), 0) for p in self.poses]
        rays = torch.stack(rays, 0)  # [N, ro+rd, H, W, 3]
        rays_rgb = torch.cat([rays, self.images[:, None]], 1)  # [N, ro+rd+rgb, H, W, 3]
        self.rays_rgb = rays_rgb.permute(0, 2, 3, 1, 4).reshape(-1, 3, 3)

        self.embed = Embedder(6)
        self.model = NeRF(input_ch=self.embed.out_dim).to(device)
        self.model.init_from_numpy(seed)
        self.renderer = Renderer(near=2.0, far=6.0, n_samples=16)
        self.lr, self.decay_steps = lr, decay_steps
        self.optimizer = torch.optim.Adam(
            params=list(self.model.parameters()), lr=lr, betas=(0.9, 0.999)
        )
        self.rng = np.random.default_rng(seed + 1)
        self.global_step = 0

    def train_step(self, batch_size=64, perturb=False):
        idx = self.rng.choice(self.rays_rgb.shape[0], size=batch_size, replace=False)
        batch = self.rays_rgb[torch.from_numpy(idx)]
        rays_o, rays_d, target = batch[:, 0], batch[:, 1], batch[:, 2]

        rgb, _ = self.renderer(self.model, self.embed, rays_o, rays_d, perturb=perturb)
        self.optimizer.zero_grad()
        loss = torch.mean((rgb - target) ** 2)
        psnr = mse2psnr(loss)
        loss.backward()
        self.optimizer.step()

        self.global_step += 1
        new_lr = self.lr * (0.1 ** (self.global_step / self.decay_steps))
        for param_group in self.optimizer.param_groups:
            param_group["lr"] = new_lr
        return loss.item(), psnr.item()

    def gradients(self):
        return {n: p.grad.clone().cpu().numpy() for n, p in self.model.named_parameters()}


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
