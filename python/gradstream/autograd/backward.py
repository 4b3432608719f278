"""`autograd.backward` and `autograd.grad`: their arguments in PyTorch's forms, normalised
into lists for the engine (`_core._run_backward`), as `torch/autograd/__init__.py` does."""

from .. import _core

Tensor = _core.Tensor


def _tensors(name, obj):
    items = [obj] if isinstance(obj, Tensor) else list(obj)
    for t in items:
        if not isinstance(t, Tensor):
            raise TypeError(f"backward(): argument '{name}' must be Tensor, not {type(t).__name__}")
    return items


def _grads(obj, n):
    if obj is None:
        return [None] * n
    return [obj] if isinstance(obj, Tensor) else list(obj)


def backward(
    tensors,
    grad_tensors=None,
    retain_graph=None,
    create_graph=False,
    inputs=None,
    grad_consumer=None,
):
    """Sum the gradients of `tensors` into the leaves' `.grad` (only those in `inputs`, if
    given). With `grad_consumer`, `fn(param, grad)` is called for each leaf as its gradient
    becomes final, and no `.grad` is stored."""
    roots = _tensors("tensors", tensors)
    if inputs is not None:
        inputs = _tensors("inputs", inputs)
        if not inputs:
            raise RuntimeError("backward: 'inputs' argument to backward() cannot be empty.")
    retain = create_graph if retain_graph is None else retain_graph
    grads = _grads(grad_tensors, len(roots))
    _core._run_backward(roots, grads, retain, create_graph, True, inputs, grad_consumer)


def grad(
    outputs,
    inputs,
    grad_outputs=None,
    retain_graph=None,
    create_graph=False,
    allow_unused=None,
    materialize_grads=False,
):
    """The gradients of `outputs` with respect to `inputs`; only the paths that lead to
    `inputs` run, and no `.grad` is touched."""
    roots = _tensors("outputs", outputs)
    wrt = _tensors("inputs", inputs)
    if not wrt:
        raise RuntimeError("grad requires non-empty inputs.")
    retain = create_graph if retain_graph is None else retain_graph
    grads = _grads(grad_outputs, len(roots))
    found = _core._run_backward(roots, grads, retain, create_graph, False, wrt, None)
    allow_unused = materialize_grads if allow_unused is None else allow_unused
    out = []
    for i, (g, x) in enumerate(zip(found, wrt, strict=True)):
        if g is None and materialize_grads:
            g = _core.zeros_like(x)
        elif g is None and not allow_unused:
            raise RuntimeError(
                "One of the differentiated Tensors appears to not have been used in the graph "
                f"(input {i}). Set allow_unused=True if this is the desired behavior."
            )
        out.append(g)
    return tuple(out)
