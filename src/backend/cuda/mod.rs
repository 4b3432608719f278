//! The CUDA backend: candle's CUDA ops everywhere candle has them (each family trait's
//! defaults, the generic path), and gradstream's own kernels (`kernels/*.cu`) where a
//! fused kernel saves memory or passes, or where candle has none.
//!
//! Each kernel's host code (its arguments and grid) is written once against
//! [`launch::launch`]: on a CUDA tensor it runs on the device (feature `cuda`); on a CPU
//! tensor with `GRADSTREAM_BACKEND=cuda-emulated` (feature `cuda-emulator`) it runs the
//! same kernel source on the CPU emulator, so the parity suite runs every kernel and its
//! host code without a GPU.

mod adafactor;
pub mod attention;
mod cast;
pub mod conv;
pub mod elementwise;
pub mod index;
pub mod inplace;
pub mod launch;
pub mod lines;
pub mod mask;
pub mod nn;
pub mod norm;
pub mod optim;
pub mod pool;
pub mod ptx;
pub mod render;
#[cfg(all(test, feature = "cuda-emulator"))]
mod testing;

#[cfg(feature = "cuda-emulator")]
mod emulator;
#[cfg(feature = "cuda")]
mod real;

#[cfg(feature = "cuda")]
pub use real::{buffer, device_ptr};

use std::collections::HashSet;
use std::sync::{Mutex, OnceLock};

use super::{LinalgOps, MatmulOps, SortOps};

/// gradstream's CUDA backend: each family's `impl` is in its file, or here when the
/// family runs candle's ops.
pub struct Cuda;

impl SortOps for Cuda {}
impl LinalgOps for Cuda {}
impl MatmulOps for Cuda {}

/// The suffix a kernel's name takes for an element type (`gs_adam_f32`).
pub fn dtype_suffix(dtype: candle_core::DType) -> &'static str {
    use candle_core::DType as D;
    match dtype {
        D::F32 => "f32",
        D::F64 => "f64",
        D::F16 => "f16",
        D::BF16 => "bf16",
        D::U8 => "u8",
        D::U32 => "u32",
        D::I16 => "i16",
        D::I32 => "i32",
        D::I64 => "i64",
        _ => "other",
    }
}

/// A kernel name made at run time, kept for the rest of the process (names are few).
pub fn intern(name: String) -> &'static str {
    static NAMES: OnceLock<Mutex<HashSet<&'static str>>> = OnceLock::new();
    let mut names = NAMES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if let Some(n) = names.get(name.as_str()) {
        return n;
    }
    let leaked: &'static str = Box::leak(name.into_boxed_str());
    names.insert(leaked);
    leaked
}
