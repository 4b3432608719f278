//! The CPU backend: gradstream's own kernels, each where candle's CPU op is slow or
//! misses PyTorch's semantics (each file says why), rayon-parallel above `PAR_MIN`
//! elements. `benches/kernels.rs` times each against candle's op.

// The CPU kernels call candle's CPU casts, which have every dtype.
#![allow(clippy::disallowed_methods)]

pub mod adafactor;
pub mod attention;
pub mod block_sum;
pub mod cast;
pub mod conv;
pub mod dense;
pub mod elementwise;
pub mod index;
pub mod inplace;
pub mod linalg;
pub mod lines;
pub mod mask;
pub mod matmul;
pub mod nn;
pub mod norm;
pub mod optim;
pub mod optim_coded;
pub mod pool;
pub mod render;
pub mod scalar;
pub mod sort;
pub mod vmath;

/// Below this many elements a kernel stays on one thread.
pub const PAR_MIN: usize = 1 << 15;

/// gradstream's CPU kernels: each family's `impl` is in its file.
pub struct Cpu;
