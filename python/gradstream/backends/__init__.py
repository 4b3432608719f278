"""`gradstream.backends`: what this build has, answered as `torch.backends` answers it.
gradstream's CPU kernels are its own (rayon threads, the gemm crate): no cuDNN, MKL-DNN,
OpenMP or MPS, and no CUDA in this build."""

from . import cuda, cudnn, mkldnn, mps, openmp

__all__ = ["cuda", "cudnn", "mkldnn", "mps", "openmp"]
