//! One error enum for the whole crate, and its one mapping to Python exceptions.

use pyo3::exceptions::{
    PyBufferError, PyIndexError, PyKeyboardInterrupt, PyNotImplementedError, PyRuntimeError,
    PyTypeError, PyValueError,
};
use pyo3::PyErr;

pyo3::create_exception!(
    _core,
    LinAlgError,
    pyo3::exceptions::PyRuntimeError,
    "A linear algebra error: a singular matrix, or one that is not positive-definite."
);

pyo3::create_exception!(
    _core,
    OutOfMemoryError,
    pyo3::exceptions::PyRuntimeError,
    "Memory cannot be had: a tensor too large for the machine, or a budget that cannot be met (like `torch.OutOfMemoryError`, a RuntimeError)."
);

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Shapes that do not fit (PyTorch raises RuntimeError).
    #[error("{0}")]
    Shape(String),
    /// An argument of the wrong type or dtype where PyTorch raises TypeError.
    #[error("{0}")]
    Type(String),
    /// A dtype an op does not support (RuntimeError in PyTorch).
    #[error("{0}")]
    DType(String),
    /// An index or dimension out of range.
    #[error("{0}")]
    Index(String),
    /// A bad value (negative size, unknown option...).
    #[error("{0}")]
    Value(String),
    /// An autograd error: released graph, missing grad_fn, in-place modification...
    #[error("{0}")]
    Autograd(String),
    #[error("{0}")]
    NotImplemented(String),
    /// A singular or non-positive-definite matrix (PyTorch's `torch.linalg.LinAlgError`).
    #[error("{0}")]
    LinAlg(String),
    /// Any other bad argument where PyTorch raises RuntimeError.
    #[error("{0}")]
    Runtime(String),
    /// Memory another library handed over that gradstream cannot read (DLPack: BufferError).
    #[error("{0}")]
    Buffer(String),
    /// A tensor larger than the memory left, or a memory budget that cannot be met
    /// (`gradstream.OutOfMemoryError`).
    #[error("{0}")]
    OutOfMemory(String),
    #[error("KeyboardInterrupt")]
    Interrupted,
    /// An error raised by Python code the engine called (a hook), carried through unchanged.
    #[error("{0}")]
    Python(PyErr),
    /// An error from candle that no op translated; the op name is prepended.
    #[error("{op}: {source}")]
    Candle {
        op: &'static str,
        source: candle_core::Error,
    },
}

pub type Result<T> = std::result::Result<T, Error>;

/// `Error::shape(msg)` and its siblings: one constructor per message-carrying variant.
macro_rules! constructors {
    ($($name:ident => $variant:ident),* $(,)?) => {
        impl Error {
            $(pub fn $name(msg: impl Into<String>) -> Self {
                Error::$variant(msg.into())
            })*
        }
    };
}

constructors! {
    shape => Shape,
    type_ => Type,
    dtype => DType,
    index => Index,
    value => Value,
    autograd => Autograd,
    runtime => Runtime,
    linalg => LinAlg,
}

/// Attach the op name to a candle error: `t.exp().op("exp")?`.
pub trait CandleContext<T> {
    fn op(self, op: &'static str) -> Result<T>;
}

impl<T> CandleContext<T> for candle_core::Result<T> {
    fn op(self, op: &'static str) -> Result<T> {
        self.map_err(|source| Error::Candle { op, source })
    }
}

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        match err {
            Error::Shape(m) | Error::DType(m) | Error::Autograd(m) | Error::Runtime(m) => {
                PyRuntimeError::new_err(m)
            }
            Error::Type(m) => PyTypeError::new_err(m),
            Error::Index(m) => PyIndexError::new_err(m),
            Error::Value(m) => PyValueError::new_err(m),
            Error::NotImplemented(m) => PyNotImplementedError::new_err(m),
            Error::LinAlg(m) => LinAlgError::new_err(m),
            Error::Buffer(m) => PyBufferError::new_err(m),
            Error::OutOfMemory(m) => OutOfMemoryError::new_err(m),
            Error::Interrupted => PyKeyboardInterrupt::new_err(()),
            Error::Python(e) => e,
            // A device that ran out of memory is PyTorch's OutOfMemoryError, as the cap is.
            Error::Candle { op, source } => {
                let msg = candle_message(&source);
                match msg.contains("OUT_OF_MEMORY") {
                    true => OutOfMemoryError::new_err(format!("{op}: CUDA out of memory: {msg}")),
                    false => PyRuntimeError::new_err(format!("{op}: {msg}")),
                }
            }
        }
    }
}

/// candle's message without the stack trace candle appends when `RUST_BACKTRACE` is set
/// (forty lines of `<unknown>` frames under the one line that says what went wrong).
fn candle_message(e: &candle_core::Error) -> String {
    match e {
        candle_core::Error::WithBacktrace { inner, .. } => candle_message(inner),
        candle_core::Error::Context { inner, context } => {
            format!("{context}: {}", candle_message(inner))
        }
        e => e.to_string(),
    }
}

impl From<PyErr> for Error {
    fn from(err: PyErr) -> Self {
        Error::Python(err)
    }
}
