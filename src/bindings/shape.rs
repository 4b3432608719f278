//! Shape methods and functions: `reshape`, `view`, `flatten`, `squeeze`, `transpose`,
//! `permute`, `expand`, `cat`, `stack`, `split`, `chunk`, `unbind`, `repeat`, `flip`, `roll`,
//! `tril`/`triu`, `narrow`, `select`, `movedim`.

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyInt, PyList, PyTuple};

use crate::bindings::convert::{extract_dims, extract_size, extract_tensor};
use crate::bindings::tensor::PyTensor;
use crate::ops::{index, shape, wrap_dim, wrap_dims};
use crate::tensor::Tensor;

fn reshape_impl(op: &str, t: &Tensor, size: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
    let req = extract_size(op, size)?;
    let dims = shape::infer_shape(op, &req, t.numel(), &t.dims())?;
    Ok(shape::reshape(t, &dims)?)
}

/// A list or tuple of tensors (`cat`, `stack`), with PyTorch's TypeError otherwise.
fn tensor_list(op: &str, obj: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    if obj.cast::<PyTensor>().is_ok()
        || !(obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>())
    {
        return Err(PyTypeError::new_err(format!(
            "{op}(): argument 'tensors' (position 1) must be tuple of Tensors, not {}",
            obj.get_type().name()?
        )));
    }
    obj.try_iter()?
        .enumerate()
        .map(|(i, item)| {
            let item = item?;
            item.cast::<PyTensor>()
                .map(|t| t.get().t.clone())
                .map_err(|_| {
                    PyTypeError::new_err(format!(
                        "{op}(): expected Tensor as element {i} in argument 0, but got {}",
                        item.get_type()
                            .name()
                            .map(|n| n.to_string())
                            .unwrap_or_default()
                    ))
                })
        })
        .collect()
}

fn tuple_of<'py>(py: Python<'py>, ts: Vec<Tensor>) -> PyResult<Bound<'py, PyTuple>> {
    PyTuple::new(py, ts)
}

/// Dims given as `f(0, 1)`, `f((0, 1))` or `f([0, 1])`.
fn dims_args(op: &str, args: &Bound<'_, PyTuple>, rank: usize) -> PyResult<Vec<usize>> {
    let d = extract_size(op, args)?;
    Ok(wrap_dims(op, Some(&d), rank)?)
}

fn squeeze_impl(t: &Tensor, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    let dims = match dim {
        Some(d) if !d.is_none() => {
            let ds = extract_dims(d)?;
            wrap_dims("squeeze", Some(&ds), t.rank())?
        }
        _ => (0..t.rank()).collect(),
    };
    Ok(shape::squeeze(t, &dims)?)
}

fn flatten_impl(t: &Tensor, start_dim: i64, end_dim: i64) -> PyResult<Tensor> {
    let r = t.rank();
    let (s, e) = (
        wrap_dim("flatten", start_dim, r)?,
        wrap_dim("flatten", end_dim, r)?,
    );
    Ok(shape::flatten(t, s, e)?)
}

fn unflatten_impl(t: &Tensor, dim: i64, sizes: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let d = wrap_dim("unflatten", dim, t.rank())?;
    let s = extract_size("unflatten", &PyTuple::new(sizes.py(), [sizes])?)?;
    Ok(shape::unflatten(t, d, &s)?)
}

fn transpose_impl(t: &Tensor, dim0: i64, dim1: i64) -> PyResult<Tensor> {
    let r = t.rank();
    let (a, b) = (
        wrap_dim("transpose", dim0, r)?,
        wrap_dim("transpose", dim1, r)?,
    );
    Ok(shape::transpose(t, a, b)?)
}

fn t_impl(t: &Tensor) -> PyResult<Tensor> {
    if t.rank() > 2 {
        return Err(PyRuntimeError::new_err(format!(
            "t() expects a tensor with <= 2 dimensions, but self is {}D",
            t.rank()
        )));
    }
    Ok(shape::transpose(t, 0, 1)?)
}

