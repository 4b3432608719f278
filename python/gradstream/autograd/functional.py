"""`autograd.functional`: vjp, jvp, jacobian, hessian, hvp, vhp of a function of tensors,
built on `autograd.grad`, as `torch.autograd.functional` builds them."""

from .. import _core
from .backward import grad
from .grad_mode import enable_grad

Tensor = _core.Tensor

__all__ = ["vjp", "jvp", "jacobian", "hessian", "hvp", "vhp"]


def _as_tuple(name, fn, x):
    is_tuple = isinstance(x, tuple | list)
    items = tuple(x) if is_tuple else (x,)
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(
                f"The {name} given to {fn} must be either a Tensor or a tuple of Tensors but "
                f"the value got here is of type {type(t).__name__}."
            )
    return items, is_tuple


def _differentiable(inputs, create_graph):
    """Inputs the function is differentiated at: fresh leaves, or (with `create_graph`)
    views that keep the caller's graph so the result can be differentiated again."""
    return tuple(
        x.view_as(x) if create_graph and x.requires_grad else x.detach().requires_grad_(True)
        for x in inputs
    )


def _grads(outputs, inputs, grad_outputs, create_graph, strict, fn):
    keep = [i for i, o in enumerate(outputs) if o.requires_grad]
    if keep:
        found = grad(
            [outputs[i] for i in keep],
            inputs,
            None if grad_outputs is None else [grad_outputs[i] for i in keep],
            retain_graph=True,
            create_graph=create_graph,
            allow_unused=True,
        )
    else:  # no output depends on an input that requires grad
        found = [None] * len(inputs)
    out = []
    for i, (g, x) in enumerate(zip(found, inputs, strict=True)):
        if g is None:
            if strict:
                raise RuntimeError(
                    f"The output of the user-provided function is independent of input {i}. "
                    f"This is not allowed in strict mode ({fn})."
                )
            g = _core.zeros_like(x)
        out.append(g if create_graph else g.detach())
    return tuple(out)


def _result(items, is_tuple):
    return items if is_tuple else items[0]


def _call(func, inputs, fn):
    outputs, out_tuple = _as_tuple("outputs of the user-provided function", fn, func(*inputs))
    return outputs, out_tuple


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """`(func(inputs), v^T J)`: the vector-Jacobian product at `inputs`."""
    inputs, in_tuple = _as_tuple("inputs", "vjp", inputs)
    with enable_grad():
        xs = _differentiable(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "vjp")
        if v is None:
            if len(outputs) != 1 or outputs[0].numel() != 1:
                raise RuntimeError(
                    "The vector v can only be None if the user-provided function returns a "
                    "single Tensor with a single element."
                )
            vs = (_core.ones_like(outputs[0]),)
        else:
            vs, _ = _as_tuple("v", "vjp", v)
        g = _grads(outputs, xs, list(vs), create_graph, strict, "vjp")
    outs = tuple(o if create_graph else o.detach() for o in outputs)
    return _result(outs, out_tuple), _result(g, in_tuple)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """`(func(inputs), J v)`: the Jacobian-vector product, by differentiating a vjp with
    respect to its vector (the double-backward trick)."""
    inputs, in_tuple = _as_tuple("inputs", "jvp", inputs)
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the input to the user-provided function is "
                "a single Tensor with a single element."
            )
        vs = (_core.ones_like(inputs[0]),)
    else:
        vs, _ = _as_tuple("v", "jvp", v)
    with enable_grad():
        xs = _differentiable(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "jvp")
        us = tuple(_core.zeros_like(o).requires_grad_(True) for o in outputs)
        g = grad(outputs, xs, list(us), create_graph=True, allow_unused=True)
        pairs = [(gi, vi) for gi, vi in zip(g, vs, strict=True) if gi is not None]
        if pairs:
            jv = _grads(
                [p for p, _ in pairs], us, [q for _, q in pairs], create_graph, strict, "jvp"
            )
        else:
            jv = tuple(_core.zeros_like(o) for o in outputs)
    outs = tuple(o if create_graph else o.detach() for o in outputs)
    return _result(outs, out_tuple), _result(jv, out_tuple)


def jacobian(
    func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"
):
    """The Jacobian of `func` at `inputs`: for output i and input j, a tensor of shape
    `outputs[i].shape + inputs[j].shape`, one backward pass per output element."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(
            f'Expected strategy to be either "forward-mode" or "reverse-mode", got {strategy!r}'
        )
    inputs, in_tuple = _as_tuple("inputs", "jacobian", inputs)
    with enable_grad():
        xs = _differentiable(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, "jacobian")
        rows = []
        for out in outputs:
            flat = out.reshape(-1)
            per_input = [[] for _ in xs]
            for k in range(flat.shape[0]):
                g = _grads([flat[k]], xs, None, create_graph, strict, "jacobian")
                for j, gj in enumerate(g):
                    per_input[j].append(gj)
            rows.append(
                tuple(
                    _core.stack(gs, 0).reshape(tuple(out.shape) + tuple(x.shape))
                    if gs
                    else _core.zeros(tuple(out.shape) + tuple(x.shape), dtype=x.dtype)
                    for gs, x in zip(per_input, xs, strict=True)
                )
            )
    rows = [_result(r, in_tuple) for r in rows]
    return _result(tuple(rows), out_tuple)


def hessian(
    func,
    inputs,
    create_graph=False,
    strict=False,
    vectorize=False,
    outer_jacobian_strategy="reverse-mode",
):
    """The Hessian of a scalar `func` at `inputs`: the Jacobian of its gradient."""
    inputs, in_tuple = _as_tuple("inputs", "hessian", inputs)

    def gradient(*xs):
        out, out_tuple = _call(func, xs, "hessian")
        if out_tuple or out[0].numel() != 1:
            raise RuntimeError(
                "The function given to hessian should return a single Tensor with a single element"
            )
        return jacobian(func, _result(xs, in_tuple), create_graph=True, strict=strict)

    return jacobian(gradient, _result(inputs, in_tuple), create_graph, strict)


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """`(func(inputs), v^T H)` for a scalar `func`."""
    return _hessian_product(func, inputs, v, create_graph, strict, "vhp")


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """`(func(inputs), H v)` for a scalar `func` (H is symmetric, so it equals v^T H)."""
    return _hessian_product(func, inputs, v, create_graph, strict, "hvp")


def _hessian_product(func, inputs, v, create_graph, strict, fn):
    inputs, in_tuple = _as_tuple("inputs", fn, inputs)
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError(
                "The vector v can only be None if the input to the user-provided function is "
                "a single Tensor with a single element."
            )
        vs = (_core.ones_like(inputs[0]),)
    else:
        vs, _ = _as_tuple("v", fn, v)
    with enable_grad():
        xs = _differentiable(inputs, create_graph)
        outputs, out_tuple = _call(func, xs, fn)
        if out_tuple or outputs[0].numel() != 1:
            raise RuntimeError(
                f"The function given to {fn} should return a single Tensor with a single element"
            )
        g = grad(outputs, xs, create_graph=True, allow_unused=True)
        pairs = [(gi, vi, x) for gi, vi, x in zip(g, vs, xs, strict=True) if gi is not None]
        if pairs:
            prod = _grads(
                [p for p, _, _ in pairs], xs, [q for _, q, _ in pairs], create_graph, strict, fn
            )
        else:
            prod = tuple(_core.zeros_like(x) for x in xs)
    out = outputs[0] if create_graph else outputs[0].detach()
    return out, _result(prod, in_tuple)
