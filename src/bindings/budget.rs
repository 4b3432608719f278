//! `gradstream.memory.budget`'s native half: the budget, what it evicted and recomputed,
//! and `OutOfMemoryError`.

use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::autograd::budget;
use crate::bindings::op::functions;
use crate::bindings::part;
use crate::error::OutOfMemoryError;
use crate::memory;

functions! { mod functions;
    /// Set the memory budget in bytes (`None`: no budget); returns the previous one. Raises
    /// the `OutOfMemoryError` of a buffer that did not fit the old budget and was not raised yet.
    ///
    /// Args:
    ///     bytes: live tensor bytes to stay within, or None.
    ///     device: the device whose tensors the budget bounds (the default device when None).
    fn _set_memory_budget["_set_memory_budget"](bytes: Option<u64>,
        device: Option<Device> = None) -> Option<u64> {
        let device = device.unwrap_or_else(crate::device::default_device);
        let prev = memory::set_budget(bytes, memory::slot(&device));
        budget::check()?;
        Ok(prev)
    }
    /// Set the memory budget to `fraction` of the exact peak when the next backward pass
    /// ends (`None` cancels a pending one).
    fn _set_memory_budget_fraction["_set_memory_budget_fraction"](fraction: Option<f64>,
        device: Option<Device> = None) -> () {
        let device = device.unwrap_or_else(crate::device::default_device);
        memory::set_budget_fraction(fraction, memory::slot(&device));
        Ok(())
    }
    /// The memory budget in bytes, or None.
    fn _memory_budget["_memory_budget"]() -> Option<u64> { Ok(memory::budget()) }
    /// What the budget did since the last reset: evictions, evicted_bytes, recomputations,
    /// recomputed_bytes, recompute_seconds, and kept: the bytes of saved
    /// tensors that have no recipe (so no budget can evict them), by the op that made them.
    fn _memory_budget_stats["_memory_budget_stats"](py: Python<'_>) -> Bound<'py, PyDict> {
        let s = budget::stats();
        let d = PyDict::new(py);
        d.set_item("evictions", s.evictions)?;
        d.set_item("evicted_bytes", s.evicted_bytes)?;
        d.set_item("recomputations", s.recomputations)?;
        d.set_item("recomputed_bytes", s.recomputed_bytes)?;
        d.set_item("recompute_seconds", s.recompute_seconds)?;
        let kept = PyDict::new(py);
        for (op, bytes, _) in budget::kept() {
            kept.set_item(op, bytes)?;
        }
        d.set_item("kept", kept)?;
        Ok(d)
    }
    /// Reset the counters of `_memory_budget_stats`.
    fn _reset_memory_budget_stats["_reset_memory_budget_stats"]() -> () {
        budget::reset_stats();
        Ok(())
    }
}

part!(|m| m.add("OutOfMemoryError", m.py().get_type::<OutOfMemoryError>()));
