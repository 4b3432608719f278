# Tiny NeRF, notebook style (after the original tiny_nerf.ipynb, ported to PyTorch).
# Whole images are rendered each step; the network is a plain nn.Sequential.
import argparse

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

L_embed = 6
N_samples = 16
near, far = 2.0, 6.0


def posenc(x):
    rets = [x]
    for i in range(L_embed):
        for fn in [torch.sin, torch.cos]:
            rets.append(fn(2.0**i * x))
    return torch.cat(rets, -1)


def init_model(D=4, W=64, seed=0):
    layers = []
    for i in range(D):
        layers.append(nn.Linear(3 + 3 * 2 * L_embed if i == 0 else W, W))
        layers.append(nn.ReLU())
    layers.append(nn.Linear(W, 4))
    model = nn.Sequential(*layers)
    # numpy init so the same weights can be reproduced anywhere
    rng = np.random.RandomState(seed)
    with torch.no_grad():
        for p in model.parameters():
            fan_in = p.shape[-1] if p.dim() == 2 else p.shape[0]
            w = rng.uniform(-1, 1, size=tuple(p.shape)) / np.sqrt(fan_in)
            p.copy_(torch.from_numpy(w.astype(np.float32)))
    return model


def get_rays(H, W, focal, c2w):
    i, j = torch.meshgrid(torch.arange(W), torch.arange(H), indexing="xy")
    dirs = torch.stack([(i - W * 0.5) / focal, -(j - H * 0.5) / focal, -torch.ones_like(i)], -1)
    rays_d = torch.sum(dirs[..., np.newaxis, :] * c2w[:3, :3], -1)
    rays_o = c2w[:3, -1].expand(rays_d.shape)
    return rays_o, rays_d


def cumprod_exclusive(tensor):
    cumprod = torch.cumprod(tensor, -1)
    cumprod = torch.roll(cumprod, 1, -1)
    cumprod[..., 0] = 1.0
    return cumprod


def render_rays(network_fn, rays_o, rays_d, near, far, N_samples, rand=False):
    def batchify(fn, chunk=1024 * 32):
        return lambda inputs: torch.cat(
            [fn(inputs[i : i + chunk]) for i in range(0, inputs.shape[0], chunk)], 0
        )

    # Compute 3D query points
    z_vals = torch.linspace(near, far, N_samples)
    if rand:
        z_vals = (
            z_vals + torch.rand(list(rays_o.shape[:-1]) + [N_samples]) * (far - near) / N_samples
        )
    else:
        z_vals = z_vals.expand(list(rays_o.shape[:-1]) + [N_samples])
    pts = rays_o[..., None, :] + rays_d[..., None, :] * z_vals[..., :, None]

    # Run network
    pts_flat = torch.reshape(pts, [-1, 3])
    pts_flat = posenc(pts_flat)
    raw = batchify(network_fn)(pts_flat)
    raw = torch.reshape(raw, list(pts.shape[:-1]) + [4])

    # Compute opacities and colors
    sigma_a = F.relu(raw[..., 3])
    rgb = torch.sigmoid(raw[..., :3])

    # Do volume rendering
    dists = torch.cat(
        [z_vals[..., 1:] - z_vals[..., :-1], torch.tensor([1e10]).expand(z_vals[..., :1].shape)], -1
    )
    alpha = 1.0 - torch.exp(-sigma_a * dists)
    weights = alpha * cumprod_exclusive(1.0 - alpha + 1e-10)

    rgb_map = torch.sum(weights[..., None] * rgb, -2)
    depth_map = torch.sum(weights * z_vals, -1)
    acc_map = torch.sum(weights, -1)
    return rgb_map, depth_map, acc_map


def run(npz_path, steps=5, perturb=False, lr=5e-4, verbose=False):
    data = np.load(npz_path)
    images = torch.from_numpy(data["images"])
    poses = torch.from_numpy(data["poses"])
    focal = torch.from_numpy(data["focal"])
    H, W = images.shape[1:3]

    testimg, testpose = images[-1], poses[-1]
    images = images[:-1, ..., :3]
    poses = poses[:-1]

    model = init_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)

    rng = np.random.RandomState(1)
    losses = []
    for i in range(steps):
        img_i = rng.randint(images.shape[0])
        target = images[img_i]
        pose = poses[img_i, :3, :4]
        rays_o, rays_d = get_rays(H, W, focal, pose)
        rgb, depth, acc = render_rays(
            model, rays_o, rays_d, near=near, far=far, N_samples=N_samples, rand=perturb
        )
        loss = F.mse_loss(rgb, target)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())

        if verbose:
            with torch.no_grad():
                rays_o, rays_d = get_rays(H, W, focal, testpose)
                rgb, depth, acc = render_rays(
                    model, rays_o, rays_d, near=near, far=far, N_samples=N_samples
                )
                mse = torch.mean(torch.square(rgb - testimg))
                psnr = -10.0 * torch.log10(mse)
            print(f"iter {i}  loss {loss.item():.6f}  test psnr {psnr.item():.3f}")

    grads = {}
    for name, p in model.named_parameters():
        grads[name] = p.grad.detach().cpu().numpy()
    return losses, grads


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--data", default="tiny_nerf_data.npz")
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--no-perturb", action="store_true")
    args = parser.parse_args()
    losses, _ = run(args.data, steps=args.steps, perturb=not args.no_perturb, verbose=True)
    print("done, final loss", losses[-1])
