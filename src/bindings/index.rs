//! Indexing from Python: `__getitem__`, `__setitem__`, `index_select`, `gather`,
//! `scatter`/`scatter_add`, `masked_fill`, `masked_select`, `nonzero`, `take_along_dim`,
//! `index_put_`.

use pyo3::exceptions::{PyIndexError, PyNotImplementedError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyList, PySlice, PyTuple};

use crate::bindings::convert::{extract_operand, extract_scalar, extract_tensor, tensor_from_data};
use crate::bindings::tensor::PyTensor;
use crate::dtype::DType;
use crate::ops::index::{self, IndexItem};
use crate::ops::{creation, wrap_dim, Operand};
use crate::tensor::Tensor;

fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_default()
}

fn slice_part(obj: &Bound<'_, PyAny>) -> PyResult<Option<i64>> {
    if obj.is_none() {
        return Ok(None);
    }
    if let Ok(v) = obj.extract::<i64>() {
        return Ok(Some(v));
    }
    obj.call_method0("__index__")
        .and_then(|v| v.extract::<i64>())
        .map(Some)
        .map_err(|_| {
            PyTypeError::new_err(format!(
                "slice indices must be integers or None or have an __index__ method (got {})",
                type_name(obj)
            ))
        })
}

fn parse_item(obj: &Bound<'_, PyAny>) -> PyResult<IndexItem> {
    let py = obj.py();
    if obj.is_none() {
        return Ok(IndexItem::NewAxis);
    }
    if obj.is(PyEllipsis::get(py)) {
        return Ok(IndexItem::Ellipsis);
    }
    if let Ok(t) = obj.cast::<PyTensor>() {
        return Ok(IndexItem::Tensor(t.get().t.clone()));
    }
    if obj.is_instance_of::<PyBool>() {
        let b: bool = obj.extract()?;
        return Ok(IndexItem::Tensor(creation::scalar_tensor(
            crate::ops::Scalar::Bool(b),
            DType::Bool,
        )?));
    }
    if let Ok(s) = obj.cast::<PySlice>() {
        return Ok(IndexItem::Slice(
            slice_part(&s.getattr("start")?)?,
            slice_part(&s.getattr("stop")?)?,
            slice_part(&s.getattr("step")?)?,
        ));
    }
    if obj.is_instance_of::<pyo3::types::PyString>() {
        return Err(PyTypeError::new_err(format!(
            "invalid index of type str ({})",
            obj.repr()?
        )));
    }
    if let Some(crate::ops::Scalar::Int(i)) = extract_scalar(obj) {
        return Ok(IndexItem::Int(i));
    }
    if obj.is_instance_of::<PyList>()
        || obj.is_instance_of::<PyTuple>()
        || obj.is_instance_of::<numpy::PyUntypedArray>()
    {
        let mut t = tensor_from_data(obj, None)?;
        if t.dtype().is_floating_point() {
            if t.numel() != 0 {
                return Err(PyIndexError::new_err(
                    "tensors used as indices must be long, int, byte or bool tensors",
                ));
            }
            t = crate::ops::convert::to_dtype(&t, DType::Int64)?;
        }
        return Ok(IndexItem::Tensor(t));
    }
    if let Ok(i) = obj
        .call_method0("__index__")
        .and_then(|v| v.extract::<i64>())
    {
        return Ok(IndexItem::Int(i));
    }
    Err(PyIndexError::new_err(format!(
        "only integers, slices (`:`), ellipsis (`...`), None and long or byte Variables are \
         valid indices (got {})",
        type_name(obj)
    )))
}

/// An index expression: a tuple is several items, anything else one.
fn parse_index(obj: &Bound<'_, PyAny>) -> PyResult<Vec<IndexItem>> {
    match obj.cast::<PyTuple>() {
        Ok(t) => t.iter().map(|i| parse_item(&i)).collect(),
        Err(_) => Ok(vec![parse_item(obj)?]),
    }
}

/// A value to write: a tensor, or a number/list made a tensor of `dtype`.
fn value_tensor(op: &str, obj: &Bound<'_, PyAny>, dtype: DType) -> PyResult<Tensor> {
    if let Some(s) = extract_scalar(obj) {
        return Ok(creation::scalar_tensor(s, dtype)?);
    }
    match extract_operand(op, obj)? {
        Operand::Tensor(t) => Ok(t),
        Operand::Scalar(s) => Ok(creation::scalar_tensor(s, dtype)?),
    }
}

