"""A minGPT chargpt-style program: a character-level GPT trained on made-up text by a small
Trainer (an endless RandomSampler-driven DataLoader, AdamW with whitelist/blacklist weight
decay, gradient clipping, callbacks that log, sample and save the model).

    python mingpt_style.py --trainer.max_iters=20 --trainer.device=cpu --model.model_type=gpt-nano

Options are `--section.key=value` overrides of the nested config, as in minGPT. The weights
are drawn with NumPy after the usual torch init, so every library starts from the same model;
the batches come from the DataLoader's torch-driven sampler, so only the first figures (before
any step) and the trends compare across libraries. The last line is `RESULT {json}`.
"""

import ast
import json
import math
import os
import sys
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset

# ---------------------------------------------------------------- a nested config


class CfgNode:
    """Attributes, possibly nested, overridden from `--a.b=value` arguments."""

    def __init__(self, **kwargs):
        self.__dict__.update(kwargs)

    def to_dict(self):
        return {k: v.to_dict() if isinstance(v, CfgNode) else v for k, v in self.__dict__.items()}

    def merge_from_dict(self, d):
        self.__dict__.update(d)

    def merge_from_args(self, args):
        for arg in args:
            assert arg.startswith("--") and "=" in arg, f"expected --key=value, got {arg}"
            keys, val = arg[2:].split("=", 1)
            try:
                val = ast.literal_eval(val)
            except (ValueError, SyntaxError):
                pass  # a plain string
            *path, leaf = keys.split(".")
            obj = self
            for k in path:
                obj = getattr(obj, k)
            assert hasattr(obj, leaf), f"{keys} is not a config attribute"
            print(f"command line overwriting config attribute {keys} with {val}")
            setattr(obj, leaf, val)


# ---------------------------------------------------------------- the model


class NewGELU(nn.Module):
    """GELU's tanh approximation, written out as in the GPT-2 code."""

    def forward(self, x):
        return (
            0.5
            * x
            * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        )


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.register_buffer(
            "bias",
            torch.tril(torch.ones(config.block_size, config.block_size)).view(
                1, 1, config.block_size, config.block_size
            ),
        )
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        att = self.attn_dropout(att)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(
            dict(
                c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
                c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
                act=NewGELU(),
                dropout=nn.Dropout(config.resid_pdrop),
            )
        )
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class GPT(nn.Module):
    @staticmethod
    def get_default_config():
        return CfgNode(
            model_type="gpt",
            n_layer=None,
            n_head=None,
            n_embd=None,
            vocab_size=None,
            block_size=None,
            embd_pdrop=0.0,
            resid_pdrop=0.0,
            attn_pdrop=0.0,
        )

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None and config.block_size is not None
        self.block_size = config.block_size
        type_given = config.model_type is not None
        params_given = all(
            [config.n_layer is not None, config.n_head is not None, config.n_embd is not None]
        )
        assert type_given ^ params_given
        if type_given:
            config.merge_from_dict(
                {
                    "gpt-mini": dict(n_layer=6, n_head=6, n_embd=192),
                    "gpt-micro": dict(n_layer=4, n_head=4, n_embd=128),
                    "gpt-nano": dict(n_layer=3, n_head=3, n_embd=48),
                    "gpt-pico": dict(n_layer=2, n_head=2, n_embd=16),
                }[config.model_type]
            )
        self.n_layer = config.n_layer
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.embd_pdrop),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=nn.LayerNorm(config.n_embd),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))
        n_params = sum(p.numel() for p in self.transformer.parameters())
        print(f"number of parameters: {n_params / 1e6:.2f}M")

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            torch.nn.init.zeros_(module.bias)
            torch.nn.init.ones_(module.weight)

    def init_from_numpy(self, seed):
        """_init_weights' distribution, drawn with NumPy (same weights under any library)."""
        rng = np.random.default_rng(seed)
        with torch.no_grad():
            for pn, p in self.named_parameters():
                if p.dim() == 1:
                    value = np.ones(p.shape) if pn.endswith("weight") else np.zeros(p.shape)
                else:
                    std = (
                        0.02 / math.sqrt(2 * self.n_layer) if pn.endswith("c_proj.weight") else 0.02
                    )
                    value = rng.normal(0.0, std, p.shape)
                p.copy_(torch.from_numpy(value.astype(np.float32)))

    def configure_optimizers(self, train_config):
        decay = set()
        no_decay = set()
        whitelist_weight_modules = (torch.nn.Linear,)
        blacklist_weight_modules = (torch.nn.LayerNorm, torch.nn.Embedding)
        for mn, m in self.named_modules():
            for pn, _p in m.named_parameters():
                fpn = "%s.%s" % (mn, pn) if mn else pn  # noqa: UP031  (the original's style)
                # named_modules is recursive: a name reaches here from every module above it,
                # so the type of `m` only counts when `m` owns the parameter directly
                if pn.endswith("bias"):
                    no_decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, whitelist_weight_modules):
                    decay.add(fpn)
                elif pn.endswith("weight") and isinstance(m, blacklist_weight_modules):
                    no_decay.add(fpn)
        param_dict = {pn: p for pn, p in self.named_parameters()}
        inter_params = decay & no_decay
        union_params = decay | no_decay
        assert len(inter_params) == 0, f"parameters {inter_params} in both sets"
        assert len(param_dict.keys() - union_params) == 0, (
            f"parameters {param_dict.keys() - union_params} in neither set"
        )
        optim_groups = [
            {
                "params": [param_dict[pn] for pn in sorted(decay)],
                "weight_decay": train_config.weight_decay,
            },
            {"params": [param_dict[pn] for pn in sorted(no_decay)], "weight_decay": 0.0},
        ]
        return torch.optim.AdamW(
            optim_groups, lr=train_config.learning_rate, betas=train_config.betas
        )

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.block_size, f"sequence of {t} > block size {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device).unsqueeze(0)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(
                logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1
            )
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size :]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


