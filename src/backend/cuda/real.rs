//! Launches and device pointers on a real CUDA device, through candle's `CudaDevice` and
//! cudarc. Every kernel is queued on the device's one stream, the stream candle's own ops
//! use, so they are ordered with them and need no events.

use candle_core::cuda_backend::cudarc::driver::{DevicePtr, LaunchConfig, PushKernelArg};
use candle_core::cuda_backend::{CudaDevice, CudaStorage, CudaStorageSlice};

use super::launch::{Arg, Grid, Kernel};
use crate::error::{Error, Result};

fn cuda_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::runtime(format!("CUDA error: {what}: {e}"))
}

/// Queue `kernel` on `d`'s stream.
pub fn launch(d: &CudaDevice, kernel: Kernel, grid: Grid, args: &[Arg]) -> Result<()> {
    let func = d
        .get_or_load_custom_func(kernel.name, kernel.module.name, kernel.module.ptx)
        .map_err(|e| cuda_error(kernel.name, e))?;
    let mut b = func.builder();
    for a in args {
        match a {
            Arg::Ptr(v) => b.arg(v),
            Arg::I32(v) => b.arg(v),
            Arg::U32(v) => b.arg(v),
            Arg::I64(v) => b.arg(v),
            Arg::F32(v) => b.arg(v),
            Arg::F64(v) => b.arg(v),
        };
    }
    let cfg = LaunchConfig {
        grid_dim: grid.blocks,
        block_dim: grid.threads,
        shared_mem_bytes: grid.shared,
    };
    // The arguments match the kernel's parameters (each kernel's host code says so), and
    // every address is kept alive by its `Addr` until the launch is queued.
    unsafe { b.launch(cfg) }.map_err(|e| cuda_error(kernel.name, e))?;
    Ok(())
}

/// Run `f` on a CUDA storage's slice, whatever its element type.
macro_rules! each_slice {
    ($s:expr, |$v:ident| $body:expr) => {
        match $s {
            CudaStorageSlice::U8($v) => $body,
            CudaStorageSlice::U32($v) => $body,
            CudaStorageSlice::I16($v) => $body,
            CudaStorageSlice::I32($v) => $body,
            CudaStorageSlice::I64($v) => $body,
            CudaStorageSlice::BF16($v) => $body,
            CudaStorageSlice::F16($v) => $body,
            CudaStorageSlice::F32($v) => $body,
            CudaStorageSlice::F64($v) => $body,
            CudaStorageSlice::F8E4M3($v) => $body,
            CudaStorageSlice::F6E2M3($v)
            | CudaStorageSlice::F6E3M2($v)
            | CudaStorageSlice::F4($v)
            | CudaStorageSlice::F8E8M0($v) => $body,
        }
    };
}

/// The device address of a CUDA storage's first element.
pub fn device_ptr(s: &CudaStorage) -> Result<u64> {
    let stream = s.device.cuda_stream();
    Ok(each_slice!(&s.slice, |v| v.device_ptr(&stream).0))
}

/// The address and size in bytes of a CUDA buffer.
pub fn buffer(s: &CudaStorage) -> (usize, usize) {
    let stream = s.device.cuda_stream();
    each_slice!(&s.slice, |v| (
        v.device_ptr(&stream).0 as usize,
        v.num_bytes()
    ))
}
