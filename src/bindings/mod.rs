//! The Python surface of the extension, one file per part of the API.

pub mod autograd;
pub mod budget;
pub mod conv;
pub mod convert;
pub mod creation;
pub mod decomposition;
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
pub mod saved_hooks;
pub mod scan;
pub mod shape;
pub mod sort;
pub mod tensor;

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

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<tensor::PyTensor>()?;
    m.add_class::<convert::PyDType>()?;
    m.add_class::<convert::PyDevice>()?;
    for dt in DType::ALL {
        m.add(dt.name(), convert::PyDType::object(m.py(), dt)?)?;
    }
    autograd::register(m)?;
    budget::register(m)?;
    conv::register(m)?;
    creation::register(m)?;
    decomposition::register(m)?;
    dlpack::register(m)?;
    function::register(m)?;
    index::register(m)?;
    linalg::register(m)?;
    math::register(m)?;
    memory::register(m)?;
    nn::register(m)?;
    op::register(m)?;
    optim::register(m)?;
    pass::register(m)?;
    pool::register(m)?;
    random::register(m)?;
    reduce::register(m)?;
    saved_hooks::register(m)?;
    scan::register(m)?;
    shape::register(m)?;
    sort::register(m)?;
    Ok(())
}
