"""`gradstream.optim`: PyTorch's optimizers on fused Rust kernels, steppable inside the
backward pass (``in_backward=True``)."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Optimizer", "SGD", "Adam", "AdamW", "lr_scheduler"]
