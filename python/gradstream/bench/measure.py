"""Peak memory and step time, measured the same way in every system's process.

Peak bytes are the RSS high-water mark above the idle baseline. The harness starts each child
with `MALLOC_MMAP_THRESHOLD_=65536` so freed tensors go back to the OS (and leave RSS), and the
high-water mark is reset after the warm-up step by writing "5" to /proc/self/clear_refs, so the
peak is that of the measured steps. The candle program does the same in Rust.

On a GPU (`--device cuda`) the same loop runs with `sync`, the device's synchronisation,
before each step's timer starts and before it stops, and `mark` prints the phases for the
harness's driver-memory sampler (`gpu.py`); the peaks are read by the child (`child.py`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def status_bytes(field: str) -> int:
    """A `VmRSS`/`VmHWM` line of /proc/self/status in bytes (0 where there is no procfs)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def reset_hwm() -> bool:
    """Reset the RSS high-water mark to the current RSS; False where the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def measure(
    step: Callable[[], float],
    steps: int,
    baseline: int,
    after_warmup: Callable[[], None] = lambda: None,
    sync: Callable[[], None] = lambda: None,
    mark: Callable[[str], None] = lambda phase: None,
) -> dict:
    """One warm-up step, then `steps` timed steps; the figures of one configuration.
    `sync` waits for the device (nothing to wait for on the CPU); `mark` names the phases."""
    losses = [step()]
    steady = status_bytes("VmRSS") - baseline
    after_warmup()
    hwm_reset = reset_hwm()
    sync()
    mark("measure")
    times = []
    for _ in range(steps):
        sync()
        t0 = time.perf_counter()
        losses.append(step())
        sync()
        times.append(time.perf_counter() - t0)
    mark("done")
    peak = status_bytes("VmHWM") - baseline
    return {
        "status": "ok",
        "peak_bytes": peak,
        "baseline_rss_bytes": baseline,
        "steady_bytes": steady,
        "hwm_reset": hwm_reset,
        "step_seconds": statistics.median(times) if times else 0.0,
        "step_times": times,
        "losses": losses,
    }
