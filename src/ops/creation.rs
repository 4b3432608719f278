//! Creating tensors from values and shapes.

use candle_core::Device;

use crate::dtype::DType;
use crate::error::{CandleContext, Result};
use crate::ops::Scalar;
use crate::tensor::Tensor;

/// A tensor of `dims` filled with `value`, in `dtype`.
pub fn full(dims: &[usize], value: f64, dtype: DType) -> Result<Tensor> {
    let t = zeros(dims, dtype)?;
    if value != 0.0 {
        crate::ops::inplace::fill_data(&t, Scalar::Float(value))?;
    }
    Ok(t)
}

pub fn zeros(dims: &[usize], dtype: DType) -> Result<Tensor> {
    let t = candle_core::Tensor::zeros(dims, dtype.candle(), &Device::Cpu).op("zeros")?;
    Ok(Tensor::new(t, dtype))
}

pub fn ones(dims: &[usize], dtype: DType) -> Result<Tensor> {
    let t = candle_core::Tensor::ones(dims, dtype.candle(), &Device::Cpu).op("ones")?;
    Ok(Tensor::new(t, dtype))
}

pub fn zeros_like(t: &Tensor) -> Result<Tensor> {
    zeros(&t.dims(), t.dtype())
}

pub fn ones_like(t: &Tensor) -> Result<Tensor> {
    ones(&t.dims(), t.dtype())
}

/// A 0-d tensor holding a Python number, in `dtype`.
pub fn scalar_tensor(s: Scalar, dtype: DType) -> Result<Tensor> {
    full(&[], s.as_f64(), dtype)
}
