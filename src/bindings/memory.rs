//! `gradstream.memory`'s native half: exact byte counters and the recorded history.
//! The PyTorch-shaped API (`memory_stats`, `snapshot`, `track`, ...) is in Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::bindings::op::functions;
use crate::block_cache;
use crate::memory::{self, Category, Label, Mode};

/// `{category name: bytes}` in the categories' order.
fn by_name(
    py: Python<'_>,
    bytes: impl IntoIterator<Item = (Category, i64)>,
) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (c, b) in bytes {
        d.set_item(c.name(), b)?;
    }
    Ok(d)
}

fn label_pair(l: Option<&Label>) -> (String, String) {
    l.map(|l| (l.phase.to_string(), l.op.to_string()))
        .unwrap_or_default()
}

const MODES: [(&str, Mode); 3] = [
    ("on", Mode::On),
    ("off", Mode::Off),
    ("locked", Mode::Locked),
];

type History<'py> = (Bound<'py, PyList>, Bound<'py, PyDict>);

/// The counters' slot of a `device=` argument: the default device's when None.
fn slot(device: Option<candle_core::Device>) -> memory::Slot {
    memory::slot(&device.unwrap_or_else(crate::device::default_device))
}
type Counts = (u64, u64, u64, u64, i64, i64);

functions! { mod functions;
    /// The cache of freed large blocks: `(cached_bytes, slack_bytes, hits, misses, enabled,
    /// (live, cached, high_water), moved_bytes)`: the resident bytes of the large blocks in
    /// use, those the cached blocks hold, and the mark the cache keeps their sum under; then
    /// the bytes of pages moved from given-back blocks into new ones.
    fn _block_cache_stats["memory"](
        ) -> (usize, usize, u64, u64, bool, (usize, usize, usize), usize) {
        let (hits, misses) = block_cache::hits_and_misses();
        let (cached, slack) = (block_cache::cached_bytes(), block_cache::slack_bytes());
        let resident = block_cache::resident_bytes();
        let moved = crate::pages::moved_bytes();
        Ok((cached, slack, hits, misses, block_cache::enabled(), resident, moved))
    }
    /// Turn the cache of freed large blocks on or off (off gives its blocks back).
    fn _set_block_cache["memory"](enabled: bool) -> () {
        block_cache::set_enabled(enabled);
        Ok(())
    }
    /// Give every cached block back to the system.
    fn _empty_cache["memory"]() -> () {
        block_cache::empty();
        Ok(())
    }
    /// Bytes of tensor storage alive now on `device` (the default device when None).
    fn _memory_allocated["memory"](device: Option<Device> = None) -> i64 {
        Ok(memory::memory_allocated(slot(device)))
    }
    /// The peak of `memory_allocated()` since start or the last reset.
    fn _max_memory_allocated["memory"](device: Option<Device> = None) -> i64 {
        Ok(memory::max_memory_allocated(slot(device)))
    }
    /// Cap the bytes of gradstream's tensors on `device` (0: no cap); passing it raises
    /// OutOfMemoryError at the next boundary.
    fn _set_memory_limit["memory"](device: Device, bytes: u64) -> () {
        memory::set_limit(memory::slot(&device), bytes);
        Ok(())
    }
    /// Reset every peak (total, by category, buffer count) to its current value.
    fn _reset_peak_memory_stats["memory"](device: Option<Device> = None) -> () {
        memory::reset_peak_memory_stats(slot(device));
        Ok(())
    }
    /// Bytes by category now: parameter, optimizer_state, gradient, activation, other.
    fn _memory_by_category["memory"](py: Python<'_>, device: Option<Device> = None)
        -> Bound<'py, PyDict> {
        by_name(py, memory::bytes_by_category(slot(device)))
    }
    /// Peak bytes by category since start or the last reset.
    fn _memory_peak_by_category["memory"](py: Python<'_>, device: Option<Device> = None)
        -> Bound<'py, PyDict> {
        by_name(py, memory::peak_bytes_by_category(slot(device)))
    }
    /// Buffer counters: `(num_allocs, num_frees, bytes_allocated, bytes_freed, live, live_peak)`.
    fn _memory_counts["memory"](device: Option<Device> = None) -> Counts {
        let s = memory::stats(slot(device));
        Ok((s.num_allocs, s.num_frees, s.bytes_allocated, s.bytes_freed, s.live, s.live_peak))
    }
    /// How the accounting runs: "on", or "off" / "locked" (set by
    /// `GRADSTREAM_MEMORY_ACCOUNTING` for overhead measurements only).
    fn _memory_accounting_mode["memory"]() -> &'static str {
        let mode = memory::mode();
        Ok(MODES.iter().find(|(_, m)| *m == mode).map_or("on", |(name, _)| name))
    }
    /// Switch the accounting mode ("on", "off", "locked") for an overhead measurement.
    /// Buffers allocated while "off" are never counted: the figures are wrong afterwards.
    fn _set_memory_accounting_mode["memory"](mode: Str) -> () {
        let Some((_, m)) = MODES.iter().find(|(name, _)| *name == mode) else {
            return Err(PyValueError::new_err(format!(
                "memory accounting mode must be 'on', 'off' or 'locked', got {mode:?}"
            )));
        };
        memory::set_mode(*m);
        Ok(())
    }
    /// Label recorded events with the op or step running (the engine sets backward nodes).
    fn _set_memory_context["memory"](label: Str) -> () {
        memory::set_context(label);
        Ok(())
    }
    /// Set the phase recorded on events; returns the previous phase.
    fn _set_memory_phase["memory"](phase: Str) -> String { Ok(memory::set_phase(phase)) }
    /// Start or stop recording history.
    ///
    /// Args:
    ///     enabled: record (starting clears the history) or stop.
    ///     trace: keep every event; False keeps only what live buffers were allocated by.
    ///     max_entries: keep the last this many events.
    fn _record_memory_history["memory"](enabled: bool, trace: bool = true,
        max_entries: usize = (usize::MAX)) -> () {
        memory::record_history(enabled, trace, max_entries);
        Ok(())
    }
    /// The recorded history: `(events, baseline)`. Each event is
    /// `(kind, addr, size, category, previous, time_us, phase, op)`; `baseline` is the
    /// bytes by category just before the first event.
    fn _memory_history["memory"](py: Python<'_>, device: Option<Device> = None) -> History<'py> {
        let s = slot(device);
        let (events, baseline) = py.detach(|| memory::history_events(s));
        let items = events.into_iter().map(|e| {
            let (phase, op) = label_pair(Some(&e.label));
            let (cat, prev) = (e.category.name(), e.previous.name());
            (e.kind.name(), e.addr, e.size, cat, prev, e.time_us, phase, op)
        });
        let base = by_name(py, Category::ALL.into_iter().zip(baseline))?;
        Ok((PyList::new(py, items)?, base))
    }
    /// Live buffers as `(addr, size, category, lifetime_category, phase, op)`, by address.
    fn _memory_live_blocks["memory"](py: Python<'_>, device: Option<Device> = None)
        -> Bound<'py, PyList> {
        let s = slot(device);
        let blocks = py.detach(|| memory::live_blocks(s)).into_iter().map(|b| {
            let (phase, op) = label_pair(b.label.as_ref());
            (b.addr, b.bytes, b.category.name(), b.lifetime.name(), phase, op)
        });
        PyList::new(py, blocks)
    }
}
