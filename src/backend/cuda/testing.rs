//! What the emulated-kernel tests share: reproducible inputs and comparisons of a CUDA
//! result with the CPU kernel's.

use candle_core::{DType, Device, Tensor};

/// `n` values in `[lo, hi)` from a small LCG: reproducible without rand's streams.
pub fn uniform(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            lo + (hi - lo) * ((x >> 11) as f64 / (1u64 << 53) as f64)
        })
        .collect()
}

/// A CPU tensor of `dims` with values from [`uniform`], in `dtype`.
pub fn tensor(dims: &[usize], seed: u64, lo: f64, hi: f64, dtype: DType) -> Tensor {
    let n = dims.iter().product();
    Tensor::from_vec(uniform(n, seed, lo, hi), dims, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

/// Small integers in `[lo, hi)` as a tensor of `dtype` (exact in every dtype).
pub fn integers(dims: &[usize], seed: u64, lo: i64, hi: i64, dtype: DType) -> Tensor {
    let n = dims.iter().product();
    let v: Vec<f64> = uniform(n, seed, lo as f64, hi as f64)
        .into_iter()
        .map(f64::floor)
        .collect();
    Tensor::from_vec(v, dims, &Device::Cpu)
        .and_then(|t| t.to_dtype(dtype))
        .unwrap()
}

/// Every element of `t` as f64, row-major.
pub fn values(t: &Tensor) -> Vec<f64> {
    t.to_dtype(DType::F64)
        .and_then(|t| t.flatten_all())
        .and_then(|t| t.to_vec1::<f64>())
        .unwrap()
}

/// `a` (emulated) and `b` (CPU) agree elementwise within `atol + rtol |b|`, NaN with NaN.
pub fn close(what: &str, a: &Tensor, b: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    for (i, (x, y)) in values(a).iter().zip(&values(b)).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= atol + rtol * y.abs();
        assert!(ok, "{what}: element {i}: emulated {x} vs cpu {y}");
    }
}

/// `a` and `b` hold the same elements, bit for bit (NaNs of any payload agree).
pub fn same(what: &str, a: &Tensor, b: &Tensor) {
    close(what, a, b, 0.0, 0.0);
}
