//! Reads of tensor elements into host memory.
//!
//! On the CPU a read is a copy; on a device it waits for every queued kernel and crosses
//! the bus. So an op reads back only what it cannot do without (a count that sizes its
//! output, LAPACK's `info`, the draws of the host generator), and always through [`read`],
//! which names the reason and counts it. `_core._host_reads()` lists the counts, and the
//! tests check that a training step of the bench's workloads makes none.

use crate::backend::cast::Convert;
use candle_core::WithDType;
use parking_lot::Mutex;

use crate::error::{CandleContext, Result};

/// Calls and bytes read, by reason, in order of first use.
static READS: Mutex<Vec<(&'static str, u64, u64)>> = Mutex::new(Vec::new());

fn count(why: &'static str, bytes: usize) {
    let mut reads = READS.lock();
    match reads.iter_mut().find(|(w, _, _)| *w == why) {
        Some(e) => {
            e.1 += 1;
            e.2 += bytes as u64;
        }
        None => reads.push((why, 1, bytes as u64)),
    }
}

/// The elements of `t` (any layout), cast to `T`, row-major, on the host.
pub fn read<T: WithDType>(why: &'static str, t: &candle_core::Tensor) -> Result<Vec<T>> {
    count(why, t.elem_count() * std::mem::size_of::<T>());
    t.cast(T::DTYPE)
        .and_then(|d| d.flatten_all())
        .and_then(|d| d.to_vec1::<T>())
        .op(why)
}

/// The one element of `t`, cast to `T`.
pub fn read_scalar<T: WithDType>(why: &'static str, t: &candle_core::Tensor) -> Result<T> {
    count(why, std::mem::size_of::<T>());
    t.cast(T::DTYPE)
        .and_then(|d| d.flatten_all())
        .and_then(|d| d.get(0))
        .and_then(|d| d.to_scalar::<T>())
        .op(why)
}

/// A host copy of `t` (a tensor that is on the host already is returned as it is).
pub fn to_host(why: &'static str, t: &candle_core::Tensor) -> Result<candle_core::Tensor> {
    if t.device().is_cpu() {
        return Ok(t.clone());
    }
    count(why, t.elem_count() * t.dtype().size_in_bytes());
    crate::device::to_device(t, &candle_core::Device::Cpu).op(why)
}

/// Every reason a read was made for, with its calls and bytes.
pub fn reads() -> Vec<(&'static str, u64, u64)> {
    READS.lock().clone()
}

/// Forget the counts.
pub fn reset() {
    READS.lock().clear();
}
