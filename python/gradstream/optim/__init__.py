"""`gradstream.optim`: PyTorch's optimizers on fused Rust kernels, steppable inside the
backward pass (``in_backward=True``); LBFGS (closure-based) in Python; `swa_utils` for
weight averaging."""

from . import lr_scheduler, swa_utils
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .low_bit import Adam8bit, AdamW4bit, AdamW8bit, AdamWFp8, SGD8bit
from .nadam import NAdam
from .optimizer import Optimizer
from .radam import RAdam
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD

__all__ = [
    "Optimizer",
    "SGD",
    "Adam",
    "AdamW",
    "RMSprop",
    "Adagrad",
    "Adamax",
    "NAdam",
    "RAdam",
    "Adadelta",
    "Rprop",
    "ASGD",
    "Adafactor",
    "Adam8bit",
    "AdamW8bit",
    "AdamW4bit",
    "AdamWFp8",
    "SGD8bit",
    "LBFGS",
    "lr_scheduler",
    "swa_utils",
]
