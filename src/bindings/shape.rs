//! Shape ops: `reshape`, `view`, `flatten`, `squeeze`, `transpose`, `permute`, `expand`,
//! `cat`, `stack`, `split`, `chunk`, `unbind`, `repeat`, `flip`, `roll`, `tril`/`triu`,
//! `narrow`, `select`, `movedim`. Where PyTorch gives `Tensor.X` varargs (`x.reshape(2, 3)`)
//! and `gradstream.X` one sequence (`reshape(x, (2, 3))`), both call one op (`sizes_ops!`).
//! The ops check the dims and sizes themselves.

use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple};

use crate::bindings::convert::{extract_dims, extract_size, type_name};
use crate::bindings::op::{attributes, functions, tensor_ops, Input};
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::ops::{index, shape, wrap_dim};
use crate::tensor::Tensor;

/// A tensor's size: `f(2, 3)` as a method, `f(x, (2, 3))` as a function.
type Sizes<'py> = Bound<'py, PyTuple>;

fn one_sequence<'py>(seq: &Obj<'py>) -> PyResult<Sizes<'py>> {
    PyTuple::new(seq.py(), [seq])
}

fn tuple(ts: Vec<Tensor>) -> PyResult<Py<PyTuple>> {
    Python::attach(|py| Ok(PyTuple::new(py, ts)?.unbind()))
}

fn split_to(t: &Tensor, split_size_or_sections: &Obj<'_>, dim: i64) -> PyResult<Py<PyTuple>> {
    if split_size_or_sections.is_instance_of::<PyInt>() {
        return tuple(shape::split(t, split_size_or_sections.extract()?, dim)?);
    }
    let sizes: Vec<i64> = split_size_or_sections.extract().map_err(|_| {
        PyTypeError::new_err(format!(
            "split(): split_size_or_sections must be an int or a list of ints, got {}",
            split_size_or_sections
                .repr()
                .map(|r| r.to_string())
                .unwrap_or_default()
        ))
    })?;
    tuple(shape::split_with_sizes(t, &sizes, dim)?)
}

tensor_ops! { mod as_fns;
    method fn view_as(x: Tensor, other: Tensor) -> Tensor {
        Ok(shape::view(&x, &other.dims().iter().map(|&d| d as i64).collect::<Vec<_>>())?)
    }
    method fn reshape_as(x: Tensor, other: Tensor) -> Tensor {
        Ok(shape::reshape(&x, &other.dims())?)
    }
    method fn expand_as(x: Tensor, other: Tensor) -> Tensor {
        Ok(shape::expand(&x, &other.dims())?)
    }
    method fn split(x: Tensor, split_size: Object, dim: i64 = 0) -> Py<PyTuple> {
        split_to(&x, split_size, dim)
    }
}

attributes! { PyTensor.t;
    /// `.T`: the dims reversed.
    #[getter(T)] fn big_t(t) -> PyResult<Tensor> = {
        Ok(shape::permute(t, &(0..t.rank()).rev().collect::<Vec<_>>())?)
    };
    /// `.mT`: the last two dims swapped.
    #[getter(mT)] fn m_t(t) -> PyResult<Tensor> = Ok(shape::mt(t)?);
}

/// The ops whose `Tensor.X` takes its sizes as varargs (`t.permute(1, 0)`) and whose
/// `gradstream.X` takes one sequence (`gradstream.permute(t, (1, 0))`), both calling
/// `f(tensor, sizes)`; `view`, `expand` and `repeat` are methods only.
macro_rules! sizes_ops {
    (both: $($name:ident($arg:ident) => $f:path),*;
     method: $($mname:ident($marg:ident) => $mf:path),*;) => {
        #[pymethods]
        impl PyTensor {
            $(#[pyo3(signature = (*$arg))]
            fn $name(&self, $arg: &Sizes<'_>) -> PyResult<Tensor> {
                Ok($f(&self.t, &extract_size(stringify!($name), $arg)?)?)
            })*
            $(#[pyo3(signature = (*$marg))]
            fn $mname(&self, $marg: &Sizes<'_>) -> PyResult<Tensor> {
                Ok($mf(&self.t, &extract_size(stringify!($mname), $marg)?)?)
            })*
        }
        tensor_ops! { mod sizes_fns; $(
            function fn $name(x: Tensor, $arg: Object) -> Tensor {
                Ok($f(&x, &extract_size(OP, &one_sequence($arg)?)?)?)
            }
        )* }
    };
}

sizes_ops! {
    both: reshape(shape) => shape::reshape_sizes, permute(dims) => shape::permute,
        tile(dims) => shape::tile, flip(dims) => shape::flip;
    method: view(shape) => shape::view, expand(sizes) => shape::expand_sizes,
        repeat(sizes) => shape::repeat;
}

