"""The systems a workload runs on, and the interface a system's module gives the child process.

A Python system's module (`torch_impl`, `gradstream_impl`) has `setup(threads)` (start its
runtime before the idle baseline is read) and `build(workload, tensors, variant) -> RunState`.
The candle system is a Rust program (benches/candle) that `candle.py` builds and runs.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass


class Unsupported(Exception):
    """The system cannot run this configuration here (a missing library or feature)."""


@dataclass
class RunState:
    """A built model and optimizer: `step()` runs one training step and returns the loss."""

    step: Callable[[], float]
    after_warmup: Callable[[], None] = lambda: None
    extra: Callable[[], dict] = dict


@dataclass(frozen=True)
class System:
    name: str
    kind: str  # "python" (a module run by child.py) or "candle" (the Rust program)
    impl: str = ""
    variant: str = ""
    workloads: frozenset[str] | None = None  # None: every workload
    note: str = ""

    def applies_to(self, workload: str) -> bool:
        return self.workloads is None or workload in self.workloads


SYSTEMS: list[System] = [
    System(
        "torch", "python", "torch_impl", "standard",
        note="PyTorch: backward, Adam (AdamW for cnn, lora) step, zero_grad(set_to_none=True)",
    ),
    System(
        "torch-hook", "python", "torch_impl", "hook",
        note="PyTorch: one Adam (AdamW) per parameter, stepped in "
        "register_post_accumulate_grad_hook",
    ),
    System(
        "torch-checkpoint", "python", "torch_impl", "checkpoint", frozenset({"nerf"}),
        note="PyTorch: the NeRF MLP in torch.utils.checkpoint per chunk of points",
    ),
    System(
        "candle", "candle",
        note="upstream candle: candle-nn Linear, Conv2d, ConvTranspose2d and BatchNorm (its "
        "forward_train: batch statistics) over Vars, max_pool2d; for lora frozen Tensors, Var "
        "adapters, attention as matmul + masked softmax, layer_norm_slow (candle-nn's fused "
        "layer_norm and softmax_last_dim have no backward); loss.backward(), AdamW (weight "
        "decay 0 for mlp, nerf); a conv whose input has C == H == W is padded by hand "
        "(candle 0.9.2's conv2d is wrong there, huggingface/candle#3404)",
    ),
    System(
        "gradstream", "python", "gradstream_impl", "standard",
        note="gradstream: backward, Adam (AdamW for cnn, lora) step, zero_grad(set_to_none=True)",
    ),
    System(
        "gradstream-in-backward", "python", "gradstream_impl", "in_backward",
        note="gradstream: Adam(in_backward=True) (AdamW for cnn, lora) steps each parameter "
        "inside backward",
    ),
    System(
        "gradstream-checkpoint", "python", "gradstream_impl", "checkpoint", frozenset({"nerf"}),
        note="gradstream: the NeRF MLP checkpointed per chunk of points",
    ),
    System(
        "torch-autocast", "python", "torch_impl", "autocast", frozenset({"mlp", "cnn", "lora"}),
        note="PyTorch: the forward and loss under torch.autocast('cpu', bfloat16), Adam step",
    ),
    System(
        "gradstream-autocast", "python", "gradstream_impl", "autocast",
        frozenset({"mlp", "cnn", "lora"}),
        note="gradstream: the forward and loss under autocast('cpu', bfloat16), Adam in backward",
    ),
    System(
        "gradstream-8bit", "python", "gradstream_impl", "low_bit:int8",
        note="gradstream: Adam (AdamW) in backward with 8-bit block-wise state "
        "(state_dtype='int8', blocks of 256)",
    ),
    System(
        "gradstream-4bit", "python", "gradstream_impl", "low_bit:int4",
        note="gradstream: Adam (AdamW) in backward with 4-bit state (blocks of 128; a "
        "matrix's second moment rank-1 normalised)",
    ),
    System(
        "gradstream-fp8", "python", "gradstream_impl", "low_bit:fp8",
        note="gradstream: Adam (AdamW) in backward with fp8 (e4m3) state scaled per block of 256",
    ),
]  # fmt: skip

# Run only when asked for (`--autocast`): mixed precision changes the losses a little.
AUTOCAST = [s.name for s in SYSTEMS if s.variant == "autocast"]
# Run only when asked for (`--low-bit`): coded optimizer state changes the losses a little.
LOW_BIT = [s.name for s in SYSTEMS if s.variant.startswith("low_bit:")]

BY_NAME = {s.name: s for s in SYSTEMS}


def unavailable_reason(system: System, workload: str | None = None) -> str | None:
    """Why `system` cannot run (`workload`) here, checked cheaply in the harness; None if it
    may."""
    if system.impl == "torch_impl" and importlib.util.find_spec("torch") is None:
        return "PyTorch is not installed"
    if system.impl == "gradstream_impl":
        from . import gradstream_impl

        return gradstream_impl.missing(system.variant, workload)
    return None