fn split_impl<'py>(
    py: Python<'py>,
    t: &Tensor,
    split_size_or_sections: &Bound<'py, PyAny>,
    dim: i64,
) -> PyResult<Bound<'py, PyTuple>> {
    let d = wrap_dim("split", dim, t.rank())?;
    let parts = if split_size_or_sections.is_instance_of::<PyInt>() {
        let s: i64 = split_size_or_sections.extract()?;
        if s < 0 {
            return Err(PyRuntimeError::new_err(format!(
                "split expects split_size be non-negative, but got split_size={s}"
            )));
        }
        shape::split(t, s as usize, d)?
    } else {
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
        shape::split_with_sizes(t, &sizes, d)?
    };
    tuple_of(py, parts)
}

fn roll_impl(
    t: &Tensor,
    shifts: &Bound<'_, PyAny>,
    dims: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    let s = extract_dims(shifts)?;
    match dims {
        Some(d) if !d.is_none() => {
            let ds = extract_dims(d)?;
            let ds = ds
                .iter()
                .map(|&x| wrap_dim("roll", x, t.rank()))
                .collect::<Result<Vec<_>, _>>()?;
            Ok(shape::roll(t, &s, Some(&ds))?)
        }
        _ => Ok(shape::roll(t, &s, None)?),
    }
}

fn movedim_impl(
    t: &Tensor,
    source: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let r = t.rank();
    let s = wrap_dims("movedim", Some(&extract_dims(source)?), r)?;
    let d = wrap_dims("movedim", Some(&extract_dims(destination)?), r)?;
    Ok(shape::movedim(t, &s, &d)?)
}

fn narrow_impl(t: &Tensor, dim: i64, start: i64, length: i64) -> PyResult<Tensor> {
    let d = wrap_dim("narrow", dim, t.rank())?;
    let size = t.dims().get(d).copied().unwrap_or(0) as i64;
    if start < -size || start > size {
        return Err(pyo3::exceptions::PyIndexError::new_err(format!(
            "start out of range (expected to be in range of [{}, {size}], but got {start})",
            -size
        )));
    }
    if length < 0 {
        return Err(PyRuntimeError::new_err(format!(
            "narrow(): length must be non-negative (got {length})"
        )));
    }
    let s = if start < 0 { start + size } else { start };
    Ok(index::narrow(t, d, s as usize, length as usize)?)
}

fn select_impl(t: &Tensor, dim: i64, index_: i64) -> PyResult<Tensor> {
    if t.rank() == 0 {
        return Err(pyo3::exceptions::PyIndexError::new_err(
            "select() cannot be applied to a 0-dim tensor.",
        ));
    }
    let d = wrap_dim("select", dim, t.rank())?;
    Ok(index::select(t, d, index_)?)
}

fn repeat_sizes(op: &str, sizes: &Bound<'_, PyTuple>) -> PyResult<Vec<usize>> {
    let r = extract_size(op, sizes)?;
    if let Some(n) = r.iter().find(|&&x| x < 0) {
        return Err(PyRuntimeError::new_err(format!(
            "{op}: Trying to create tensor with negative dimension {n}: {r:?}"
        )));
    }
    Ok(r.into_iter().map(|x| x as usize).collect())
}

fn tile_impl(t: &Tensor, dims: &[usize]) -> PyResult<Tensor> {
    let mut d = vec![1; t.rank().saturating_sub(dims.len())];
    d.extend_from_slice(dims);
    Ok(shape::repeat(t, &d)?)
}

fn expand_impl(t: &Tensor, sizes: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
    let req = extract_size("expand", sizes)?;
    Ok(shape::expand_sizes(t, &req)?)
}

#[pymethods]
impl PyTensor {
    #[pyo3(signature = (*shape))]
    fn reshape(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        reshape_impl("reshape", &self.t, shape)
    }

