//! Python surface of pooling, interpolation and batch norm (`gradstream.nn.functional`
//! wraps these; it normalises int-or-tuple arguments to two-element lists, H first, with
//! H's entries 1 for the 1-d ops).

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::op::functions;
use crate::ops::batch_norm::{batch_norm, Running};
use crate::ops::interpolate::{interpolate, Mode};
use crate::ops::pool::{self, AvgArgs, PoolArgs};
use crate::tensor::Tensor;

fn pair<T: Copy + std::fmt::Debug>(op: &str, what: &str, v: &[T]) -> PyResult<[T; 2]> {
    match v {
        &[a, b] => Ok([a, b]),
        _ => Err(PyValueError::new_err(format!(
            "{op}: expected {what} as two ints, got {v:?}"
        ))),
    }
}

/// An output size `[h, w]` (`what` in `op`'s errors), each non-negative.
fn output_size(op: &str, what: &str, shown: &str, v: &[i64]) -> PyResult<[usize; 2]> {
    let [h, w] = pair(op, what, v)?;
    if h < 0 || w < 0 {
        return Err(PyValueError::new_err(format!(
            "{op}: {shown} must be non-negative, got {v:?}"
        )));
    }
    Ok([h as usize, w as usize])
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

/// The window of a max or average pooling.
fn pool_args(
    op: &str,
    k: &[i64],
    s: &[i64],
    p: &[i64],
    d: &[i64],
    ceil_mode: bool,
) -> PyResult<PoolArgs> {
    Ok(PoolArgs {
        kernel: pair(op, "kernel_size", k)?,
        stride: pair(op, "stride", s)?,
        padding: pair(op, "padding", p)?,
        dilation: pair(op, "dilation", d)?,
        ceil_mode,
    })
}

type Indexed = (Tensor, Option<Tensor>);

functions! { mod functions;
    /// `max_pool1d` (spatial=1) or `max_pool2d`: the maxima, and the flat int64 indices when
    /// `return_indices`.
    fn _nn_max_pool[pool_name("max", spatial)?](input: Tensor, spatial: usize,
        kernel_size: Vec<i64>, stride: Vec<i64>, padding: Vec<i64>, dilation: Vec<i64>,
        ceil_mode: bool, return_indices: bool) -> Indexed {
        let op = pool_name("max", spatial)?;
        let a = pool_args(op, &kernel_size, &stride, &padding, &dilation, ceil_mode)?;
        Ok(pool::max_pool(op, &input, spatial, &a, return_indices)?)
    }
    /// `avg_pool1d` (spatial=1) or `avg_pool2d`.
    fn _nn_avg_pool[pool_name("avg", spatial)?](input: Tensor, spatial: usize,
        kernel_size: Vec<i64>, stride: Vec<i64>, padding: Vec<i64>, ceil_mode: bool,
        count_include_pad: bool, divisor_override: Option<i64> = None) -> Tensor {
        let op = pool_name("avg", spatial)?;
        let a = pool_args(op, &kernel_size, &stride, &padding, &[1, 1], ceil_mode)?;
        let avg = AvgArgs { count_include_pad, divisor_override };
        Ok(pool::avg_pool(op, &input, spatial, &a, avg)?)
    }
    /// `adaptive_avg_pool1d` (spatial=1) or `adaptive_avg_pool2d` to `output_size` (H, W).
    fn _nn_adaptive_avg_pool[pool_name("adaptive_avg", spatial)?](input: Tensor, spatial: usize,
        output_size: Vec<i64>) -> Tensor {
        let op = pool_name("adaptive_avg", spatial)?;
        let size = self::output_size(op, "output_size", "output_size", &output_size)?;
        Ok(pool::adaptive_avg_pool(op, &input, spatial, size)?)
    }
    /// `adaptive_max_pool1d` (spatial=1) or `adaptive_max_pool2d` to `output_size` (H, W):
    /// the maxima, and the flat int64 indices when `return_indices`.
    fn _nn_adaptive_max_pool[pool_name("adaptive_max", spatial)?](input: Tensor, spatial: usize,
        output_size: Vec<i64>, return_indices: bool) -> Indexed {
        let op = pool_name("adaptive_max", spatial)?;
        let size = self::output_size(op, "output_size", "output_size", &output_size)?;
        Ok(pool::adaptive_max_pool(op, &input, spatial, size, return_indices)?)
    }
    /// `interpolate` of (N, C, L) (spatial=1) or (N, C, H, W) input to `size` (H, W) with
    /// the scale factors the kernel uses (None: input / output), `mode` one of `nearest`,
    /// `nearest-exact`, `linear`.
    fn _nn_interpolate[pool_name("interpolate", spatial)?](input: Tensor, spatial: usize,
        size: Vec<i64>, scales: Vec<Option<f64>>, mode: Str, align_corners: bool) -> Tensor {
        let op = "interpolate";
        let size = output_size(op, "size", "output size", &size)?;
        let scales = pair(op, "scale factors", &scales)
            .map_err(|_| PyValueError::new_err("interpolate: expected two scale factors"))?;
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
        Ok(interpolate(op, &input, spatial, size, scales, mode, align_corners)?)
    }
    /// `batch_norm`: batch statistics when `training` (updating the running buffers in place
    /// with `momentum`), else the running ones.
    fn _nn_batch_norm["batch_norm"](input: Tensor, running_mean: Option<Tensor>,
        running_var: Option<Tensor>, weight: Option<Tensor> = None, bias: Option<Tensor> = None,
        training: bool = false, momentum: f64 = 0.1, eps: f64 = 1e-5) -> Tensor {
        let running = Running { mean: running_mean.as_ref(), var: running_var.as_ref(), momentum };
        Ok(batch_norm(&input, running, weight.as_ref(), bias.as_ref(), training, eps)?)
    }
}
