"""What `--device cuda` adds to the harness: the check that there is a GPU, the driver's view
of a configuration's device memory, the ballast that caps it, and the candle program's
libraries.

Driver memory: the harness (this process, which holds no CUDA context) samples the device's
used memory through NVML (`pynvml`, from the `nvidia-ml-py` package) in a background thread
while a configuration's process runs; the child prints phase marks on stdout (`PHASE`
lines: `baseline` when its runtime has started and nothing of the workload is on the device,
`measure` after the warm-up step, `done` after the measured steps). The figure is the
highest sample between `measure` and `done` minus the level at `baseline`. Why NVML, from
here: one method for all three systems, the Rust candle program included, with nothing
added to their processes (a sampling thread inside a Python child would take the GIL from
the step it times), and no CUDA context of its own. Why the device's total, not the
process's own figure: NVML's per-process figures need the container's process ids to be the
host's, which they often are not; each configuration runs alone, so the device's total moves
only with it.
"""

from __future__ import annotations

import ctypes
import os
import statistics
import subprocess
import sys
import threading
import time

PHASE = "@@gradstream-bench phase "
"""The prefix of a child's phase mark on stdout (followed by the phase's name)."""

# The quiet span around the `baseline` mark: the child waits this long before and after it.
BASELINE_QUIET_S = 0.05

MEMORY_METHOD = (
    "peak: the library's own counter of the bytes its tensors hold on the device "
    "(torch.cuda.max_memory_allocated, gradstream.cuda.max_memory_allocated), reset after one "
    "warm-up step, above its value before the workload was loaded; candle has no such counter. "
    "driver: the device's used memory as NVML reports it, sampled by the harness in a "
    "background thread while the configuration's process runs, the highest sample during the "
    "measured steps above the level once the process's runtime had started and before the "
    "workload was loaded (context, kernels and the libraries' own workspaces before that are "
    "not counted; allocator caches and pools are); a reservation held for less than the "
    "sampling period can be missed"
)


def mark(phase: str) -> None:
    """Print a phase mark for the harness's sampler (a child's side)."""
    if phase == "baseline":
        time.sleep(BASELINE_QUIET_S)
    sys.stdout.write(f"\n{PHASE}{phase}\n")
    sys.stdout.flush()
    if phase == "baseline":
        time.sleep(BASELINE_QUIET_S)


# ---------------------------------------------------------------- is there a GPU


def cuda_unavailable_reason() -> str | None:
    """Why this machine cannot run `--device cuda` (gradstream sees no CUDA device), or None."""
    try:
        import gradstream
    except ImportError as e:  # pragma: no cover - the bench is part of the package
        return f"gradstream does not import: {e}"
    if gradstream.cuda.is_available():
        return None
    build = getattr(getattr(gradstream, "_build", None), "chosen", "cpu")
    why = (
        "this gradstream is the CPU build; tools/build-cuda-wheel.sh builds the CUDA wheel"
        if build != "cuda"
        else "the CUDA build loaded but the driver reports no device"
    )
    return f"--device cuda: no CUDA device here: gradstream.cuda.is_available() is False ({why})"


def torch_cuda_reason() -> str | None:
    """Why PyTorch cannot run on the GPU here, or None."""
    try:
        import torch
    except ImportError:
        return "PyTorch is not installed"
    if not torch.cuda.is_available():
        return f"this PyTorch ({torch.__version__}) sees no CUDA device"
    return None


# ---------------------------------------------------------------- the driver's view


def _nvml_index() -> tuple[str, str | int]:
    """How NVML names CUDA's device 0: the first entry of CUDA_VISIBLE_DEVICES (an index or
    a UUID), else index 0."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return "uuid", visible
    if visible.isdigit():
        return "index", int(visible)
    return "index", 0


class Sampler:
    """The device's used memory (NVML), sampled every `period` seconds while started."""

    def __init__(self, nvml, handle, period: float = 0.0005):
        self._nvml = nvml
        self._handle = handle
        self.period = period
        self._samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @classmethod
    def open(cls) -> tuple[Sampler | None, str | None]:
        """A sampler of CUDA's device 0, or None and why not."""
        try:
            import pynvml
        except ImportError:
            return None, "pynvml is not installed (pip install nvidia-ml-py)"
        try:
            pynvml.nvmlInit()
            how, which = _nvml_index()
            if how == "uuid":
                handle = pynvml.nvmlDeviceGetHandleByUUID(which)
            else:
                handle = pynvml.nvmlDeviceGetHandleByIndex(which)
            pynvml.nvmlDeviceGetMemoryInfo(handle)
        except Exception as e:  # NVMLError and its subclasses, a missing libnvidia-ml
            return None, f"NVML: {type(e).__name__}: {e}"
        return cls(pynvml, handle), None

    def describe(self) -> dict:
        """The device and driver, for the results' meta."""
        out: dict = {"driver_sample_period_target_s": self.period}
        for key, call in (
            ("gpu", lambda: self._nvml.nvmlDeviceGetName(self._handle)),
            ("gpu_memory_bytes", lambda: self._nvml.nvmlDeviceGetMemoryInfo(self._handle).total),
            ("driver_version", self._nvml.nvmlSystemGetDriverVersion),
        ):
            try:
                value = call()
                out[key] = value.decode() if isinstance(value, bytes) else value
            except Exception:
                pass
        return out

    def used(self) -> int:
        return int(self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used)

    def start(self) -> None:
        self._samples = []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        samples = self._samples
        while not self._stop.is_set():
            try:
                samples.append((time.monotonic(), self.used()))
            except Exception:  # the device went away: keep what was sampled
                return
            time.sleep(self.period)

    def stop(self) -> list[tuple[float, int]]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        return self._samples


