//! Ops that run a line kernel (`backend::LineKernel`) along one dim: the dtype each
//! computes in, empty inputs, and the call into the device's backend.

use crate::backend::cast::Convert;
use candle_core::DType as CDType;

use crate::backend;
pub use crate::backend::{LineKernel, Lines};
use crate::error::{CandleContext, Error, Result};

/// The storage type a kernel runs in for data stored as `dt`.
fn compute_dtype(k: LineKernel, dt: CDType) -> CDType {
    match dt {
        CDType::F16 | CDType::BF16 => CDType::F32,
        CDType::U8 | CDType::I32 | CDType::U32 => match k {
            LineKernel::Softmax { .. } | LineKernel::LinearScan { .. } => CDType::F32,
            _ => CDType::I64,
        },
        other => other,
    }
}

/// Run a one-input line kernel along `dim` of a tensor of rank >= 1. The result has the
/// input's storage type (int64 for `ArgExtreme`); the dim has size 1 for reductions.
pub fn line_op(x: &candle_core::Tensor, dim: usize, k: LineKernel) -> Result<candle_core::Tensor> {
    let name = k.name();
    if dim >= x.rank() {
        return Err(Error::index(format!(
            "{name}: dim {dim} out of range for rank {}",
            x.rank()
        )));
    }
    let dt = x.dtype();
    if x.elem_count() == 0 {
        return empty_result(x, dim, k);
    }
    let cdt = compute_dtype(k, dt);
    let x = x.cast(cdt).op(name)?.dense().op(name)?;
    let out = backend::on(&x).lines(&x, dim, k)?;
    match k {
        LineKernel::ArgExtreme { .. } => Ok(out),
        _ => out.cast(dt).op(name),
    }
}

/// A kernel's result on an input without elements: empty, or ones/zeros for an empty line.
fn empty_result(x: &candle_core::Tensor, dim: usize, k: LineKernel) -> Result<candle_core::Tensor> {
    let name = k.name();
    let mut dims = x.dims().to_vec();
    if dims[dim] == 0
        && matches!(
            k,
            LineKernel::Extreme { .. } | LineKernel::ArgExtreme { .. }
        )
    {
        return Err(Error::index(format!(
            "{name}(): Expected reduction dim {dim} to have non-zero size (input shape {})",
            crate::tensor::shape_str(&dims)
        )));
    }
    dims[dim] = k.out_len(dims[dim]);
    let dt = match k {
        LineKernel::ArgExtreme { .. } => CDType::I64,
        _ => x.dtype(),
    };
    let identity = if k == LineKernel::Prod { 1.0 } else { 0.0 };
    crate::device::full(dims, identity, dt, x.device())
}

/// Run a two-input line kernel (`LinearScan`) along `dim`; both inputs the same shape.
pub fn line_op2(
    a: &candle_core::Tensor,
    b: &candle_core::Tensor,
    dim: usize,
    k: LineKernel,
) -> Result<candle_core::Tensor> {
    let name = k.name();
    let dt = a.dtype();
    if a.elem_count() == 0 {
        return Ok(b.clone());
    }
    let cdt = compute_dtype(k, dt);
    let a = a.cast(cdt).op(name)?.dense().op(name)?;
    let b = b.cast(cdt).op(name)?.dense().op(name)?;
    let out = backend::on(&a).lines2(&a, &b, dim, k)?;
    out.cast(dt).op(name)
}
