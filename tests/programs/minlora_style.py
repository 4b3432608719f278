"""A minLoRA-style fine-tune: a small GPT is pretrained briefly, then every Linear and
Embedding weight gets a low-rank LoRA parametrization (`torch.nn.utils.parametrize`), only
the LoRA factors train, their state dict is saved and loaded into a fresh copy of the base
model, and finally the adapters are merged into plain weights.

    python minlora_style.py --out_dir=out --pretrain_steps=8 --steps=12

Weights, LoRA factors and batches come from NumPy, so PyTorch and gradstream compute the
same figures. The last line is `RESULT {json}`.
"""

import argparse
import json
import math
import os
from functools import partial

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.utils.parametrize as parametrize

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out_dir", default="out-minlora-style")
parser.add_argument("--device", default="cpu")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--pretrain_steps", type=int, default=8)
parser.add_argument("--steps", type=int, default=12)
parser.add_argument("--rank", type=int, default=4)
parser.add_argument("--lora_alpha", type=float, default=8.0)
parser.add_argument("--lr", type=float, default=1e-2)
parser.add_argument("--batch_size", type=int, default=4)
parser.add_argument("--block_size", type=int, default=12)
parser.add_argument("--vocab_size", type=int, default=32)
parser.add_argument("--n_embd", type=int, default=32)
parser.add_argument("--n_head", type=int, default=2)
parser.add_argument("--n_layer", type=int, default=2)


# ---------------------------------------------------------------- LoRA


class LoRAParametrization(nn.Module):
    """W + scaling * B @ A, with B zero at the start so that the model is unchanged."""

    def __init__(self, fan_in, fan_out, fan_in_fan_out=False, rank=4, lora_alpha=1.0):
        super().__init__()
        # an Embedding's weight is (num_embeddings, dim): its "input" is the first axis
        self.swap = (lambda x: (x[1], x[0])) if fan_in_fan_out else (lambda x: x)
        self.lora_A = nn.Parameter(torch.zeros(self.swap((rank, fan_in))))
        self.lora_B = nn.Parameter(torch.zeros(self.swap((fan_out, rank))))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))
        self.scaling = lora_alpha / rank
        self.forward_fn = self.lora_forward

    def lora_forward(self, X):
        delta = torch.matmul(*self.swap((self.lora_B, self.lora_A))).view(X.shape)
        return X + delta * self.scaling

    def forward(self, X):
        return self.forward_fn(X)

    def disable_lora(self):
        self.forward_fn = lambda x: x

    def enable_lora(self):
        self.forward_fn = self.lora_forward

    @classmethod
    def from_linear(cls, layer, rank=4, lora_alpha=1.0):
        fan_out, fan_in = layer.weight.shape
        return cls(fan_in, fan_out, fan_in_fan_out=False, rank=rank, lora_alpha=lora_alpha)

    @classmethod
    def from_embedding(cls, layer, rank=4, lora_alpha=1.0):
        fan_in, fan_out = layer.weight.shape
        return cls(fan_in, fan_out, fan_in_fan_out=True, rank=rank, lora_alpha=lora_alpha)


def lora_config(rank, alpha):
    return {
        nn.Linear: {
            "weight": partial(LoRAParametrization.from_linear, rank=rank, lora_alpha=alpha)
        },
        nn.Embedding: {
            "weight": partial(LoRAParametrization.from_embedding, rank=rank, lora_alpha=alpha)
        },
    }


def apply_lora(layer, register=True, merge=False, config=None):
    if register:
        if type(layer) in config:
            for attr_name, parametrization in config[type(layer)].items():
                parametrize.register_parametrization(layer, attr_name, parametrization(layer))
    elif hasattr(layer, "parametrizations"):
        for attr_name in list(layer.parametrizations.keys()):
            parametrize.remove_parametrizations(layer, attr_name, leave_parametrized=merge)


def add_lora(model, config):
    model.apply(partial(apply_lora, config=config))


def merge_lora(model):
    model.apply(partial(apply_lora, register=False, merge=True))


def apply_to_lora(fn):
    def apply_fn(layer):
        if isinstance(layer, LoRAParametrization):
            fn(layer)

    return apply_fn


def name_is_lora(name):
    parts = name.split(".")
    return len(parts) >= 4 and parts[-4] == "parametrizations" and parts[-1] in ("lora_A", "lora_B")


def get_lora_params(model):
    for n, p in model.named_parameters():
        if name_is_lora(n):
            yield p


def get_lora_state_dict(model):
    return {k: v for k, v in model.state_dict().items() if name_is_lora(k)}


# ---------------------------------------------------------------- the base model


