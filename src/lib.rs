//! gradstream's native core: tensors on candle-core, a streaming autograd engine, exact
//! memory accounting, and the Python bindings (`gradstream._core`).

pub mod autocast;
pub mod autograd;
pub mod backend;
pub mod bindings;
pub mod dtype;
pub mod error;
pub mod memory;
pub mod ops;
pub mod optim;
pub mod random;
pub mod tensor;

use pyo3::prelude::*;

/// Counts every byte of tensor storage the extension allocates (see `memory`).
#[global_allocator]
static ALLOCATOR: memory::CountingAllocator = memory::CountingAllocator;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    bindings::register(m)
}
