"""A Pytorch-UNet-style segmentation trainer: a small U-Net (DoubleConv / Down / Up with skip
connections) trained on a made-up Carvana-like dataset of blobs on noisy backgrounds, with
BCE (or cross-entropy) plus dice loss, RMSprop, ReduceLROnPlateau on the validation dice
score, channels_last tensors, and a checkpoint per epoch.

    python unet_style.py --epochs 2 --batch-size 4 --out_dir out
    python unet_style.py --classes 2 --bilinear

Weights come from NumPy after the usual init, and each image is drawn from a NumPy seed in
`__getitem__`, so the loss of the untrained model on a fixed batch is the same under every
library; the shuffled training order is not. The last line is `RESULT {json}`.
"""

import argparse
import json
import logging
import os
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch import optim
from torch.utils.data import DataLoader, Dataset, random_split

# ---------------------------------------------------------------- the model


class DoubleConv(nn.Module):
    """(convolution => [BN] => ReLU) * 2"""

    def __init__(self, in_channels, out_channels, mid_channels=None):
        super().__init__()
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(mid_channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.BatchNorm2d(out_channels),
            nn.ReLU(inplace=True),
        )

    def forward(self, x):
        return self.double_conv(x)


class Down(nn.Module):
    """Downscaling with maxpool then double conv"""

    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.maxpool_conv = nn.Sequential(nn.MaxPool2d(2), DoubleConv(in_channels, out_channels))

    def forward(self, x):
        return self.maxpool_conv(x)


