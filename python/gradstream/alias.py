"""Run PyTorch code unchanged on gradstream: ``import torch`` resolves to gradstream.

While the alias is installed, ``torch`` and every ``torch.<name>`` module name resolve to
``gradstream`` and ``gradstream.<name>``: ``import torch``, ``import torch.nn as nn``,
``import torch.nn.functional as F``, ``from torch import optim``, ``import torch.optim``,
``from torch.utils.checkpoint import checkpoint`` all give gradstream's modules (the same
module objects as ``import gradstream.<name>``, never a second copy). A ``torch.<name>``
that gradstream does not have raises ``ModuleNotFoundError`` as usual.

Three ways to use it::

    from gradstream.alias import torch_alias

    with torch_alias():            # a context manager
        import my_pytorch_script   # binds gradstream wherever it says `torch`

    gradstream.alias.install()     # or by hand; calls nest, each uninstall undoes
    ...                            # exactly one install
    gradstream.alias.uninstall()

    $ python -m gradstream.alias train.py --steps 100    # run a script under the alias
    $ python -m gradstream.alias -m package.module args  # or a module, like `python -m`
    $ python -m gradstream.alias --memory-budget 60% train.py  # within 60% of step 1's peak

While the alias is installed, processes started with the "spawn" and "forkserver" methods
(gradstream's DataLoader workers, ``multiprocessing`` pools and processes,
``torch.multiprocessing.spawn``) install it too, before they import the main module and
unpickle their target, so the script's ``import torch`` binds gradstream there as well.
gradstream must be importable in the child from its default ``sys.path`` (installed, or on
``PYTHONPATH``), as it is whenever ``python -m gradstream.alias`` found it. A forkserver
started while the alias is installed does not preload ``__main__`` (each child imports it,
as with spawn); one started before it keeps what it preloaded.

``uninstall()`` restores ``sys.modules`` exactly as ``install()`` found it: if a real
``torch`` (and its submodules) was imported before, the same module objects are put
back; ``torch.*`` names first imported under the alias are removed. The alias only
changes module-name resolution: a module that already holds a reference to the real
``torch`` keeps it, and code imported under the alias keeps gradstream after
``uninstall()`` (import it again, fresh, to bind the real one).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.machinery
import multiprocessing.spawn
import os
import runpy
import sys
from collections.abc import Callable, Iterator
from types import ModuleType

__all__ = ["install", "uninstall", "torch_alias", "is_installed", "main"]

_ALIAS = "torch"
_TARGET = "gradstream"

# One snapshot of the aliased names per active install(), innermost last.
_saved: list[dict[str, ModuleType]] = []


def _is_aliased(name: str) -> bool:
    return name == _ALIAS or name.startswith(_ALIAS + ".")


def _target_name(name: str) -> str:
    return _TARGET + name[len(_ALIAS) :]


class _ExistingModuleLoader(importlib.abc.Loader):
    """Hands the import system an already-imported gradstream module under its torch name."""

    def __init__(self, module: ModuleType) -> None:
        self._module = module
        self._spec = module.__spec__

    def create_module(self, spec):  # noqa: ARG002  (importlib's signature)
        return self._module

    def exec_module(self, module: ModuleType) -> None:
        # The import system stamped the alias spec on the module; gradstream keeps its own.
        module.__spec__ = self._spec


class _AliasFinder(importlib.abc.MetaPathFinder):
    """Resolves a ``torch.<name>`` not yet in sys.modules to ``gradstream.<name>``."""

    def find_spec(self, fullname, path=None, target=None):  # noqa: ARG002
        if not _is_aliased(fullname):
            return None
        target_name = _target_name(fullname)
        try:
            module = importlib.import_module(target_name)
        except ModuleNotFoundError as e:
            if e.name == target_name:
                raise ModuleNotFoundError(
                    f"No module named {fullname!r} (gradstream has no {target_name!r}; "
                    "`import torch` resolves to gradstream under gradstream.alias)",
                    name=fullname,
                ) from None
            raise
        return importlib.machinery.ModuleSpec(
            fullname,
            _ExistingModuleLoader(module),
            is_package=hasattr(module, "__path__"),
        )


_finder = _AliasFinder()


# Imported by a child process to install the alias there: its import is the install, so a
# child forked from an aliased forkserver, which has it imported already, does not repeat it.
_CHILD_MODULE = "gradstream._alias_child"


class _InstallInChild:
    """Put in the preparation data that multiprocessing pickles for a spawned (or
    forkserver) child: the child unpickles that data first, then runs ``prepare()``, which
    imports the main module, then unpickles the process object. Unpickling this object
    imports `_CHILD_MODULE`, so the alias is in place before anything says ``import torch``.

    Why this and not another hook: the child's command line is fixed by multiprocessing
    (``spawn_main``), an environment variable would need code run at every interpreter start
    (a ``.pth`` file, which neither ``PYTHONPATH`` checkouts nor maturin's wheel layout
    give), and the preparation data is the one thing the parent sends that the child reads
    before the main module. `prepare()` ignores keys it does not know.
    """

    def __reduce__(self):
        return (importlib.import_module, (_CHILD_MODULE,))


_PREPARATION_KEY = "gradstream.alias"

# The multiprocessing functions the alias wraps, as it found them at install().
_wrapped: dict[str, Callable] = {}


def _get_preparation_data(name):
    data = _wrapped["get_preparation_data"](name)
    if is_installed():
        data = {_PREPARATION_KEY: _InstallInChild(), **data}
    return data


def _forkserver_class():
    try:
        from multiprocessing.forkserver import ForkServer
    except ImportError:  # a platform without the forkserver method
        return None
    return ForkServer


def _ensure_running(self):
    """A forkserver preloads ``__main__`` before any other module it is told to, and passes
    it to every child it forks (CPython 3.14, and 3.13 from 3.13.8; before, that preload
    never ran: gh-126631): started under the alias, it imports `_CHILD_MODULE` in its place,
    and each child imports the main module itself, after the alias (as spawn does)."""
    ensure_running = _wrapped["ensure_running"]
    preload = self._preload_modules
    if not is_installed() or "__main__" not in preload:
        return ensure_running(self)
    self._preload_modules = [_CHILD_MODULE if m == "__main__" else m for m in preload]
    try:
        return ensure_running(self)
    finally:
        self._preload_modules = preload


def _patch_multiprocessing(on: bool) -> None:
    """Route multiprocessing through the two functions above while the alias is installed
    (each put back only if nobody replaced it since; if somebody did, it stays in their
    chain and passes calls through)."""
    targets = {"get_preparation_data": (multiprocessing.spawn, _get_preparation_data)}
    fork_server = _forkserver_class()
    if fork_server is not None:
        targets["ensure_running"] = (fork_server, _ensure_running)
    for name, (owner, ours) in targets.items():
        current = getattr(owner, name)
        if on and current is not ours:
            _wrapped[name] = current
            setattr(owner, name, ours)
        elif not on and current is ours:
            setattr(owner, name, _wrapped[name])


def is_installed() -> bool:
    """Whether ``import torch`` currently resolves to gradstream."""
    return bool(_saved)


def install() -> None:
    """Make ``torch`` and ``torch.*`` resolve to gradstream until the matching `uninstall`."""
    import gradstream  # noqa: F401  (imports the eager submodules: nn, optim, utils, ...)

    snapshot = {name: mod for name, mod in sys.modules.items() if _is_aliased(name)}
    _saved.append(snapshot)
    for name in snapshot:
        del sys.modules[name]
    for name, mod in list(sys.modules.items()):
        if name == _TARGET or name.startswith(_TARGET + "."):
            sys.modules[_ALIAS + name[len(_TARGET) :]] = mod
    if _finder not in sys.meta_path:
        sys.meta_path.insert(0, _finder)
    if len(_saved) == 1:
        _patch_multiprocessing(True)


def uninstall() -> None:
    """Undo the most recent `install`: ``sys.modules`` gets back exactly what it had."""
    if not _saved:
        raise RuntimeError("gradstream.alias.uninstall() without a matching install()")
    snapshot = _saved.pop()
    for name in [n for n in sys.modules if _is_aliased(n)]:
        del sys.modules[name]
    sys.modules.update(snapshot)
    if not _saved:
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(_finder)
        _patch_multiprocessing(False)


@contextlib.contextmanager
def torch_alias() -> Iterator[ModuleType]:
    """Context manager: inside it ``import torch`` gives gradstream (which it yields)."""
    install()
    try:
        yield sys.modules[_ALIAS]
    finally:
        uninstall()


_USAGE = (
    "usage: python -m gradstream.alias [--memory-budget SIZE] (script.py | -m module) "
    "[args ...]\n\n"
    "  --memory-budget SIZE  run within a memory budget: bytes (300MiB, 2GB) or a\n"
    "                        percentage of the first step's exact peak (60%)"
)


def _budget_option(argv: list[str]) -> tuple[str | None, list[str]]:
    """``--memory-budget SIZE`` (or ``=SIZE``) before the script: (SIZE, the rest)."""
    if argv and argv[0].startswith("--memory-budget="):
        return argv[0].split("=", 1)[1], argv[1:]
    if argv and argv[0] == "--memory-budget":
        if len(argv) < 2:
            print(_USAGE, file=sys.stderr)
            raise SystemExit(2)
        return argv[1], argv[2:]
    return None, argv


def main(argv: list[str] | None = None) -> None:
    """Run a script (or ``-m module``) as ``__main__`` with ``import torch`` -> gradstream."""
    argv = list(sys.argv[1:] if argv is None else argv)
    size, argv = _budget_option(argv)
    if not argv or argv[0] in ("-h", "--help"):
        print(_USAGE, file=sys.stderr if not argv else sys.stdout)
        raise SystemExit(0 if argv else 2)
    run_module = argv[0] == "-m"
    if run_module:
        if len(argv) < 2:
            print(_USAGE, file=sys.stderr)
            raise SystemExit(2)
        target, args = argv[1], argv[2:]
    else:
        target, args = argv[0], argv[1:]
    if size is not None:
        import gradstream.memory

        try:
            gradstream.memory.set_budget(size)
        except (TypeError, ValueError) as e:
            print(f"python -m gradstream.alias: --memory-budget: {e}", file=sys.stderr)
            raise SystemExit(2) from None
    old_argv, old_path = sys.argv, list(sys.path)
    with torch_alias():
        try:
            if run_module:
                sys.argv = [target, *args]
                runpy.run_module(target, run_name="__main__", alter_sys=True)
            else:
                sys.argv = [target, *args]
                # Like `python script.py`: the script's own folder comes first on sys.path.
                sys.path.insert(0, os.path.dirname(os.path.abspath(target)))
                runpy.run_path(target, run_name="__main__")
        finally:
            sys.argv = old_argv
            sys.path[:] = old_path


if __name__ == "__main__":
    # Run through the importable module so install() state lives in one place.
    from gradstream.alias import main as _main

    _main()