tensor_ops! { mod functions;
    both fn broadcast_to(x: Tensor, size: Object) -> Tensor {
        Ok(shape::expand_sizes(&x, &extract_size(OP, &one_sequence(size)?)?)?)
    }
    both fn flatten(x: Tensor, start_dim: i64 = 0, end_dim: i64 = (-1)) -> Tensor {
        Ok(shape::flatten(&x, start_dim, end_dim)?)
    }
    both fn unflatten(x: Tensor, dim: i64, sizes: Object) -> Tensor {
        Ok(shape::unflatten(&x, dim, &extract_size("unflatten", &one_sequence(sizes)?)?)?)
    }
    both fn ravel(x: Tensor) -> Tensor { Ok(shape::reshape(&x, &[x.numel()])?) }
    both fn squeeze(x: Tensor, dim: Option<Object> = None) -> Tensor {
        Ok(match dim.filter(|d| !d.is_none()) {
            Some(d) => shape::squeeze(&x, &extract_dims(d)?)?,
            None => shape::squeeze(&x, &(0..x.rank()).collect::<Vec<_>>())?,
        })
    }
    both fn unsqueeze(x: Tensor, dim: i64) -> Tensor {
        Ok(shape::unsqueeze(&x, dim)?)
    }
    both fn transpose | swapdims(x: Tensor, dim0: i64,
        dim1: i64) -> Tensor { Ok(shape::transpose(&x, dim0, dim1)?) }
    both fn swapaxes(x: Tensor, axis0: i64,
        axis1: i64) -> Tensor { Ok(shape::transpose(&x, axis0, axis1)?) }
    both fn t(x: Tensor) -> Tensor { Ok(shape::t(&x)?) }
    both fn movedim | moveaxis(x: Tensor, source: Object, destination: Object) -> Tensor {
        Ok(shape::movedim(&x, &extract_dims(source)?, &extract_dims(destination)?)?)
    }
    both fn chunk(x: Tensor, chunks: i64, dim: i64 = 0) -> Py<PyTuple> {
        tuple(shape::chunk(&x, chunks, dim)?)
    }
    both fn unbind(x: Tensor, dim: i64 = 0) -> Py<PyTuple> { tuple(shape::unbind(&x, dim)?) }
    both fn roll(x: Tensor, shifts: Object, dims: Option<Object> = None) -> Tensor {
        let s = extract_dims(shifts)?;
        let Some(d) = dims.filter(|d| !d.is_none()) else {
            return Ok(shape::roll(&x, &s, None)?);
        };
        let ds = extract_dims(d)?
            .iter()
            .map(|&d| wrap_dim("roll", d, x.rank()))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(shape::roll(&x, &s, Some(&ds))?)
    }
    both fn tril[false] | triu[true](x: Tensor,
        diagonal: i64 = 0) -> Tensor { Ok(shape::tri(&x, diagonal, FLAG)?) }
    both fn narrow(x: Tensor, dim: i64, start: i64, length: i64) -> Tensor {
        Ok(index::narrow(&x, dim, start, length)?)
    }
    both fn select(x: Tensor, dim: i64, index: i64) -> Tensor {
        Ok(index::select(&x, dim, index)?)
    }
}

/// A list or tuple of tensors (`cat`, `stack`), with PyTorch's TypeError otherwise.
fn tensor_list(op: &str, obj: &Obj<'_>) -> PyResult<Vec<Tensor>> {
    if obj.cast::<PyTensor>().is_ok()
        || !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>())
    {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not {}",
            type_name(obj)
        )));
    }
    obj.try_iter()?
        .enumerate()
        .map(|(i, item)| {
            let item = item?;
            Tensor::extract(op, &item).map_err(|_| {
                PyTypeError::new_err(format!(
                    "{op}(): expected Tensor as element {i} in argument 0, but got {}",
                    type_name(&item)
                ))
            })
        })
        .collect()
}

functions! { mod list_fns;
    /// `cat(tensors, dim=0)`; also `concat` and `concatenate` (which also takes `axis=`).
    fn cat["cat"](tensors: Object, dim: i64 = 0) -> Tensor {
        Ok(shape::cat(&tensor_list("cat", tensors)?, dim)?)
    }
    fn concat["concat"](tensors: Object, dim: i64 = 0) -> Tensor {
        Ok(shape::cat(&tensor_list("concat", tensors)?, dim)?)
    }
    fn concatenate["concatenate"](tensors: Object, axis: i64 = 0,
        dim: Option<i64> = None) -> Tensor {
        Ok(shape::cat(&tensor_list("concatenate", tensors)?, dim.unwrap_or(axis))?)
    }
    fn stack["stack"](tensors: Object, dim: i64 = 0) -> Tensor {
        Ok(shape::stack(&tensor_list("stack", tensors)?, dim)?)
    }
    /// `split(tensor, split_size_or_sections, dim=0)`: PyTorch names this input `tensor`.
    fn split["split"](tensor: Tensor, split_size_or_sections: Object, dim: i64 = 0) -> Py<PyTuple> {
        split_to(&tensor, split_size_or_sections, dim)
    }
}
