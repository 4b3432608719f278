//! gradstream's native core: tensors on candle-core, a streaming autograd engine, exact
//! memory accounting, and the Python bindings (`gradstream._core`).

// Tests compare against candle's casts; the library casts through its backends (clippy.toml).
#![cfg_attr(test, allow(clippy::disallowed_methods))]

pub mod autocast;
pub mod autograd;
pub mod backend;
pub mod bindings;
pub mod block_cache;
pub mod device;
pub mod dlpack;
pub mod dtype;
pub mod error;
pub mod headroom;
pub mod host;
pub mod memory;
pub mod ops;
pub mod optim;
pub mod pages;
pub mod random;
pub mod scalar;
pub mod tensor;
pub mod threads;

use pyo3::prelude::*;

/// Counts every byte of tensor storage the extension allocates (see `memory`).
#[global_allocator]
static ALLOCATOR: memory::CountingAllocator = memory::CountingAllocator;

#[pymodule]
fn _core(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // On unless GRADSTREAM_BLOCK_CACHE=0 (read once: the allocator cannot read the environment).
    block_cache::set_enabled(std::env::var("GRADSTREAM_BLOCK_CACHE").map_or(true, |v| v != "0"));
    threads::install_handler();
    bindings::register(m)
}
