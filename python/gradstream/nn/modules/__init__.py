"""The module classes of `gradstream.nn`."""

from .activation import (
    GELU,
    LogSoftmax,
    ReLU,
    Sigmoid,
    SiLU,
    Softmax,
    Softplus,
    Tanh,
    Threshold,
)
from .container import ModuleDict, ModuleList, Sequential
from .layers import Dropout, Embedding, LayerNorm
from .linear import Identity, Linear
from .loss import (
    BCELoss,
    BCEWithLogitsLoss,
    CrossEntropyLoss,
    L1Loss,
    MSELoss,
    NLLLoss,
    SmoothL1Loss,
)
from .module import Module

__all__ = [
    "Module", "Sequential", "ModuleList", "ModuleDict", "Identity", "Linear", "ReLU", "Threshold",
    "Sigmoid", "Tanh", "Softplus", "GELU", "SiLU", "Softmax", "LogSoftmax", "Dropout",
    "LayerNorm", "Embedding", "MSELoss", "L1Loss", "SmoothL1Loss", "CrossEntropyLoss",
    "NLLLoss", "BCELoss", "BCEWithLogitsLoss",
]  # fmt: skip
