"""A nanoGPT-style train.py: a small GPT trained on a made-up token stream read through
np.memmap, with AdamW in decay/no-decay groups, warmup + cosine learning rate, gradient
accumulation and clipping, periodic evaluation, checkpoints that can be resumed, and top-k
sampling at the end.

    python nanogpt_style.py --device=cpu --out_dir=out --max_iters=12
    python nanogpt_style.py --device=cpu --out_dir=out --max_iters=20 --init_from=resume

Weights are drawn with NumPy (after the usual torch init) and batches are picked with NumPy,
so PyTorch and gradstream start from the same model and see the same data. The last line is
`RESULT {json}` with the figures a test compares.
"""

import argparse
import inspect
import json
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


def str2bool(s):
    return str(s).lower() in ("1", "true", "yes", "y")


parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--out_dir", default="out-nanogpt-style")
parser.add_argument("--data_dir", default=None, help="defaults to out_dir")
parser.add_argument("--init_from", default="scratch", choices=["scratch", "resume"])
parser.add_argument("--eval_interval", type=int, default=6)
parser.add_argument("--eval_iters", type=int, default=2)
parser.add_argument("--log_interval", type=int, default=1)
parser.add_argument("--always_save_checkpoint", type=str2bool, default=True)
parser.add_argument("--gradient_accumulation_steps", type=int, default=2)
parser.add_argument("--batch_size", type=int, default=4)
parser.add_argument("--block_size", type=int, default=16)
parser.add_argument("--vocab_size", type=int, default=48)
parser.add_argument("--n_layer", type=int, default=2)
parser.add_argument("--n_head", type=int, default=2)
parser.add_argument("--n_embd", type=int, default=32)
parser.add_argument("--dropout", type=float, default=0.0)
parser.add_argument("--bias", type=str2bool, default=True)
parser.add_argument("--flash", type=str2bool, default=True, help="False: manual attention")
parser.add_argument("--learning_rate", type=float, default=3e-3)
parser.add_argument("--max_iters", type=int, default=12)
parser.add_argument("--weight_decay", type=float, default=1e-1)
parser.add_argument("--beta1", type=float, default=0.9)
parser.add_argument("--beta2", type=float, default=0.99)
parser.add_argument("--grad_clip", type=float, default=1.0)
parser.add_argument("--decay_lr", type=str2bool, default=True)
parser.add_argument("--warmup_iters", type=int, default=3)
parser.add_argument("--lr_decay_iters", type=int, default=20)
parser.add_argument("--min_lr", type=float, default=3e-4)
parser.add_argument("--device", default="cpu")
parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
parser.add_argument("--seed", type=int, default=1337)
parser.add_argument("--num_samples", type=int, default=2)
parser.add_argument("--max_new_tokens", type=int, default=10)
parser.add_argument("--temperature", type=float, default=0.8)
parser.add_argument("--top_k", type=int, default=5)
args = parser.parse_args()


# ---------------------------------------------------------------- the model


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nn.LayerNorm's bias=False came later)."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = config.flash and hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.flash:
            mask = torch.tril(torch.ones(config.block_size, config.block_size))
            self.register_buffer("bias", mask.view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 48
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True
    flash: bool = True


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        # weight tying: the token embedding and the output projection share one matrix
        self.transformer.wte.weight = self.lm_head.weight
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def init_from_numpy(self, seed):
        """The same init drawn with NumPy, so that every library starts from these weights."""
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for pn, p in self.named_parameters():
                if p.dim() < 2:  # LayerNorm weights 1, biases 0
                    value = np.ones(p.shape) if pn.endswith("weight") else np.zeros(p.shape)
                else:
                    std = 0.02 / math.sqrt(2 * self.config.n_layer) if "c_proj" in pn else 0.02
                    value = rng.normal(0.0, std, p.shape)
                p.copy_(torch.from_numpy(value.astype(np.float32)))

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence of {t} > block size {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device)
        tok_emb = self.transformer.wte(idx)
        pos_emb = self.transformer.wpe(pos)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        else:
            logits = self.lm_head(x[:, [-1], :])  # only the last position is needed
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {"params": decay_params, "weight_decay": weight_decay},
            {"params": nodecay_params, "weight_decay": 0.0},
        ]
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        print(f"decayed tensors: {len(decay_params)}, {num_decay_params:,} parameters")
        print(f"non-decayed tensors: {len(nodecay_params)}, {num_nodecay_params:,} parameters")
        fused_available = "fused" in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == "cuda"
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        print(f"using fused AdamW: {use_fused}")
        return optimizer

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = (
                idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size :]
            )
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# ---------------------------------------------------------------- data


