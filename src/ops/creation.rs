//! Creating tensors from values and shapes.

use candle_core::Device;

use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
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

/// A tensor of `dtype` from values computed in `T`.
pub fn from_vec<T: candle_core::WithDType>(
    v: Vec<T>,
    dims: &[usize],
    dtype: DType,
) -> Result<Tensor> {
    let t = candle_core::Tensor::from_vec(v, dims, &Device::Cpu).op("tensor")?;
    let src = DType::from_candle(t.dtype())?;
    crate::ops::convert::to_dtype(&Tensor::new(t, src), dtype)
}

/// `arange(start, end, step)`: exact in int64 when every bound is an integer.
pub fn arange(start: Scalar, end: Scalar, step: Scalar, dtype: DType) -> Result<Tensor> {
    let (a, b, c) = (start.as_f64(), end.as_f64(), step.as_f64());
    if c == 0.0 {
        return Err(Error::runtime("arange: step must be nonzero"));
    }
    if (b - a) / c < 0.0 {
        return Err(Error::runtime(format!(
            "arange: upper bound and larger bound inconsistent with step sign (start={a}, end={b}, step={c})"
        )));
    }
    let n = ((b - a) / c).ceil() as usize;
    let integral = [start, end, step]
        .iter()
        .all(|s| !matches!(s, Scalar::Float(_)));
    if integral {
        let (a, c) = (a as i64, c as i64);
        from_vec((0..n as i64).map(|i| a + i * c).collect(), &[n], dtype)
    } else {
        from_vec((0..n).map(|i| a + i as f64 * c).collect(), &[n], dtype)
    }
}

/// `linspace(start, end, steps)`: computed symmetrically from both ends, as PyTorch does.
pub fn linspace(start: f64, end: f64, steps: i64, dtype: DType) -> Result<Tensor> {
    if steps < 0 {
        return Err(Error::runtime(format!(
            "linspace: number of steps must be non-negative, got {steps}"
        )));
    }
    let n = steps as usize;
    let step = if n > 1 {
        (end - start) / (n - 1) as f64
    } else {
        0.0
    };
    let v: Vec<f64> = (0..n)
        .map(|i| match i < n / 2 {
            true => start + step * i as f64,
            false => end - step * (n - 1 - i) as f64,
        })
        .collect();
    from_vec(v, &[n], dtype)
}

/// `eye(n, m)`: ones on the diagonal of an n×m matrix.
pub fn eye(n: i64, m: i64, dtype: DType) -> Result<Tensor> {
    if n < 0 || m < 0 {
        return Err(Error::runtime(format!(
            "eye: n and m must be non-negative, got n={n}, m={m}"
        )));
    }
    let (n, m) = (n as usize, m as usize);
    let mut v = vec![0f64; n * m];
    for i in 0..n.min(m) {
        v[i * m + i] = 1.0;
    }
    from_vec(v, &[n, m], dtype)
}
