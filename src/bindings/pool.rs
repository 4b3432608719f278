//! Python surface of pooling, interpolation and batch norm (`gradstream.nn.functional`
//! wraps these; it normalises int-or-tuple arguments to two-element lists, H first, with
//! H's entries 1 for the 1-d ops).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::add_functions;
use crate::bindings::convert::{extract_tensor, opt_tensor};
use crate::bindings::Obj;
use crate::ops::batch_norm::{batch_norm, Running};
use crate::ops::interpolate::{interpolate, Mode};
use crate::ops::pool::{self, AvgArgs, PoolArgs};
use crate::tensor::Tensor;

fn pair(op: &str, what: &str, v: &[i64]) -> PyResult<[i64; 2]> {
    match v {
        &[a, b] => Ok([a, b]),
        _ => Err(PyValueError::new_err(format!(
            "{op}: expected {what} as two ints, got {v:?}"
        ))),
    }
}

fn pool_name(kind: &str, spatial: usize) -> PyResult<&'static str> {
    Ok(match (kind, spatial) {
        ("max", 1) => "max_pool1d",
        ("max", 2) => "max_pool2d",
        ("avg", 1) => "avg_pool1d",
        ("avg", 2) => "avg_pool2d",
        ("adaptive_avg", 1) => "adaptive_avg_pool1d",
        ("adaptive_avg", 2) => "adaptive_avg_pool2d",
        ("adaptive_max", 1) => "adaptive_max_pool1d",
        ("adaptive_max", 2) => "adaptive_max_pool2d",
        ("interpolate", 1 | 2) => "interpolate",
        _ => {
            return Err(PyValueError::new_err(format!(
                "{kind} pooling over {spatial} dims is not supported"
            )))
        }
    })
}

/// `max_pool1d` (spatial=1) or `max_pool2d`: the maxima, and the flat int64 indices when
/// `return_indices`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
fn _nn_max_pool(
    input: &Obj<'_>,
    spatial: usize,
    kernel_size: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    ceil_mode: bool,
    return_indices: bool,
) -> PyResult<(Tensor, Option<Tensor>)> {
    crate::bindings::op::guarded("max_pool", || {
        let op = pool_name("max", spatial)?;
        let x = extract_tensor(op, "input", input)?;
        let a = PoolArgs {
            kernel: pair(op, "kernel_size", &kernel_size)?,
            stride: pair(op, "stride", &stride)?,
            padding: pair(op, "padding", &padding)?,
            dilation: pair(op, "dilation", &dilation)?,
            ceil_mode,
        };
        Ok(pool::max_pool(op, &x, spatial, &a, return_indices)?)
    })
}

/// `avg_pool1d` (spatial=1) or `avg_pool2d`.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (input, spatial, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override=None))]
fn _nn_avg_pool(
    input: &Obj<'_>,
    spatial: usize,
    kernel_size: Vec<i64>,
    stride: Vec<i64>,
    padding: Vec<i64>,
    ceil_mode: bool,
    count_include_pad: bool,
    divisor_override: Option<i64>,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("avg_pool", || {
        let op = pool_name("avg", spatial)?;
        let x = extract_tensor(op, "input", input)?;
        let a = PoolArgs {
            kernel: pair(op, "kernel_size", &kernel_size)?,
            stride: pair(op, "stride", &stride)?,
            padding: pair(op, "padding", &padding)?,
            dilation: [1, 1],
            ceil_mode,
        };
        let avg = AvgArgs {
            count_include_pad,
            divisor_override,
        };
        Ok(pool::avg_pool(op, &x, spatial, &a, avg)?)
    })
}

/// `adaptive_avg_pool1d` (spatial=1) or `adaptive_avg_pool2d` to `output_size` (H, W).
#[pyfunction]
fn _nn_adaptive_avg_pool(
    input: &Obj<'_>,
    spatial: usize,
    output_size: Vec<i64>,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("adaptive_avg_pool", || {
        let op = pool_name("adaptive_avg", spatial)?;
        let x = extract_tensor(op, "input", input)?;
        let [h, w] = pair(op, "output_size", &output_size)?;
        if h < 0 || w < 0 {
            return Err(PyValueError::new_err(format!(
                "{op}: output_size must be non-negative, got {output_size:?}"
            )));
        }
        Ok(pool::adaptive_avg_pool(
            op,
            &x,
            spatial,
            [h as usize, w as usize],
        )?)
    })
}

