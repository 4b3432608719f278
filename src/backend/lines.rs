//! Kernels that walk a tensor as independent lines along one dim (scans, max/argmax,
//! prod, softmax), and the sum over a block of dims. The defaults are candle's
//! reductions; candle's cumsum builds an n×n matrix, so it is for small lines only.

use crate::backend::cast::Convert;
use candle_core::Tensor;

use super::{no_fallback, not_implemented};
use crate::error::{CandleContext, Result};

/// `dims` seen as lines along `dim`: `outer × n × inner`.
#[derive(Clone, Copy, Debug)]
pub struct Lines {
    pub outer: usize,
    pub n: usize,
    pub inner: usize,
}

impl Lines {
    pub fn new(dims: &[usize], dim: usize) -> Lines {
        Lines {
            outer: dims[..dim].iter().product(),
            n: dims[dim],
            inner: dims[dim + 1..].iter().product(),
        }
    }
}

/// What a line kernel computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKernel {
    /// Running sum or product, front to back or back to front.
    Scan { prod: bool, reverse: bool },
    /// `h[i] = a[i] * h[i-1] + b[i]` (or from the back), `h` before the line is 0.
    /// Two inputs: a, b.
    LinearScan { reverse: bool },
    /// Largest (smallest) value; NaN wins, as in PyTorch.
    Extreme { max: bool },
    /// Index of the first largest (smallest) value, or of the first NaN; int64.
    ArgExtreme { max: bool },
    /// Product of the line.
    Prod,
    /// Softmax or log-softmax of the line, max-subtracted.
    Softmax { log: bool },
}

impl LineKernel {
    pub fn name(self) -> &'static str {
        match self {
            LineKernel::Scan { prod: false, .. } => "cumsum",
            LineKernel::Scan { prod: true, .. } => "cumprod",
            LineKernel::LinearScan { .. } => "linear_scan",
            LineKernel::Extreme { max: true } => "amax",
            LineKernel::Extreme { max: false } => "amin",
            LineKernel::ArgExtreme { max: true } => "argmax",
            LineKernel::ArgExtreme { max: false } => "argmin",
            LineKernel::Prod => "prod",
            LineKernel::Softmax { log: false } => "softmax",
            LineKernel::Softmax { log: true } => "log_softmax",
        }
    }

    /// Rows each line writes.
    pub fn out_len(self, n: usize) -> usize {
        match self {
            LineKernel::Extreme { .. } | LineKernel::ArgExtreme { .. } | LineKernel::Prod => 1,
            _ => n,
        }
    }
}

pub trait ReduceOps {
    /// `k` along `dim` of a non-empty contiguous `x` in its compute dtype (f32, f64 or
    /// i64): same dtype out (i64 for `ArgExtreme`), the dim of size `k.out_len(n)`.
    fn lines(&self, x: &Tensor, dim: usize, k: LineKernel) -> Result<Tensor> {
        let name = k.name();
        let r = match k {
            LineKernel::Softmax { log } => (|| {
                let shifted = x.broadcast_sub(&x.max_keepdim(dim)?)?;
                let e = shifted.exp()?;
                let s = e.sum_keepdim(dim)?;
                if log {
                    shifted.broadcast_sub(&s.log()?)
                } else {
                    e.broadcast_div(&s)
                }
            })(),
            LineKernel::Extreme { max } => extreme(x, dim, max),
            LineKernel::ArgExtreme { max } => arg_extreme(x, dim, max),
            // candle's cumsum is a matmul by a triangular matrix: floats only, and a line
            // of its own contiguous along the last dim.
            LineKernel::Scan {
                prod: false,
                reverse: false,
            } if x.dtype().is_float() => (|| {
                let last = x.rank() - 1;
                let lines = x.transpose(dim, last)?.dense()?;
                lines.cumsum(last)?.transpose(dim, last)?.dense()
            })(),
            _ => return Err(not_implemented(name, x.device())),
        };
        r.op(name)
    }

    no_fallback! {
        /// A two-input line kernel (`LinearScan`) on contiguous `a`, `b` of one shape.
        fn lines2(&self, a: &Tensor, b: &Tensor, dim: usize, k: LineKernel)
            -> Result<Tensor> = k.name(), a;
    }

    /// The sum of `x` over `reduced` (sorted dims), keepdim shape, when this backend has a
    /// faster kernel than candle's `sum_keepdim` for that case; `None` otherwise.
    fn block_sum(&self, _x: &Tensor, _reduced: &[usize]) -> Result<Option<Tensor>> {
        Ok(None)
    }
}

/// Whether each line of a float `x` along `dim` holds a NaN (keepdim, u8).
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn has_nan(x: &Tensor, dim: usize) -> candle_core::Result<Tensor> {
    x.ne(x)?.max_keepdim(dim)
}

/// max/min along `dim`, NaN where the line has one, as PyTorch's.
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn extreme(x: &Tensor, dim: usize, max: bool) -> candle_core::Result<Tensor> {
    let m = if max {
        x.max_keepdim(dim)?
    } else {
        x.min_keepdim(dim)?
    };
    if !x.dtype().is_float() {
        return Ok(m);
    }
    let nan = Tensor::full(f64::NAN, m.shape(), x.device())?.cast(x.dtype())?;
    has_nan(x, dim)?.where_cond(&nan, &m)
}

/// argmax/argmin along `dim` (i64): the first NaN where the line has one, as PyTorch's.
#[allow(clippy::disallowed_methods)] // candle's op: the fallback
fn arg_extreme(x: &Tensor, dim: usize, max: bool) -> candle_core::Result<Tensor> {
    let i = if max {
        x.argmax_keepdim(dim)?
    } else {
        x.argmin_keepdim(dim)?
    };
    let i = i.cast(candle_core::DType::I64)?;
    if !x.dtype().is_float() {
        return Ok(i);
    }
    let first_nan = x
        .ne(x)?
        .argmax_keepdim(dim)?
        .cast(candle_core::DType::I64)?;
    has_nan(x, dim)?.where_cond(&first_nan, &i)
}
