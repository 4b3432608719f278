"""`gradstream.compile`: there is no graph compiler; the model runs eagerly, unchanged, so
scripts that call `torch.compile(model)` run as they are."""

import warnings

_warned = False


def compile(
    model=None,
    *,
    fullgraph=False,
    dynamic=None,
    backend="inductor",
    mode=None,
    options=None,
    disable=False,
    **kwargs,
):
    """Return `model` unchanged (or, without a model, a decorator that does)."""
    if model is None:
        return lambda m: compile(m, fullgraph=fullgraph, dynamic=dynamic, backend=backend)
    if not callable(model):
        raise RuntimeError(f"compile(): model must be callable, got {type(model).__name__}")
    global _warned
    if not _warned and not disable:
        _warned = True
        warnings.warn(
            "gradstream.compile: no graph compiler in gradstream; the model runs eagerly",
            stacklevel=2,
        )
    return model
