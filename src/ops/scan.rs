//! Scans: `cumsum` and `cumprod` along any dim, with O(n) kernels.
