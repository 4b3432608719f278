"""`gradstream.autograd`: `backward`, `grad`, grad-mode switches, `gradcheck`."""

from .._core import Node
from . import functional, graph, variable
from .backward import backward, grad
from .function import Function, FunctionCtx
from .grad_mode import (
    enable_grad,
    inference_mode,
    no_grad,
    set_grad_enabled,
    set_multithreading_enabled,
)
from .gradcheck import gradcheck, gradgradcheck
from .variable import Variable

__all__ = [
    "Node",
    "functional",
    "graph",
    "Function",
    "FunctionCtx",
    "backward",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "set_multithreading_enabled",
    "variable",
    "Variable",
    "enable_grad",
    "inference_mode",
    "no_grad",
    "set_grad_enabled",
]