def write_dataset(data_dir, vocab_size, seed):
    """train.bin / val.bin: uint16 tokens from a Markov chain that mostly follows a fixed
    permutation, so there is something to learn."""
    rng = np.random.default_rng(seed)
    follow = rng.permutation(vocab_size)
    for split, n in (("train", 4000), ("val", 600)):
        path = os.path.join(data_dir, f"{split}.bin")
        if os.path.exists(path):
            continue
        tokens = np.empty(n, dtype=np.int64)
        tokens[0] = 0
        jumps = rng.random(n) < 0.2
        noise = rng.integers(0, vocab_size, n)
        for i in range(1, n):
            tokens[i] = noise[i] if jumps[i] else follow[tokens[i - 1]]
        arr = np.memmap(path, dtype=np.uint16, mode="w+", shape=(n,))
        arr[:] = tokens
        arr.flush()


# ---------------------------------------------------------------- training

out_dir = args.out_dir
data_dir = args.data_dir or out_dir
os.makedirs(out_dir, exist_ok=True)
write_dataset(data_dir, args.vocab_size, seed=0)

torch.manual_seed(args.seed)
torch.backends.cuda.matmul.allow_tf32 = True
torch.backends.cudnn.allow_tf32 = True
device = args.device
device_type = "cuda" if "cuda" in device else "cpu"
ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[
    args.dtype
]
ctx = (
    nullcontext()
    if args.dtype == "float32"
    else torch.amp.autocast(device_type=device_type, dtype=ptdtype)
)
batch_rng = np.random.default_rng(args.seed)


def get_batch(split):
    # a fresh memmap each batch, as nanoGPT does, to avoid its memory growing
    data = np.memmap(os.path.join(data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
    ix = batch_rng.integers(0, len(data) - args.block_size, args.batch_size)
    x = torch.stack(
        [torch.from_numpy((data[i : i + args.block_size]).astype(np.int64)) for i in ix]
    )
    y = torch.stack(
        [torch.from_numpy((data[i + 1 : i + 1 + args.block_size]).astype(np.int64)) for i in ix]
    )
    if device_type == "cuda":
        x, y = (
            x.pin_memory().to(device, non_blocking=True),
            y.pin_memory().to(device, non_blocking=True),
        )
    else:
        x, y = x.to(device), y.to(device)
    return x, y


iter_num = 0
best_val_loss = 1e9
model_args = dict(
    n_layer=args.n_layer,
    n_head=args.n_head,
    n_embd=args.n_embd,
    block_size=args.block_size,
    bias=args.bias,
    vocab_size=args.vocab_size,
    dropout=args.dropout,
    flash=args.flash,
)
ckpt_path = os.path.join(out_dir, "ckpt.pt")
if args.init_from == "scratch":
    model = GPT(GPTConfig(**model_args))
    model.init_from_numpy(args.seed)
    checkpoint = None
else:
    print(f"resuming training from {out_dir}")
    checkpoint = torch.load(ckpt_path, map_location=device)
    for k in ["n_layer", "n_head", "n_embd", "block_size", "bias", "vocab_size"]:
        model_args[k] = checkpoint["model_args"][k]
    model = GPT(GPTConfig(**model_args))
    state_dict = checkpoint["model"]
    unwanted_prefix = "_orig_mod."
    for k, _v in list(state_dict.items()):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix) :]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    iter_num = checkpoint["iter_num"]
    best_val_loss = checkpoint["best_val_loss"]
    # the batches a resumed run sees follow on from those of the run that saved
    batch_rng = np.random.default_rng([args.seed, iter_num])
model.to(device)
print(f"number of parameters: {model.get_num_params() / 1e6:.4f}M")

