"""`gradstream.autograd`: `backward`, `grad`, grad-mode switches, `gradcheck`."""

from .._core import Node
from . import graph
from .backward import backward, grad
from .function import Function, FunctionCtx
from .grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled
from .gradcheck import gradcheck

__all__ = [
    "Node",
    "graph",
    "Function",
    "FunctionCtx",
    "backward",
    "grad",
    "gradcheck",
    "enable_grad",
    "inference_mode",
    "no_grad",
    "set_grad_enabled",
]
