//! One definition per tensor op. A `tensor_ops!` row is the op's one binding: its body is
//! the function `gradstream.X(input, ...)`, and the method `Tensor.X(...)` calls that same
//! function with itself as `input`. Both share one body, one signature, one docstring and
//! one set of errors.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;

use crate::bindings::convert::{extract_operand, extract_tensor, opt_tensor, type_name};
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::ops::Operand;
use crate::tensor::Tensor;

/// What an op takes its `input` (or `self`) as.
pub trait Input: Sized {
    fn extract(op: &str, obj: &Obj<'_>) -> PyResult<Self>;
}

impl Input for Tensor {
    fn extract(op: &str, obj: &Obj<'_>) -> PyResult<Self> {
        Ok(tensor_object(op, obj)?.get().t.clone())
    }
}

/// The arithmetic ops also take a number as `input`, as PyTorch's do (`add(2, t)`).
impl Input for Operand {
    fn extract(op: &str, obj: &Obj<'_>) -> PyResult<Self> {
        extract_operand(op, obj).map_err(|e| match e.is_instance_of::<PyTypeError>(obj.py()) {
            true => input_type_error(op, obj),
            false => e,
        })
    }
}

/// In-place ops hand back the very object they changed (a `Parameter` stays one).
impl Input for Py<PyTensor> {
    fn extract(op: &str, obj: &Obj<'_>) -> PyResult<Self> {
        Ok(tensor_object(op, obj)?.clone().unbind())
    }
}

fn tensor_object<'a, 'py>(op: &str, obj: &'a Obj<'py>) -> PyResult<&'a Bound<'py, PyTensor>> {
    obj.cast::<PyTensor>()
        .map_err(|_| input_type_error(op, obj))
}

fn input_type_error(op: &str, obj: &Obj<'_>) -> PyErr {
    PyTypeError::new_err(format!(
        "{op}(): argument 'input' (position 1) must be Tensor, not {}",
        type_name(obj)
    ))
}

/// `tensor_ops! { mod NAME; rows }`, a row being
///
/// ```text
/// /// Docstring.
/// both fn name(x: Tensor, arg: T, ...) [signature after input] -> R { body }
/// ```
///
/// `fn name | alias(...)` makes the same op under each name; in the body `OP` is the name
/// called (the errors name it), and `fn max[true] | min[false]` sets the bool `FLAG` per name.
///
/// `x` is the input, taken as any [`Input`]. `both` makes `gradstream.name` and
/// `Tensor.name`, `function` only `gradstream.name`, `method` only `Tensor.name`. An
/// argument written `as "label"` is taken as an [`Arg`] (a tensor, as in [`functions!`]).
/// The table adds its functions to the module itself (a [`Part`](crate::bindings::Part)).
macro_rules! tensor_ops {
    (mod $m:ident; $(
        $(#[$($attr:tt)*])*
        $kind:ident fn $($name:ident $([$flag:expr])?)|+($($args:tt)*) [$($sig:tt)*]
            -> $ret:ty $body:block
    )*) => {
        pub mod $m {
            #[allow(unused_imports)]
            use super::*;
            $($crate::bindings::op::op_fn! { @names [$($name [$($flag)?])+] {
                $kind $(#[$($attr)*])* ($($args)*) [$($sig)*] -> $ret $body
            } })*
            #[allow(unused_variables)] // a module of `method` rows registers nothing
            fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $($($crate::bindings::op::op_fn!(@register $kind m $name);)+)*
                Ok(())
            }
            $crate::bindings::part!(register);
        }
    };
}

/// One name of a row: its body (a `#[pyfunction]` unless the row is `method`), its
/// registration, and its `Tensor` method (unless the row is `function`), which calls the
/// body with itself as `input`.
macro_rules! op_fn {
    (@names [$($name:ident $flag:tt)+] $row:tt) => {
        $($crate::bindings::op::op_fn!(@named $name $flag $row);)+
    };
    (@named $name:ident [$($flag:expr)?] {
        $kind:ident $(#[$($attr:tt)*])* ($($args:tt)*) [$($sig:tt)*] -> $ret:ty $body:block
    }) => {
        $crate::bindings::op::op_fn! {
            $kind $(#[$($attr)*])* $name($($args)*) [$($sig)*] -> $ret {
                $(const FLAG: bool = $flag;)?
                $body
            }
        }
    };
    (@register method $m:ident $name:ident) => {};
    (@register $kind:ident $m:ident $name:ident) => {
        $m.add_function(wrap_pyfunction!(self::$name, $m)?)?
    };
    (@method function $($rest:tt)*) => {};
    (@method $kind:ident $(#[$($attr:tt)*])* $name:ident($x:ident: $xty:ty
        $(, $arg:ident $(as $label:literal)?: $ty:ty)*) [$($sig:tt)*] -> $ret:ty) => {
        #[pymethods]
        impl $crate::bindings::tensor::PyTensor {
            $(#[$($attr)*])*
            #[pyo3(signature = ($($sig)*))]
            fn $name(slf: &Bound<'_, Self>, $($arg: $ty),*) -> PyResult<$ret> {
                self::$name(slf.as_any(), $($arg),*)
            }
        }
    };
    (@body [$($pre:tt)*] $name:ident($x:ident: $xty:ty
        $(, $arg:ident $(as $label:literal)?: $ty:ty)* $(,)?) -> $ret:ty $body:block) => {
        $($pre)*
        #[allow(unused_braces, clippy::too_many_arguments)]
        pub fn $name(input: &$crate::bindings::Obj<'_>, $($arg: $ty),*) -> PyResult<$ret> {
            const OP: &str = stringify!($name);
            $crate::bindings::op::guarded(OP, || {
                let $x: $xty = $crate::bindings::op::Input::extract(OP, input)?;
                $($(let $arg = $crate::bindings::op::Arg::extract($arg, OP, $label)?;)?)*
                $body
            })
        }
    };
    (method $(#[$($attr:tt)*])* $name:ident $args:tt [$($sig:tt)*] -> $ret:ty $body:block) => {
        $crate::bindings::op::op_fn!(@body [] $name $args -> $ret $body);
        $crate::bindings::op::op_fn! {
            @method method $(#[$($attr)*])* $name $args [$($sig)*] -> $ret
        }
    };
    ($kind:ident $(#[$($attr:tt)*])* $name:ident $args:tt [$($sig:tt)*] -> $ret:ty
        $body:block) => {
        $crate::bindings::op::op_fn!(@body [
            $(#[$($attr)*])*
            #[pyfunction]
            #[pyo3(signature = (input, $($sig)*))]
        ] $name $args -> $ret $body);
        $crate::bindings::op::op_fn! {
            @method $kind $(#[$($attr)*])* $name $args [$($sig)*] -> $ret
        }
    };
}

/// The last line of defence: a panic inside an op (a bug, never the user's input) becomes
/// a RuntimeError that names the op, instead of pyo3's PanicException (a BaseException
/// that `except Exception` does not catch).
pub fn guarded<R>(op: &str, f: impl FnOnce() -> PyResult<R>) -> PyResult<R> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_default();
        Err(pyo3::exceptions::PyRuntimeError::new_err(format!(
            "{op}: internal error in gradstream ({msg}); please report it"
        )))
    })
}

/// `functions! { mod NAME; rows }` for the functions that take no `input` (the private
/// `_core` helpers the Python layer wraps), a row being
///
/// ```text
/// /// Docstring.
/// fn name["op"](arg: T, tensor as "label": &Obj<'_>, ...) [signature] -> R { body }
/// ```
///
/// An argument written `as "label"` is taken as an [`Arg`] (a tensor; absent or None for an
/// `Option`), its TypeError naming the op and the label. The body runs under [`guarded`].
macro_rules! functions {
    (mod $m:ident; $(
        $(#[$($attr:tt)*])*
        fn $name:ident[$op:expr]($($arg:ident $(as $label:literal)?: $ty:ty),* $(,)?)
            [$($sig:tt)*] -> $ret:ty $body:block
    )*) => {
        pub mod $m {
            #[allow(unused_imports)]
            use super::*;
            $(
                $(#[$($attr)*])*
                #[pyfunction]
                #[pyo3(signature = ($($sig)*))]
                #[allow(unused_braces, clippy::too_many_arguments)]
                pub fn $name($($arg: $ty),*) -> PyResult<$ret> {
                    $crate::bindings::op::guarded($op, || {
                        $($(let $arg = $crate::bindings::op::Arg::extract($arg, $op, $label)?;)?)*
                        $body
                    })
                }
            )*
            fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $(m.add_function(wrap_pyfunction!(self::$name, m)?)?;)*
                Ok(())
            }
            $crate::bindings::part!(register);
        }
    };
}

/// A tensor argument of a [`functions!`] row: required, or optional (absent or None).
pub trait Arg {
    type Out;
    fn extract(self, op: &str, label: &str) -> PyResult<Self::Out>;
}

impl Arg for &Obj<'_> {
    type Out = Tensor;
    fn extract(self, op: &str, label: &str) -> PyResult<Tensor> {
        extract_tensor(op, label, self)
    }
}

impl Arg for Option<&Obj<'_>> {
    type Out = Option<Tensor>;
    fn extract(self, op: &str, label: &str) -> PyResult<Option<Tensor>> {
        opt_tensor(op, label, self)
    }
}

/// `attributes! { Class.field; rows }`: getters and argument-free methods of a pyclass that
/// read one field, a row being `/// Doc.` then `[#[getter]] fn name(f[, py]) -> R = expr;`,
/// with `f` the field (`&self.field`) and `py` the interpreter. No extraction and no panic
/// guard: each is as cheap as an attribute read.
macro_rules! attributes {
    ($class:ident.$field:ident;
     $($(#[$attr:meta])* fn $name:ident($f:ident $(, $py:ident)?) -> $ret:ty = $body:expr;)*) => {
        #[pymethods]
        impl $class {
            $($(#[$attr])*
            #[allow(clippy::extra_unused_lifetimes)]
            fn $name<'py>(&self $(, $py: Python<'py>)?) -> $ret {
                #[allow(unused_variables)]
                let $f = &self.$field;
                $body
            })*
        }
    };
}

pub(crate) use {attributes, functions, op_fn, tensor_ops};

tensor_ops! { mod guard_fns;
    /// Panics on purpose, to test that a panic reaches Python as a RuntimeError.
    function fn _panic(x: Tensor, message: String) [message] -> Tensor {
        let _ = x;
        panic!("{message}")
    }
}
