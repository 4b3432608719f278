"""Tensors of every dtype gradstream has, made alike in gradstream and PyTorch from NumPy
values, for the tests of files both libraries read."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

import gradstream as gs

DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "int32", "uint8", "bool"]
FLOATS = {"float32", "float64", "float16", "bfloat16"}

shapes = st.lists(st.integers(0, 4), min_size=0, max_size=3).map(tuple)


def values(dtype: str, shape, seed: int) -> np.ndarray:
    """Values of `dtype` (bfloat16: float32 values bfloat16 holds exactly)."""
    rng = np.random.default_rng(seed)
    if dtype in FLOATS:
        x = np.asarray(rng.standard_normal(shape) * 10.0 ** rng.integers(-3, 4))
        if dtype == "bfloat16":
            bits = x.astype(np.float32).view(np.uint32) & 0xFFFF0000
            return np.asarray(bits).view(np.float32)
        return x.astype(dtype)
    if dtype == "bool":
        return np.asarray(rng.integers(0, 2, shape).astype(bool))
    info = np.iinfo(dtype)
    return np.asarray(rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True))


def gs_tensor(dtype: str, arr: np.ndarray):
    if dtype == "bfloat16":
        return gs.from_numpy(arr).to(gs.bfloat16)
    return gs.from_numpy(np.array(arr, order="C"))


def torch_tensor(dtype: str, arr: np.ndarray):
    import torch

    return torch.from_numpy(np.array(arr, order="C")).to(getattr(torch, dtype))
