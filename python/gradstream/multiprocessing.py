"""`gradstream.multiprocessing`, as `torch.multiprocessing`: the standard `multiprocessing`
module (everything in its `__all__`), plus `spawn` / `start_processes`, which run
`fn(i, *args)` in `nprocs` processes and raise the first failure in the parent.

Differences from PyTorch: a tensor sent to another process (a `Queue`, `Pool` arguments or
results, `spawn`'s `args`) is pickled and arrives as a copy, not as a view of shared memory,
so a child's in-place change is not seen by the parent. The sharing strategies are accepted
and reported as PyTorch's, and change nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import tempfile
import time
import traceback
import warnings
from multiprocessing import *  # noqa: F403  (the standard module's API, as torch's has)

__all__ = [
    "set_sharing_strategy",
    "get_sharing_strategy",
    "get_all_sharing_strategies",
    *multiprocessing.__all__,
]

if sys.platform in ("darwin", "win32"):
    _all_sharing_strategies = {"file_system"}
else:
    _all_sharing_strategies = {"file_descriptor", "file_system"}
_sharing_strategy = "file_system" if sys.platform in ("darwin", "win32") else "file_descriptor"


def set_sharing_strategy(new_strategy: str) -> None:
    """Accepts one of `get_all_sharing_strategies()` (tensors are copied whichever it is)."""
    global _sharing_strategy
    if new_strategy not in _all_sharing_strategies:
        raise AssertionError(
            f"invalid sharing strategy {new_strategy!r}, expected one of {_all_sharing_strategies}"
        )
    _sharing_strategy = new_strategy


def get_sharing_strategy() -> str:
    return _sharing_strategy


def get_all_sharing_strategies() -> set[str]:
    return _all_sharing_strategies


class ProcessException(Exception):
    """A process started by `spawn` / `start_processes` failed."""

    def __init__(self, msg: str, error_index: int, error_pid: int) -> None:
        super().__init__(msg)
        self.msg = msg
        self.error_index = error_index
        self.error_pid = error_pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.error_pid)


class ProcessRaisedException(ProcessException):
    """The process's `fn` raised; the message carries its traceback."""


class ProcessExitedException(ProcessException):
    """The process exited with a non-zero code, or was killed by a signal."""

    def __init__(
        self,
        msg: str,
        error_index: int,
        error_pid: int,
        exit_code: int,
        signal_name: str | None = None,
    ) -> None:
        super().__init__(msg, error_index, error_pid)
        self.exit_code = exit_code
        self.signal_name = signal_name

    def __reduce__(self):
        args = (self.msg, self.error_index, self.error_pid, self.exit_code, self.signal_name)
        return type(self), args


def _die_with_parent() -> None:
    """On Linux, have the kernel send this process SIGINT when its parent dies, so that
    non-daemonic processes do not outlive a killed parent."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGINT)


def _run(fn, i: int, args: tuple, error_file: str) -> None:
    _die_with_parent()
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass  # the parent stopped this process after another one failed
    except Exception:
        # A file rather than a queue: a large traceback cannot block the child on a full pipe.
        with open(error_file, "wb") as f:
            pickle.dump(traceback.format_exc(), f)
        sys.exit(1)


class ProcessContext:
    """The processes of one `start_processes(..., join=False)` call."""

    def __init__(self, processes, error_files) -> None:
        self.processes = processes
        self.error_files = error_files
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self) -> list[int]:
        return [int(p.pid) for p in self.processes]

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        """Waits (up to `timeout` seconds) for a process to end. True once all have ended
        successfully, False while some still run; on the first failure the others are
        stopped (after `grace_period` seconds, SIGTERM, then SIGKILL) and the failure is
        raised as `ProcessRaisedException` or `ProcessExitedException`."""
        if not self.sentinels:
            return True
        failed = None
        for sentinel in multiprocessing.connection.wait(list(self.sentinels), timeout=timeout):
            index = self.sentinels.pop(sentinel)
            self.processes[index].join()
            if self.processes[index].exitcode != 0:
                failed = index
                break
        if failed is None:
            if not self.sentinels:
                self._remove_error_files()
            return not self.sentinels
        self._stop_all(grace_period)
        try:
            self._raise(failed)
        finally:
            self._remove_error_files()

    def _remove_error_files(self) -> None:
        for path in self.error_files:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)

    def _stop_all(self, grace_period: float | None) -> None:
        if grace_period is not None:
            self._join_all(grace_period)
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        self._join_all(30 if grace_period is None else grace_period)
        for p in self.processes:
            if p.is_alive():
                p.kill()
            p.join()

    def _join_all(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        for p in self.processes:
            p.join(max(0.0, deadline - time.monotonic()))

    def _raise(self, index: int):
        process = self.processes[index]
        error_file = self.error_files[index]
        if os.access(error_file, os.R_OK):
            with open(error_file, "rb") as f:
                trace = pickle.load(f)
            msg = f"\n\n-- Process {index:d} terminated with the following error:\n{trace}"
            raise ProcessRaisedException(msg, index, process.pid)
        code = process.exitcode
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"<Unknown signal {-code}>"
            raise ProcessExitedException(
                f"process {index:d} terminated with signal {name}",
                error_index=index,
                error_pid=process.pid,
                exit_code=code,
                signal_name=name,
            )
        raise ProcessExitedException(
            f"process {index:d} terminated with exit code {code:d}",
            error_index=index,
            error_pid=process.pid,
            exit_code=code,
        )


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Runs `fn(i, *args)` for i in range(nprocs), each in a process started with
    `start_method`. With `join`, waits for all and returns None (raising the first failure);
    otherwise returns their `ProcessContext`."""
    context = multiprocessing.get_context(start_method)
    error_files, processes = [], []
    for i in range(nprocs):
        # A name for the child to write its traceback to; the file exists only if it fails.
        with tempfile.NamedTemporaryFile(prefix="gradstream-spawn-", suffix=".pickle") as f:
            error_files.append(f.name)
        p = context.Process(target=_run, args=(fn, i, args, error_files[i]), daemon=daemon)
        p.start()
        processes.append(p)
    process_context = ProcessContext(processes, error_files)
    if not join:
        return process_context
    while not process_context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """`start_processes` with the "spawn" start method (another `start_method` is warned
    about and ignored, as in PyTorch)."""
    if start_method != "spawn":
        warnings.warn(
            f"This method only supports start_method=spawn (got: {start_method}).\n"
            "To use a different start_method use:\n\t\t"
            " torch.multiprocessing.start_processes(...)",
            FutureWarning,
            stacklevel=2,
        )
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
