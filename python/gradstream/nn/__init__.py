"""`gradstream.nn`: modules, functional ops and initialisers shaped like `torch.nn`."""

from . import functional, init, parallel, utils
from .modules import *  # noqa: F403
from .modules import __all__ as _modules_all
from .parameter import Buffer, Parameter

__all__ = ["Parameter", "Buffer", "functional", "init", "parallel", "utils", *_modules_all]
