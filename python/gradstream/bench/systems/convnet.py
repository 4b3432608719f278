"""The `cnn` workload's model and loss, written once against PyTorch's API.

`build(torch, workload, tensors, tensor)` takes the module to build with (PyTorch, or
gradstream, which mirrors it), so the torch and gradstream systems run the same code;
`tensor` makes a tensor on the run's device from an array, and the model is moved there.
"""

from __future__ import annotations

from collections.abc import Callable


def build(
    torch,
    workload,
    tensors: dict,
    tensor: Callable,
    segments: int | None = None,
    device: str = "cpu",
) -> tuple[Callable, list]:
    """The FCN as an `nn.Sequential` with the shared weights, on `device`; (loss function,
    parameters). `segments`: run it with `checkpoint_sequential` in that many segments
    (`--budget-sweep`)."""
    nn, F = torch.nn, torch.nn.functional

    def load(module, name: str):
        with torch.no_grad():
            module.weight.copy_(tensor(tensors[f"{name}.weight"]))
            if module.bias is not None:
                module.bias.copy_(tensor(tensors[f"{name}.bias"]))
        return module

    layers = []
    for kind, name, c_in, c_out, _ in workload.layers():
        if kind == "conv":
            layers.append(load(nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), name))
        elif kind == "bn":
            layers.append(load(nn.BatchNorm2d(c_out), name))
        elif kind == "relu":
            layers.append(nn.ReLU())
        elif kind == "pool":
            layers.append(nn.MaxPool2d(2))
        elif kind == "up":
            layers.append(load(nn.ConvTranspose2d(c_in, c_out, 2, stride=2), name))
        elif kind == "head":
            layers.append(load(nn.Conv2d(c_in, c_out, 1), name))
    model = nn.Sequential(*layers).to(device)
    x = tensor(tensors["x"])
    target = tensor(tensors["target"])

    def loss_fn():
        if segments:
            out = torch.utils.checkpoint.checkpoint_sequential(
                model, segments, x, use_reentrant=False
            )
            return F.cross_entropy(out, target)
        return F.cross_entropy(model(x), target)

    return loss_fn, list(model.parameters())
