//! Indexing from Python: `__getitem__`, `__setitem__`, `index_select`, `gather`,
//! `scatter`/`scatter_add`, `masked_fill`, `masked_select`, `nonzero`, `take_along_dim`,
//! `index_put_`.

use pyo3::exceptions::{PyIndexError, PyNotImplementedError, PyTypeError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyEllipsis, PyList, PySlice, PyTuple};

use crate::bindings::convert::{extract_operand, extract_scalar, tensor_from_data, type_name};
use crate::bindings::op::tensor_ops;
use crate::bindings::tensor::PyTensor;
use crate::bindings::Obj;
use crate::dtype::DType;
use crate::ops::index::{self, IndexItem};
use crate::ops::{creation, Operand};
use crate::tensor::Tensor;

fn slice_part(obj: &Obj<'_>) -> PyResult<Option<i64>> {
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

fn parse_item(obj: &Obj<'_>) -> PyResult<IndexItem> {
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
            &crate::device::host(),
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
fn parse_index(obj: &Obj<'_>) -> PyResult<Vec<IndexItem>> {
    match obj.cast::<PyTuple>() {
        Ok(t) => t.iter().map(|i| parse_item(&i)).collect(),
        Err(_) => Ok(vec![parse_item(obj)?]),
    }
}

/// A value to write into `dst`: a tensor, or a number/list made a tensor of its dtype on
/// its device.
fn value_tensor(op: &str, obj: &Obj<'_>, dst: &Tensor) -> PyResult<Tensor> {
    let (dtype, device) = (dst.dtype(), dst.device());
    if let Some(s) = extract_scalar(obj) {
        return Ok(creation::scalar_tensor(s, dtype, &device)?);
    }
    match extract_operand(op, obj)? {
        Operand::Tensor(t) => Ok(crate::ops::convert::to_device(&t, &device)?),
        Operand::Scalar(s) => Ok(creation::scalar_tensor(s, dtype, &device)?),
    }
}

fn scatter_src(
    x: &Tensor,
    src: Option<&Obj<'_>>,
    value: Option<&Obj<'_>>,
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
    let v = creation::scalar_tensor(s, x.dtype(), &x.device())?;
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

fn masked_fill_value(t: &Tensor, value: &Obj<'_>) -> PyResult<Tensor> {
    if let Ok(v) = value.cast::<PyTensor>() {
        return Ok(v.get().t.clone());
    }
    let s = extract_scalar(value).ok_or_else(|| {
        PyTypeError::new_err(format!(
            "masked_fill(): argument 'value' must be Number or Tensor, not {}",
            type_name(value)
        ))
    })?;
    Ok(creation::scalar_tensor(s, t.dtype(), &t.device())?)
}

fn index_tensors(obj: &Obj<'_>) -> PyResult<Vec<Tensor>> {
    parse_index(obj)?
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
    fn __getitem__(&self, index: &Obj<'_>) -> PyResult<Tensor> {
        Ok(index::getitem(&self.t, &parse_index(index)?)?)
    }

    fn __setitem__(&self, index: &Obj<'_>, value: &Obj<'_>) -> PyResult<()> {
        let items = parse_index(index)?;
        let v = value_tensor("__setitem__", value, &self.t)?;
        Ok(index::setitem(&self.t, &items, &v)?)
    }
}

tensor_ops! { mod functions;
    both fn gather(x: Tensor, dim: i64, index: Tensor; sparse_grad: bool = false) -> Tensor {
        let _ = sparse_grad;
        Ok(index::gather(&x, dim, &index)?)
    }
    both fn index_select(x: Tensor, dim: i64, index: Tensor) -> Tensor {
        Ok(index::index_select(&x, dim, &index)?)
    }
    both fn take_along_dim(x: Tensor, indices: Tensor, dim: Option<i64> = None) -> Tensor {
        Ok(index::take_along_dim(&x, &indices, dim)?)
    }
    both fn scatter_add(x: Tensor, dim: i64, index: Tensor, src: Tensor) -> Tensor {
        Ok(index::out_of_place(&x, |o| index::scatter_add_(o, dim, &index, &src))?)
    }
    method fn scatter_add_(x: Py<PyTensor>, dim: i64, index: Tensor, src: Tensor) -> Py<PyTensor> {
        index::scatter_add_(&x.get().t, dim, &index, &src)?;
        Ok(x)
    }
    both fn scatter(x: Tensor, dim: i64, index: Tensor, src: Option<Object> = None,
        value: Option<Object> = None; reduce: Option<Str> = None) -> Tensor {
        no_reduce(reduce)?;
        let s = scatter_src(&x, src, value, &index)?;
        Ok(index::out_of_place(&x, |o| index::scatter_(o, dim, &index, &s))?)
    }
    method fn scatter_(x: Py<PyTensor>, dim: i64, index: Tensor, src: Option<Object> = None,
        value: Option<Object> = None; reduce: Option<Str> = None) -> Py<PyTensor> {
        no_reduce(reduce)?;
        let t = &x.get().t;
        index::scatter_(t, dim, &index, &scatter_src(t, src, value, &index)?)?;
        Ok(x)
    }
    both fn masked_fill(x: Tensor, mask: Tensor, value: Object) -> Tensor {
        Ok(index::masked_fill(&x, &mask, &masked_fill_value(&x, value)?)?)
    }
    method fn masked_fill_(x: Py<PyTensor>, mask: Tensor, value: Object) -> Py<PyTensor> {
        let t = &x.get().t;
        index::masked_fill_(t, &mask, &masked_fill_value(t, value)?)?;
        Ok(x)
    }
    both fn masked_select(x: Tensor, mask: Tensor) -> Tensor {
        Ok(index::masked_select(&x, &mask)?)
    }
    both fn nonzero(x: Tensor; as_tuple: bool = false) -> Py<PyAny> {
        let mut r = index::nonzero(&x, as_tuple)?;
        Python::attach(|py| {
            Ok(if as_tuple {
                PyTuple::new(py, r)?.into_any().unbind()
            } else {
                r.remove(0).into_pyobject(py)?.into_any().unbind()
            })
        })
    }
    both fn argwhere(x: Tensor) -> Tensor { Ok(index::nonzero(&x, false)?.remove(0)) }
    both fn index_put(x: Tensor, indices: Object, values: Object,
        accumulate: bool = false) -> Tensor {
        let idx = index_tensors(indices)?;
        let v = value_tensor("index_put", values, &x)?;
        Ok(index::out_of_place(&x, |o| index::index_put_indices(o, &idx, &v, accumulate))?)
    }
    method fn index_put_(x: Py<PyTensor>, indices: Object, values: Object,
        accumulate: bool = false) -> Py<PyTensor> {
        let t = &x.get().t;
        let idx = index_tensors(indices)?;
        let v = value_tensor("index_put_", values, t)?;
        index::index_put_indices(t, &idx, &v, accumulate)?;
        Ok(x)
    }
}