fn scatter_src(
    x: &Tensor,
    src: Option<&Bound<'_, PyAny>>,
    value: Option<&Bound<'_, PyAny>>,
    index: &Tensor,
) -> PyResult<Tensor> {
    let obj = match (src, value) {
        (Some(s), _) if !s.is_none() => s,
        (_, Some(v)) if !v.is_none() => v,
        _ => {
            return Err(PyTypeError::new_err(
                "scatter(): expected a src tensor or a value",
            ))
        }
    };
    if obj.cast::<PyTensor>().is_ok() {
        return Ok(obj.cast::<PyTensor>()?.get().t.clone());
    }
    let s = extract_scalar(obj).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "scatter(): argument 'src' must be Tensor or Number, not {}",
            type_name(obj)
        ))
    })?;
    let v = creation::scalar_tensor(s, x.dtype())?;
    Ok(crate::ops::shape::expand(&v, &index.dims())?)
}

fn no_reduce(reduce: Option<&str>) -> PyResult<()> {
    match reduce {
        None => Ok(()),
        Some(r) => Err(PyNotImplementedError::new_err(format!(
            "scatter(): reduce='{r}' is not supported; use scatter_add"
        ))),
    }
}

fn gather_impl(t: &Tensor, dim: i64, index: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let i = extract_tensor("gather", "index", index)?;
    let d = wrap_dim("gather", dim, t.rank())?;
    Ok(index::gather(t, d, &i)?)
}

fn index_select_impl(t: &Tensor, dim: i64, index_: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let i = extract_tensor("index_select", "index", index_)?;
    let d = wrap_dim("index_select", dim, t.rank())?;
    Ok(index::index_select(t, d, &i)?)
}

fn masked_fill_value(t: &Tensor, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    if let Ok(v) = value.cast::<PyTensor>() {
        return Ok(v.get().t.clone());
    }
    let s = extract_scalar(value).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "masked_fill(): argument 'value' must be Number or Tensor, not {}",
            type_name(value)
        ))
    })?;
    Ok(creation::scalar_tensor(s, t.dtype())?)
}

fn take_along_dim_impl(
    t: &Tensor,
    indices: &Bound<'_, PyAny>,
    dim: Option<i64>,
) -> PyResult<Tensor> {
    let i = extract_tensor("take_along_dim", "indices", indices)?;
    Ok(index::take_along_dim(t, &i, dim)?)
}

fn nonzero_impl<'py>(py: Python<'py>, t: &Tensor, as_tuple: bool) -> PyResult<Bound<'py, PyAny>> {
    let mut r = index::nonzero(t, as_tuple)?;
    if as_tuple {
        Ok(PyTuple::new(py, r)?.into_any())
    } else {
        Ok(r.remove(0).into_pyobject(py)?.into_any())
    }
}

fn index_tensors(obj: &Bound<'_, PyAny>) -> PyResult<Vec<Tensor>> {
    let items = parse_index(obj)?;
    items
        .into_iter()
        .map(|i| match i {
            IndexItem::Tensor(t) => Ok(t),
            _ => Err(PyTypeError::new_err(
                "index_put_(): argument 'indices' must be a tuple of Tensors",
            )),
        })
        .collect()
}

#[pymethods]
impl PyTensor {
    fn __getitem__(&self, index: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let items = parse_index(index)?;
        Ok(index::getitem(&self.t, &items)?)
    }

    fn __setitem__(&self, index: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        let items = parse_index(index)?;
        let v = value_tensor("__setitem__", value, self.t.dtype())?;
        Ok(index::setitem(&self.t, &items, &v)?)
    }

    #[pyo3(signature = (dim, index, *, sparse_grad=false))]
    fn gather(&self, dim: i64, index: &Bound<'_, PyAny>, sparse_grad: bool) -> PyResult<Tensor> {
        let _ = sparse_grad;
        gather_impl(&self.t, dim, index)
    }

    fn index_select(&self, dim: i64, index: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        index_select_impl(&self.t, dim, index)
    }

    #[pyo3(signature = (indices, dim=None))]
    fn take_along_dim(&self, indices: &Bound<'_, PyAny>, dim: Option<i64>) -> PyResult<Tensor> {
        take_along_dim_impl(&self.t, indices, dim)
    }

