"""The `Tensor` methods written in Python, as PyTorch writes them in `torch/_tensor.py`:
conversions to Python and NumPy values, pickling, copying, and aliases. The native class
holds the data and runs every op; these only combine its methods."""

from . import _core
from ._formatting import rebuild_tensor, tensor_repr
from .comparison import allclose, equal, isclose

Tensor = _core.Tensor

_TYPE_NAMES = {
    _core.float32: "FloatTensor",
    _core.float64: "DoubleTensor",
    _core.float16: "HalfTensor",
    _core.bfloat16: "BFloat16Tensor",
    _core.int64: "LongTensor",
    _core.int32: "IntTensor",
    _core.uint8: "ByteTensor",
    _core.bool: "BoolTensor",
}


def _host_copy(t):
    """The values as a NumPy array; bfloat16, which NumPy lacks, as float32 (exact)."""
    t = t.detach()
    return (t.float() if t.dtype is _core.bfloat16 else t).numpy()


def __len__(self):
    if self.dim() == 0:
        raise TypeError("len() of a 0-d tensor")
    return self.shape[0]


def __iter__(self):
    if self.dim() == 0:
        raise TypeError("iteration over a 0-d tensor")
    return iter(self.unbind(0))


def __bool__(self):
    n = self.numel()
    if n != 1:
        what = "no" if n == 0 else "more than one"
        raise RuntimeError(f"Boolean value of Tensor with {what} values is ambiguous")
    return bool(self.item())


def __float__(self):
    return float(self.item())


def __int__(self):
    return int(self.item())


def __format__(self, format_spec):
    # As PyTorch: a 0-d tensor formats as its value (`f"{loss:.4f}"`), anything else (a
    # Parameter included) as an object, which takes no format spec.
    if self.dim() == 0 and type(self) is Tensor:
        return self.item().__format__(format_spec)
    return object.__format__(self, format_spec)


def __index__(self):
    if self.is_floating_point():
        raise TypeError("only integer tensors of a single element can be converted to an index")
    return int(self.item())


def tolist(self):
    return _host_copy(self).tolist()


def __array__(self, dtype=None, copy=None):
    a = self.detach().numpy()
    return a if dtype is None else a.astype(dtype)


def __reduce__(self):
    # A bfloat16 tensor travels as float32 and is cast back on load.
    return rebuild_tensor, (_host_copy(self), self.dtype, self.requires_grad)


def __deepcopy__(self, memo):
    c = self.detach().clone()
    if type(self) is not Tensor:
        # Keep the subclass (nn.Parameter) by going through its constructor.
        return type(self)(c, self.requires_grad)
    return c.requires_grad_(self.requires_grad and self.is_leaf)


def _type(self, dtype=None):
    """`type()` names the tensor type (`gradstream.FloatTensor`); `type(dtype)` casts."""
    if dtype is None:
        cuda = ".cuda" if self.device.type == "cuda" else ""
        return f"gradstream{cuda}.{_TYPE_NAMES[self.dtype]}"
    return self.to(dtype)


def type_as(self, other):
    if not isinstance(other, Tensor):
        raise TypeError(
            f"type_as(): argument 'other' (position 1) must be Tensor, not {type(other).__name__}"
        )
    return self.to(device=other.device, dtype=other.dtype)


def cpu(self, memory_format=None):
    return self.to("cpu")


def cuda(self, device=None, non_blocking=False, memory_format=None):
    return self.to(_core.device("cuda") if device is None else _core.device(device))


def backward(
    self, gradient=None, retain_graph=None, create_graph=False, inputs=None, grad_consumer=None
):
    """Sum this tensor's gradient into the leaves' `.grad`. With `grad_consumer`,
    `fn(param, grad)` is called for each leaf as its gradient becomes final, and no `.grad`
    is stored."""
    from .autograd.backward import backward as run

    run(self, gradient, retain_graph, create_graph, inputs, grad_consumer)


def _new(fill):
    def new(self, *size, dtype=None, device=None, requires_grad=False):
        dt = self.dtype if dtype is None else dtype
        dev = self.device if device is None else device
        return fill(*size, dtype=dt, device=dev, requires_grad=requires_grad)

    return new


def new_full(self, size, fill_value, *, dtype=None, device=None, requires_grad=False):
    dt = self.dtype if dtype is None else dtype
    dev = self.device if device is None else device
    return _core.full(size, fill_value, dtype=dt, device=dev, requires_grad=requires_grad)


def new_tensor(self, data, *, dtype=None, device=None, requires_grad=False):
    """A copy of `data` as a new leaf, in this tensor's dtype unless `dtype=`."""
    dt = self.dtype if dtype is None else dtype
    dev = self.device if device is None else device
    return _core.tensor(data, dtype=dt, device=dev, requires_grad=requires_grad)


def positive(self):
    """`self` itself, as PyTorch's `positive`; a bool tensor has no unary `+`."""
    if self.dtype is _core.bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return self


def _cast(dtype):
    def cast(self, memory_format=None):
        return self.to(dtype)

    return cast


_METHODS = {
    "__len__": __len__,
    "__iter__": __iter__,
    "__bool__": __bool__,
    "__float__": __float__,
    "__int__": __int__,
    "__index__": __index__,
    "__format__": __format__,
    "__array__": __array__,
    "__reduce__": __reduce__,
    "__deepcopy__": __deepcopy__,
    "__repr__": tensor_repr,
    "tolist": tolist,
    "positive": positive,
    "isclose": isclose,
    "allclose": allclose,
    "equal": equal,
    "new_zeros": _new(_core.zeros),
    "new_ones": _new(_core.ones),
    "new_empty": _new(_core.empty),
    "new_full": new_full,
    "new_tensor": new_tensor,
    "backward": backward,
    "type": _type,
    "type_as": type_as,
    "cpu": cpu,
    "cuda": cuda,
    "nelement": lambda self: self.numel(),
    "element_size": lambda self: self.dtype.itemsize,
    "float": _cast(_core.float32),
    "double": _cast(_core.float64),
    "half": _cast(_core.float16),
    "bfloat16": _cast(_core.bfloat16),
    "long": _cast(_core.int64),
    "int": _cast(_core.int32),
    "bool": _cast(_core.bool),
    "byte": _cast(_core.uint8),
    # NumPy defers to the tensor's reflected operators: `np.float64(2) * t` is a tensor.
    "__array_priority__": 1000.0,
    "ndim": property(lambda self: self.dim()),
    "itemsize": property(lambda self: self.dtype.itemsize),
    "nbytes": property(lambda self: self.dtype.itemsize * self.numel()),
    "is_cuda": property(lambda self: self.device.type == "cuda"),
    "is_sparse": property(lambda self: False),
    "layout": property(lambda self: "strided"),
}

for _name, _value in _METHODS.items():
    setattr(Tensor, _name, _value)
