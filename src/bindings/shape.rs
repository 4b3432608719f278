//! Shape ops: `reshape`, `view`, `flatten`, `squeeze`, `transpose`, `permute`, `expand`,
//! `cat`, `stack`, `split`, `chunk`, `unbind`, `repeat`, `flip`, `roll`, `tril`/`triu`,
//! `narrow`, `select`, `movedim`. Where PyTorch gives `Tensor.X` varargs (`x.reshape(2, 3)`)
//! and `gradstream.X` one sequence (`reshape(x, (2, 3))`), both call one `*_to` function.

use pyo3::exceptions::{PyIndexError, PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple};

use crate::bindings::convert::{extract_dims, extract_size, type_name};
use crate::bindings::op::{attributes, functions, tensor_ops, Input};
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::ops::{index, shape, wrap_dim, wrap_dims};
use crate::tensor::Tensor;

/// A tensor's size: `f(2, 3)` as a method, `f(x, (2, 3))` as a function.
type Sizes<'py> = Bound<'py, PyTuple>;

fn one_sequence<'py>(seq: &Obj<'py>) -> PyResult<Sizes<'py>> {
    PyTuple::new(seq.py(), [seq])
}

fn reshape_to(t: &Tensor, size: &Sizes<'_>) -> PyResult<Tensor> {
    let req = extract_size("reshape", size)?;
    let dims = shape::infer_shape("reshape", &req, t.numel(), &t.dims())?;
    Ok(shape::reshape(t, &dims)?)
}

fn view_to(t: &Tensor, size: &Sizes<'_>) -> PyResult<Tensor> {
    Ok(shape::view(t, &extract_size("view", size)?)?)
}

fn permute_to(t: &Tensor, dims: &Sizes<'_>) -> PyResult<Tensor> {
    Ok(shape::permute(
        t,
        &wrap_dims("permute", Some(&extract_size("permute", dims)?), t.rank())?,
    )?)
}

fn flip_to(t: &Tensor, dims: &Sizes<'_>) -> PyResult<Tensor> {
    Ok(shape::flip(
        t,
        &wrap_dims("flip", Some(&extract_size("flip", dims)?), t.rank())?,
    )?)
}

fn expand_to(t: &Tensor, sizes: &Sizes<'_>) -> PyResult<Tensor> {
    Ok(shape::expand_sizes(t, &extract_size("expand", sizes)?)?)
}

fn repeat_sizes(op: &str, sizes: &Sizes<'_>) -> PyResult<Vec<usize>> {
    let r = extract_size(op, sizes)?;
    if let Some(n) = r.iter().find(|&&x| x < 0) {
        return Err(PyRuntimeError::new_err(format!(
            "{op}: Trying to create tensor with negative dimension {n}: {r:?}"
        )));
    }
    Ok(r.into_iter().map(|x| x as usize).collect())
}

fn repeat_to(t: &Tensor, sizes: &Sizes<'_>) -> PyResult<Tensor> {
    Ok(shape::repeat(t, &repeat_sizes("repeat", sizes)?)?)
}

fn tile_to(t: &Tensor, dims: &Sizes<'_>) -> PyResult<Tensor> {
    let dims = repeat_sizes("tile", dims)?;
    let mut d = vec![1; t.rank().saturating_sub(dims.len())];
    d.extend_from_slice(&dims);
    Ok(shape::repeat(t, &d)?)
}

fn transpose_dims(t: &Tensor, dim0: i64, dim1: i64) -> PyResult<Tensor> {
    let r = t.rank();
    let (a, b) = (
        wrap_dim("transpose", dim0, r)?,
        wrap_dim("transpose", dim1, r)?,
    );
    Ok(shape::transpose(t, a, b)?)
}

fn tuple(ts: Vec<Tensor>) -> PyResult<Py<PyTuple>> {
    Python::attach(|py| Ok(PyTuple::new(py, ts)?.unbind()))
}

