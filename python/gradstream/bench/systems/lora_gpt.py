"""The `lora` workload's model and loss, written once against PyTorch's API.

`build(torch, workload, tensors, tensor)` takes the module to build with (PyTorch, or
gradstream, which mirrors it); `tensor` makes a tensor on the run's device from an array. The
base GPT's weights are frozen tensors (`requires_grad_(False)`); only the LoRA adapters are
returned as parameters.
"""

from __future__ import annotations

from collections.abc import Callable


def build(
    torch,
    workload,
    tensors: dict,
    tensor: Callable,
    segments: int | None = None,
    device: str = "cpu",
) -> tuple[Callable, list]:
    """(loss function, adapter parameters) of the LoRA GPT on the shared weights and tokens
    (`tensor` puts them on the run's device: `device` is there for the signature `convnet`
    shares). `segments`: run the blocks with `checkpoint_sequential` in that many segments."""
    F = torch.nn.functional
    base = {n: tensor(tensors[n]).requires_grad_(False) for n in workload.base_shapes()}
    adapters = {
        f"{n}.{part}": tensor(tensors[f"{n}.{part}"]).requires_grad_(True)
        for n in workload.adapter_names()
        for part in ("A", "B")
    }
    tokens = tensor(tensors["tokens"])
    idx = tokens[:, :-1].contiguous()
    targets = tokens[:, 1:].reshape(-1)
    d, heads, scale = workload.width, workload.heads, workload.scale

    def linear(x, name):
        return F.linear(x, base[f"{name}.weight"], base[f"{name}.bias"])

    def layer_norm(x, name):
        return F.layer_norm(x, (d,), base[f"{name}.weight"], base[f"{name}.bias"])

    def lora(x, name):
        return F.linear(F.linear(x, adapters[f"{name}.A"]), adapters[f"{name}.B"]) * scale

    def attention(a, p):
        b, t, _ = a.shape
        q, k, v = linear(a, p + "qkv").split(d, -1)
        q = q + lora(a, p + "lora_q")
        k = k + lora(a, p + "lora_k")
        v = v + lora(a, p + "lora_v")
        q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, d)
        return linear(y, p + "proj") + lora(y, p + "lora_proj")

    def block(x, p):
        x = x + attention(layer_norm(x, p + "ln1"), p)
        return x + linear(F.gelu(linear(layer_norm(x, p + "ln2"), p + "fc")), p + "out")

    blocks = [lambda x, p=f"h.{i}.": block(x, p) for i in range(workload.layers)]

    def loss_fn():
        x = F.embedding(idx, base["wte"]) + base["wpe"][: idx.shape[1]]
        if segments:
            x = torch.utils.checkpoint.checkpoint_sequential(
                blocks, segments, x, use_reentrant=False
            )
        else:
            for b in blocks:
                x = b(x)
        logits = F.linear(layer_norm(x, "ln_f"), base["wte"])
        return F.cross_entropy(logits.view(-1, workload.vocab), targets)

    return loss_fn, list(adapters.values())
