"""Which build of the extension this process runs.

A CUDA wheel (`tools/build-cuda-wheel.sh`) carries two builds of `gradstream._core`: the
CPU one (`_core.*.so`, as `pip install .` builds it) and the CUDA one (`_cuda/_core.*.so`).
The CUDA build links the driver's `libcuda.so.1` and CUDA's cuBLAS and cuRAND, so it loads
only where those do. `load()` runs before anything imports `_core`: where the driver is
there, it loads cuBLAS and cuRAND from the `nvidia-*` packages PyTorch installs (as
PyTorch itself does, so no `LD_LIBRARY_PATH` is needed) and imports the CUDA build as
`gradstream._core`; anywhere else the CPU build is imported as usual.
`GRADSTREAM_BUILD=cpu` keeps the CPU build. Importing this module does it.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import sys

# What the CUDA build needs besides the driver, by soname (CUDA 13), in load order.
_CUDA_LIBS = ("libcublasLt.so.13", "libcublas.so.13", "libcurand.so.10")

chosen = "cpu"
"""The build this process imported: "cpu" or "cuda"."""


def _nvidia_dirs() -> list[str]:
    """The library folders of the `nvidia-*` packages on `sys.path`."""
    dirs: list[str] = []
    for p in sys.path:
        for pattern in ("nvidia/cu13/lib", "nvidia/*/lib"):
            dirs.extend(glob.glob(os.path.join(p, pattern)))
    return dirs


def _preload() -> bool:
    """Load the driver and CUDA's libraries globally; whether all of them loaded."""
    try:
        ctypes.CDLL("libcuda.so.1", mode=ctypes.RTLD_GLOBAL)
    except OSError:
        return False
    dirs = _nvidia_dirs()
    for soname in _CUDA_LIBS:
        candidates = [os.path.join(d, soname) for d in dirs] + [soname]
        for path in candidates:
            if path != soname and not os.path.exists(path):
                continue
            try:
                ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                break
            except OSError:
                continue
        else:
            return False
    return True


def load() -> None:
    """Import the CUDA build as `gradstream._core` where it can run."""
    global chosen
    if os.environ.get("GRADSTREAM_BUILD") == "cpu":
        return
    found = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "_cuda", "_core*.so")))
    if not found or not _preload():
        return
    spec = importlib.util.spec_from_file_location("gradstream._core", found[0])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except ImportError:
        return
    sys.modules["gradstream._core"] = module
    chosen = "cuda"


load()