class Up(nn.Module):
    """Upscaling then double conv"""

    def __init__(self, in_channels, out_channels, bilinear=True):
        super().__init__()
        if bilinear:
            self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
            self.conv = DoubleConv(in_channels, out_channels, in_channels // 2)
        else:
            self.up = nn.ConvTranspose2d(in_channels, in_channels // 2, kernel_size=2, stride=2)
            self.conv = DoubleConv(in_channels, out_channels)

    def forward(self, x1, x2):
        x1 = self.up(x1)
        # the input is CHW; odd sizes leave the upsampled map a pixel short of the skip
        diffY = x2.size()[2] - x1.size()[2]
        diffX = x2.size()[3] - x1.size()[3]
        x1 = F.pad(x1, [diffX // 2, diffX - diffX // 2, diffY // 2, diffY - diffY // 2])
        x = torch.cat([x2, x1], dim=1)
        return self.conv(x)


class OutConv(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel_size=1)

    def forward(self, x):
        return self.conv(x)


class Checkpointed(nn.Module):
    """Recomputes the wrapped module's activations in the backward pass."""

    def __init__(self, module):
        super().__init__()
        self.module = module

    def forward(self, *inputs):
        return torch.utils.checkpoint.checkpoint(self.module, *inputs, use_reentrant=False)


class UNet(nn.Module):
    def __init__(self, n_channels, n_classes, bilinear=False, width=8):
        super().__init__()
        self.n_channels = n_channels
        self.n_classes = n_classes
        self.bilinear = bilinear
        factor = 2 if bilinear else 1
        self.inc = DoubleConv(n_channels, width)
        self.down1 = Down(width, 2 * width)
        self.down2 = Down(2 * width, 4 * width)
        self.down3 = Down(4 * width, 8 * width // factor)
        self.up1 = Up(8 * width, 4 * width // factor, bilinear)
        self.up2 = Up(4 * width, 2 * width // factor, bilinear)
        self.up3 = Up(2 * width, width, bilinear)
        self.outc = OutConv(width, n_classes)

    def forward(self, x):
        x1 = self.inc(x)
        x2 = self.down1(x1)
        x3 = self.down2(x2)
        x4 = self.down3(x3)
        x = self.up1(x4, x3)
        x = self.up2(x, x2)
        x = self.up3(x, x1)
        return self.outc(x)

    def use_checkpointing(self):
        for name in ["inc", "down1", "down2", "down3", "up1", "up2", "up3", "outc"]:
            setattr(self, name, Checkpointed(getattr(self, name)))

    def init_from_numpy(self, seed):
        """He-normal conv weights from NumPy; BatchNorm at 1, 0; biases 0."""
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if p.dim() == 1:
                    value = np.ones(p.shape) if name.endswith("weight") else np.zeros(p.shape)
                else:
                    fan_in = p.shape[1] * p.shape[2] * p.shape[3]
                    if isinstance(self.get_submodule(name.rsplit(".", 1)[0]), nn.ConvTranspose2d):
                        fan_in = p.shape[0] * p.shape[2] * p.shape[3]
                    value = rng.normal(0.0, np.sqrt(2.0 / fan_in), p.shape)
                p.copy_(torch.from_numpy(value.astype(np.float32)))


# ---------------------------------------------------------------- the data


class CarvanaStyleDataset(Dataset):
    """Images of 1-3 bright ellipses on a noisy background; the mask marks the ellipses.
    Item `i` is drawn from NumPy seed (seed, i), so it is the same in every process."""

    def __init__(self, n, size, seed, n_classes=1):
        self.n, self.size, self.seed = n, size, seed
        self.mask_values = [0, 1]
        self.n_classes = n_classes

    def __len__(self):
        return self.n

    def __getitem__(self, idx):
        rng = np.random.default_rng([self.seed, idx])
        h, w = self.size
        yy, xx = np.mgrid[0:h, 0:w]
        mask = np.zeros((h, w), dtype=np.int64)
        for _ in range(int(rng.integers(1, 4))):
            cy, cx = rng.uniform(0, h), rng.uniform(0, w)
            ry, rx = rng.uniform(h / 8, h / 3), rng.uniform(w / 8, w / 3)
            mask[((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1] = 1
        color = rng.uniform(0.2, 0.8, (3, 1, 1))
        img = 0.3 * rng.random((3, h, w)) + mask[None] * color
        return {
            "image": torch.as_tensor(img.copy()).float().contiguous(),
            "mask": torch.as_tensor(mask.copy()).long().contiguous(),
        }


# ---------------------------------------------------------------- loss and score


def dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
    assert input.size() == target.size()
    assert input.dim() == 3 or not reduce_batch_first
    sum_dim = (-1, -2) if input.dim() == 2 or not reduce_batch_first else (-1, -2, -3)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    dice = (inter + epsilon) / (sets_sum + epsilon)
    return dice.mean()


def multiclass_dice_coeff(input, target, reduce_batch_first=False, epsilon=1e-6):
    return dice_coeff(input.flatten(0, 1), target.flatten(0, 1), reduce_batch_first, epsilon)


def dice_loss(input, target, multiclass=False):
    fn = multiclass_dice_coeff if multiclass else dice_coeff
    return 1 - fn(input, target, reduce_batch_first=True)


def compute_loss(model, criterion, masks_pred, true_masks):
    if model.n_classes == 1:
        loss = criterion(masks_pred.squeeze(1), true_masks.float())
        loss += dice_loss(F.sigmoid(masks_pred.squeeze(1)), true_masks.float(), multiclass=False)
    else:
        loss = criterion(masks_pred, true_masks)
        loss += dice_loss(
            F.softmax(masks_pred, dim=1).float(),
            F.one_hot(true_masks, model.n_classes).permute(0, 3, 1, 2).float(),
            multiclass=True,
        )
    return loss


@torch.inference_mode()
def evaluate(net, dataloader, device, amp, fmt):
    net.eval()
    num_val_batches = len(dataloader)
    dice_score = 0
    with torch.autocast(device.type if device.type != "mps" else "cpu", enabled=amp):
        for batch in dataloader:
            image, mask_true = batch["image"], batch["mask"]
            image = image.to(device=device, dtype=torch.float32, **fmt)
            mask_true = mask_true.to(device=device, dtype=torch.long)
            mask_pred = net(image)
            if net.n_classes == 1:
                mask_pred = (F.sigmoid(mask_pred.squeeze(1)) > 0.5).float()
                dice_score += dice_coeff(mask_pred, mask_true.float(), reduce_batch_first=False)
            else:
                mask_true = F.one_hot(mask_true, net.n_classes).permute(0, 3, 1, 2).float()
                mask_pred = F.one_hot(mask_pred.argmax(dim=1), net.n_classes)
                mask_pred = mask_pred.permute(0, 3, 1, 2).float()
                dice_score += multiclass_dice_coeff(
                    mask_pred[:, 1:], mask_true[:, 1:], reduce_batch_first=False
                )
    net.train()
    return dice_score / max(num_val_batches, 1)


# ---------------------------------------------------------------- training


def train_model(model, device, args, record):
    fmt = dict(memory_format=torch.channels_last) if args.channels_last else {}
    dataset = CarvanaStyleDataset(args.n_images, (args.size, args.size), args.seed, args.classes)
    n_val = int(len(dataset) * args.val / 100)
    n_train = len(dataset) - n_val
    train_set, val_set = random_split(
        dataset, [n_train, n_val], generator=torch.Generator().manual_seed(0)
    )
    loader_args = dict(batch_size=args.batch_size, num_workers=args.num_workers, pin_memory=True)
    train_loader = DataLoader(train_set, shuffle=True, **loader_args)
    val_loader = DataLoader(val_set, shuffle=False, drop_last=True, **loader_args)

    optimizer = optim.RMSprop(
        model.parameters(),
        lr=args.lr,
        weight_decay=args.weight_decay,
        momentum=args.momentum,
        foreach=True,
    )
    scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=5)
    grad_scaler = torch.cuda.amp.GradScaler(enabled=args.amp)
    criterion = nn.CrossEntropyLoss() if model.n_classes > 1 else nn.BCEWithLogitsLoss()

    # the untrained model's loss on a fixed batch: the same data and weights everywhere
    fixed = [dataset[i] for i in range(args.batch_size)]
    fixed_images = torch.stack([b["image"] for b in fixed]).to(
        device=device, dtype=torch.float32, **fmt
    )
    fixed_masks = torch.stack([b["mask"] for b in fixed]).to(device=device, dtype=torch.long)
    # (in train mode: a few steps leave BatchNorm's running statistics far from the data's)
    with torch.no_grad():
        record["init_loss"] = compute_loss(
            model, criterion, model(fixed_images), fixed_masks
        ).item()

    global_step = 0
    for epoch in range(1, args.epochs + 1):
        model.train()
        epoch_loss = 0
        for batch in train_loader:
            images, true_masks = batch["image"], batch["mask"]
            assert images.shape[1] == model.n_channels, (
                f"network has {model.n_channels} input channels, images have {images.shape[1]}"
            )
            images = images.to(device=device, dtype=torch.float32, **fmt)
            true_masks = true_masks.to(device=device, dtype=torch.long)
            with torch.autocast(device.type if device.type != "mps" else "cpu", enabled=args.amp):
                masks_pred = model(images)
                loss = compute_loss(model, criterion, masks_pred, true_masks)
            record["shapes"] = {
                "images": list(images.shape),
                "masks_pred": list(masks_pred.shape),
                "channels_last": args.channels_last
                and images.is_contiguous(memory_format=torch.channels_last),
            }
            optimizer.zero_grad(set_to_none=True)
            grad_scaler.scale(loss).backward()
            grad_scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.gradient_clipping)
            grad_scaler.step(optimizer)
            grad_scaler.update()
            global_step += 1
            epoch_loss += loss.item()
            record["losses"].append(loss.item())

        val_score = evaluate(model, val_loader, device, args.amp, fmt)
        scheduler.step(val_score)
        record["val_dice"].append(float(val_score))
        record["lrs"].append(optimizer.param_groups[0]["lr"])
        logging.info(f"epoch {epoch}: loss {epoch_loss:.4f}, validation dice {val_score:.4f}")

        Path(args.out_dir).mkdir(parents=True, exist_ok=True)
        state_dict = model.state_dict()
        state_dict["mask_values"] = dataset.mask_values
        torch.save(state_dict, str(Path(args.out_dir) / f"checkpoint_epoch{epoch}.pth"))

    with torch.no_grad():
        model.train()
        record["final_fixed_loss"] = compute_loss(
            model, criterion, model(fixed_images), fixed_masks
        ).item()


def get_args():
    parser = argparse.ArgumentParser(description="Train a U-Net on made-up images and masks")
    parser.add_argument("--epochs", "-e", type=int, default=3)
    parser.add_argument("--batch-size", "-b", dest="batch_size", type=int, default=4)
    parser.add_argument("--learning-rate", "-l", dest="lr", type=float, default=1e-3)
    parser.add_argument("--load", "-f", type=str, default=False, help="a .pth to start from")
    parser.add_argument("--size", type=int, default=20, help="image side (odd sizes pad)")
    parser.add_argument("--n-images", dest="n_images", type=int, default=20)
    parser.add_argument("--validation", "-v", dest="val", type=float, default=20.0)
    parser.add_argument("--amp", action="store_true", default=False)
    parser.add_argument("--bilinear", action="store_true", default=False)
    parser.add_argument("--classes", "-c", type=int, default=1)
    parser.add_argument("--width", type=int, default=8)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--weight-decay", dest="weight_decay", type=float, default=1e-8)
    parser.add_argument("--gradient-clipping", dest="gradient_clipping", type=float, default=1.0)
    parser.add_argument("--num-workers", dest="num_workers", type=int, default=2)
    parser.add_argument(
        "--channels-last", dest="channels_last", action=argparse.BooleanOptionalAction, default=True
    )
    parser.add_argument("--checkpointing", action="store_true", help="from the start")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out_dir", default="checkpoints")
    return parser.parse_args()


if __name__ == "__main__":
    args = get_args()
    logging.basicConfig(level=logging.INFO, format="%(levelname)s: %(message)s")
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    logging.info(f"Using device {device}")

    model = UNet(n_channels=3, n_classes=args.classes, bilinear=args.bilinear, width=args.width)
    model.init_from_numpy(args.seed)
    if args.channels_last:
        model = model.to(memory_format=torch.channels_last)
    logging.info(
        f"Network: {model.n_channels} input channels, {model.n_classes} output channels, "
        f"{'Bilinear' if model.bilinear else 'Transposed conv'} upscaling"
    )
    if args.load:
        state_dict = torch.load(args.load, map_location=device)
        del state_dict["mask_values"]
        model.load_state_dict(state_dict)
        logging.info(f"Model loaded from {args.load}")
    model.to(device=device)
    if args.checkpointing:
        model.use_checkpointing()

    record = {"losses": [], "val_dice": [], "lrs": []}
    try:
        train_model(model, device, args, record)
    except torch.cuda.OutOfMemoryError:
        logging.error("Detected OutOfMemoryError! Enabling checkpointing to reduce memory usage")
        torch.cuda.empty_cache()
        model.use_checkpointing()
        train_model(model, device, args, record)
    record["checkpoints"] = sorted(os.listdir(args.out_dir))
    record["num_params"] = sum(p.numel() for p in model.parameters())
    print("RESULT " + json.dumps(record))
