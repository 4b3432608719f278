"""LoRA fine-tuning of a small character-level GPT: the base model is pretrained for a few
steps on one text, then frozen; rank-r adapters on the attention's qkv and output projections
are trained on another text with gradient clipping, AdamW and StepLR.

    python lora_gpt.py --pretrain-steps 20 --steps 50
"""

import argparse
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

PRETRAIN_TEXT = "the quick brown fox jumps over the lazy dog. " * 8
FINETUNE_TEXT = "pack my box with five dozen liquor jugs! " * 8
VOCAB = sorted(set(PRETRAIN_TEXT + FINETUNE_TEXT))


def encode(text):
    return torch.tensor([VOCAB.index(c) for c in text], dtype=torch.long)


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.n_head = n_head
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q = q.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        k = k.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        v = v.view(b, t, self.n_head, c // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    def __init__(self, d_model, n_head):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d_model)
        self.attn = CausalSelfAttention(d_model, n_head)
        self.ln_2 = nn.LayerNorm(d_model)
        self.mlp = nn.Sequential(
            nn.Linear(d_model, 4 * d_model), nn.GELU(), nn.Linear(4 * d_model, d_model)
        )

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size=16, d_model=32, n_head=2, n_layer=2):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, d_model)
        self.wpe = nn.Embedding(block_size, d_model)
        self.blocks = nn.ModuleList(Block(d_model, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(d_model)
        self.lm_head = nn.Linear(d_model, vocab_size, bias=False)

    def forward(self, idx, targets):
        pos = torch.arange(idx.shape[1], dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))

    def init_from_numpy(self, seed):
        """GPT-2's init drawn with NumPy: weights N(0, 0.02), biases 0 (LayerNorms stay 1, 0)."""
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for name, p in self.named_parameters():
                if "ln_" in name:
                    continue
                if name.endswith("bias"):
                    p.zero_()
                else:
                    value = rng.normal(0.0, 0.02, tuple(p.shape)).astype(np.float32)
                    p.copy_(torch.from_numpy(value))


class LoRALinear(nn.Module):
    """A frozen Linear plus a trainable low-rank update: base(x) + (x Aᵀ) Bᵀ · alpha / r."""

    def __init__(self, base, r=4, alpha=8.0, rng=None):
        super().__init__()
        self.base = base
        self.scaling = alpha / r
        self.lora_A = nn.Parameter(torch.empty(r, base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        bound = 1.0 / math.sqrt(base.in_features)  # kaiming_uniform_(a=sqrt(5)), from NumPy
        value = rng.uniform(-bound, bound, (r, base.in_features)).astype(np.float32)
        with torch.no_grad():
            self.lora_A.copy_(torch.from_numpy(value))

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


def add_lora(model, r, seed):
    rng = np.random.default_rng(seed)
    for block in model.blocks:
        block.attn.c_attn = LoRALinear(block.attn.c_attn, r=r, rng=rng)
        block.attn.c_proj = LoRALinear(block.attn.c_proj, r=r, rng=rng)


def batches(data, block_size, batch_size, rng):
    while True:
        starts = rng.integers(0, len(data) - block_size - 1, batch_size)
        x = torch.stack([data[s : s + block_size] for s in starts])
        y = torch.stack([data[s + 1 : s + 1 + block_size] for s in starts])
        yield x, y


def run(pretrain_steps=3, steps=5, batch_size=4, block_size=16, seed=0, verbose=False):
    model = GPT(len(VOCAB), block_size=block_size)
    model.init_from_numpy(seed)
    rng = np.random.default_rng(seed + 1)
    losses = []

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = batches(encode(PRETRAIN_TEXT), block_size, batch_size, rng)
    for it in range(pretrain_steps):
        x, y = next(data)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if verbose:
            print(f"[pretrain {it:4d}] loss={loss.item():.5f}")

    model.requires_grad_(False)
    add_lora(model, r=4, seed=seed + 2)
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    data = batches(encode(FINETUNE_TEXT), block_size, batch_size, rng)
    for it in range(steps):
        x, y = next(data)
        loss = model(x, y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        scheduler.step()
        losses.append(loss.item())
        if verbose:
            lr = optimizer.param_groups[0]["lr"]
            print(f"[step {it:4d}] loss={loss.item():.5f} lr={lr:.2e}")
    grads = {
        n: p.grad.clone().cpu().numpy() for n, p in model.named_parameters() if p.requires_grad
    }
    return losses, grads


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--pretrain-steps", type=int, default=20)
    p.add_argument("--steps", type=int, default=50)
    a = p.parse_args()
    run(pretrain_steps=a.pretrain_steps, steps=a.steps, verbose=True)
