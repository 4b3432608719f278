//! Creating tensors from values and shapes, on the device the caller names (an op making
//! a tensor beside its input names the input's device).

use candle_core::Device;

use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::Scalar;
use crate::tensor::Tensor;

/// A tensor of `dims` filled with `value`, in `dtype`, on `device`.
pub fn full(
    dims: &[usize],
    value: impl Into<Scalar>,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    // a new tensor: filled without a version bump (PyTorch's `full` is at version 0)
    crate::headroom::ensure("full", dims, dtype.size_in_bytes())?;
    let value = value.into();
    let v = match dtype {
        DType::Bool => Scalar::Bool(value.as_f64() != 0.0),
        _ => value,
    };
    let t = crate::device::full(dims, v, dtype.candle(), device)?;
    Ok(Tensor::new(t, dtype))
}

pub fn zeros(dims: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
    crate::headroom::ensure("zeros", dims, dtype.size_in_bytes())?;
    let t = crate::device::zeros(dims, dtype.candle(), device).op("zeros")?;
    Ok(Tensor::new(t, dtype))
}

pub fn ones(dims: &[usize], dtype: DType, device: &Device) -> Result<Tensor> {
    // zeros and a fill: candle's `ones` has no int32 kernel on CUDA
    full(dims, 1.0, dtype, device)
}

/// Zeros of `t`'s shape and dtype, on its device.
pub fn zeros_like(t: &Tensor) -> Result<Tensor> {
    zeros(&t.dims(), t.dtype(), &t.device())
}

/// Ones of `t`'s shape and dtype, on its device.
pub fn ones_like(t: &Tensor) -> Result<Tensor> {
    ones(&t.dims(), t.dtype(), &t.device())
}

/// A 0-d tensor holding a Python number, in `dtype`, on `device`.
pub fn scalar_tensor(s: Scalar, dtype: DType, device: &Device) -> Result<Tensor> {
    full(&[], s, dtype, device)
}

/// A tensor of `dtype` on `device` from values computed on the host in `T`.
pub fn from_vec<T: candle_core::WithDType>(
    v: Vec<T>,
    dims: &[usize],
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let t = crate::device::from_vec(v, dims, device).op("tensor")?;
    let src = DType::from_candle(t.dtype())?;
    crate::ops::convert::to_dtype(&Tensor::new(t, src), dtype)
}

/// `arange(start, end, step)`: exact in int64 when every bound is an integer.
pub fn arange(
    start: Scalar,
    end: Scalar,
    step: Scalar,
    dtype: DType,
    device: &Device,
) -> Result<Tensor> {
    let (a, b, c) = (start.as_f64(), end.as_f64(), step.as_f64());
    if c == 0.0 {
        return Err(Error::runtime("arange: step must be nonzero"));
    }
    if (b - a) / c < 0.0 {
        return Err(Error::runtime(format!(
            "arange: upper bound and larger bound inconsistent with step sign (start={a}, end={b}, step={c})"
        )));
    }
    let n = ((b - a) / c).ceil();
    if n.is_nan() || n >= usize::MAX as f64 {
        return Err(Error::runtime(format!(
            "arange: the number of elements is too large (start={a}, end={b}, step={c})"
        )));
    }
    let n = n as usize;
    crate::headroom::ensure("arange", &[n], 8)?;
    let integral = [start, end, step]
        .iter()
        .all(|s| !matches!(s, Scalar::Float(_)));
    if integral {
        let (a, c) = (a as i64, c as i64);
        from_vec(
            (0..n as i64).map(|i| a + i * c).collect(),
            &[n],
            dtype,
            device,
        )
    } else {
        from_vec(
            (0..n).map(|i| a + i as f64 * c).collect(),
            &[n],
            dtype,
            device,
        )
    }
}

/// `linspace(start, end, steps)`: computed symmetrically from both ends, as PyTorch does.
pub fn linspace(start: f64, end: f64, steps: i64, dtype: DType, device: &Device) -> Result<Tensor> {
    if steps < 0 {
        return Err(Error::runtime(format!(
            "linspace: number of steps must be non-negative, got {steps}"
        )));
    }
    let n = steps as usize;
    crate::headroom::ensure("linspace", &[n], 8)?;
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
    from_vec(v, &[n], dtype, device)
}

/// `eye(n, m)`: ones on the diagonal of an n×m matrix.
pub fn eye(n: i64, m: i64, dtype: DType, device: &Device) -> Result<Tensor> {
    if n < 0 || m < 0 {
        return Err(Error::runtime(format!(
            "eye: n and m must be non-negative, got n={n}, m={m}"
        )));
    }
    let (n, m) = (n as usize, m as usize);
    crate::headroom::ensure("eye", &[n, m], 8)?;
    let mut v = vec![0f64; n * m];
    for i in 0..n.min(m) {
        v[i * m + i] = 1.0;
    }
    from_vec(v, &[n, m], dtype, device)
}
