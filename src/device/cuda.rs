//! The CUDA devices of this process: each made once, on first use, and what the driver
//! says of them. A build without the `cuda` feature sees none.

use crate::error::Error;

#[cfg(feature = "cuda")]
mod imp {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use candle_core::cuda_backend::cudarc::driver::{result, sys, CudaContext};
    use candle_core::Device;
    use parking_lot::Mutex;
    use std::sync::Arc;

    use crate::error::{Error, Result};

    static DEVICES: Mutex<Vec<Option<Device>>> = Mutex::new(Vec::new());
    static CURRENT: AtomicUsize = AtomicUsize::new(0);

    fn driver_error(what: &str, e: impl std::fmt::Display) -> Error {
        Error::runtime(format!("CUDA error: {what}: {e}"))
    }

    /// How many CUDA devices the driver reports; 0 without a driver or a GPU.
    pub fn count() -> usize {
        // A machine without a driver answers an error (or the stub's), never a panic; the
        // guard is for drivers that misbehave.
        std::panic::catch_unwind(CudaContext::device_count)
            .ok()
            .and_then(|r| r.ok())
            .map_or(0, |n| n.max(0) as usize)
    }

    pub fn current() -> usize {
        CURRENT.load(Ordering::Relaxed)
    }

    pub fn set_current(ordinal: usize) -> Result<()> {
        device(ordinal)?;
        CURRENT.store(ordinal, Ordering::Relaxed);
        Ok(())
    }

    /// The candle device of `cuda:ordinal`.
    pub fn device(ordinal: usize) -> Result<Device> {
        let mut devices = DEVICES.lock();
        if let Some(Some(d)) = devices.get(ordinal) {
            return Ok(d.clone());
        }
        let n = count();
        if ordinal >= n {
            return Err(super::unavailable(ordinal, n));
        }
        let d =
            Device::new_cuda(ordinal).map_err(|e| driver_error(&format!("cuda:{ordinal}"), e))?;
        if let Device::Cuda(c) = &d {
            // Every kernel, candle's and ours, runs on the device's one stream, in order:
            // cudarc's per-buffer events would only cost time.
            unsafe { c.disable_event_tracking() };
        }
        if devices.len() <= ordinal {
            devices.resize(ordinal + 1, None);
        }
        devices[ordinal] = Some(d.clone());
        Ok(d)
    }

    fn context(ordinal: usize) -> Result<Arc<CudaContext>> {
        match device(ordinal)? {
            Device::Cuda(c) => Ok(c.cuda_stream().context().clone()),
            _ => unreachable!("a CUDA ordinal names a CUDA device"),
        }
    }

    /// Wait for everything queued on `cuda:ordinal`.
    pub fn synchronize(ordinal: usize) -> Result<()> {
        match device(ordinal)? {
            Device::Cuda(c) => c
                .cuda_stream()
                .synchronize()
                .map_err(|e| driver_error("synchronize", e)),
            _ => Ok(()),
        }
    }

    /// `(free, total)` bytes of the device, as the driver sees them.
    pub fn mem_get_info(ordinal: usize) -> Result<(usize, usize)> {
        context(ordinal)?
            .mem_get_info()
            .map_err(|e| driver_error("mem_get_info", e))
    }

    pub fn name(ordinal: usize) -> Result<String> {
        context(ordinal)?
            .name()
            .map_err(|e| driver_error("device name", e))
    }

    pub fn capability(ordinal: usize) -> Result<(i32, i32)> {
        context(ordinal)?
            .compute_capability()
            .map_err(|e| driver_error("compute capability", e))
    }

    /// The bytes the device's memory pool holds (in use and cached), from which candle's
    /// stream-ordered allocations are served.
    pub fn reserved(ordinal: usize) -> Result<usize> {
        let ctx = context(ordinal)?;
        ctx.bind_to_thread()
            .map_err(|e| driver_error("reserved", e))?;
        let mut v: u64 = 0;
        // The default pool of a device this process holds a context on.
        unsafe {
            let pool = result::device::get_default_mem_pool(ctx.cu_device())
                .map_err(|e| driver_error("memory pool", e))?;
            result::mem_pool::get_attribute(
                pool,
                sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT,
                (&mut v as *mut u64).cast(),
            )
            .map_err(|e| driver_error("memory pool", e))?;
        }
        Ok(v as usize)
    }

    /// Give the pool's cached, unused memory back to the driver (`empty_cache`).
    pub fn empty_cache(ordinal: usize) -> Result<()> {
        synchronize(ordinal)?;
        let ctx = context(ordinal)?;
        unsafe {
            let pool = result::device::get_default_mem_pool(ctx.cu_device())
                .map_err(|e| driver_error("memory pool", e))?;
            result::mem_pool::trim_to(pool, 0).map_err(|e| driver_error("empty_cache", e))
        }
    }
}

#[cfg(not(feature = "cuda"))]
mod imp {
    use candle_core::Device;

    use crate::error::{Error, Result};

    fn none() -> Error {
        Error::runtime(
            "gradstream was built without CUDA support: tensors can only be created on 'cpu' \
             (the CUDA wheel is built by tools/build-cuda-wheel.sh)",
        )
    }

    pub fn count() -> usize {
        0
    }
    pub fn current() -> usize {
        0
    }
    pub fn set_current(_: usize) -> Result<()> {
        Err(none())
    }
    pub fn device(_: usize) -> Result<Device> {
        Err(none())
    }
    pub fn synchronize(_: usize) -> Result<()> {
        Err(none())
    }
    pub fn mem_get_info(_: usize) -> Result<(usize, usize)> {
        Err(none())
    }
    pub fn name(_: usize) -> Result<String> {
        Err(none())
    }
    pub fn capability(_: usize) -> Result<(i32, i32)> {
        Err(none())
    }
    pub fn reserved(_: usize) -> Result<usize> {
        Err(none())
    }
    pub fn empty_cache(_: usize) -> Result<()> {
        Err(none())
    }
}

pub use imp::*;

/// The error for a CUDA ordinal this machine does not have.
#[allow(dead_code)]
fn unavailable(ordinal: usize, n: usize) -> Error {
    Error::runtime(match n {
        0 => "Found no NVIDIA driver on your system, or no CUDA GPU: cuda devices are \
              unavailable (gradstream.cuda.is_available() is False)"
            .to_string(),
        n => format!(
            "CUDA error: invalid device ordinal (cuda:{ordinal}; this machine has {n} CUDA \
             device{})",
            if n == 1 { "" } else { "s" }
        ),
    })
}
