//! The Python surface of the extension, one file per part of the API.

pub mod autograd;
pub mod budget;
pub mod conv;
pub mod convert;
pub mod creation;
pub mod decomposition;
pub mod device;
pub mod dlpack;
pub mod function;
pub mod hook_refs;
pub mod index;
pub mod linalg;
pub mod math;
pub mod memory;
pub mod nn;
pub mod op;
pub mod optim;
pub mod pass;
pub mod pool;
pub mod random;
pub mod reduce;
pub mod row_types;
pub mod saved_hooks;
pub mod scan;
pub mod shape;
pub mod sort;
pub mod tensor;
pub mod threads;

use pyo3::prelude::*;

use crate::dtype::DType;

/// A Python argument as the bindings receive it.
pub type Obj<'py> = Bound<'py, PyAny>;

/// Run heavy Rust work with the interpreter released, so other Python threads go on.
pub fn detached<T: Send>(
    py: Python<'_>,
    f: impl FnOnce() -> crate::error::Result<T> + Send,
) -> PyResult<T> {
    Ok(py.detach(f)?)
}

/// [`detached`] where the interpreter is held but no `py` token is at hand.
pub fn released<T: Send>(f: impl FnOnce() -> crate::error::Result<T> + Send) -> PyResult<T> {
    Python::attach(|py| detached(py, f))
}

/// One part of `_core`: what a `tensor_ops!`/`functions!` table, or a file's [`part!`],
/// adds to the module. Each submits itself; `register` runs them all, ordered by module path.
pub struct Part(
    pub &'static str,
    pub fn(&Bound<'_, PyModule>) -> PyResult<()>,
);

inventory::collect!(Part);

/// `part!(|m| ...)`: what this file adds to the module besides its tables (classes, constants).
macro_rules! part {
    ($f:expr) => {
        inventory::submit! { $crate::bindings::Part(module_path!(), $f) }
    };
}
pub(crate) use part;

part!(|m| {
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<convert::PyDType>()?;
    m.add_class::<convert::PyDevice>()?;
    for dt in DType::ALL {
        m.add(dt.name(), convert::PyDType::object(m.py(), dt)?)?;
    }
    m.add_class::<convert::PyMemoryFormat>()?;
    for f in crate::ops::memory_format::MemoryFormat::ALL {
        m.add(f.name(), convert::PyMemoryFormat { f })?;
    }
    Ok(())
});

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let mut parts: Vec<&Part> = inventory::iter::<Part>.into_iter().collect();
    parts.sort_by_key(|p| p.0);
    parts.into_iter().try_for_each(|p| (p.1)(m))
}
