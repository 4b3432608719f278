//! What the emulated-kernel tests share: reproducible inputs and comparisons of the CUDA
//! backend's results (emulated) with the CPU backend's.

use candle_core::{DType, Device, Tensor};

/// `n` values uniform in [lo, hi), from a small LCG: reproducible without rand's streams.
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

/// A CPU tensor of `dims` in `dtype` with values uniform in [lo, hi) (integers: rounded
/// down).
pub fn sample(dims: &[usize], dtype: DType, seed: u64, lo: f64, hi: f64) -> Tensor {
    let n = dims.iter().product();
    let v = uniform(n, seed, lo, hi);
    let t = if dtype == DType::I64 {
        Tensor::from_vec(
            v.iter().map(|x| x.floor() as i64).collect::<Vec<_>>(),
            dims,
            &Device::Cpu,
        )
    } else {
        Tensor::from_vec(v, dims, &Device::Cpu).and_then(|t| t.to_dtype(dtype))
    };
    t.unwrap()
}

/// The elements of `t` as f64 (row-major).
pub fn flat(t: &Tensor) -> Vec<f64> {
    t.flatten_all()
        .and_then(|t| t.to_dtype(DType::F64))
        .and_then(|t| t.to_vec1::<f64>())
        .unwrap()
}

/// `a` (the CUDA backend's) against `b` (the CPU backend's): the same shape and dtype, NaN
/// where NaN, infinities equal, else within `atol + rtol * |b|`.
pub fn assert_close(what: &str, a: &Tensor, b: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    if a.dtype() == DType::I64 {
        let (x, y) = (
            a.flatten_all().unwrap().to_vec1::<i64>().unwrap(),
            b.flatten_all().unwrap().to_vec1::<i64>().unwrap(),
        );
        if let Some(i) = (0..x.len()).find(|&i| x[i] != y[i]) {
            panic!("{what}: element {i}: cuda {} vs cpu {}", x[i], y[i]);
        }
        return;
    }
    let (x, y) = (flat(a), flat(b));
    for (i, (&p, &q)) in x.iter().zip(&y).enumerate() {
        let ok = if q.is_nan() || p.is_nan() {
            p.is_nan() && q.is_nan()
        } else if q.is_infinite() || p.is_infinite() {
            p == q
        } else {
            (p - q).abs() <= atol + rtol * q.abs()
        };
        assert!(ok, "{what}: element {i}: cuda {p} vs cpu {q}");
    }
}

/// The bit patterns of `t`'s elements, row-major: NaN equals NaN, -0 differs from +0.
pub fn bits(t: &Tensor) -> Vec<u64> {
    let t = t.flatten_all().unwrap();
    fn each<T: candle_core::WithDType>(t: &Tensor, f: impl Fn(T) -> u64) -> Vec<u64> {
        t.to_vec1::<T>().unwrap().into_iter().map(f).collect()
    }
    match t.dtype() {
        DType::F32 => each(&t, |v: f32| v.to_bits() as u64),
        DType::F64 => each(&t, |v: f64| v.to_bits()),
        DType::F16 => each(&t, |v: half::f16| v.to_bits() as u64),
        DType::BF16 => each(&t, |v: half::bf16| v.to_bits() as u64),
        DType::U8 => each(&t, |v: u8| v as u64),
        DType::U32 => each(&t, |v: u32| v as u64),
        DType::I32 => each(&t, |v: i32| v as u64),
        _ => each(&t, |v: i64| v as u64),
    }
}

/// `a` and `b` with the same bits (zero signs included; NaNs of any payload agree:
/// converters disagree on the canonical NaN, the emulator's 0x7fff and half's 0x7e00).
pub fn assert_same_bits(what: &str, a: &Tensor, b: &Tensor) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    let nans = |t: &Tensor| -> Vec<bool> {
        match t.dtype().is_float() {
            true => flat(t).iter().map(|v| v.is_nan()).collect(),
            false => vec![false; t.elem_count()],
        }
    };
    let (na, nb) = (nans(a), nans(b));
    let (x, y) = (bits(a), bits(b));
    if let Some(i) = (0..x.len()).find(|&i| na[i] != nb[i] || (!na[i] && x[i] != y[i])) {
        panic!(
            "{what}: element {i}: cuda bits {:x} vs cpu {:x}",
            x[i], y[i]
        );
    }
}

/// Tolerances for a result of `dtype` that sums `n` terms: (rtol, atol).
pub fn tolerance(dtype: DType, n: usize) -> (f64, f64) {
    let n = n.max(1) as f64;
    match dtype {
        DType::F64 => (1e-12, 1e-14 * n),
        _ => (2e-6, 1e-9 * n),
    }
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

/// `a` (emulated) and `b` (CPU) agree elementwise within `atol + rtol |b|`, NaN with NaN.
pub fn close(what: &str, a: &Tensor, b: &Tensor, rtol: f64, atol: f64) {
    assert_eq!(a.dims(), b.dims(), "{what}: shapes");
    assert_eq!(a.dtype(), b.dtype(), "{what}: dtypes");
    for (i, (x, y)) in flat(a).iter().zip(&flat(b)).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= atol + rtol * y.abs();
        assert!(ok, "{what}: element {i}: emulated {x} vs cpu {y}");
    }
}

/// `a` and `b` hold the same elements, bit for bit (NaNs of any payload agree).
pub fn same(what: &str, a: &Tensor, b: &Tensor) {
    close(what, a, b, 0.0, 0.0);
}
