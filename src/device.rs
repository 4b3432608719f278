//! Devices: their names as PyTorch writes them (`cpu`, `cuda:0`), the one candle `Device`
//! per device, and the default device of the factories (`set_default_device`).
//!
//! candle tells two devices apart by identity (a CUDA device is a context and a stream), so
//! `cuda:0` is made once and handed out from here: two tensors on `cuda:0` must hold the
//! same candle device, or every op between them is a device mismatch.

use candle_core::{Device, DeviceLocation};
use parking_lot::RwLock;

use crate::error::{Error, Result};

/// The kinds of device a name may start with, as PyTorch lists them.
pub const KINDS: [&str; 4] = ["cpu", "cuda", "mps", "meta"];

/// The device as PyTorch names it: `cpu`, `cuda:0`, `mps:0`.
pub fn name(device: &Device) -> String {
    match device.location() {
        DeviceLocation::Cpu => "cpu".into(),
        DeviceLocation::Cuda { gpu_id } => format!("cuda:{gpu_id}"),
        DeviceLocation::Metal { gpu_id } => format!("mps:{gpu_id}"),
    }
}

/// The kind and index of a device (`("cuda", Some(0))`, `("cpu", None)`).
pub fn kind_and_index(device: &Device) -> (&'static str, Option<usize>) {
    match device.location() {
        DeviceLocation::Cpu => ("cpu", None),
        DeviceLocation::Cuda { gpu_id } => ("cuda", Some(gpu_id)),
        DeviceLocation::Metal { gpu_id } => ("mps", Some(gpu_id)),
    }
}

/// The host: where values from Python (numbers, lists, NumPy arrays) are made before they
/// move to their device, and where the few host-only tensors live (a generator's state,
/// an optimizer's step count).
pub fn host() -> Device {
    Device::Cpu
}

/// Whether two candle devices are the same device.
pub fn same(a: &Device, b: &Device) -> bool {
    a.same_device(b)
}

/// The candle device of `kind` and `index` (`None`: the current one of that kind).
pub fn get(kind: &str, index: Option<usize>) -> Result<Device> {
    match kind {
        "cpu" => Ok(Device::Cpu),
        "cuda" => cuda::device(index.unwrap_or_else(cuda::current)),
        other => Err(Error::runtime(format!(
            "gradstream has no '{other}' backend: tensors can live on 'cpu' or 'cuda' only"
        ))),
    }
}

static DEFAULT: RwLock<Option<Device>> = RwLock::new(None);

/// The device factories use when given none: the CPU unless `set_default_device` moved it.
pub fn default_device() -> Device {
    DEFAULT.read().clone().unwrap_or(Device::Cpu)
}

/// `set_default_device(device)`.
pub fn set_default_device(device: Device) {
    *DEFAULT.write() = Some(device);
}

/// The error of an op whose tensors are on two devices, worded as PyTorch's.
pub fn mismatch(op: &str, a: &Device, b: &Device) -> Error {
    Error::runtime(format!(
        "{op}: Expected all tensors to be on the same device, but found at least two devices, \
         {} and {}!",
        name(a),
        name(b)
    ))
}

#[cfg(feature = "cuda")]
pub mod cuda {
    //! The CUDA devices of this process, each made once, on first use.

    use std::sync::atomic::{AtomicUsize, Ordering};

    use candle_core::Device;
    use parking_lot::Mutex;

    use crate::error::{Error, Result};

    static DEVICES: Mutex<Vec<Option<Device>>> = Mutex::new(Vec::new());
    static CURRENT: AtomicUsize = AtomicUsize::new(0);

    /// How many CUDA devices the driver reports; 0 without a driver or a GPU.
    pub fn count() -> usize {
        use candle_core::cuda_backend::cudarc::driver::CudaContext;
        // `device_count` initialises the driver; a machine without one answers an error.
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
            return Err(Error::runtime(match n {
                0 => "Found no NVIDIA driver on your system, or no CUDA GPU: cuda devices are \
                      unavailable (gradstream.cuda.is_available() is False)"
                    .to_string(),
                n => format!(
                    "CUDA error: invalid device ordinal (cuda:{ordinal}; this machine has {n} \
                     CUDA device{})",
                    if n == 1 { "" } else { "s" }
                ),
            }));
        }
        let d = Device::new_cuda(ordinal)
            .map_err(|e| Error::runtime(format!("cuda:{ordinal}: {e}")))?;
        if devices.len() <= ordinal {
            devices.resize(ordinal + 1, None);
        }
        devices[ordinal] = Some(d.clone());
        Ok(d)
    }
}

#[cfg(not(feature = "cuda"))]
pub mod cuda {
    //! This build has no CUDA backend: no device is available.

    use candle_core::Device;

    use crate::error::{Error, Result};

    pub fn count() -> usize {
        0
    }

    pub fn current() -> usize {
        0
    }

    pub fn set_current(ordinal: usize) -> Result<()> {
        device(ordinal).map(|_| ())
    }

    pub fn device(_ordinal: usize) -> Result<Device> {
        Err(Error::runtime(
            "gradstream was built without CUDA support: tensors can only be created on 'cpu' \
             (the CUDA wheel is built by tools/build-cuda-wheel.sh)",
        ))
    }
}
