"""Forked processes after gradstream has run parallel kernels: DataLoader workers with the
default start method (fork on Linux, as PyTorch's) and explicit fork/spawn contexts load
the same batches as the main process, and a bare `os.fork` child runs kernels. A forked
child inherits rayon's pool without its threads; gradstream makes the child's thread a
one-thread pool of its own. Each run is a subprocess with a timeout, so a hang fails the
test instead of stopping the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(os.name != "posix", reason="fork is a POSIX start method")

SCRIPT = textwrap.dedent(
    """
    import multiprocessing
    import sys
    import gradstream as gs
    from gradstream.utils.data import DataLoader, Dataset

    class Products(Dataset):
        def __len__(self):
            return 8

        def __getitem__(self, i):
            gs.manual_seed(i)
            x = gs.randn(256, 256)
            return (x @ x).tanh().sum(0)  # parallel kernels inside the worker

    if __name__ == "__main__":
        method = sys.argv[1]
        a = gs.randn(1024, 1024)
        (a @ a).tanh().sum().item()  # the thread pool is live before the workers start
        context = None if method == "default" else multiprocessing.get_context(method)
        loader = DataLoader(Products(), batch_size=2, num_workers=2,
                            multiprocessing_context=context)
        batches = [b for b in loader]
        serial = [b for b in DataLoader(Products(), batch_size=2)]
        assert [tuple(b.shape) for b in batches] == [(2, 256)] * 4
        assert all(gs.equal(b, s) for b, s in zip(batches, serial))
        print("ok", multiprocessing.get_start_method())
    """
)

FORK = textwrap.dedent(
    """
    import os
    import numpy as np
    import gradstream as gs

    a = gs.randn(512, 512)
    expected = (a @ a).sum(0).numpy()
    def same():
        return np.allclose((a @ a).sum(0).numpy(), expected, rtol=1e-5, atol=1e-3)

    pid = os.fork()
    if pid == 0:
        # the child, then its own child: kernels run in both
        ok = same()
        inner = os.fork()
        if inner == 0:
            os._exit(0 if same() else 3)
        _, status = os.waitpid(inner, 0)
        os._exit(0 if ok and os.WEXITSTATUS(status) == 0 else 2)
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, status
    print("ok")
    """
)


def run(tmp_path, text, *args):
    script = tmp_path / "script.py"
    script.write_text(text)
    try:
        out = subprocess.run(
            [sys.executable, str(script), *args], capture_output=True, text=True, timeout=240
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{args or 'the script'} hung after parallel kernels had run")
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.mark.parametrize("method", ["default", "fork", "spawn"])
def test_workers_start_after_parallel_kernels(tmp_path, method):
    out = run(tmp_path, SCRIPT, method)
    assert out.startswith("ok")
    if method == "default" and sys.platform.startswith("linux") and sys.version_info < (3, 14):
        assert out.split()[1] == "fork"


def test_a_forked_child_and_its_child_run_kernels(tmp_path):
    assert run(tmp_path, FORK).startswith("ok")
