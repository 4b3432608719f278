//! The modules of gradstream's own kernels: one per `.cu` file in `kernels/`, each with
//! the PTX nvcc made of it (a build with `cuda`; `build.rs`). Under the emulator only the
//! names matter: a kernel is found by its exported name.

/// A kernel module: its name (the file's stem) and its PTX.
#[derive(Debug)]
pub struct Module {
    pub name: &'static str,
    pub ptx: &'static str,
}

#[cfg(feature = "cuda")]
macro_rules! ptx_of {
    ($file:literal) => {
        include_str!(concat!(env!("OUT_DIR"), "/", $file, ".ptx"))
    };
}

#[cfg(not(feature = "cuda"))]
macro_rules! ptx_of {
    ($file:literal) => {
        ""
    };
}

/// `NAME = "file"`: the module compiled from `kernels/file.cu`.
macro_rules! modules {
    ($($(#[$doc:meta])* $id:ident = $file:literal;)*) => {$(
        $(#[$doc])*
        pub static $id: Module = Module { name: $file, ptx: ptx_of!($file) };
    )*};
}

modules! {
    /// Scans, max/argmax, prod, softmax and sums over lines (`ReduceOps`).
    LINES = "lines";
    /// layer_norm, nll_loss's rows, embedding (`NnOps`).
    NN = "nn";
    /// Batch norm's per-channel kernels (`NormOps`).
    NORM = "norm";
    /// Adafactor's factored step (`OptimOps`).
    ADAFACTOR = "adafactor";
    /// The fused optimizer steps (`OptimOps`).
    OPTIM = "optim";
    /// Casts between every pair of dtypes (`CastOps`).
    CAST = "cast";
    /// Element-wise unary and binary functions, float predicates (`ElementwiseOps`).
    ELEMENTWISE = "elementwise";
    /// relu/threshold with a 1-bit mask, the backward's select by it (`MaskOps`).
    MASK = "mask";
    /// The fused NeRF volume renderer and its backward (`RenderOps`).
    RENDER = "render";
    /// Max pooling, its adjoint and reads, and the separable resampling (`PoolOps`).
    POOL = "pool";
    /// Strided in-place updates, fills and dense copies (`InplaceOps`).
    INPLACE = "inplace";
    /// Advanced-index take and put, and the bounds check of index values (`IndexOps`).
    INDEX = "index";
    /// FlashAttention-2 forward and backward (`AttentionOps`).
    ATTENTION = "attention";
    /// im2col, col2im and the image/channel swap around the convolutions' GEMMs (`ConvOps`).
    CONV = "conv";
}