# ---------------------------------------------------------------- the trainer


class Trainer:
    @staticmethod
    def get_default_config():
        return CfgNode(
            device="auto",
            num_workers=0,
            max_iters=None,
            batch_size=8,
            learning_rate=5e-3,
            betas=(0.9, 0.95),
            weight_decay=0.1,
            grad_norm_clip=1.0,
            # minGPT's "practically infinite" epoch, drawn with replacement
            num_samples=int(1e10),
        )

    def __init__(self, config, model, train_dataset):
        self.config = config
        self.model = model
        self.optimizer = None
        self.train_dataset = train_dataset
        self.callbacks = defaultdict(list)
        if config.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = config.device
        self.model = self.model.to(self.device)
        print("running on device", self.device)
        self.iter_num = 0
        self.iter_time = 0.0
        self.iter_dt = 0.0

    def add_callback(self, onevent: str, callback):
        self.callbacks[onevent].append(callback)

    def set_callback(self, onevent: str, callback):
        self.callbacks[onevent] = [callback]

    def trigger_callbacks(self, onevent: str):
        for callback in self.callbacks.get(onevent, []):
            callback(self)

    def run(self):
        model, config = self.model, self.config
        self.optimizer = model.configure_optimizers(config)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(
                self.train_dataset, replacement=True, num_samples=config.num_samples
            ),
            shuffle=False,
            pin_memory=True,
            batch_size=config.batch_size,
            num_workers=config.num_workers,
        )
        model.train()
        self.iter_num = 0
        self.iter_time = time.time()
        data_iter = iter(train_loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                batch = next(data_iter)
            batch = [t.to(self.device) for t in batch]
            x, y = batch
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_norm_clip)
            self.optimizer.step()
            self.trigger_callbacks("on_batch_end")
            self.iter_num += 1
            tnow = time.time()
            self.iter_dt = tnow - self.iter_time
            self.iter_time = tnow
            if config.max_iters is not None and self.iter_num >= config.max_iters:
                break


# ---------------------------------------------------------------- the data


class CharDataset(Dataset):
    @staticmethod
    def get_default_config():
        return CfgNode(block_size=16)

    def __init__(self, config, data):
        self.config = config
        chars = sorted(list(set(data)))
        data_size, vocab_size = len(data), len(chars)
        print(f"data has {data_size} characters, {vocab_size} unique.")
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.vocab_size = vocab_size
        self.data = data

    def get_vocab_size(self):
        return self.vocab_size

    def get_block_size(self):
        return self.config.block_size

    def __len__(self):
        return len(self.data) - self.config.block_size

    def __getitem__(self, idx):
        chunk = self.data[idx : idx + self.config.block_size + 1]
        dix = [self.stoi[s] for s in chunk]
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        return x, y


