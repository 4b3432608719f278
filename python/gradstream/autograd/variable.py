"""`Variable`: PyTorch's deprecated wrapper; since tensors carry autograd state themselves,
`Variable(t)` returns a tensor and every tensor is a `Variable`."""

from .. import _core


class _VariableMeta(type):
    def __instancecheck__(cls, obj):
        return isinstance(obj, _core.Tensor)


class Variable(metaclass=_VariableMeta):
    def __new__(cls, data, requires_grad=False, volatile=False):
        if not isinstance(data, _core.Tensor):
            raise TypeError(f"Variable data has to be a tensor, but got {type(data).__name__}")
        return data.detach().requires_grad_(requires_grad)
