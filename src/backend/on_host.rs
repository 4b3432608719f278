//! Kernels a device runs on the host: the inputs copied to the CPU, the CPU kernel, the
//! results copied back. The default, on every device, for the ops PyTorch too waits for the
//! device on (sorting and `unique`, whose output sizes depend on the data; searching), and for
//! the dense decompositions (LU, Cholesky, QR, SVD, eigh), for which gradstream links no GPU
//! library. Each copy to the host is a counted `host` read named after the op; on CPU
//! tensors nothing is copied.

use candle_core::{Device, Tensor};

use crate::error::{CandleContext, Result};

/// Results that go back to the inputs' device.
pub trait Outputs: Sized {
    fn to(self, device: &Device) -> Result<Self>;
}

impl Outputs for Tensor {
    fn to(self, device: &Device) -> Result<Self> {
        crate::device::to_device(&self, device).op("to device")
    }
}

impl<A: Outputs, B: Outputs> Outputs for (A, B) {
    fn to(self, device: &Device) -> Result<Self> {
        Ok((self.0.to(device)?, self.1.to(device)?))
    }
}

impl<A: Outputs, B: Outputs, C: Outputs> Outputs for (A, B, C) {
    fn to(self, device: &Device) -> Result<Self> {
        Ok((self.0.to(device)?, self.1.to(device)?, self.2.to(device)?))
    }
}

/// `f` on host copies of `inputs` (all on one device), its results moved back there.
pub fn on_host<R: Outputs>(
    why: &'static str,
    inputs: &[&Tensor],
    f: impl FnOnce(&[Tensor]) -> Result<R>,
) -> Result<R> {
    let device = inputs.first().map_or(Device::Cpu, |t| t.device().clone());
    if device.is_cpu() {
        let same: Vec<Tensor> = inputs.iter().map(|t| (*t).clone()).collect();
        return f(&same);
    }
    let host: Vec<Tensor> = inputs
        .iter()
        .map(|t| crate::host::to_host(why, t))
        .collect::<Result<_>>()?;
    f(&host)?.to(&device)
}