    #[pyo3(signature = (*shape))]
    fn view(&self, shape: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        Ok(shape::view(&self.t, &extract_size("view", shape)?)?)
    }

    fn view_as(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = extract_tensor("view_as", "other", other)?;
        let dims: Vec<i64> = o.dims().iter().map(|&d| d as i64).collect();
        self.view(&PyTuple::new(other.py(), [dims])?)
    }

    fn reshape_as(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = extract_tensor("reshape_as", "other", other)?;
        Ok(shape::reshape(&self.t, &o.dims())?)
    }

    #[pyo3(signature = (start_dim=0, end_dim=-1))]
    fn flatten(&self, start_dim: i64, end_dim: i64) -> PyResult<Tensor> {
        flatten_impl(&self.t, start_dim, end_dim)
    }

    fn unflatten(&self, dim: i64, sizes: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        unflatten_impl(&self.t, dim, sizes)
    }

    fn ravel(&self) -> PyResult<Tensor> {
        Ok(shape::reshape(&self.t, &[self.t.numel()])?)
    }

    #[pyo3(signature = (dim=None))]
    fn squeeze(&self, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
        squeeze_impl(&self.t, dim)
    }

    fn unsqueeze(&self, dim: i64) -> PyResult<Tensor> {
        let d = wrap_dim("unsqueeze", dim, self.t.rank() + 1)?;
        Ok(shape::unsqueeze(&self.t, d)?)
    }

    fn transpose(&self, dim0: i64, dim1: i64) -> PyResult<Tensor> {
        transpose_impl(&self.t, dim0, dim1)
    }

    fn swapaxes(&self, axis0: i64, axis1: i64) -> PyResult<Tensor> {
        transpose_impl(&self.t, axis0, axis1)
    }

    fn swapdims(&self, dim0: i64, dim1: i64) -> PyResult<Tensor> {
        transpose_impl(&self.t, dim0, dim1)
    }

    #[pyo3(signature = (*dims))]
    fn permute(&self, dims: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let d = dims_args("permute", dims, self.t.rank())?;
        Ok(shape::permute(&self.t, &d)?)
    }

    fn movedim(
        &self,
        source: &Bound<'_, PyAny>,
        destination: &Bound<'_, PyAny>,
    ) -> PyResult<Tensor> {
        movedim_impl(&self.t, source, destination)
    }

    fn moveaxis(
        &self,
        source: &Bound<'_, PyAny>,
        destination: &Bound<'_, PyAny>,
    ) -> PyResult<Tensor> {
        movedim_impl(&self.t, source, destination)
    }

    #[pyo3(signature = (*sizes))]
    fn expand(&self, sizes: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        expand_impl(&self.t, sizes)
    }

    fn expand_as(&self, other: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let o = extract_tensor("expand_as", "other", other)?;
        Ok(shape::expand(&self.t, &o.dims())?)
    }

    fn broadcast_to(&self, size: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        expand_impl(&self.t, &PyTuple::new(size.py(), [size])?)
    }

    fn t(&self) -> PyResult<Tensor> {
        t_impl(&self.t)
    }

    #[getter(T)]
    fn big_t(&self) -> PyResult<Tensor> {
        let r = self.t.rank();
        let perm: Vec<usize> = (0..r).rev().collect();
        Ok(shape::permute(&self.t, &perm)?)
    }

    #[getter(mT)]
    fn m_t(&self) -> PyResult<Tensor> {
        let r = self.t.rank();
        if r < 2 {
            return Err(PyRuntimeError::new_err(format!(
                "tensor.mT is only supported on matrices or batches of matrices. Got {r}-D tensor."
            )));
        }
        Ok(shape::transpose(&self.t, r - 2, r - 1)?)
    }