def made_up_text(seed, n_lines=300):
    rng = np.random.default_rng(seed)
    words = "to be or not that is the question whether tis nobler in mind suffer".split()
    lines = []
    for _ in range(n_lines):
        n = int(rng.integers(3, 9))
        lines.append(" ".join(words[i] for i in rng.integers(0, len(words), n)).capitalize() + ".")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- chargpt


def get_config():
    C = CfgNode()
    C.system = CfgNode(seed=3407, work_dir="./out/chargpt")
    C.data = CharDataset.get_default_config()
    C.model = GPT.get_default_config()
    C.model.model_type = "gpt-pico"
    C.trainer = Trainer.get_default_config()
    C.trainer.max_iters = 20
    C.trainer.device = "cpu"
    C.sample = CfgNode(every=10, tokens=12, context="To be ")
    return C


if __name__ == "__main__":
    config = get_config()
    config.merge_from_args(sys.argv[1:])
    os.makedirs(config.system.work_dir, exist_ok=True)
    with open(os.path.join(config.system.work_dir, "config.json"), "w") as f:
        f.write(json.dumps(config.to_dict(), indent=4))
    torch.manual_seed(config.system.seed)

    text = made_up_text(seed=0)
    train_dataset = CharDataset(config.data, text)
    config.model.vocab_size = train_dataset.get_vocab_size()
    config.model.block_size = train_dataset.get_block_size()
    model = GPT(config.model)
    model.init_from_numpy(config.system.seed)
    stoi, itos = train_dataset.stoi, train_dataset.itos

    fixed_x, fixed_y = (
        torch.stack(t) for t in zip(*[train_dataset[i] for i in (0, 7, 21, 40)], strict=True)
    )

    def fixed_loss(m):
        m.eval()
        with torch.no_grad():
            _, loss = m(fixed_x.to(trainer.device), fixed_y.to(trainer.device))
        m.train()
        return loss.item()

    def complete(m, do_sample):
        context = config.sample.context
        x = torch.tensor([stoi[s] for s in context], dtype=torch.long)[None, ...].to(trainer.device)
        y = m.generate(x, config.sample.tokens, temperature=1.0, do_sample=do_sample, top_k=10)[0]
        return "".join([itos[int(i)] for i in y])

    trainer = Trainer(config.trainer, model, train_dataset)
    record = {
        "vocab_size": train_dataset.get_vocab_size(),
        "init_loss": fixed_loss(model),
        "init_greedy": complete(model, do_sample=False),
        "train_losses": [],
        "samples": [],
    }
    ckpt_path = os.path.join(config.system.work_dir, "model.pt")

    def batch_end_callback(trainer):
        record["train_losses"].append(trainer.loss.item())
        if trainer.iter_num % 5 == 0:
            print(
                f"iter_dt {trainer.iter_dt * 1000:.2f}ms; iter {trainer.iter_num}: "
                f"train loss {trainer.loss.item():.5f}"
            )
        if trainer.iter_num % config.sample.every == 0:
            model.eval()
            with torch.no_grad():
                completion = complete(model, do_sample=True)
                print(completion)
                record["samples"].append(completion)
            print("saving model")
            torch.save(model.state_dict(), ckpt_path)
            model.train()

    trainer.set_callback("on_batch_end", batch_end_callback)
    trainer.run()
    torch.save(model.state_dict(), ckpt_path)

    # the saved model, loaded into a fresh one, gives the trained model's figures
    model_config = get_config()
    model_config.merge_from_args(sys.argv[1:])
    model_config.model.vocab_size = train_dataset.get_vocab_size()
    model_config.model.block_size = train_dataset.get_block_size()
    reloaded = GPT(model_config.model)
    reloaded.load_state_dict(torch.load(ckpt_path, map_location=trainer.device))
    reloaded.to(trainer.device)
    record.update(
        iters=trainer.iter_num,
        final_loss=fixed_loss(model),
        reloaded_loss=fixed_loss(reloaded),
        final_greedy=complete(model, do_sample=False),
        reloaded_greedy=complete(reloaded, do_sample=False),
        completion_lengths=[len(s) for s in record["samples"]],
        samples_in_vocab=all(c in stoi for s in record["samples"] for c in s),
    )
    print("RESULT " + json.dumps(record))