    fn scatter_add(
        &self,
        dim: i64,
        index: &Bound<'_, PyAny>,
        src: &Bound<'_, PyAny>,
    ) -> PyResult<Tensor> {
        let i = extract_tensor("scatter_add", "index", index)?;
        let s = extract_tensor("scatter_add", "src", src)?;
        let d = wrap_dim("scatter_add", dim, self.t.rank())?;
        Ok(index::out_of_place(&self.t, |o| {
            index::scatter_add_(o, d, &i, &s)
        })?)
    }

    fn scatter_add_<'py>(
        slf: &Bound<'py, Self>,
        dim: i64,
        index: &Bound<'py, PyAny>,
        src: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        let i = extract_tensor("scatter_add_", "index", index)?;
        let s = extract_tensor("scatter_add_", "src", src)?;
        let d = wrap_dim("scatter_add_", dim, t.rank())?;
        index::scatter_add_(t, d, &i, &s)?;
        Ok(slf.clone())
    }

    #[pyo3(signature = (dim, index, src=None, value=None, *, reduce=None))]
    fn scatter(
        &self,
        dim: i64,
        index: &Bound<'_, PyAny>,
        src: Option<&Bound<'_, PyAny>>,
        value: Option<&Bound<'_, PyAny>>,
        reduce: Option<&str>,
    ) -> PyResult<Tensor> {
        no_reduce(reduce)?;
        let i = extract_tensor("scatter", "index", index)?;
        let s = scatter_src(&self.t, src, value, &i)?;
        let d = wrap_dim("scatter", dim, self.t.rank())?;
        Ok(index::out_of_place(&self.t, |o| {
            index::scatter_(o, d, &i, &s)
        })?)
    }

    #[pyo3(signature = (dim, index, src=None, value=None, *, reduce=None))]
    fn scatter_<'py>(
        slf: &Bound<'py, Self>,
        dim: i64,
        index: &Bound<'py, PyAny>,
        src: Option<&Bound<'py, PyAny>>,
        value: Option<&Bound<'py, PyAny>>,
        reduce: Option<&str>,
    ) -> PyResult<Bound<'py, Self>> {
        no_reduce(reduce)?;
        let t = &slf.get().t;
        let i = extract_tensor("scatter_", "index", index)?;
        let s = scatter_src(t, src, value, &i)?;
        let d = wrap_dim("scatter_", dim, t.rank())?;
        index::scatter_(t, d, &i, &s)?;
        Ok(slf.clone())
    }

    fn masked_fill(&self, mask: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let m = extract_tensor("masked_fill", "mask", mask)?;
        let v = masked_fill_value(&self.t, value)?;
        Ok(index::masked_fill(&self.t, &m, &v)?)
    }

    fn masked_fill_<'py>(
        slf: &Bound<'py, Self>,
        mask: &Bound<'py, PyAny>,
        value: &Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        let m = extract_tensor("masked_fill_", "mask", mask)?;
        let v = masked_fill_value(t, value)?;
        index::masked_fill_(t, &m, &v)?;
        Ok(slf.clone())
    }

    fn masked_select(&self, mask: &Bound<'_, PyAny>) -> PyResult<Tensor> {
        let m = extract_tensor("masked_select", "mask", mask)?;
        Ok(index::masked_select(&self.t, &m)?)
    }

    #[pyo3(signature = (*, as_tuple=false))]
    fn nonzero<'py>(&self, py: Python<'py>, as_tuple: bool) -> PyResult<Bound<'py, PyAny>> {
        nonzero_impl(py, &self.t, as_tuple)
    }

    fn argwhere(&self) -> PyResult<Tensor> {
        Ok(index::nonzero(&self.t, false)?.remove(0))
    }

    #[pyo3(signature = (indices, values, accumulate=false))]
    fn index_put_<'py>(
        slf: &Bound<'py, Self>,
        indices: &Bound<'py, PyAny>,
        values: &Bound<'py, PyAny>,
        accumulate: bool,
    ) -> PyResult<Bound<'py, Self>> {
        let t = &slf.get().t;
        let idx = index_tensors(indices)?;
        let v = value_tensor("index_put_", values, t.dtype())?;
        index::index_put_indices(t, &idx, &v, accumulate)?;
        Ok(slf.clone())
    }

    #[pyo3(signature = (indices, values, accumulate=false))]
    fn index_put(
        &self,
        indices: &Bound<'_, PyAny>,
        values: &Bound<'_, PyAny>,
        accumulate: bool,
    ) -> PyResult<Tensor> {
        let idx = index_tensors(indices)?;
        let v = value_tensor("index_put", values, self.t.dtype())?;
        Ok(index::out_of_place(&self.t, |o| {
            index::index_put_indices(o, &idx, &v, accumulate)
        })?)
    }
}