def driver_figures(samples: list[tuple[float, int]], marks: dict[str, float]) -> dict:
    """The driver's figures of one configuration from the samples and the child's marks:
    `driver_peak_bytes` (the highest sample from `measure` to `done` above the `baseline`
    level), or `driver_reason` when they cannot say."""
    missing = [p for p in ("baseline", "measure", "done") if p not in marks]
    if missing:
        return {"driver_reason": f"the child printed no {', '.join(missing)} mark"}
    tb, tm, td = marks["baseline"], marks["measure"], marks["done"]
    quiet = [u for t, u in samples if tb - 0.8 * BASELINE_QUIET_S <= t <= tb]
    before = [u for t, u in samples if t <= tb]
    window = [u for t, u in samples if tm <= t <= td]
    if not (quiet or before) or not window:
        return {"driver_reason": f"too few samples ({len(samples)}) to place the marks"}
    baseline = statistics.median(quiet) if quiet else before[-1]
    gaps = [b[0] - a[0] for a, b in zip(samples, samples[1:], strict=False)]
    return {
        "driver_peak_bytes": max(window) - int(baseline),
        "driver_baseline_bytes": int(baseline),
        "driver_samples": len(window),
        "driver_sample_period_s": statistics.median(gaps) if gaps else None,
    }


def run_sampled(cmd: list[str], env: dict[str, str], timeout: float, sampler: Sampler):
    """Run `cmd` while `sampler` samples the device; (returncode or None on timeout, stdout,
    stderr, driver figures)."""
    marks: dict[str, float] = {}
    out_lines: list[str] = []
    err_lines: list[str] = []
    proc = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1
    )

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(PHASE):
                marks.setdefault(line[len(PHASE) :].strip(), time.monotonic())
            else:
                out_lines.append(line)

    def read_err() -> None:
        assert proc.stderr is not None
        err_lines.extend(proc.stderr)

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    sampler.start()
    for r in readers:
        r.start()
    try:
        rc: int | None = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        rc = None
    for r in readers:
        r.join()
    samples = sampler.stop()
    return rc, "".join(out_lines), "".join(err_lines), driver_figures(samples, marks)


# ---------------------------------------------------------------- the cap of `--max-batch`


def leave_free(cap: int) -> int:
    """Allocate, straight from the driver, all of the device's free memory but `cap` bytes, for
    the life of the process (the ballast of `--max-batch`): what this process allocates from now
    on, through any allocator, has `cap` bytes. Runs on CUDA's device 0 in the primary context,
    the one PyTorch, gradstream and candle use. Returns the ballast's size."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(rc: int, what: str) -> None:
        if rc != 0:
            raise RuntimeError(f"ballast: {what} failed with CUresult {rc}")

    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    check(cuda.cuInit(0), "cuInit")
    check(cuda.cuDeviceGet(ctypes.byref(dev), 0), "cuDeviceGet")
    check(cuda.cuDevicePrimaryCtxRetain(ctypes.byref(ctx), dev), "cuDevicePrimaryCtxRetain")
    check(cuda.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    free, total = ctypes.c_size_t(), ctypes.c_size_t()
    check(cuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total)), "cuMemGetInfo")
    size = free.value - cap
    if size <= 0:
        raise RuntimeError(f"ballast: only {free.value} bytes free, under the cap of {cap}")
    ptr = ctypes.c_uint64()
    check(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)), f"cuMemAlloc({size})")
    return size


# ---------------------------------------------------------------- the candle program


def nvidia_library_dirs() -> list[str]:
    """The library folders of the `nvidia-*` packages PyTorch installs (cuBLAS, cuRAND), where
    the candle program's CUDA build finds its libraries."""
    from .._build import _nvidia_dirs

    return list(dict.fromkeys(_nvidia_dirs()))


def candle_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with the nvidia-* library folders first on LD_LIBRARY_PATH (the candle child's
    own environment only)."""
    dirs = nvidia_library_dirs()
    if env.get("LD_LIBRARY_PATH"):
        dirs.append(env["LD_LIBRARY_PATH"])
    return dict(env, LD_LIBRARY_PATH=":".join(dirs)) if dirs else dict(env)