/// `adaptive_max_pool1d` (spatial=1) or `adaptive_max_pool2d` to `output_size` (H, W):
/// the maxima, and the flat int64 indices when `return_indices`.
#[pyfunction]
fn _nn_adaptive_max_pool(
    input: &Obj<'_>,
    spatial: usize,
    output_size: Vec<i64>,
    return_indices: bool,
) -> PyResult<(Tensor, Option<Tensor>)> {
    crate::bindings::op::guarded("adaptive_max_pool", || {
        let op = pool_name("adaptive_max", spatial)?;
        let x = extract_tensor(op, "input", input)?;
        let [h, w] = pair(op, "output_size", &output_size)?;
        if h < 0 || w < 0 {
            return Err(PyValueError::new_err(format!(
                "{op}: output_size must be non-negative, got {output_size:?}"
            )));
        }
        Ok(pool::adaptive_max_pool(
            op,
            &x,
            spatial,
            [h as usize, w as usize],
            return_indices,
        )?)
    })
}

/// `interpolate` of (N, C, L) (spatial=1) or (N, C, H, W) input to `size` (H, W) with
/// the scale factors the kernel uses (None: input / output), `mode` one of `nearest`,
/// `nearest-exact`, `linear`.
#[pyfunction]
fn _nn_interpolate(
    input: &Obj<'_>,
    spatial: usize,
    size: Vec<i64>,
    scales: Vec<Option<f64>>,
    mode: &str,
    align_corners: bool,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("interpolate", || {
        let op = pool_name("interpolate", spatial)?;
        let x = extract_tensor(op, "input", input)?;
        let [h, w] = pair(op, "size", &size)?;
        if h < 0 || w < 0 {
            return Err(PyValueError::new_err(format!(
                "interpolate: output size must be non-negative, got {size:?}"
            )));
        }
        let scales = match scales.as_slice() {
            &[a, b] => [a, b],
            _ => {
                return Err(PyValueError::new_err(
                    "interpolate: expected two scale factors",
                ))
            }
        };
        let mode = match mode {
            "nearest" => Mode::Nearest,
            "nearest-exact" => Mode::NearestExact,
            "linear" => Mode::Linear,
            other => {
                return Err(PyValueError::new_err(format!(
                    "interpolate: unknown mode '{other}'"
                )))
            }
        };
        Ok(interpolate(
            op,
            &x,
            spatial,
            [h as usize, w as usize],
            scales,
            mode,
            align_corners,
        )?)
    })
}

/// `batch_norm`: batch statistics when `training` (updating the running buffers in place
/// with `momentum`), else the running ones.
#[pyfunction]
#[allow(clippy::too_many_arguments)]
#[pyo3(signature = (input, running_mean, running_var, weight=None, bias=None, training=false, momentum=0.1, eps=1e-5))]
fn _nn_batch_norm(
    input: &Obj<'_>,
    running_mean: Option<&Obj<'_>>,
    running_var: Option<&Obj<'_>>,
    weight: Option<&Obj<'_>>,
    bias: Option<&Obj<'_>>,
    training: bool,
    momentum: f64,
    eps: f64,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("batch_norm", || {
        let op = "batch_norm";
        let x = extract_tensor(op, "input", input)?;
        let rm = opt_tensor(op, "running_mean", running_mean)?;
        let rv = opt_tensor(op, "running_var", running_var)?;
        let w = opt_tensor(op, "weight", weight)?;
        let b = opt_tensor(op, "bias", bias)?;
        let running = Running {
            mean: rm.as_ref(),
            var: rv.as_ref(),
            momentum,
        };
        Ok(batch_norm(
            &x,
            running,
            w.as_ref(),
            b.as_ref(),
            training,
            eps,
        )?)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m,
        _nn_max_pool, _nn_avg_pool, _nn_adaptive_avg_pool, _nn_adaptive_max_pool, _nn_interpolate,
        _nn_batch_norm
    }
    Ok(())
}
