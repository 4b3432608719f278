//! Where a tensor's elements live: the address and size of the buffer under a candle
//! tensor, on any device. The byte accounting (`memory`) keys its registry by it, and ops
//! ask [`same_buffer`] whether a result is a view of an input.

use candle_core::Storage;

use crate::memory::{self, Slot};

/// A buffer: its address (a host pointer, or a device pointer), its size in bytes (what
/// its allocator holds for it) and the slot of its device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Buffer {
    pub addr: usize,
    pub bytes: usize,
    pub device: Slot,
}

/// The buffer under `t`; `None` for an empty one, or on a device without accounting.
pub fn buffer_of(t: &candle_core::Tensor) -> Option<Buffer> {
    let (storage, _) = t.storage_and_layout();
    let (addr, bytes) = match &*storage {
        Storage::Cpu(s) => super::cpu::dense::buffer(s),
        #[cfg(feature = "cuda")]
        Storage::Cuda(s) => super::cuda::buffer(s),
        #[allow(unreachable_patterns)]
        _ => return None,
    };
    (bytes > 0).then(|| Buffer {
        addr,
        bytes,
        device: memory::slot(t.device()),
    })
}

/// Whether two candle tensors share one buffer (on any device; empty ones too).
pub fn same_buffer(a: &candle_core::Tensor, b: &candle_core::Tensor) -> bool {
    buffer_id(a) == buffer_id(b)
}

/// An identity of the buffer under `t`, equal for tensors sharing one. It takes and drops a
/// read guard: never call it while holding one on the same buffer (two read guards on one
/// lock can deadlock behind a writer).
pub fn buffer_id(t: &candle_core::Tensor) -> usize {
    let (s, _) = t.storage_and_layout();
    &*s as *const Storage as usize
}
