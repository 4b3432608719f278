//! `set_num_threads` and friends, as PyTorch's.

use pyo3::prelude::*;

use crate::bindings::op::functions;
use crate::threads;

functions! { mod functions;
    /// `set_num_threads(n)`: the threads CPU kernels run on. Set it before the first op (or
    /// with RAYON_NUM_THREADS): once kernels have run the pool keeps its size, with a warning.
    fn set_num_threads["set_num_threads"](n: i64) -> () {
        if !threads::set_num_threads(n)? {
            let msg = format!(
                "set_num_threads({n}): the kernels' thread pool already runs {} threads and \
                 cannot be resized once kernels have run; call set_num_threads before the \
                 first op, or set RAYON_NUM_THREADS",
                threads::get_num_threads()
            );
            Python::attach(|py| {
                let category = py.get_type::<pyo3::exceptions::PyUserWarning>();
                PyErr::warn(py, &category, &std::ffi::CString::new(msg)?, 1)
            })?;
        }
        Ok(())
    }
    /// `get_num_threads()`: the threads CPU kernels run on.
    fn get_num_threads["get_num_threads"]() -> usize {
        Ok(threads::get_num_threads())
    }
    /// `set_num_interop_threads(n)`: recorded; gradstream has no inter-op pool.
    fn set_num_interop_threads["set_num_interop_threads"](n: i64) -> () {
        Ok(threads::set_num_interop_threads(n)?)
    }
    /// `get_num_interop_threads()`.
    fn get_num_interop_threads["get_num_interop_threads"]() -> usize {
        Ok(threads::get_num_interop_threads())
    }
}
