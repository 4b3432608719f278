"""DataLoader workers after gradstream has run parallel kernels: with the default start
method they load (gradstream's loader starts workers with spawn, since a forked child
inherits the Rust thread pool without its threads). Each run is a subprocess with a
timeout, so a hang fails the test instead of stopping the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent(
    """
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
        a = gs.randn(1024, 1024)
        (a @ a).tanh().sum().item()  # the thread pool is live before the workers start
        loader = DataLoader(Products(), batch_size=2, num_workers=2)
        batches = [tuple(b.shape) for b in loader]
        serial = [tuple(b.shape) for b in DataLoader(Products(), batch_size=2)]
        assert batches == serial == [(2, 256)] * 4, batches
        print("ok", loader.multiprocessing_context)
    """
)


@pytest.mark.skipif(os.name != "posix", reason="fork is the default start method on Linux")
def test_default_workers_start_after_parallel_kernels(tmp_path):
    script = tmp_path / "load.py"
    script.write_text(SCRIPT)
    try:
        out = subprocess.run(
            [sys.executable, str(script)], capture_output=True, text=True, timeout=240
        )
    except subprocess.TimeoutExpired:
        pytest.fail("DataLoader(num_workers=2) hung after parallel kernels had run")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok")