    #[pyo3(signature = (split_size, dim=0))]
    fn split<'py>(
        &self,
        py: Python<'py>,
        split_size: &Bound<'py, PyAny>,
        dim: i64,
    ) -> PyResult<Bound<'py, PyTuple>> {
        split_impl(py, &self.t, split_size, dim)
    }

    #[pyo3(signature = (chunks, dim=0))]
    fn chunk<'py>(&self, py: Python<'py>, chunks: i64, dim: i64) -> PyResult<Bound<'py, PyTuple>> {
        let d = wrap_dim("chunk", dim, self.t.rank())?;
        tuple_of(py, shape::chunk(&self.t, chunks, d)?)
    }

    #[pyo3(signature = (dim=0))]
    fn unbind<'py>(&self, py: Python<'py>, dim: i64) -> PyResult<Bound<'py, PyTuple>> {
        let d = wrap_dim("unbind", dim, self.t.rank())?;
        tuple_of(py, shape::unbind(&self.t, d)?)
    }

    #[pyo3(signature = (*sizes))]
    fn repeat(&self, sizes: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let r = repeat_sizes("repeat", sizes)?;
        Ok(shape::repeat(&self.t, &r)?)
    }

    #[pyo3(signature = (*dims))]
    fn tile(&self, dims: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        tile_impl(&self.t, &repeat_sizes("tile", dims)?)
    }

    #[pyo3(signature = (*dims))]
    fn flip(&self, dims: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
        let d = dims_args("flip", dims, self.t.rank())?;
        Ok(shape::flip(&self.t, &d)?)
    }

    #[pyo3(signature = (shifts, dims=None))]
    fn roll(&self, shifts: &Bound<'_, PyAny>, dims: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
        roll_impl(&self.t, shifts, dims)
    }

    #[pyo3(signature = (diagonal=0))]
    fn tril(&self, diagonal: i64) -> PyResult<Tensor> {
        Ok(shape::tri(&self.t, diagonal, false)?)
    }

    #[pyo3(signature = (diagonal=0))]
    fn triu(&self, diagonal: i64) -> PyResult<Tensor> {
        Ok(shape::tri(&self.t, diagonal, true)?)
    }

    fn narrow(&self, dim: i64, start: i64, length: i64) -> PyResult<Tensor> {
        narrow_impl(&self.t, dim, start, length)
    }

    fn select(&self, dim: i64, index: i64) -> PyResult<Tensor> {
        select_impl(&self.t, dim, index)
    }
}

#[pyfunction]
fn reshape(input: &Bound<'_, PyAny>, shape: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("reshape", "input", input)?;
    reshape_impl("reshape", &t, &PyTuple::new(input.py(), [shape])?)
}

#[pyfunction]
#[pyo3(signature = (input, start_dim=0, end_dim=-1))]
fn flatten(input: &Bound<'_, PyAny>, start_dim: i64, end_dim: i64) -> PyResult<Tensor> {
    flatten_impl(
        &extract_tensor("flatten", "input", input)?,
        start_dim,
        end_dim,
    )
}

#[pyfunction]
fn unflatten(input: &Bound<'_, PyAny>, dim: i64, sizes: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    unflatten_impl(&extract_tensor("unflatten", "input", input)?, dim, sizes)
}

#[pyfunction]
fn ravel(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("ravel", "input", input)?;
    Ok(shape::reshape(&t, &[t.numel()])?)
}

#[pyfunction]
#[pyo3(signature = (input, dim=None))]
fn squeeze(input: &Bound<'_, PyAny>, dim: Option<&Bound<'_, PyAny>>) -> PyResult<Tensor> {
    squeeze_impl(&extract_tensor("squeeze", "input", input)?, dim)
}

#[pyfunction]
fn unsqueeze(input: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    let t = extract_tensor("unsqueeze", "input", input)?;
    Ok(shape::unsqueeze(
        &t,
        wrap_dim("unsqueeze", dim, t.rank() + 1)?,
    )?)
}

#[pyfunction]
fn transpose(input: &Bound<'_, PyAny>, dim0: i64, dim1: i64) -> PyResult<Tensor> {
    transpose_impl(&extract_tensor("transpose", "input", input)?, dim0, dim1)
}

