"""`backends.cuda`: this build has no CUDA."""

from types import SimpleNamespace


def is_built():
    return False


# Settings scripts write before training; they have no effect on the CPU.
matmul = SimpleNamespace(allow_tf32=False, allow_fp16_reduced_precision_reduction=True)