#[pyfunction]
#[pyo3(signature = (input, dim, index, *, sparse_grad=false))]
fn gather(
    input: &Bound<'_, PyAny>,
    dim: i64,
    index: &Bound<'_, PyAny>,
    sparse_grad: bool,
) -> PyResult<Tensor> {
    let _ = sparse_grad;
    gather_impl(&extract_tensor("gather", "input", input)?, dim, index)
}

#[pyfunction]
fn index_select(input: &Bound<'_, PyAny>, dim: i64, index: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    index_select_impl(&extract_tensor("index_select", "input", input)?, dim, index)
}

#[pyfunction]
#[pyo3(signature = (input, indices, dim=None))]
fn take_along_dim(
    input: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    dim: Option<i64>,
) -> PyResult<Tensor> {
    take_along_dim_impl(
        &extract_tensor("take_along_dim", "input", input)?,
        indices,
        dim,
    )
}

#[pyfunction]
fn scatter_add(
    input: &Bound<'_, PyAny>,
    dim: i64,
    index: &Bound<'_, PyAny>,
    src: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let t = extract_tensor("scatter_add", "input", input)?;
    PyTensor { t }.scatter_add(dim, index, src)
}

#[pyfunction]
#[pyo3(signature = (input, dim, index, src=None, value=None, *, reduce=None))]
fn scatter(
    input: &Bound<'_, PyAny>,
    dim: i64,
    index: &Bound<'_, PyAny>,
    src: Option<&Bound<'_, PyAny>>,
    value: Option<&Bound<'_, PyAny>>,
    reduce: Option<&str>,
) -> PyResult<Tensor> {
    let t = extract_tensor("scatter", "input", input)?;
    PyTensor { t }.scatter(dim, index, src, value, reduce)
}

#[pyfunction]
fn masked_fill(
    input: &Bound<'_, PyAny>,
    mask: &Bound<'_, PyAny>,
    value: &Bound<'_, PyAny>,
) -> PyResult<Tensor> {
    let t = extract_tensor("masked_fill", "input", input)?;
    PyTensor { t }.masked_fill(mask, value)
}

#[pyfunction]
fn masked_select(input: &Bound<'_, PyAny>, mask: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("masked_select", "input", input)?;
    PyTensor { t }.masked_select(mask)
}

#[pyfunction]
#[pyo3(signature = (input, *, as_tuple=false))]
fn nonzero<'py>(input: &Bound<'py, PyAny>, as_tuple: bool) -> PyResult<Bound<'py, PyAny>> {
    let t = extract_tensor("nonzero", "input", input)?;
    nonzero_impl(input.py(), &t, as_tuple)
}

#[pyfunction]
fn argwhere(input: &Bound<'_, PyAny>) -> PyResult<Tensor> {
    let t = extract_tensor("argwhere", "input", input)?;
    Ok(index::nonzero(&t, false)?.remove(0))
}

#[pyfunction]
#[pyo3(signature = (input, indices, values, accumulate=false))]
fn index_put(
    input: &Bound<'_, PyAny>,
    indices: &Bound<'_, PyAny>,
    values: &Bound<'_, PyAny>,
    accumulate: bool,
) -> PyResult<Tensor> {
    let t = extract_tensor("index_put", "input", input)?;
    PyTensor { t }.index_put(indices, values, accumulate)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(gather, m)?)?;
    m.add_function(wrap_pyfunction!(index_select, m)?)?;
    m.add_function(wrap_pyfunction!(take_along_dim, m)?)?;
    m.add_function(wrap_pyfunction!(scatter_add, m)?)?;
    m.add_function(wrap_pyfunction!(scatter, m)?)?;
    m.add_function(wrap_pyfunction!(masked_fill, m)?)?;
    m.add_function(wrap_pyfunction!(masked_select, m)?)?;
    m.add_function(wrap_pyfunction!(nonzero, m)?)?;
    m.add_function(wrap_pyfunction!(argwhere, m)?)?;
    m.add_function(wrap_pyfunction!(index_put, m)?)?;
    Ok(())
}
