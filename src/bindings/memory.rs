//! `gradstream.memory`'s native half: exact byte counters and the recorded history.
//! The PyTorch-shaped API (`memory_stats`, `snapshot`, `track`, ...) is in Python.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::bindings::add_functions;
use crate::block_cache;
use crate::memory::{self, Category, Label};

/// Bytes of tensor storage alive now.
#[pyfunction]
#[pyo3(name = "_memory_allocated")]
fn memory_allocated() -> i64 {
    memory::memory_allocated()
}

/// The peak of `memory_allocated()` since start or the last reset.
#[pyfunction]
#[pyo3(name = "_max_memory_allocated")]
fn max_memory_allocated() -> i64 {
    memory::max_memory_allocated()
}

/// Reset every peak (total, by category, buffer count) to its current value.
#[pyfunction]
#[pyo3(name = "_reset_peak_memory_stats")]
fn reset_peak_memory_stats() {
    memory::reset_peak_memory_stats()
}

/// `{category name: bytes}` in the categories' order.
fn by_name(py: Python<'_>, bytes: [(Category, i64); 5]) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for (c, b) in bytes {
        d.set_item(c.name(), b)?;
    }
    Ok(d)
}

/// Bytes by category now: parameter, optimizer_state, gradient, activation, other.
#[pyfunction]
#[pyo3(name = "_memory_by_category")]
fn memory_by_category(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    by_name(py, memory::bytes_by_category())
}

/// Peak bytes by category since start or the last reset.
#[pyfunction]
#[pyo3(name = "_memory_peak_by_category")]
fn memory_peak_by_category(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    by_name(py, memory::peak_bytes_by_category())
}

/// Buffer counters: `(num_allocs, num_frees, bytes_allocated, bytes_freed, live, live_peak)`.
#[pyfunction]
#[pyo3(name = "_memory_counts")]
fn memory_counts() -> (u64, u64, u64, u64, i64, i64) {
    let s = memory::stats();
    (
        s.num_allocs,
        s.num_frees,
        s.bytes_allocated,
        s.bytes_freed,
        s.live,
        s.live_peak,
    )
}

/// How the accounting runs: "on", or "off" / "locked" (set by
/// `GRADSTREAM_MEMORY_ACCOUNTING` for overhead measurements only).
#[pyfunction]
#[pyo3(name = "_memory_accounting_mode")]
fn memory_accounting_mode() -> &'static str {
    match memory::mode() {
        memory::Mode::On => "on",
        memory::Mode::Off => "off",
        memory::Mode::Locked => "locked",
    }
}

/// Switch the accounting mode ("on", "off", "locked") for an overhead measurement.
/// Buffers allocated while "off" are never counted: the figures are wrong afterwards.
#[pyfunction]
#[pyo3(name = "_set_memory_accounting_mode")]
fn set_memory_accounting_mode(mode: &str) -> PyResult<()> {
    let m = match mode {
        "on" => memory::Mode::On,
        "off" => memory::Mode::Off,
        "locked" => memory::Mode::Locked,
        other => {
            return Err(pyo3::exceptions::PyValueError::new_err(format!(
                "memory accounting mode must be 'on', 'off' or 'locked', got {other:?}"
            )))
        }
    };
    memory::set_mode(m);
    Ok(())
}

/// Label recorded events with the op or step running (the engine sets backward nodes).
#[pyfunction]
#[pyo3(name = "_set_memory_context")]
fn set_memory_context(label: &str) {
    memory::set_context(label)
}

/// Set the phase recorded on events; returns the previous phase.
#[pyfunction]
#[pyo3(name = "_set_memory_phase")]
fn set_memory_phase(phase: &str) -> String {
    memory::set_phase(phase)
}

/// Start or stop recording history.
///
/// Args:
///     enabled: record (starting clears the history) or stop.
///     trace: keep every event; False keeps only what live buffers were allocated by.
///     max_entries: keep the last this many events.
#[pyfunction]
#[pyo3(signature = (enabled, trace=true, max_entries=usize::MAX))]
#[pyo3(name = "_record_memory_history")]
fn record_memory_history(enabled: bool, trace: bool, max_entries: usize) {
    memory::record_history(enabled, trace, max_entries)
}

fn label_pair(l: Option<&Label>) -> (String, String) {
    l.map(|l| (l.phase.to_string(), l.op.to_string()))
        .unwrap_or_default()
}

/// The recorded history: `(events, baseline)`. Each event is
/// `(kind, addr, size, category, previous, time_us, phase, op)`; `baseline` is the
/// bytes by category just before the first event.
#[pyfunction]
#[pyo3(name = "_memory_history")]
fn memory_history<'py>(py: Python<'py>) -> PyResult<(Bound<'py, PyList>, Bound<'py, PyDict>)> {
    let (events, baseline) = py.detach(memory::history_events);
    let items = events.into_iter().map(|e| {
        let (phase, op) = label_pair(Some(&e.label));
        (
            e.kind.name(),
            e.addr,
            e.size,
            e.category.name(),
            e.previous.name(),
            e.time_us,
            phase,
            op,
        )
    });
    let list = PyList::new(py, items)?;
    let base = PyDict::new(py);
    for (c, b) in memory::Category::ALL.iter().zip(baseline) {
        base.set_item(c.name(), b)?;
    }
    Ok((list, base))
}

/// Live buffers as `(addr, size, category, lifetime_category, phase, op)`, by address.
#[pyfunction]
#[pyo3(name = "_memory_live_blocks")]
fn memory_live_blocks<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let blocks = py.detach(memory::live_blocks);
    PyList::new(
        py,
        blocks.into_iter().map(|b| {
            let (phase, op) = label_pair(b.label.as_ref());
            (
                b.addr,
                b.bytes,
                b.category.name(),
                b.lifetime.name(),
                phase,
                op,
            )
        }),
    )
}

/// The cache of freed large blocks: `(cached_bytes, slack_bytes, hits, misses, enabled)`.
#[pyfunction]
#[pyo3(name = "_block_cache_stats")]
fn block_cache_stats() -> (usize, usize, u64, u64, bool) {
    let (hits, misses) = block_cache::hits_and_misses();
    let (cached, slack) = (block_cache::cached_bytes(), block_cache::slack_bytes());
    (cached, slack, hits, misses, block_cache::enabled())
}

/// Turn the cache of freed large blocks on or off (off gives its blocks back).
#[pyfunction]
#[pyo3(name = "_set_block_cache")]
fn set_block_cache(enabled: bool) {
    block_cache::set_enabled(enabled)
}

/// Give every cached block back to the system.
#[pyfunction]
#[pyo3(name = "_empty_cache")]
fn empty_cache() {
    block_cache::empty()
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m,
        block_cache_stats, set_block_cache, empty_cache,
        memory_allocated, max_memory_allocated, reset_peak_memory_stats, memory_by_category,
        memory_peak_by_category, memory_counts, memory_accounting_mode,
        set_memory_accounting_mode, set_memory_context, set_memory_phase, record_memory_history,
        memory_history, memory_live_blocks
    }
    Ok(())
}
