//! The device seam: every op reaches its kernels through one [`Backend`] per device.
//!
//! An op (in `ops/`) is written once: dtype rule, forward, what it saves, backward. For
//! the work on a tensor's elements it asks [`on`] for the backend of the tensor's device
//! and calls one method of a per-family trait, as burn's `Backend` splits its ops into
//! `FloatTensorOps`, `ActivationOps`... and candle's `BackendStorage` has one impl per
//! device. Each family trait's default methods are the fallback that any candle device
//! runs: candle's own op where it has one, else a NotImplementedError that names the op
//! and the device. A backend overrides what it does better.
//!
//! | family (trait)                | CPU (`cpu::Cpu`): ours                             | fallback (`Candle`)                      |
//! |-------------------------------|----------------------------------------------------|------------------------------------------|
//! | `CastOps`                     | candle's, with PyTorch's float-to-int and bool casts | candle's casts                          |
//! | `ElementwiseOps::unary`       | all of `UnaryOp` (rayon, strided, fused gelu/silu/...)  | candle's unary ops; not log1p/expm1/round/trunc/frac/bitwise |
//! | `ElementwiseOps::binary`      | all of `Bin` (Python `//` and `%`, int pow, fused backward) | add/sub/mul/div/max/min               |
//! | `ElementwiseOps::predicate`   | isnan/isinf/isfinite                               | candle comparisons                       |
//! | `InplaceOps`                  | strided `copy_`/`add_`..., `fill_`, dense copy     | contiguous destinations (`slice_set`)    |
//! | `MaskOps`                     | relu/threshold with a 1-bit mask, or in place      | candle's compare + where, no mask        |
//! | `ReduceOps::lines`            | scans, max/argmax, prod, softmax per line          | softmax, max/min, argmax/argmin, cumsum (O(n²)) |
//! | `ReduceOps::block_sum`        | parallel sum over a block of dims                  | none: candle's `sum_keepdim` runs        |
//! | `NnOps`                       | layer_norm rows, nll gather/scatter, embedding     | layer_norm, nll rows, embedding (`index_select`) |
//! | `PoolOps`                     | max pooling with a u8 argmax, separable resampling (avg pools, interpolation) | NotImplementedError |
//! | `NormOps`                     | batch norm's per-channel statistics, affine and gradient | candle's reductions in f64      |
//! | `IndexOps`                    | advanced-index take/put on any strided layout, bounds | dense take/put (`index_select`, `scatter_set`), bounds |
//! | `SortOps`                     | stable argsort of lines and rows, runs, binary search | the CPU kernels on the host        |
//! | `RenderOps`                   | fused NeRF volume renderer and its backward        | NotImplementedError                      |
//! | `OptimOps`                    | fused in-place optimizer steps, grad norms         | NotImplementedError                      |
//! | `AttentionOps`                | FlashAttention-2 forward and backward              | NotImplementedError                      |
//! | `ConvOps`                     | conv2d forward, input and weight grads (im2col + GEMM, groups) | candle's conv2d / conv_transpose2d (square args, groups=1) |
//! | `LinalgOps`                   | LU, Cholesky, QR, SVD, eigh, triangular solves (faer) | the CPU kernels on the host        |
//! | `MatmulOps`                   | f16/f32/f64 products on any strides (`gemm`, no copies) | candle's matmul (dense operands)       |
//!
//! Everything else is candle's on every device: views, and the float math candle has
//! kernels for (`affine`, `exp`, `sum_keepdim`...). candle's ops that its CUDA build cannot
//! run for every dtype or shape (casts, copies, comparisons, `where_cond`, fills, `cat`,
//! `index_select`) are disallowed by `clippy.toml` outside the CPU kernels and the
//! fallbacks, which are candle's ops by definition (each marked `#[allow]`); the library
//! calls drop-ins that go through the backend instead ([`cast::Convert`],
//! [`compare::Compare`], `device::zeros`/`full`, `ops::shape::join`).
//!
//! Adding a device: a unit struct, an empty `impl XOps for It {}` per family (the
//! fallback), then override the methods it has kernels for, and one arm in [`of`]
//! (docs/architecture.md, "Adding a device").

pub mod attention;
pub mod buffer;
pub mod candle;
pub mod cast;
pub mod coded;
pub mod compare;
pub mod conv;
pub mod cpu;
#[cfg(any(feature = "cuda", feature = "cuda-emulator"))]
pub mod cuda;
pub mod elementwise;
pub mod index;
pub mod inplace;
pub mod linalg;
pub mod lines;
pub mod mask;
pub mod matmul;
pub mod nn;
pub mod norm;
pub mod on_host;
pub mod optim;
pub mod pool;
pub mod render;
pub mod sort;
pub mod strided;

use candle_core::Device;

use crate::error::Error;