#[pyfunction]
fn swapaxes(input: &Bound<'_, PyAny>, axis0: i64, axis1: i64) -> PyResult<Tensor> {
    transpose_impl(&extract_tensor("swapaxes", "input", input)?, axis0, axis1)
}

#[pyfunction]
fn swapdims(input: &Bound<'_, PyAny>, dim0: i64, dim1: i64) -> PyResult<Tensor> {
    transpose_impl(&extract_tensor("swapdims", "input", input)?, dim0, dim1)
}

#[pyfunction]
fn t(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    t_impl(&extract_tensor("t", "input", input)?)
}

#[pyfunction]
fn permute(input: &Bound<'_, PyAny>, dims: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("permute", "input", input)?;
    let d = dims_args("permute", &PyTuple::new(input.py(), [dims])?, t.rank())?;
    Ok(shape::permute(&t, &d)?)
}

#[pyfunction]
fn movedim(
    input: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    movedim_impl(
        &extract_tensor("movedim", "input", input)?,
        source,
        destination,
    )
}

#[pyfunction]
fn moveaxis(
    input: &Bound<'_, PyAny>,
    source: &Bound<'_, PyAny>,
    destination: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    movedim_impl(
        &extract_tensor("moveaxis", "input", input)?,
        source,
        destination,
    )
}

#[pyfunction]
fn broadcast_to(input: &Bound<'_, PyAny>, size: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("broadcast_to", "input", input)?;
    expand_impl(&t, &PyTuple::new(input.py(), [size])?)
}

/// `cat(tensors, dim=0)`; also `concat` and `concatenate` (which also takes `axis=`).
fn cat_impl(op: &str, tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    let ts = tensor_list(op, tensors)?;
    Ok(shape::cat(&ts, dim)?)
}

#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
fn cat(tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    cat_impl("cat", tensors, dim)
}

#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
fn concat(tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    cat_impl("concat", tensors, dim)
}

#[pyfunction]
#[pyo3(signature = (tensors, axis=0, dim=None))]
fn concatenate(tensors: &Bound<'_, PyAny>, axis: i64, dim: Option<i64>) -> PyResult<Tensor> {
    cat_impl("concatenate", tensors, dim.unwrap_or(axis))
}

#[pyfunction]
#[pyo3(signature = (tensors, dim=0))]
fn stack(tensors: &Bound<'_, PyAny>, dim: i64) -> PyResult<Tensor> {
    let ts = tensor_list("stack", tensors)?;
    Ok(shape::stack(&ts, dim)?)
}

#[pyfunction]
#[pyo3(signature = (tensor, split_size_or_sections, dim=0))]
fn split<'py>(
    tensor: &Bound<'py, PyAny>,
    split_size_or_sections: &Bound<'py, PyAny>,
    dim: i64,
) -> PyResult<Bound<'py, PyTuple>> {
    let t = extract_tensor("split", "tensor", tensor)?;
    split_impl(tensor.py(), &t, split_size_or_sections, dim)
}

#[pyfunction]
#[pyo3(signature = (input, chunks, dim=0))]
fn chunk<'py>(input: &Bound<'py, PyAny>, chunks: i64, dim: i64) -> PyResult<Bound<'py, PyTuple>> {
    let t = extract_tensor("chunk", "input", input)?;
    let d = wrap_dim("chunk", dim, t.rank())?;
    tuple_of(input.py(), shape::chunk(&t, chunks, d)?)
}

#[pyfunction]
#[pyo3(signature = (input, dim=0))]
fn unbind<'py>(input: &Bound<'py, PyAny>, dim: i64) -> PyResult<Bound<'py, PyTuple>> {
    let t = extract_tensor("unbind", "input", input)?;
    let d = wrap_dim("unbind", dim, t.rank())?;
    tuple_of(input.py(), shape::unbind(&t, d)?)
}

