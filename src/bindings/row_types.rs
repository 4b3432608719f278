//! What each row tells `tools/gen_stubs.py`: the Python types of its arguments and result,
//! so the shipped stub is typed from the rows themselves (`_core._row_types()`).

use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::convert::{PyDType, PyDevice};
use crate::bindings::op::functions;
use crate::bindings::random::PyGenerator;
use crate::bindings::tensor::PyTensor;
use crate::ops::Operand;
use crate::tensor::Tensor;

/// A row's [`RowTypes`]: `row_types!(kind, name [input] [args] -> R)`.
macro_rules! row_types {
    ($kind:expr, $name:ident [$($input:expr)?] [$($arg:ident: $ty:ty,)*] -> $ret:ty) => {
        inventory::submit! { $crate::bindings::row_types::RowTypes {
            name: stringify!($name),
            kind: $kind,
            params: &[$(("input", $input as $crate::bindings::row_types::Annotation),)?
                $((stringify!($arg), <$ty as $crate::bindings::op::Param<'static, 'static>>
                    ::annotation as $crate::bindings::row_types::Annotation),)*],
            // a result may borrow the interpreter (`Bound<'py, PyDict>`)
            returns: {
                #[allow(clippy::extra_unused_lifetimes)]
                fn returns<'py>() -> Option<String> {
                    <$ret as $crate::bindings::row_types::PyType>::annotation()
                }
                returns
            },
        } }
    };
}

/// What a row tells `tools/gen_stubs.py` (through `_core._row_types()`): the Python type of
/// each argument and of the result, so the stub is typed from the row itself. An
/// [`Annotation`] is `None` where the row takes an
/// [`Object`](crate::bindings::op::Object) and parses it itself; the generator then types
/// that argument by its name. The annotations use the stub's own aliases (`_Operand`,
/// `_Dtype`, `_Device`).
pub struct RowTypes {
    pub name: &'static str,
    /// `both`, `function` or `method`, as in [`tensor_ops!`](crate::bindings::op::tensor_ops).
    pub kind: &'static str,
    pub params: &'static [(&'static str, Annotation)],
    pub returns: Annotation,
}

pub type Annotation = fn() -> Option<String>;

inventory::collect!(RowTypes);

/// An [`Annotation`]'s value for a type the stub can name.
pub fn typed(annotation: &str) -> Option<String> {
    Some(annotation.to_string())
}

/// A Rust value's Python type, as the stub names it: a row's result or input, or an argument
/// pyo3 hands over as it is (`None`: the stub's table names it).
pub trait PyType {
    fn annotation() -> Option<String>;
}

macro_rules! py_types {
    ($($t:ty => $ann:expr),* $(,)?) => {$(
        impl PyType for $t {
            fn annotation() -> Option<String> {
                $ann
            }
        }
    )*};
}
py_types!(
    Tensor => typed("Tensor"),
    Py<PyTensor> => typed("Tensor"),
    Operand => typed("_Operand"),
    () => typed("None"),
    bool => typed("bool"),
    i64 => typed("int"),
    u64 => typed("int"),
    usize => typed("int"),
    f64 => typed("float"),
    String => typed("str"),
    str => typed("str"),
    PyDType => typed("dtype"),
    Py<PyDType> => typed("dtype"),
    PyDevice => typed("device"),
    Py<PyGenerator> => typed("Generator"),
    Py<PyAny> => None,
    Py<PyTuple> => None,
);

impl<T: PyType + ?Sized> PyType for &T {
    fn annotation() -> Option<String> {
        T::annotation()
    }
}

/// Python objects as they are (dicts, lists, tuples the body builds, or an argument the
/// body parses): the stub's table names what they hold.
impl<T> PyType for Bound<'_, T> {
    fn annotation() -> Option<String> {
        None
    }
}

impl<T: PyType> PyType for Option<T> {
    fn annotation() -> Option<String> {
        T::annotation().map(|t| format!("{t} | None"))
    }
}

impl<T: PyType> PyType for Vec<T> {
    fn annotation() -> Option<String> {
        T::annotation().map(|t| format!("list[{t}]"))
    }
}

macro_rules! py_type_tuple {
    ($($t:ident),+) => {
        impl<$($t: PyType),+> PyType for ($($t,)+) {
            fn annotation() -> Option<String> {
                let items = [$($t::annotation()?),+];
                Some(format!("tuple[{}]", items.join(", ")))
            }
        }
    };
}
py_type_tuple!(A, B);
py_type_tuple!(A, B, C);
py_type_tuple!(A, B, C, D, E, F);
py_type_tuple!(A, B, C, D, E, F, G);

pub(crate) use row_types;

functions! { mod row_type_fns;
    /// Each row's argument and result types, for `tools/gen_stubs.py`: a list of
    /// `(name, kind, [(argument, type or None)], result type or None)`.
    fn _row_types["_row_types"](py: Python<'_>) -> Py<PyAny> {
        let rows: Vec<_> = inventory::iter::<RowTypes>
            .into_iter()
            .map(|r| {
                let params: Vec<_> = r.params.iter().map(|(name, ann)| (*name, ann())).collect();
                (r.name, r.kind, params, (r.returns)())
            })
            .collect();
        Ok(rows.into_pyobject(py)?.into_any().unbind())
    }
}