pub use attention::AttentionOps;
pub use buffer::{buffer_of, same_buffer, Buffer};
pub use cast::CastOps;
pub use compare::Compare;
pub use conv::{ConvGeometry, ConvOps};
pub use elementwise::{Bin, ElementwiseOps, Pred, UnaryOp};
pub use index::IndexOps;
pub use inplace::{InplaceOps, Update};
pub use linalg::LinalgOps;
pub use lines::{LineKernel, Lines, ReduceOps};
pub use mask::MaskOps;
pub use matmul::MatmulOps;
pub use nn::NnOps;
pub use norm::NormOps;
pub use optim::{
    AdadeltaStep, AdafactorStep, AdagradStep, AdamBase, AdamStep, AdamaxStep, AsgdStep, GradPrep,
    NAdamStep, OptimOps, RAdamStep, RmsPropStep, RpropStep, SgdStep, StepRule,
};
pub use pool::PoolOps;
pub use render::{RenderInputs, RenderOps, RenderShape};
pub use sort::SortOps;

/// All the kernel families of one device; any type that has them all is a `Backend`.
macro_rules! backend {
    ($($family:ident),*) => {
        pub trait Backend: $($family +)* {}
        impl<B: $($family +)*> Backend for B {}
    };
}

backend!(
    CastOps,
    ElementwiseOps,
    InplaceOps,
    MaskOps,
    ReduceOps,
    NnOps,
    IndexOps,
    SortOps,
    RenderOps,
    OptimOps,
    AttentionOps,
    ConvOps,
    PoolOps,
    NormOps,
    LinalgOps,
    MatmulOps
);

/// The backend of a device: one match, no allocation.
pub fn of(device: &Device) -> &'static dyn Backend {
    match device {
        Device::Cpu => match cpu_path() {
            CpuPath::Cpu => &cpu::Cpu,
            CpuPath::Generic => &candle::Candle,
            #[cfg(feature = "cuda-emulator")]
            CpuPath::CudaEmulated => &cuda::Cuda,
        },
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => &cuda::Cuda,
        _ => &candle::Candle,
    }
}

/// The backend of the device `t` lives on.
pub fn on(t: &candle_core::Tensor) -> &'static dyn Backend {
    of(t.device())
}

/// Which backend CPU tensors run on, from `GRADSTREAM_BACKEND` (read once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CpuPath {
    /// The CPU kernels (the default).
    Cpu,
    /// `generic`: the `Candle` backend, candle's ops: the path every device takes where it
    /// has no kernel of its own. CI runs the parity suite on it, so that path has always
    /// run before a new device first takes it.
    Generic,
    /// `cuda-emulated`: the CUDA backend, its kernels run by the CPU emulator (a build
    /// with `cuda-emulator`): the CUDA kernels and their host code, tested without a GPU.
    #[cfg(feature = "cuda-emulator")]
    CudaEmulated,
}

pub fn cpu_path() -> CpuPath {
    static PATH: std::sync::OnceLock<CpuPath> = std::sync::OnceLock::new();
    *PATH.get_or_init(|| match std::env::var("GRADSTREAM_BACKEND").as_deref() {
        Ok("generic") => CpuPath::Generic,
        #[cfg(feature = "cuda-emulator")]
        Ok("cuda-emulated") => CpuPath::CudaEmulated,
        _ => CpuPath::Cpu,
    })
}

/// The name of the backend a device's tensors run on: `cpu`, `generic`, `cuda`,
/// `cuda-emulated`.
pub fn name_of(device: &Device) -> &'static str {
    match device {
        Device::Cpu => match cpu_path() {
            CpuPath::Cpu => "cpu",
            CpuPath::Generic => "generic",
            #[cfg(feature = "cuda-emulator")]
            CpuPath::CudaEmulated => "cuda-emulated",
        },
        #[cfg(feature = "cuda")]
        Device::Cuda(_) => "cuda",
        _ => "generic",
    }
}

/// Family-trait methods with no fallback: each raises [`not_implemented`] for the op and
/// the tensor named after `=`. A row: `/// Doc.` then `fn f(&self, name: &'static str,
/// x: &Tensor, ...) -> Result<T> = name, x;`.
macro_rules! no_fallback {
    ($($(#[$attr:meta])* fn $f:ident(&self $(, $arg:ident: $ty:ty)* $(,)?) -> $ret:ty
        = $op:expr, $on:expr;)*) => {
        $($(#[$attr])*
        #[allow(unused_variables)]
        fn $f(&self $(, $arg: $ty)*) -> $ret {
            Err($crate::backend::not_implemented($op, $on.device()))
        })*
    };
}
pub(crate) use no_fallback;

/// The error of an op that has no kernel on a device.
pub fn not_implemented(op: &str, device: &Device) -> Error {
    Error::NotImplemented(format!(
        "{op}: not implemented on device '{}' (gradstream has no kernel for it there, and \
         candle has no equivalent op)",
        crate::device::name(device)
    ))
}
