"""Shared fixtures: PyTorch is the reference where installed; tests that need it skip without it."""

import collections
import json
import os
import signal

import backend_paths
import numpy as np
import pytest
from hypothesis import settings

import gradstream as gs

# The property tests draw the same examples on every run (CI must not turn red on a new
# random draw); `pytest --hypothesis-profile=explore` draws fresh ones, and `long` many more.
settings.register_profile("fixed", derandomize=True, deadline=None)
settings.register_profile("explore", deadline=None)
settings.register_profile("long", max_examples=1000, deadline=None)
settings.load_profile("fixed")

try:
    import torch
except ImportError:  # pragma: no cover - CI always installs it
    torch = None


@pytest.fixture
def torch_ref():
    """PyTorch, or a skip when it is not installed."""
    if torch is None:
        pytest.skip("PyTorch is not installed")
    return torch


@pytest.fixture(autouse=True)
def _seed():
    gs.manual_seed(0)
    np.random.seed(0)


# ---------------------------------------------------------------- the backend path
#
# `GRADSTREAM_BACKEND=generic` runs CPU tensors through the generic path (candle's ops, the
# fallback every device takes where it has no kernel of its own), and `cuda-emulated`
# through the CUDA backend with its kernels run by the CPU emulator. On those paths an op
# with no kernel raises NotImplementedError naming itself and the device: a test that
# meets one of the ops listed in `backend_paths.NO_KERNEL` for its path is reported as
# expected to fail; an op that is not listed fails the test.

PATH = gs._core._backend_of("cpu")
_asked = os.environ.get("GRADSTREAM_BACKEND")
if _asked and _asked != PATH:
    raise pytest.UsageError(
        f"GRADSTREAM_BACKEND={_asked}, but this build runs CPU tensors on '{PATH}' "
        "(cuda-emulated needs the cuda-emulator feature)"
    )

SEEN: collections.Counter[str] = collections.Counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if PATH == "cpu" or call.excinfo is None or call.when != "call":
        return
    ops = backend_paths.missing_kernels(call.excinfo.value)
    if ops is None:
        return
    SEEN.update(set(ops))
    listed = backend_paths.NO_KERNEL.get(PATH, {})
    unlisted = sorted({op for op in ops if op not in listed})
    if not unlisted:
        report.outcome = "skipped"
        report.wasxfail = "; ".join(
            f"{op}: no kernel on the {PATH} path ({listed[op]})" for op in sorted(set(ops))
        )
    else:
        report.sections.append(
            (
                "backend path",
                f"{', '.join(unlisted)}: no kernel on the {PATH} path, and not listed in "
                "tests/backend_paths.py",
            )
        )


def pytest_terminal_summary(terminalreporter):
    # What the README's test command costs in memory (its child processes are not counted).
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    terminalreporter.write_line(f"peak RSS of the pytest process: {peak:.0f} MiB")
    if PATH == "cpu":
        return
    listed = backend_paths.NO_KERNEL.get(PATH, {})
    tr = terminalreporter
    tr.section(f"ops without a kernel on the {PATH} path")
    for op, n in sorted(SEEN.items()):
        mark = "listed" if op in listed else "NOT LISTED"
        tr.write_line(f"{op}: {n} test(s) ({mark})")
    unseen = sorted(set(listed) - set(SEEN))
    if unseen:
        tr.write_line(f"listed but not met in this run: {', '.join(unseen)}")
    report = os.environ.get("GRADSTREAM_PATH_REPORT")
    if report:
        with open(report, "w") as f:
            json.dump({"path": PATH, "seen": dict(SEEN), "listed": sorted(listed)}, f, indent=1)


# ---------------------------------------------------------------- the test device
#
# `GRADSTREAM_TEST_DEVICE=cuda` makes CUDA the default device, so every factory in the
# suite makes CUDA tensors and the parity tests compare CUDA results with PyTorch's.
# Without a GPU every test skips. A test that cannot run on CUDA is marked
# `@pytest.mark.cpu_only("why")`.

TEST_DEVICE = os.environ.get("GRADSTREAM_TEST_DEVICE", "cpu")
if TEST_DEVICE != "cpu" and gs.cuda.is_available():
    gs.set_default_device(TEST_DEVICE)


def pytest_configure(config):
    # A pytest started as a background job (`nohup ... &`) inherits an ignored SIGINT, and
    # Python then installs no handler of its own; the tests that press Ctrl-C need it.
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    config.addinivalue_line("markers", "cpu_only(reason): a test that cannot run on CUDA")
    config.addinivalue_line(
        "markers",
        "cpu_backend(reason): a test of what the CPU backend's own kernels or allocator do "
        "(byte counts, 1-bit masks, the block cache), or of whole programs in child "
        "processes; skipped on the other backend paths",
    )


def pytest_collection_modifyitems(config, items):
    if PATH != "cpu":
        for item in items:
            mark = item.get_closest_marker("cpu_backend")
            if mark is not None:
                why = mark.args[0] if mark.args else "the CPU backend's own"
                item.add_marker(pytest.mark.skip(reason=f"CPU backend only: {why}"))
    if TEST_DEVICE == "cpu":
        return
    if not gs.cuda.is_available():
        skip = pytest.mark.skip(reason=f"GRADSTREAM_TEST_DEVICE={TEST_DEVICE}, no CUDA device")
        for item in items:
            item.add_marker(skip)
        return
    for item in items:
        mark = item.get_closest_marker("cpu_only")
        if mark is not None:
            why = mark.args[0] if mark.args else "CPU only"
            item.add_marker(pytest.mark.skip(reason=f"CPU only: {why}"))
