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

/// Zeros of `shape` on `device`. candle allocates a CUDA buffer with cuMemAlloc, which
/// refuses zero bytes, so a CUDA tensor with no elements is a zero-length view of a
/// one-element buffer (PyTorch's hold no buffer at all; two bytes to eight are the cost).
pub fn zeros<S: Into<candle_core::Shape>>(
    shape: S,
    dtype: candle_core::DType,
    device: &Device,
) -> candle_core::Result<candle_core::Tensor> {
    let shape = shape.into();
    if shape.elem_count() > 0 || device.is_cpu() {
        #[allow(clippy::disallowed_methods)]
        return candle_core::Tensor::zeros(shape, dtype, device);
    }
    #[allow(clippy::disallowed_methods)]
    let one = candle_core::Tensor::zeros(1, dtype, device)?;
    one.narrow(0, 0, 0)?.reshape(shape)
}

/// `value` in every element of a new tensor of `shape` on `device` (a bool or uint8 tensor
/// holds 0/1): zeros and the backend's fill, since candle's CUDA `ones`/`full` have no
/// int32 kernel.
pub fn full<S: Into<candle_core::Shape>>(
    shape: S,
    value: impl Into<crate::scalar::Scalar>,
    dtype: candle_core::DType,
    device: &Device,
) -> Result<candle_core::Tensor> {
    use crate::error::CandleContext;
    let value = value.into();
    let t = zeros(shape, dtype, device).op("full")?;
    let f = value.as_f64();
    if (f != 0.0 || f.is_sign_negative()) && t.elem_count() > 0 {
        crate::backend::on(&t).fill("full", &t, value)?;
    }
    Ok(t)
}

/// A tensor of `shape` on `device` holding `v`; no values make an empty tensor as [`zeros`]
/// makes one.
pub fn from_vec<T: candle_core::WithDType, S: Into<candle_core::Shape>>(
    v: Vec<T>,
    shape: S,
    device: &Device,
) -> candle_core::Result<candle_core::Tensor> {
    if v.is_empty() {
        return zeros(shape, T::DTYPE, device);
    }
    #[allow(clippy::disallowed_methods)]
    candle_core::Tensor::from_vec(v, shape, device)
}

/// `t` copied to `device` (`t` itself when it is there), an empty tensor as [`zeros`] makes
/// one.
pub fn to_device(
    t: &candle_core::Tensor,
    device: &Device,
) -> candle_core::Result<candle_core::Tensor> {
    if t.elem_count() == 0 && !same(t.device(), device) {
        return zeros(t.shape(), t.dtype(), device);
    }
    t.to_device(device)
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

pub mod cuda;