#[pyfunction]
fn tile(input: &Bound<'_, PyAny>, dims: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("tile", "input", input)?;
    tile_impl(
        &t,
        &repeat_sizes("tile", &PyTuple::new(input.py(), [dims])?)?,
    )
}

#[pyfunction]
fn flip(input: &Bound<'_, PyAny>, dims: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("flip", "input", input)?;
    let d = dims_args("flip", &PyTuple::new(input.py(), [dims])?, t.rank())?;
    Ok(shape::flip(&t, &d)?)
}

#[pyfunction]
#[pyo3(signature = (input, shifts, dims=None))]
fn roll(
    input: &Bound<'_, PyAny>,
    shifts: &Bound<'_, PyAny>,
    dims: Option<&Bound<'_, PyAny>>,
) -> PyResult<Tensor> {
    roll_impl(&extract_tensor("roll", "input", input)?, shifts, dims)
}

#[pyfunction]
#[pyo3(signature = (input, diagonal=0))]
fn tril(input: &Bound<'_, PyAny>, diagonal: i64) -> PyResult<Tensor> {
    Ok(shape::tri(
        &extract_tensor("tril", "input", input)?,
        diagonal,
        false,
    )?)
}

#[pyfunction]
#[pyo3(signature = (input, diagonal=0))]
fn triu(input: &Bound<'_, PyAny>, diagonal: i64) -> PyResult<Tensor> {
    Ok(shape::tri(
        &extract_tensor("triu", "input", input)?,
        diagonal,
        true,
    )?)
}

#[pyfunction]
fn narrow(input: &Bound<'_, PyAny>, dim: i64, start: i64, length: i64) -> PyResult<Tensor> {
    narrow_impl(
        &extract_tensor("narrow", "input", input)?,
        dim,
        start,
        length,
    )
}

#[pyfunction]
fn select(input: &Bound<'_, PyAny>, dim: i64, index: i64) -> PyResult<Tensor> {
    select_impl(&extract_tensor("select", "input", input)?, dim, index)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(reshape, m)?)?;
    m.add_function(wrap_pyfunction!(flatten, m)?)?;
    m.add_function(wrap_pyfunction!(unflatten, m)?)?;
    m.add_function(wrap_pyfunction!(ravel, m)?)?;
    m.add_function(wrap_pyfunction!(squeeze, m)?)?;
    m.add_function(wrap_pyfunction!(unsqueeze, m)?)?;
    m.add_function(wrap_pyfunction!(transpose, m)?)?;
    m.add_function(wrap_pyfunction!(swapaxes, m)?)?;
    m.add_function(wrap_pyfunction!(swapdims, m)?)?;
    m.add_function(wrap_pyfunction!(t, m)?)?;
    m.add_function(wrap_pyfunction!(permute, m)?)?;
    m.add_function(wrap_pyfunction!(movedim, m)?)?;
    m.add_function(wrap_pyfunction!(moveaxis, m)?)?;
    m.add_function(wrap_pyfunction!(broadcast_to, m)?)?;
    m.add_function(wrap_pyfunction!(cat, m)?)?;
    m.add_function(wrap_pyfunction!(concat, m)?)?;
    m.add_function(wrap_pyfunction!(concatenate, m)?)?;
    m.add_function(wrap_pyfunction!(stack, m)?)?;
    m.add_function(wrap_pyfunction!(split, m)?)?;
    m.add_function(wrap_pyfunction!(chunk, m)?)?;
    m.add_function(wrap_pyfunction!(unbind, m)?)?;
    m.add_function(wrap_pyfunction!(tile, m)?)?;
    m.add_function(wrap_pyfunction!(flip, m)?)?;
    m.add_function(wrap_pyfunction!(roll, m)?)?;
    m.add_function(wrap_pyfunction!(tril, m)?)?;
    m.add_function(wrap_pyfunction!(triu, m)?)?;
    m.add_function(wrap_pyfunction!(narrow, m)?)?;
    m.add_function(wrap_pyfunction!(select, m)?)?;
    Ok(())
}
