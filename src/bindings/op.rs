//! One definition per tensor op. A `tensor_ops!` row is the op's one binding: its body is
//! the function `gradstream.X(input, ...)`, and the method `Tensor.X(...)` calls that same
//! function with itself as `input`. Both share one body, one signature, one docstring and
//! one set of errors.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyTuple};

use crate::bindings::convert::{
    extract_device, extract_dtype, extract_memory_format, extract_operand, extract_tensor,
    type_name,
};
use crate::bindings::row_types::typed;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::ops::memory_format::MemoryFormat;
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
/// both fn name(x: Tensor, arg: T, arg: T = default; keyword: T = default) -> R { body }
/// ```
///
/// The parentheses are the op's signature after `input`, as PyTorch writes it: each
/// argument's [`Param`] type, its default (one token: a literal, `None`, or an expression in
/// parentheses, so that pyo3 shows literals in `__text_signature__`), and after `;` the
/// keyword-only ones. `fn name | alias(...)` makes the same op under each name; in the body
/// `OP` is the name called (the errors name it), and `fn max[true] | min[false]` sets the
/// bool `FLAG` per name.
///
/// `x` is the input, taken as any [`Input`]. `both` makes `gradstream.name` and
/// `Tensor.name`, `function` only `gradstream.name`, `method` only `Tensor.name`.
/// The table adds its functions to the module itself (a [`Part`](crate::bindings::Part)).
macro_rules! tensor_ops {
    (mod $m:ident; $(
        $(#[$($attr:tt)*])*
        $kind:ident fn $($name:ident $([$flag:expr])?)|+($x:ident: $xty:ty
            $(, $arg:ident: $ty:ty $(= $def:tt)?)*
            $(; $($karg:ident: $kty:ty $(= $kdef:tt)?),+)?) -> $ret:ty $body:block
    )*) => {
        pub mod $m {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use $crate::bindings::op::vocabulary::*;
            $($crate::bindings::op::op_fn! { @names [$($name [$($flag)?])+] {
                $kind [$(#[$($attr)*])*] ($x: $xty)
                [$($arg: $ty,)* $($($karg: $kty,)+)?]
                [$($arg $(= $def)?,)* $(*, $($karg $(= $kdef)?,)+)?]
                -> $ret $body
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
        $kind:ident [$($attr:tt)*] $x:tt $args:tt $sig:tt -> $ret:ty $body:block
    }) => {
        $crate::bindings::op::op_fn! { @body $kind $($attr)* $name $x $args $sig -> $ret {
            $(const FLAG: bool = $flag;)?
            $body
        } }
        $crate::bindings::op::op_fn!(@types $kind $name $x $args -> $ret);
    };
    (@types $kind:ident $name:ident ($x:ident: $xty:ty) [$($arg:ident: $ty:ty,)*] -> $ret:ty) => {
        $crate::bindings::row_types::row_types!(stringify!($kind), $name
            [<$xty as $crate::bindings::row_types::PyType>::annotation] [$($arg: $ty,)*] -> $ret);
    };
    (@register method $m:ident $name:ident) => {};
    (@register $kind:ident $m:ident $name:ident) => {
        $m.add_function(wrap_pyfunction!(self::$name, $m)?)?
    };
    (@method function $($rest:tt)*) => {};
    (@method $kind:ident $(#[$($attr:tt)*])* $name:ident [$($arg:ident: $ty:ty,)*]
        [$($sig:tt)*] -> $ret:ty) => {
        #[pymethods]
        impl $crate::bindings::tensor::PyTensor {
            $(#[$($attr)*])*
            #[pyo3(signature = ($($sig)*))]
            fn $name<'a, 'py: 'a>(slf: &'a Bound<'py, Self>, py: Python<'py>,
                $($arg: $crate::bindings::op::Raw<'a, 'py, $ty>),*) -> PyResult<$ret> {
                self::$name(py, slf.as_any(), $($arg),*)
            }
        }
    };
    (@body method $(#[$($attr:tt)*])* $name:ident $x:tt $args:tt $sig:tt -> $ret:ty
        $body:block) => {
        $crate::bindings::op::op_fn!(@fn [] $name $x $args -> $ret $body);
        $crate::bindings::op::op_fn!(@method method $(#[$($attr)*])* $name $args $sig -> $ret);
    };
    (@body $kind:ident $(#[$($attr:tt)*])* $name:ident $x:tt $args:tt [$($sig:tt)*]
        -> $ret:ty $body:block) => {
        $crate::bindings::op::op_fn!(@fn [
            $(#[$($attr)*])*
            #[pyfunction]
            #[pyo3(signature = (input, $($sig)*))]
        ] $name $x $args -> $ret $body);
        $crate::bindings::op::op_fn!(@method $kind $(#[$($attr)*])* $name $args [$($sig)*] -> $ret);
    };
    (@fn [$($pre:tt)*] $name:ident ($x:ident: $xty:ty) [$($arg:ident: $ty:ty,)*] -> $ret:ty
        $body:block) => {
        $($pre)*
        #[allow(unused_braces, unused_variables, clippy::too_many_arguments)]
        pub fn $name<'a, 'py: 'a>(py: Python<'py>, input: &'a $crate::bindings::Obj<'py>,
            $($arg: $crate::bindings::op::Raw<'a, 'py, $ty>),*) -> PyResult<$ret> {
            const OP: &str = stringify!($name);
            $crate::bindings::op::guarded(OP, || {
                let $x: $xty = $crate::bindings::op::Input::extract(OP, input)?;
                $(let $arg = $crate::bindings::op::convert::<$ty>($arg, OP, stringify!($arg))?;)*
                $body
            })
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
/// `_core` helpers the Python layer wraps, the factories), a row being
///
/// ```text
/// /// Docstring.
/// fn name["op"](arg: T, arg: T = default; keyword: T = default) -> R { body }
/// fn name["op"](*args: Tuple; keyword: T = default) -> R { body }
/// ```
///
/// with the signature written as in [`tensor_ops!`]; `"op"` is the name errors give. The
/// body runs under [`guarded`]; a row that needs the interpreter starts its signature with
/// `py: Python<'_>`.
macro_rules! functions {
    (mod $m:ident; $(
        $(#[$($attr:tt)*])*
        fn $name:ident[$op:expr]($($params:tt)*) -> $ret:ty $body:block
    )*) => {
        pub mod $m {
            #[allow(unused_imports)]
            use super::*;
            #[allow(unused_imports)]
            use $crate::bindings::op::vocabulary::*;
            $($crate::bindings::op::function_row! {
                [$(#[$($attr)*])*] $name $op ($($params)*) -> $ret $body
            })*
            fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
                $(m.add_function(wrap_pyfunction!(self::$name, m)?)?;)*
                Ok(())
            }
            $crate::bindings::part!(register);
        }
    };
}

/// One [`functions!`] row, its signature split into the pyo3 signature and the arguments.
macro_rules! function_row {
    ($attrs:tt $name:ident $op:tt ($py:ident: Python<'_> $(, $($params:tt)*)?) -> $ret:ty
        $body:block) => {
        $crate::bindings::op::function_row!(@args $attrs $name $op $py ($($($params)*)?)
            -> $ret $body);
    };
    ($attrs:tt $name:ident $op:tt ($($params:tt)*) -> $ret:ty $body:block) => {
        $crate::bindings::op::function_row!(@args $attrs $name $op py ($($params)*)
            -> $ret $body);
    };
    (@args $attrs:tt $name:ident $op:tt $py:ident (*$var:ident: $vty:ty
        $(; $($karg:ident: $kty:ty $(= $kdef:tt)?),+)?) -> $ret:ty $body:block) => {
        $crate::bindings::op::function_row!(@fn $attrs $name $op $py
            [$var: $vty, $($($karg: $kty,)+)?] [*$var, $($($karg $(= $kdef)?,)+)?] -> $ret $body);
    };
    (@args $attrs:tt $name:ident $op:tt $py:ident ($($arg:ident: $ty:ty $(= $def:tt)?),*
        $(; $($karg:ident: $kty:ty $(= $kdef:tt)?),+)?) -> $ret:ty $body:block) => {
        $crate::bindings::op::function_row!(@fn $attrs $name $op $py
            [$($arg: $ty,)* $($($karg: $kty,)+)?] [$($arg $(= $def)?,)* $(*, $($karg $(= $kdef)?,)+)?]
            -> $ret $body);
    };
    (@fn [$($attr:tt)*] $name:ident $op:tt $py:ident [$($arg:ident: $ty:ty,)*] [$($sig:tt)*]
        -> $ret:ty $body:block) => {
        $($attr)*
        #[pyfunction]
        #[pyo3(signature = ($($sig)*))]
        #[allow(unused_braces, unused_variables, non_snake_case, clippy::too_many_arguments)]
        pub fn $name<'a, 'py: 'a>($py: Python<'py>,
            $($arg: $crate::bindings::op::Raw<'a, 'py, $ty>),*) -> PyResult<$ret> {
            $crate::bindings::op::guarded($op, || {
                $(let $arg = $crate::bindings::op::convert::<$ty>($arg, $op, stringify!($arg))?;)*
                $body
            })
        }
        $crate::bindings::row_types::row_types!("function", $name [] [$($arg: $ty,)*] -> $ret);
    };
}

/// The argument types a row names, imported into each table.
pub mod vocabulary {
    pub use super::{Device, List, Object, Str, Tuple};
    pub use crate::dtype::DType;
    pub use crate::ops::Operand;
    pub use crate::tensor::Tensor;
}

/// A row's argument type: what pyo3 extracts (`Raw`) and what the body gets (`Out`), with
/// PyTorch's TypeError naming the op and the argument when the value does not fit.
pub trait Param<'a, 'py> {
    type Raw;
    type Out;
    fn convert(raw: Self::Raw, op: &str, name: &str) -> PyResult<Self::Out>;
    /// Its type in the stub (see [`RowTypes`](crate::bindings::row_types::RowTypes)).
    fn annotation() -> Option<String>;
}

pub type Raw<'a, 'py, T> = <T as Param<'a, 'py>>::Raw;

pub fn convert<'a, 'py, T: Param<'a, 'py>>(raw: T::Raw, op: &str, name: &str) -> PyResult<T::Out> {
    T::convert(raw, op, name)
}

/// Any Python object, handed to the body as is (`&Obj`).
pub struct Object;
/// A `str` argument (`&str`).
pub struct Str;
/// A tuple argument, or the `*args` of a row (`&Bound<PyTuple>`).
pub struct Tuple;
/// A list argument (`&Bound<PyList>`).
pub struct List;

/// Arguments the body takes as pyo3 hands them over: `extracted:` types pyo3 extracts
/// itself (numbers, flags, pyclass values), typed in the stub as their
/// [`PyType`](crate::bindings::row_types::PyType); `borrowed:` marker types and what pyo3
/// lends for them, each with its stub type.
macro_rules! passed_as_is {
    (extracted: $($t:ty),* $(,)?) => {
        $($crate::bindings::op::passed_as_is!(@impl $t => $t:
            <$t as $crate::bindings::row_types::PyType>::annotation());)*
    };
    (borrowed: $($t:ty => $out:ty: $ann:expr),* $(,)?) => {
        $($crate::bindings::op::passed_as_is!(@impl $t => $out: $ann);)*
    };
    (@impl $t:ty => $out:ty: $ann:expr) => {
        impl<'a, 'py: 'a> $crate::bindings::op::Param<'a, 'py> for $t {
            type Raw = $out;
            type Out = $out;
            fn convert(raw: $out, _: &str, _: &str) -> PyResult<$out> {
                Ok(raw)
            }
            fn annotation() -> Option<String> {
                $ann
            }
        }
    };
}
passed_as_is!(extracted: bool, i64, u64, usize, f64, String, Py<PyAny>);
passed_as_is!(borrowed:
    Vec<i64> => Vec<i64>: typed("Sequence[int]"),
    Vec<Option<f64>> => Vec<Option<f64>>: typed("Sequence[float | None]"),
    Object => &'a Obj<'py>: None,
    Str => &'a str: typed("str"),
    Tuple => &'a Bound<'py, PyTuple>: None,
    List => &'a Bound<'py, PyList>: None,
);

/// `Option<T>`: absent or None is `None`, anything else is a `T`.
impl<'a, 'py, T: Param<'a, 'py>> Param<'a, 'py> for Option<T> {
    type Raw = Option<T::Raw>;
    type Out = Option<T::Out>;
    fn convert(raw: Self::Raw, op: &str, name: &str) -> PyResult<Self::Out> {
        raw.map(|r| T::convert(r, op, name)).transpose()
    }
    fn annotation() -> Option<String> {
        T::annotation().map(|t| format!("{t} | None"))
    }
}

/// A `device=` argument: the candle device it names (a device this build or machine lacks
/// is refused when converted).
pub struct Device;

/// Arguments converted from the object pyo3 lends: `Type => Out: "stub type" = |object, op,
/// argument name| conversion;`.
macro_rules! converted {
    ($($(#[$doc:meta])* $t:ty => $out:ty: $ann:literal
        = |$raw:ident, $op:pat_param, $name:pat_param| $conv:expr;)*) => {$(
        $(#[$doc])*
        impl<'a, 'py: 'a> Param<'a, 'py> for $t {
            type Raw = &'a Obj<'py>;
            type Out = $out;
            fn convert($raw: &'a Obj<'py>, $op: &str, $name: &str) -> PyResult<$out> {
                $conv
            }
            fn annotation() -> Option<String> {
                typed($ann)
            }
        }
    )*};
}
converted! {
    /// A tensor argument.
    Tensor => Tensor: "Tensor" = |raw, op, name| extract_tensor(op, name, raw);
    /// A tensor or a number (`other` of the arithmetic ops).
    Operand => Operand: "_Operand" = |raw, op, _| extract_operand(op, raw);
    Device => candle_core::Device: "_Device" = |raw, _, _| extract_device(raw);
    /// A dtype: `gradstream.float32`, or Python's `float`, `int`, `bool`.
    DType => DType: "_Dtype" = |raw, _, _| extract_dtype(raw);
    /// A layout: `gradstream.channels_last` and the other memory formats.
    MemoryFormat => MemoryFormat: "memory_format" = |raw, op, name| extract_memory_format(op, name, raw);
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

pub(crate) use {attributes, function_row, functions, op_fn, passed_as_is, tensor_ops};

tensor_ops! { mod guard_fns;
    /// Panics on purpose, to test that a panic reaches Python as a RuntimeError.
    function fn _panic(x: Tensor, message: String) -> Tensor {
        let _ = x;
        panic!("{message}")
    }
}
