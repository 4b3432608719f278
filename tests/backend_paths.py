"""What each non-native backend path has no kernel for.

`GRADSTREAM_BACKEND=generic` runs CPU tensors on candle's ops: the path any device takes
where gradstream has no kernel of its own. The ops below raise NotImplementedError there,
naming themselves and the device; they are what a new device's own kernels must cover (the
CUDA backend's, for one). `conftest.py` reports a test that meets a listed op as expected
to fail, and fails a test that meets an op not listed here.
"""

from __future__ import annotations

import builtins
import re

_UNARY = "candle has no element-wise {}"
_BINARY = "candle has no element-wise {} with PyTorch's rules"

GENERIC: dict[str, str] = {
    # element-wise
    **{
        op: _UNARY.format(op)
        for op in (
            "log1p expm1 asin acos atan sinh cosh asinh acosh atanh round trunc frac bitwise_not"
        ).split()
    },
    **{
        op: _BINARY.format(op)
        for op in (
            "pow floor_divide remainder fmod atan2 hypot bitwise_and bitwise_or "
            "bitwise_xor logical_xor"
        ).split()
    },
    # in-place writes
    "copy_": "candle writes only contiguous destinations (slice_set)",
    "add_": "candle writes only contiguous destinations (slice_set)",
    "mul_": "candle writes only contiguous destinations (slice_set)",
    "sub_": "candle writes only contiguous destinations (slice_set)",
    "div_": "candle writes only contiguous destinations (slice_set)",
    "slice_backward": "candle writes only contiguous destinations (slice_set)",
    "split_backward": "candle writes only contiguous destinations (slice_set)",
    "index_put_": "candle writes only contiguous destinations (scatter_set)",
    # reductions and scans
    "prod": "candle has no product reduction",
    "cumprod": "candle has no cumulative product",
    "cumsum": "candle's cumsum is an O(n^2) matmul, for floats only",
    # fused kernels
    "volume_render": "the fused NeRF renderer is gradstream's own kernel",
    "scaled_dot_product_attention": "attention that never stores the scores is gradstream's own",
    **{
        f"{rule} step": "the fused in-place optimizer step is gradstream's own kernel"
        for rule in (
            "SGD Adam RMSprop Adagrad Adamax NAdam RAdam Adadelta Rprop ASGD Adafactor"
        ).split()
    },
    # nn
    **{
        op: "candle's pooling has no indices, padding, dilation or ceil_mode"
        for op in (
            "max_pool1d max_pool2d avg_pool1d avg_pool2d adaptive_max_pool1d "
            "adaptive_max_pool2d adaptive_avg_pool1d adaptive_avg_pool2d"
        ).split()
    },
    "interpolate": "candle has only nearest 2-d upsampling",
    "conv2d": "candle's conv2d takes square arguments and one group",
    "conv2d_weight_grad": "candle has no convolution weight gradient",
    "conv_transpose2d": "candle's conv_transpose2d takes square arguments and one group",
}

# What the CUDA backend's own kernels cover of the generic path's gaps (src/backend/cuda/).
CUDA_KERNELS: set[str] = {
    *(
        f"{rule} step"
        for rule in (
            "SGD Adam RMSprop Adagrad Adamax NAdam RAdam Adadelta Rprop ASGD Adafactor"
        ).split()
    ),
    # elementwise.cu
    *(
        "log1p expm1 asin acos atan sinh cosh asinh acosh atanh round trunc frac bitwise_not "
        "pow floor_divide remainder fmod atan2 hypot bitwise_and bitwise_or bitwise_xor "
        "logical_and logical_or logical_xor"
    ).split(),
    # lines.cu
    "prod",
    "cumprod",
    "cumsum",
    # inplace.cu, index.cu
    *"copy_ add_ mul_ slice_backward split_backward index_put_".split(),
    # render.cu
    "volume_render",
    # pool.cu
    *(
        "max_pool1d max_pool2d avg_pool1d avg_pool2d adaptive_max_pool1d adaptive_max_pool2d "
        "adaptive_avg_pool1d adaptive_avg_pool2d interpolate"
    ).split(),
    # attention.cu
    "scaled_dot_product_attention",
    # conv.cu
    "conv2d",
    "conv2d_weight_grad",
    "conv_transpose2d",
}

# `cuda-emulated`: the CUDA backend on CPU tensors, its kernels run by the CPU emulator;
# what it has no kernel for falls back to candle's ops, as on the generic path.
CUDA_EMULATED: dict[str, str] = {
    op: f"no CUDA kernel yet; {why}" for op, why in GENERIC.items() if op not in CUDA_KERNELS
}

NO_KERNEL: dict[str, dict[str, str]] = {"generic": GENERIC, "cuda-emulated": CUDA_EMULATED}


# Python 3.11's; hypothesis reports several distinct failures as one.
_GROUP = getattr(builtins, "BaseExceptionGroup", ())

_MISSING = re.compile(r"^(.+?): not implemented on device '")


def missing_kernels(e: BaseException) -> list[str] | None:
    """The ops `e` says have no kernel: one, or for a group of failures (hypothesis reports
    distinct failures as one) each member's; None if any failure is something else."""
    if isinstance(e, _GROUP):
        ops = [missing_kernels(m) for m in e.exceptions]
        return None if any(o is None for o in ops) else [op for o in ops for op in o]
    op = missing_kernel(e)
    return None if op is None else [op]


def missing_kernel(e: BaseException | None) -> str | None:
    """The op a 'no kernel on this device' NotImplementedError names (in `e`'s chain)."""
    while e is not None:
        if isinstance(e, NotImplementedError):
            m = _MISSING.match(str(e))
            if m:
                return m.group(1)
        e = e.__cause__ or e.__context__
    return None


def reraise_missing(e: BaseException) -> None:
    """Re-raise `e` if it is a missing kernel's NotImplementedError: a helper that compares
    exception classes must not count it as the library's answer."""
    if missing_kernel(e) is not None:
        raise e