scaler = torch.cuda.amp.GradScaler(enabled=(args.dtype == "float16"))
optimizer = model.configure_optimizers(
    args.weight_decay, args.learning_rate, (args.beta1, args.beta2), device_type
)
if args.init_from == "resume":
    optimizer.load_state_dict(checkpoint["optimizer"])
checkpoint = None


@torch.no_grad()
def estimate_loss():
    out = {}
    model.eval()
    for split in ["train", "val"]:
        losses = torch.zeros(args.eval_iters)
        for k in range(args.eval_iters):
            X, Y = get_batch(split)
            with ctx:
                logits, loss = model(X, Y)
            losses[k] = loss.item()
        out[split] = losses.mean()
    model.train()
    return out


def get_lr(it):
    if it < args.warmup_iters:
        return args.learning_rate * (it + 1) / (args.warmup_iters + 1)
    if it > args.lr_decay_iters:
        return args.min_lr
    decay_ratio = (it - args.warmup_iters) / (args.lr_decay_iters - args.warmup_iters)
    assert 0 <= decay_ratio <= 1
    coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
    return args.min_lr + coeff * (args.learning_rate - args.min_lr)


start_iter = iter_num
record = {"start_iter": start_iter, "train_losses": [], "lrs": [], "grad_norms": [], "evals": []}
X, Y = get_batch("train")
t0 = time.time()
raw_model = model
while True:
    lr = get_lr(iter_num) if args.decay_lr else args.learning_rate
    for param_group in optimizer.param_groups:
        param_group["lr"] = lr

    if iter_num % args.eval_interval == 0 and iter_num > start_iter:
        losses = estimate_loss()
        print(f"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}")
        record["evals"].append(
            {"iter": iter_num, "train": float(losses["train"]), "val": float(losses["val"])}
        )
        if losses["val"] < best_val_loss or args.always_save_checkpoint:
            best_val_loss = losses["val"]
            checkpoint = {
                "model": raw_model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "model_args": model_args,
                "iter_num": iter_num,
                "best_val_loss": best_val_loss,
                "config": vars(args),
            }
            print(f"saving checkpoint to {out_dir}")
            torch.save(checkpoint, ckpt_path)

    for _micro_step in range(args.gradient_accumulation_steps):
        with ctx:
            logits, loss = model(X, Y)
            loss = loss / args.gradient_accumulation_steps
        X, Y = get_batch("train")  # the next batch, fetched while the GPU would be busy
        scaler.scale(loss).backward()
    if args.grad_clip != 0.0:
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        record["grad_norms"].append(norm.item())
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)

    t1 = time.time()
    dt = t1 - t0
    t0 = t1
    lossf = loss.item() * args.gradient_accumulation_steps
    record["train_losses"].append(lossf)
    record["lrs"].append(lr)
    if iter_num % args.log_interval == 0:
        print(f"iter {iter_num}: loss {lossf:.4f}, time {dt * 1000:.2f}ms")
    iter_num += 1
    if iter_num > args.max_iters:
        break

# ---------------------------------------------------------------- sampling

model.eval()
start_ids = [0, int(np.memmap(os.path.join(data_dir, "val.bin"), dtype=np.uint16, mode="r")[1])]
x = torch.tensor(start_ids, dtype=torch.long, device=device)[None, ...]
with torch.no_grad():
    with ctx:
        last_logits, _ = model(x)
        samples = [
            model.generate(x, args.max_new_tokens, temperature=args.temperature, top_k=args.top_k)
            for _ in range(args.num_samples)
        ]
for y in samples:
    print(" ".join(str(t) for t in y[0].tolist()))
    print("---------------")

record.update(
    num_params=model.get_num_params(),
    tied=model.transformer.wte.weight is model.lm_head.weight,
    last_logits_shape=list(last_logits.shape),
    last_logits=last_logits[0, -1].float().tolist(),
    sample_shapes=[list(y.shape) for y in samples],
    sample_in_vocab=all(0 <= t < args.vocab_size for y in samples for t in y[0].tolist()),
    sample_prefix_kept=all(y[0, :2].tolist() == start_ids for y in samples),
    best_val_loss=float(best_val_loss),
)
print("RESULT " + json.dumps(record))
