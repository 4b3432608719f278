"""How much of PyTorch's public API gradstream has: `python -m gradstream.coverage`.

For each namespace, PyTorch's public names are its `__all__` when it has one, else its
attributes not starting with `_`, less what a module only imports for its own use (other
modules, and names from `typing` and `collections.abc`); for `Tensor`, the public attributes
of `torch.Tensor`. A name counts as present when the matching gradstream object has it.
PyTorch must be installed: it is the reference.
"""

from __future__ import annotations

import argparse
import sys
import types
from dataclasses import dataclass

import gradstream

NAMESPACES = [
    "nn.functional",
    "nn",
    "optim",
    "optim.lr_scheduler",
    "utils.data",
    "multiprocessing",
    "autograd",
    "linalg",
    "nn.init",
    "nn.utils",
    "nn.utils.parametrize",
    "nn.utils.parametrizations",
    "Tensor",
]

_IMPORT_ONLY_MODULES = {"typing", "typing_extensions", "collections.abc", "builtins"}


@dataclass
class Coverage:
    namespace: str
    present: list[str]
    missing: list[str]

    @property
    def total(self) -> int:
        return len(self.present) + len(self.missing)

    def summary(self) -> str:
        percent = 100 * len(self.present) / self.total if self.total else 0.0
        return f"{len(self.present)} of {self.total} ({percent:.0f}%)"


def _resolve(root, namespace: str):
    """`root.a.b` for namespace "a.b", or None where a part is missing."""
    obj = root
    for part in namespace.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def _is_import_only(namespace_module, name: str, value) -> bool:
    if name == "TYPE_CHECKING":
        return True
    if isinstance(value, types.ModuleType):
        return not value.__name__.startswith(namespace_module.__name__ + ".")
    return getattr(value, "__module__", None) in _IMPORT_ONLY_MODULES


def public_names(torch, namespace: str) -> list[str]:
    """PyTorch's public names in `namespace` ("Tensor" for the tensor's attributes)."""
    obj = _resolve(torch, namespace)
    if namespace == "Tensor":
        return sorted(n for n in dir(obj) if not n.startswith("_"))
    names = getattr(obj, "__all__", None)
    if names is not None:
        return sorted(set(names))
    return sorted(
        n
        for n in dir(obj)
        if not n.startswith("_") and not _is_import_only(obj, n, getattr(obj, n))
    )


def coverage(torch) -> list[Coverage]:
    """One `Coverage` per namespace in `NAMESPACES`."""
    rows = []
    for namespace in NAMESPACES:
        ours = _resolve(gradstream, namespace)
        present, missing = [], []
        for name in public_names(torch, namespace):
            (present if ours is not None and hasattr(ours, name) else missing).append(name)
        rows.append(Coverage(namespace, present, missing))
    return rows


def format_table(rows: list[Coverage]) -> str:
    lines = ["| namespace | gradstream has |", "| --- | --- |"]
    lines += [f"| {row.namespace} | {row.summary()} |" for row in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m gradstream.coverage",
        description="How many of PyTorch's public names each gradstream namespace has.",
    )
    parser.add_argument(
        "--missing", metavar="NS", choices=NAMESPACES, help="list the names NS lacks"
    )
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gradstream.coverage compares with PyTorch, which is not installed.", file=sys.stderr)
        return 1
    rows = coverage(torch)
    if args.missing is None:
        print(format_table(rows))
    else:
        row = next(r for r in rows if r.namespace == args.missing)
        print(f"{args.missing}: {row.summary()}; missing:")
        print("\n".join(row.missing))
    return 0


if __name__ == "__main__":
    sys.exit(main())
