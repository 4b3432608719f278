//! Devices from Python: the default device, the CUDA devices this process sees, which
//! backend a device's tensors run on, and the reads back to the host (`host`).

use pyo3::prelude::*;

use crate::bindings::convert::PyDevice;
use crate::bindings::op::functions;
use crate::device;

functions! { mod functions;
    /// `set_default_device(device)`: the device factories make tensors on when given none
    /// (`None`: the CPU again). Ops on existing tensors stay on their tensors' device.
    fn set_default_device["set_default_device"](device: Option<Device>) -> () {
        device::set_default_device(device.unwrap_or_else(device::host));
        Ok(())
    }
    /// The device factories use when given none (the CPU unless `set_default_device`).
    fn get_default_device["get_default_device"]() -> PyDevice {
        Ok(PyDevice::of(&device::default_device()))
    }
    /// How many CUDA devices this process sees (0 in a build without CUDA, or without a
    /// driver or a GPU).
    fn _cuda_device_count["device"]() -> usize { Ok(device::cuda::count()) }
    /// The index of the current CUDA device.
    fn _cuda_current_device["device"]() -> usize { Ok(device::cuda::current()) }
    /// Make `cuda:index` the current CUDA device.
    fn _cuda_set_device["device"](index: usize) -> () {
        Ok(device::cuda::set_current(index)?)
    }
    /// Wait for everything queued on `cuda:index`.
    fn _cuda_synchronize["device"](index: usize) -> () {
        Ok(device::cuda::synchronize(index)?)
    }
    /// `(free, total)` bytes of `cuda:index`, as the driver sees them.
    fn _cuda_mem_get_info["device"](index: usize) -> (usize, usize) {
        Ok(device::cuda::mem_get_info(index)?)
    }
    /// The name of `cuda:index` (e.g. "NVIDIA H100 80GB HBM3").
    fn _cuda_device_name["device"](index: usize) -> String {
        Ok(device::cuda::name(index)?)
    }
    /// The compute capability `(major, minor)` of `cuda:index`.
    fn _cuda_capability["device"](index: usize) -> (i64, i64) {
        let (a, b) = device::cuda::capability(index)?;
        Ok((a as i64, b as i64))
    }
    /// The bytes `cuda:index`'s memory pool holds, in use and cached.
    fn _cuda_reserved["device"](index: usize) -> usize {
        Ok(device::cuda::reserved(index)?)
    }
    /// Give `cuda:index`'s cached, unused pool memory back to the driver.
    fn _cuda_empty_cache["device"](index: usize) -> () {
        Ok(device::cuda::empty_cache(index)?)
    }
    /// The backend `device`'s tensors run on: "cpu" (the CPU kernels), "generic" (candle's
    /// ops: `GRADSTREAM_BACKEND=generic` on the CPU, and any device without kernels).
    fn _backend_of["device"](device: Device) -> &'static str {
        Ok(crate::backend::name_of(&device))
    }
    /// The reads of tensor data back to the host so far, as `(reason, calls, bytes)`.
    fn _host_reads["device"]() -> Vec<(String, u64, u64)> {
        Ok(crate::host::reads()
            .into_iter()
            .map(|(why, n, b)| (why.to_string(), n, b))
            .collect())
    }
    /// Forget the counts of `_host_reads`.
    fn _reset_host_reads["device"]() -> () {
        crate::host::reset();
        Ok(())
    }
}
