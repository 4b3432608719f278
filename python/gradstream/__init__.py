"""gradstream: train neural networks in less memory.

A PyTorch-shaped API over a Rust autograd engine on candle-core. Gradients are computed
only where needed, freed as soon as they are used, and can be streamed to the optimizer
inside the backward pass.
"""

from . import _build  # noqa: F401, I001  (first: picks the build of _core this process runs)
from . import (
    _core,
    _tensor,  # noqa: F401  (adds the Tensor methods written in Python)
    amp,
    autograd,
    backends,
    cpu,
    cuda,
    distributed,
    linalg,
    memory,
    multiprocessing,
    nn,
    optim,
    utils,
)
from ._core import *  # noqa: F403  (the op set: tensor, zeros, add, matmul, ...)
from ._core import OutOfMemoryError as OutOfMemoryError
from ._core import Tensor, device
from ._core import dtype as dtype
from .amp.autocast_mode import (
    autocast,
    get_autocast_cpu_dtype,
    get_autocast_dtype,
    is_autocast_cpu_enabled,
    is_autocast_enabled,
    set_autocast_dtype,
    set_autocast_enabled,
)
from .autograd.grad_mode import (
    enable_grad,
    inference_mode,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from .broadcasting import broadcast_shapes, broadcast_tensors
from .comparison import allclose as allclose
from .comparison import equal as equal
from .comparison import isclose as isclose
from .compiler import compile as compile
from .einsum import einsum as einsum
from .linalg import TOP_LEVEL as _LINALG_TOP_LEVEL
from .serialization import load as load
from .serialization import save as save
from .size import Size

float32 = _core.float32
float64 = _core.float64
float16 = _core.float16
bfloat16 = _core.bfloat16
int64 = _core.int64
int32 = _core.int32
uint8 = _core.uint8
bool = _core.bool  # noqa: A001  (PyTorch's name)
float = float32  # noqa: A001
double = float64
half = float16
long = int64
int = int32  # noqa: A001

__version__ = "0.1.0"

# torch.inverse, torch.det, torch.logdet, torch.slogdet, torch.cholesky, torch.diagonal.
globals().update(_LINALG_TOP_LEVEL)


def positive(input):  # noqa: A002  (PyTorch's name)
    return Tensor.positive(input)


def is_tensor(obj):
    return isinstance(obj, Tensor)


__all__ = [
    "Tensor",
    "Size",
    "broadcast_shapes",
    "broadcast_tensors",
    "device",
    "dtype",
    "no_grad",
    "enable_grad",
    "set_grad_enabled",
    "inference_mode",
    "is_grad_enabled",
    "amp",
    "autocast",
    "is_autocast_enabled",
    "set_autocast_enabled",
    "get_autocast_dtype",
    "set_autocast_dtype",
    "is_autocast_cpu_enabled",
    "get_autocast_cpu_dtype",
    "autograd",
    "backends",
    "cpu",
    "cuda",
    "distributed",
    "linalg",
    "memory",
    "multiprocessing",
    "nn",
    "optim",
    "utils",
]
