"""FCN semantic segmentation on synthetic shapes: a frozen stem conv, conv-BN-ReLU encoder
with max pooling, a transposed-conv decoder with a skip connection, bilinear upsampling of the
logits to the input size, per-pixel cross-entropy, gradient clipping, AdamW and StepLR.

    python fcn.py --steps 50
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def make_shapes(n=12, size=16, classes=3, seed=0):
    """Images of a rectangle (class 1) and a disc (class 2) on a background (class 0), each
    class with its own colour plus noise; (images (N, 3, H, W) float32, labels (N, H, W) int64)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    colours = rng.uniform(0.0, 1.0, (classes, 3))
    images = np.empty((n, 3, size, size), np.float32)
    labels = np.zeros((n, size, size), np.int64)
    for k in range(n):
        x0, y0 = rng.integers(0, size // 2, 2)
        w, h = rng.integers(3, size // 2, 2)
        labels[k, y0 : y0 + h, x0 : x0 + w] = 1
        cx, cy = rng.uniform(0, size, 2)
        r = rng.uniform(2, size / 4)
        labels[k][(xx - cx) ** 2 + (yy - cy) ** 2 < r * r] = 2
        noise = rng.normal(0.0, 0.1, (3, size, size))
        images[k] = (colours[labels[k]].transpose(2, 0, 1) + noise).astype(np.float32)
    return images, labels


def conv_bn_relu(c_in, c_out):
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
        nn.BatchNorm2d(c_out),
        nn.ReLU(inplace=True),
    )


class FCN(nn.Module):
    def __init__(self, classes=3, width=8):
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1)
        self.enc1 = conv_bn_relu(width, width)
        self.enc2 = conv_bn_relu(width, 2 * width)
        self.enc3 = conv_bn_relu(2 * width, 4 * width)
        self.pool = nn.MaxPool2d(2)
        self.up = nn.ConvTranspose2d(4 * width, 2 * width, kernel_size=2, stride=2)
        self.dec = conv_bn_relu(4 * width, 2 * width)
        self.head = nn.Conv2d(2 * width, classes, 1)

    def forward(self, x):
        e1 = self.enc1(F.relu(self.stem(x)))
        e2 = self.enc2(self.pool(e1))
        e3 = self.enc3(self.pool(e2))
        d = self.dec(torch.cat([self.up(e3), e2], dim=1))
        logits = self.head(d)
        return F.interpolate(logits, size=x.shape[-2:], mode="bilinear", align_corners=False)

    def init_from_numpy(self, seed):
        """PyTorch's default conv init, U(-1/sqrt(fan_in), 1/sqrt(fan_in)), drawn with NumPy."""
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
                    fan_in = m.weight.shape[1] * m.weight.shape[2] * m.weight.shape[3]
                    bound = 1.0 / math.sqrt(fan_in)
                    for p in (m.weight, m.bias):
                        if p is not None:
                            value = rng.uniform(-bound, bound, tuple(p.shape))
                            p.copy_(torch.from_numpy(value.astype(np.float32)))


def run(steps=5, batch_size=4, lr=1e-2, seed=0, verbose=False):
    images, labels = make_shapes(seed=seed)
    images, labels = torch.from_numpy(images), torch.from_numpy(labels)

    model = FCN()
    model.init_from_numpy(seed)
    model.stem.requires_grad_(False)  # a "pretrained" first layer, kept frozen
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=1e-2)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    rng = np.random.default_rng(seed + 1)

    model.train()
    losses = []
    for it in range(steps):
        idx = torch.from_numpy(rng.choice(images.shape[0], size=batch_size, replace=False))
        x, y = images[idx], labels[idx]
        optimizer.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, max_norm=1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if verbose:
            acc = (logits.argmax(dim=1) == y).float().mean().item()
            lr_now = optimizer.param_groups[0]["lr"]
            print(f"[step {it:4d}] loss={loss.item():.5f} acc={acc:.3f} lr={lr_now:.2e}")
    grads = {
        n: p.grad.clone().cpu().numpy() for n, p in model.named_parameters() if p.requires_grad
    }
    return losses, grads


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    run(steps=a.steps, verbose=True)