fn split_to(t: &Tensor, split_size_or_sections: &Obj<'_>, dim: i64) -> PyResult<Py<PyTuple>> {
    if t.rank() == 0 {
        return Err(crate::ops::needs_1d("split").into());
    }
    if split_size_or_sections.is_instance_of::<PyInt>() {
        let s: i64 = split_size_or_sections.extract()?;
        if s < 0 {
            return Err(PyRuntimeError::new_err(format!(
                "split expects split_size be non-negative, but got split_size={s}"
            )));
        }
        let d = wrap_dim("split", dim, t.rank())?;
        return tuple(shape::split(t, s as usize, d)?);
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
    if let Some(n) = sizes.iter().find(|&&s| s < 0) {
        return Err(PyRuntimeError::new_err(format!(
            "split_with_sizes expects split_sizes have only non-negative entries, but got \
             split_sizes={sizes:?} (entry {n})"
        )));
    }
    let sizes: Vec<usize> = sizes.into_iter().map(|s| s as usize).collect();
    let d = wrap_dim("split", dim, t.rank())?;
    tuple(shape::split_with_sizes(t, &sizes, d)?)
}

tensor_ops! { mod as_fns;
    method fn view_as(x: Tensor, other as "other": &Obj<'_>) [other] -> Tensor {
        Ok(shape::view(&x, &other.dims().iter().map(|&d| d as i64).collect::<Vec<_>>())?)
    }
    method fn reshape_as(x: Tensor, other as "other": &Obj<'_>) [other] -> Tensor {
        Ok(shape::reshape(&x, &other.dims())?)
    }
    method fn expand_as(x: Tensor, other as "other": &Obj<'_>) [other] -> Tensor {
        Ok(shape::expand(&x, &other.dims())?)
    }
    method fn split(x: Tensor, split_size: &Obj<'_>, dim: i64) [split_size, dim=0]
        -> Py<PyTuple> {
        split_to(&x, split_size, dim)
    }
}

attributes! { PyTensor.t;
    /// `.T`: the dims reversed.
    #[getter(T)] fn big_t(t) -> PyResult<Tensor> = {
        Ok(shape::permute(t, &(0..t.rank()).rev().collect::<Vec<_>>())?)
    };
    /// `.mT`: the last two dims swapped.
    #[getter(mT)] fn m_t(t) -> PyResult<Tensor> = match t.rank() {
        r if r < 2 => Err(PyRuntimeError::new_err(format!(
            "tensor.mT is only supported on matrices or batches of matrices. Got {r}-D tensor."
        ))),
        r => Ok(shape::transpose(t, r - 2, r - 1)?),
    };
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
            fn $name(&self, $arg: &Sizes<'_>) -> PyResult<Tensor> { $f(&self.t, $arg) })*
            $(#[pyo3(signature = (*$marg))]
            fn $mname(&self, $marg: &Sizes<'_>) -> PyResult<Tensor> { $mf(&self.t, $marg) })*
        }
        tensor_ops! { mod sizes_fns; $(
            function fn $name(x: Tensor, $arg: &Obj<'_>) [$arg] -> Tensor {
                $f(&x, &one_sequence($arg)?)
            }
        )* }
    };
}

sizes_ops! {
    both: reshape(shape) => reshape_to, permute(dims) => permute_to, tile(dims) => tile_to,
        flip(dims) => flip_to;
    method: view(shape) => view_to, expand(sizes) => expand_to, repeat(sizes) => repeat_to;
}

tensor_ops! { mod functions;
    both fn broadcast_to(x: Tensor, size: &Obj<'_>) [size] -> Tensor {
        expand_to(&x, &one_sequence(size)?)
    }
    both fn flatten(x: Tensor, start_dim: i64, end_dim: i64) [start_dim=0, end_dim=-1] -> Tensor {
        let r = x.rank();
        let (s, e) = (wrap_dim("flatten", start_dim, r)?, wrap_dim("flatten", end_dim, r)?);
        Ok(shape::flatten(&x, s, e)?)
    }
    both fn unflatten(x: Tensor, dim: i64, sizes: &Obj<'_>) [dim, sizes] -> Tensor {
        let d = wrap_dim("unflatten", dim, x.rank())?;
        Ok(shape::unflatten(&x, d, &extract_size("unflatten", &one_sequence(sizes)?)?)?)
    }
    both fn ravel(x: Tensor) [] -> Tensor { Ok(shape::reshape(&x, &[x.numel()])?) }
    both fn squeeze(x: Tensor, dim: Option<&Obj<'_>>) [dim=None] -> Tensor {
        let dims = match dim.filter(|d| !d.is_none()) {
            Some(d) => wrap_dims("squeeze", Some(&extract_dims(d)?), x.rank())?,
            None => (0..x.rank()).collect(),
        };
        Ok(shape::squeeze(&x, &dims)?)
    }
    both fn unsqueeze(x: Tensor, dim: i64) [dim] -> Tensor {
        Ok(shape::unsqueeze(&x, wrap_dim("unsqueeze", dim, x.rank() + 1)?)?)
    }
    both fn transpose | swapdims(x: Tensor, dim0: i64, dim1: i64)
        [dim0, dim1] -> Tensor { transpose_dims(&x, dim0, dim1) }
    both fn swapaxes(x: Tensor, axis0: i64, axis1: i64)
        [axis0, axis1] -> Tensor { transpose_dims(&x, axis0, axis1) }
    both fn t(x: Tensor) [] -> Tensor {
        if x.rank() > 2 {
            return Err(PyRuntimeError::new_err(format!(
                "t() expects a tensor with <= 2 dimensions, but self is {}D",
                x.rank()
            )));
        }
        Ok(shape::transpose(&x, 0, 1)?)
    }
    both fn movedim | moveaxis(x: Tensor, source: &Obj<'_>, destination: &Obj<'_>)
        [source, destination] -> Tensor {
        let r = x.rank();
        let s = wrap_dims("movedim", Some(&extract_dims(source)?), r)?;
        let d = wrap_dims("movedim", Some(&extract_dims(destination)?), r)?;
        Ok(shape::movedim(&x, &s, &d)?)
    }
    both fn chunk(x: Tensor, chunks: i64, dim: i64) [chunks, dim=0] -> Py<PyTuple> {
        shape::check_chunk(&x, chunks)?;
        tuple(shape::chunk(&x, chunks, wrap_dim("chunk", dim, x.rank())?)?)
    }
    both fn unbind(x: Tensor, dim: i64) [dim=0] -> Py<PyTuple> {
        tuple(shape::unbind(&x, wrap_dim("unbind", dim, x.rank())?)?)
    }
    both fn roll(x: Tensor, shifts: &Obj<'_>, dims: Option<&Obj<'_>>)
        [shifts, dims=None] -> Tensor {
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
    both fn tril[false] | triu[true](x: Tensor, diagonal: i64)
        [diagonal=0] -> Tensor { Ok(shape::tri(&x, diagonal, FLAG)?) }
    both fn narrow(x: Tensor, dim: i64, start: i64, length: i64) [dim, start, length] -> Tensor {
        if x.rank() == 0 {
            return Err(crate::error::Error::shape("narrow() cannot be applied to a 0-dim tensor.").into());
        }
        if length < 0 {
            return Err(PyRuntimeError::new_err(format!(
                "narrow(): length must be non-negative (got {length})"
            )));
        }
        let d = wrap_dim("narrow", dim, x.rank())?;
        let size = x.dims().get(d).copied().unwrap_or(0) as i64;
        if start < -size || start > size {
            return Err(PyIndexError::new_err(format!(
                "start out of range (expected to be in range of [{}, {size}], but got {start})",
                -size
            )));
        }
        let s = if start < 0 { start + size } else { start };
        Ok(index::narrow(&x, d, s as usize, length as usize)?)
    }
    both fn select(x: Tensor, dim: i64, index: i64) [dim, index] -> Tensor {
        if x.rank() == 0 {
            return Err(PyIndexError::new_err("select() cannot be applied to a 0-dim tensor."));
        }
        Ok(index::select(&x, wrap_dim("select", dim, x.rank())?, index)?)
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
    fn cat["cat"](tensors: &Obj<'_>, dim: i64) [tensors, dim=0] -> Tensor {
        Ok(shape::cat(&tensor_list("cat", tensors)?, dim)?)
    }
    fn concat["concat"](tensors: &Obj<'_>, dim: i64) [tensors, dim=0] -> Tensor {
        Ok(shape::cat(&tensor_list("concat", tensors)?, dim)?)
    }
    fn concatenate["concatenate"](tensors: &Obj<'_>, axis: i64, dim: Option<i64>)
        [tensors, axis=0, dim=None] -> Tensor {
        Ok(shape::cat(&tensor_list("concatenate", tensors)?, dim.unwrap_or(axis))?)
    }
    fn stack["stack"](tensors: &Obj<'_>, dim: i64) [tensors, dim=0] -> Tensor {
        Ok(shape::stack(&tensor_list("stack", tensors)?, dim)?)
    }
    /// `split(tensor, split_size_or_sections, dim=0)`: PyTorch names this input `tensor`.
    fn split["split"](tensor as "tensor": &Obj<'_>, split_size_or_sections: &Obj<'_>, dim: i64)
        [tensor, split_size_or_sections, dim=0] -> Py<PyTuple> {
        split_to(&tensor, split_size_or_sections, dim)
    }
}
