//! The global random generator and the tensors drawn from it: `rand`, `randn`, `randint`,
//! `randperm`, `nn.init`'s fills and dropout masks. `manual_seed` makes all of them
//! repeatable.

use std::sync::OnceLock;

use parking_lot::Mutex;
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::creation::from_vec;
use crate::ops::inplace::{update_data, Update};
use crate::tensor::Tensor;

/// A saved state of the generator (`get_rng_state` / `set_rng_state`).
pub type State = StdRng;

fn generator() -> &'static Mutex<StdRng> {
    static R: OnceLock<Mutex<StdRng>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(StdRng::seed_from_u64(0x5eed)))
}

fn with_rng<R>(f: impl FnOnce(&mut StdRng) -> R) -> R {
    f(&mut generator().lock())
}

pub fn manual_seed(seed: u64) {
    with_rng(|r| *r = StdRng::seed_from_u64(seed));
}

/// Reseed from the operating system's entropy; returns the seed (`gradstream.seed()`).
pub fn seed() -> u64 {
    let s: u64 = rand::rng().random();
    manual_seed(s);
    s
}

pub fn get_state() -> State {
    with_rng(|r| r.clone())
}

pub fn set_state(state: State) {
    with_rng(|r| *r = state);
}

fn floating(op: &str, dtype: DType) -> Result<()> {
    if dtype.is_floating_point() {
        return Ok(());
    }
    Err(Error::type_(format!(
        "{op}: expected a floating point dtype, got {}",
        dtype.name()
    )))
}

/// `rand`: U(0, 1) draws.
pub fn rand(dims: &[usize], dtype: DType) -> Result<Tensor> {
    floating("rand", dtype)?;
    let n = dims.iter().product();
    let v: Vec<f32> = with_rng(|r| (0..n).map(|_| r.random::<f32>()).collect());
    from_vec(v, dims, dtype)
}

/// `randn`: N(0, 1) draws.
pub fn randn(dims: &[usize], dtype: DType) -> Result<Tensor> {
    floating("randn", dtype)?;
    let n = dims.iter().product();
    let v: Vec<f32> = with_rng(|r| (0..n).map(|_| StandardNormal.sample(r)).collect());
    from_vec(v, dims, dtype)
}

/// `randint`: integers drawn uniformly from `low..high`.
pub fn randint(low: i64, high: i64, dims: &[usize], dtype: DType) -> Result<Tensor> {
    if low >= high {
        return Err(Error::runtime(format!(
            "random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )));
    }
    let n = dims.iter().product();
    let v: Vec<i64> = with_rng(|r| (0..n).map(|_| r.random_range(low..high)).collect());
    from_vec(v, dims, dtype)
}

/// `randperm`: a random permutation of `0..n`.
pub fn randperm(n: i64, dtype: DType) -> Result<Tensor> {
    if n < 0 {
        return Err(Error::runtime(format!(
            "randperm: n must be non-negative, got {n}"
        )));
    }
    let mut v: Vec<i64> = (0..n).collect();
    with_rng(|r| v.shuffle(r));
    from_vec(v, &[n as usize], dtype)
}

/// Dropout's keep mask: each of `n` elements kept with probability `1 - p`.
pub fn keep_mask(n: usize, p: f64) -> Vec<u8> {
    with_rng(|r| (0..n).map(|_| (r.random::<f64>() >= p) as u8).collect())
}

/// Overwrite a floating-point `t` in place with `n` values drawn by `draw`.
fn fill(op: &'static str, t: &Tensor, mut draw: impl FnMut(&mut StdRng) -> f64) -> Result<()> {
    if !t.dtype().is_floating_point() {
        return Err(Error::type_(format!(
            "{op}: expected a floating point tensor, got {}",
            t.dtype().name()
        )));
    }
    let n = t.numel();
    let v: Vec<f64> = with_rng(|r| std::iter::repeat_with(|| draw(r)).take(n).collect());
    update_data(
        op,
        t,
        &from_vec(v, &t.dims(), DType::Float64)?,
        Update::Assign,
    )
}

/// `nn.init.uniform_`: U(a, b) in place.
pub fn uniform_(t: &Tensor, a: f64, b: f64) -> Result<()> {
    fill("uniform_", t, |r| a + (b - a) * r.random::<f64>())
}

/// `nn.init.normal_`: N(mean, std²) in place.
pub fn normal_(t: &Tensor, mean: f64, std: f64) -> Result<()> {
    fill("normal_", t, |r| {
        let z: f64 = StandardNormal.sample(r);
        mean + std * z
    })
}