class Block(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.qkv = nn.Linear(n_embd, 3 * n_embd)
        self.proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.fc = nn.Linear(n_embd, 4 * n_embd)
        self.fc_out = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_out(F.gelu(self.fc(self.ln_2(x))))


class TinyGPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_embd, n_head, n_layer):
        super().__init__()
        self.tok_emb = nn.Embedding(vocab_size, n_embd)
        self.pos_emb = nn.Embedding(block_size, n_embd)
        self.blocks = nn.Sequential(*[Block(n_embd, n_head) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None):
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.blocks(self.tok_emb(idx) + self.pos_emb(pos))
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits, None
        return logits, F.cross_entropy(logits.view(-1, logits.shape[-1]), targets.view(-1))


def numpy_fill(params, seed, std=0.05):
    """Matrices N(0, std) from NumPy, vectors as LayerNorm's/Linear's defaults (1s, 0s)."""
    rng = np.random.default_rng(seed)
    with torch.no_grad():
        for name, p in params:
            if p.dim() == 1:
                value = np.ones(p.shape) if name.endswith("weight") else np.zeros(p.shape)
            else:
                value = rng.normal(0.0, std, p.shape)
            p.copy_(torch.from_numpy(value.astype(np.float32)))


def make_batches(seed, n, vocab_size, batch_size, block_size, shift):
    """Sequences counting up by `shift` (mod vocab) from random starts: easy to learn, and a
    different `shift` is a different task for the fine-tune."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        start = rng.integers(0, vocab_size, (batch_size, 1))
        seq = (start + shift * np.arange(block_size + 1)) % vocab_size
        x, y = np.ascontiguousarray(seq[:, :-1]), np.ascontiguousarray(seq[:, 1:])
        out.append((torch.from_numpy(x), torch.from_numpy(y)))
    return out


def build_base(args, device):
    model = TinyGPT(args.vocab_size, args.block_size, args.n_embd, args.n_head, args.n_layer)
    numpy_fill(model.named_parameters(), args.seed)
    model.to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    for x, y in make_batches(
        args.seed + 1,
        args.pretrain_steps,
        args.vocab_size,
        args.batch_size,
        args.block_size,
        shift=1,
    ):
        _, loss = model(x.to(device), y.to(device))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model


def main():
    args = parser.parse_args()
    device = torch.device(args.device)
    os.makedirs(args.out_dir, exist_ok=True)
    torch.manual_seed(args.seed)
    eval_x, eval_y = make_batches(args.seed + 3, 1, args.vocab_size, 8, args.block_size, 3)[0]
    eval_x, eval_y = eval_x.to(device), eval_y.to(device)

    @torch.no_grad()
    def eval_loss(m):
        return m(eval_x, eval_y)[1].item()

    model = build_base(args, device)
    base_loss = eval_loss(model)
    base_keys = sorted(model.state_dict().keys())

    add_lora(model, lora_config(args.rank, args.lora_alpha))
    lora_names = [n for n, _ in model.named_parameters() if name_is_lora(n)]
    # kaiming_uniform_ drew A from each library's own RNG; NumPy's A makes the runs comparable
    numpy_fill(
        [(n, p) for n, p in model.named_parameters() if n.endswith("lora_A")],
        args.seed + 2,
        std=0.3,
    )
    loss_after_add = eval_loss(model)  # B is zero: the model is unchanged

    for n, p in model.named_parameters():
        p.requires_grad_(name_is_lora(n))
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(get_lora_params(model), lr=args.lr)
    frozen_before = {
        n: p.detach().clone() for n, p in model.named_parameters() if not name_is_lora(n)
    }

    losses = []
    for x, y in make_batches(
        args.seed + 4, args.steps, args.vocab_size, args.batch_size, args.block_size, shift=3
    ):
        _, loss = model(x.to(device), y.to(device))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(get_lora_params(model), 1.0)
        optimizer.step()
        losses.append(loss.item())
    frozen_unchanged = all(
        torch.equal(p, frozen_before[n]) for n, p in model.named_parameters() if n in frozen_before
    )
    tuned_loss = eval_loss(model)

    model.apply(apply_to_lora(lambda layer: layer.disable_lora()))
    disabled_loss = eval_loss(model)
    model.apply(apply_to_lora(lambda layer: layer.enable_lora()))

    lora_state = get_lora_state_dict(model)
    ckpt_path = os.path.join(args.out_dir, "lora.pt")
    torch.save(lora_state, ckpt_path)

    # a fresh copy of the base model, with the adapters loaded from the checkpoint
    fresh = build_base(args, device)
    add_lora(fresh, lora_config(args.rank, args.lora_alpha))
    missing, unexpected = fresh.load_state_dict(
        torch.load(ckpt_path, map_location=device), strict=False
    )
    loaded_loss = eval_loss(fresh)

    merge_lora(fresh)
    merged_loss = eval_loss(fresh)
    merged_keys = sorted(fresh.state_dict().keys())
    merged_params = sum(p.numel() for p in fresh.parameters())

    print(f"base {base_loss:.4f}  tuned {tuned_loss:.4f}  merged {merged_loss:.4f}")
    record = {
        "base_loss": base_loss,
        "loss_after_add": loss_after_add,
        "losses": losses,
        "tuned_loss": tuned_loss,
        "disabled_loss": disabled_loss,
        "loaded_loss": loaded_loss,
        "merged_loss": merged_loss,
        "n_lora_params": len(lora_names),
        "trainable_is_lora": trainable == lora_names,
        "frozen_unchanged": frozen_unchanged,
        "lora_state_keys": sorted(lora_state.keys()),
        "lora_state_shapes": {k: list(v.shape) for k, v in sorted(lora_state.items())},
        "missing_keys": len(missing),
        "unexpected_keys": list(unexpected),
        "merged_keys_match_base": merged_keys == base_keys,
        "merged_params": merged_params,
        "merged_has_parametrizations": any(parametrize.is_parametrized(m) for m in fresh.modules()),
    }
    print("RESULT " + json.dumps(record))


if __name__ == "__main__":
    main()
