//! `gradstream.memory`'s native half: exact byte counters and the recorded history.

use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

use crate::memory;

#[pyfunction]
fn memory_allocated() -> i64 {
    memory::memory_allocated()
}

#[pyfunction]
fn max_memory_allocated() -> i64 {
    memory::max_memory_allocated()
}

#[pyfunction]
fn reset_peak_memory_stats() {
    memory::reset_peak_memory_stats()
}

/// Bytes by category: parameter, optimizer_state, gradient, activation, other.
#[pyfunction]
fn memory_by_category<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    for (c, b) in memory::bytes_by_category() {
        d.set_item(c.name(), b)?;
    }
    Ok(d)
}

#[pyfunction]
fn memory_counts() -> (u64, u64) {
    (memory::num_allocs(), memory::num_frees())
}

#[pyfunction]
fn set_memory_context(label: &str) {
    memory::set_context(label)
}

#[pyfunction]
#[pyo3(signature = (enabled, max_entries=usize::MAX))]
fn record_memory_history(enabled: bool, max_entries: usize) {
    memory::record_history(enabled, max_entries)
}

/// Recorded events as `(alloc, addr, size, category, time_us, context)` tuples.
#[pyfunction]
fn memory_history<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    let items = memory::history_events().into_iter().map(|e| {
        (
            e.alloc,
            e.addr,
            e.size,
            e.category.name(),
            e.time_us,
            e.context,
        )
    });
    PyList::new(py, items)
}

/// Live buffers as `(addr, size, category)`.
#[pyfunction]
fn memory_live_blocks<'py>(py: Python<'py>) -> PyResult<Bound<'py, PyList>> {
    PyList::new(
        py,
        memory::live_blocks()
            .into_iter()
            .map(|(a, s, c)| (a, s, c.name())),
    )
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(memory_allocated, m)?)?;
    m.add_function(wrap_pyfunction!(max_memory_allocated, m)?)?;
    m.add_function(wrap_pyfunction!(reset_peak_memory_stats, m)?)?;
    m.add_function(wrap_pyfunction!(memory_by_category, m)?)?;
    m.add_function(wrap_pyfunction!(memory_counts, m)?)?;
    m.add_function(wrap_pyfunction!(set_memory_context, m)?)?;
    m.add_function(wrap_pyfunction!(record_memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(memory_history, m)?)?;
    m.add_function(wrap_pyfunction!(memory_live_blocks, m)?)?;
    Ok(())
}
