"""`gradstream.autograd`: `backward`, `grad`, grad-mode switches, `gradcheck`."""

from .._core import Node
from .._core import autograd_backward as backward
from .._core import autograd_grad as grad
from . import graph
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
