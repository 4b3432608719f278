#!/usr/bin/env python
# compact nerf: functional rendering, small mlp, random pixel batches
import sys

import numpy as np
import torch
from torch import nn, optim

BOUNDS = np.array([2.0, 6.0])  # near/far of the scene


def fourier(x, n_freq=5):
    freqs = 2.0 ** torch.arange(n_freq, dtype=torch.float32)
    xb = (x[..., None, :] * freqs[:, None]).reshape(list(x.shape[:-1]) + [-1])
    return torch.cat([x, torch.sin(xb), torch.cos(xb)], -1)


class MLP(nn.Module):
    def __init__(self, d_in, width=32, depth=3):
        super().__init__()
        dims = [d_in] + [width] * depth
        layers = []
        for a, b in zip(dims[:-1], dims[1:], strict=True):
            layers += [nn.Linear(a, b), nn.ReLU()]
        self.body = nn.Sequential(*layers)
        self.sigma = nn.Linear(width, 1)
        self.color = nn.Linear(width, 3)

    def forward(self, x):
        h = self.body(x)
        return torch.cat([self.color(h), self.sigma(h)], -1)


def pixel_rays(h, w, f, c2w):
    xs, ys = torch.meshgrid(
        torch.arange(w, dtype=torch.float32) + 0.5,
        torch.arange(h, dtype=torch.float32) + 0.5,
        indexing="xy",
    )
    d = torch.stack([(xs - 0.5 * w) / f, -(ys - 0.5 * h) / f, -torch.ones_like(xs)], -1)
    d = (d[..., None, :] * c2w[None, None, :3, :3]).sum(-1)
    o = c2w[:3, -1][None, None].expand(d.shape)
    return o, d


def sample_along_rays(o, d, t0, t1, n, jitter):
    t = t0 + (t1 - t0) * torch.linspace(0, 1, n)[None].repeat(o.shape[0], 1)
    if jitter:
        t = t + (torch.rand(t.shape) - 0.5) * ((t1 - t0) / n)
    return o[:, None] + t[..., None] * d[:, None], t


def composite(raw, t):
    # raw: [rays, samples, 4] -> rgb [rays, 3]
    delta = t[:, 1:] - t[:, :-1]
    delta = torch.cat([delta, delta[:, -1:]], -1)
    sigma = torch.relu(raw[..., 3])
    tau = sigma * delta
    # exclusive transmittance: exp(-sum of tau over the samples before)
    acc = torch.cumsum(tau, -1)
    trans = torch.exp(-torch.cat([torch.zeros_like(acc[:, :1]), acc[:, :-1]], -1))
    w = trans * (1 - torch.exp(-tau))
    rgb = torch.sum(w[..., None] * torch.sigmoid(raw[..., :3]), -2)
    bg = 1.0 - torch.sum(w, -1)
    return rgb + bg[:, None], w


def render(net, o, d, jitter=False, n=12):
    near, far = BOUNDS
    pts, t = sample_along_rays(o, d, near, far, n, jitter)
    raw = net(fourier(pts.reshape(-1, 3)))
    raw = raw.reshape(list(pts.shape[:-1]) + [4])
    return composite(raw, t)


def seed_params(net, seed):
    g = np.random.default_rng(seed)
    with torch.no_grad():
        for _, p in net.named_parameters():
            p.copy_(torch.from_numpy(g.standard_normal(p.shape).astype("float32") * 0.15))


def run(npz_path, steps=5, perturb=False, bs=96, log=None):
    dev = torch.device("cuda:0") if torch.cuda.is_available() else torch.device("cpu")
    npz = np.load(npz_path)
    imgs, c2ws, f = (torch.from_numpy(npz[k]) for k in ("images", "poses", "focal"))
    imgs, c2ws = imgs.to(dev), c2ws.to(dev)
    train, val = imgs[::2], imgs[1::2]
    train_poses = c2ws[::2]
    n_img, h, w = train.shape[:3]

    net = MLP(3 + 3 * 2 * 5).to(dev)
    seed_params(net, 3)
    head = [p for n_, p in net.named_parameters() if not n_.startswith("body")]
    body = [p for n_, p in net.named_parameters() if n_.startswith("body")]
    opt = optim.Adam([{"params": body}, {"params": head, "lr": 2e-3}], lr=1e-3)

    g = np.random.default_rng(7)
    hist = []
    for it in range(steps):
        k = int(g.integers(n_img))
        o, d = pixel_rays(h, w, f, train_poses[k])
        ys, xs = g.integers(0, h, size=bs), g.integers(0, w, size=bs)
        o, d, gt = o[ys, xs], d[ys, xs], train[k][ys, xs]
        rgb, _ = render(net, o, d, jitter=perturb)
        loss = ((rgb - gt) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        hist.append(float(loss.item()))
        for i in range(len(opt.param_groups)):
            opt.param_groups[i]["lr"] *= 0.9
        if log:
            with torch.no_grad():
                o, d = pixel_rays(h, w, f, c2ws[1])
                pred, _ = render(net, o.reshape(-1, 3), d.reshape(-1, 3))
                err = torch.mean((pred.reshape(val[0].shape) - val[0]) ** 2)
            log(f"{it:3d} train {hist[-1]:.5f}  val psnr {(-10.0 * torch.log10(err)).item():6.2f}")
    grads = {n_: p.grad.detach().numpy().copy() for n_, p in net.named_parameters()}
    return hist, grads


if __name__ == "__main__":
    argv = sys.argv[1:]
    path = argv[argv.index("--data") + 1] if "--data" in argv else "tiny_nerf_data.npz"
    n_steps = int(argv[argv.index("--steps") + 1]) if "--steps" in argv else 300
    run(path, steps=n_steps, perturb=True, log=print)
