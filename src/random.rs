//! Random generators (`gradstream.Generator`, the global `default_generator`) and every
//! tensor drawn from one: `rand`, `randn`, `randint`, `randperm`, `uniform_`/`normal_`
//! (`nn.init` and the Tensor methods), `bernoulli`, `multinomial` and dropout masks. Each
//! draw takes the generator it draws from; seeding a generator makes its draws repeatable.

use std::sync::{Arc, OnceLock};

use candle_core::Device;
use parking_lot::Mutex;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha12Rng;
use rand_distr::{Distribution, Exp1, StandardNormal};

use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::broadcast_shape;
use crate::ops::convert::to_dtype;
use crate::ops::creation::from_vec;
use crate::ops::inplace::{update_data, Update};
use crate::tensor::Tensor;

/// The seed of a generator nobody has seeded (PyTorch's `default_rng_seed_val`).
pub const DEFAULT_SEED: u64 = 67280421310721;

/// Bytes of a serialised state: the ChaCha key (32), stream (8), word position (16) and the
/// initial seed (8), little-endian.
pub const STATE_BYTES: usize = 64;

struct Inner {
    rng: ChaCha12Rng,
    initial_seed: u64,
}

impl Inner {
    fn seeded(seed: u64) -> Inner {
        Inner {
            rng: ChaCha12Rng::seed_from_u64(seed),
            initial_seed: seed,
        }
    }
}

/// A random generator: ChaCha12 (rand's `StdRng`) and the seed it was last seeded with.
pub struct Generator {
    inner: Mutex<Inner>,
}

impl Generator {
    pub fn new(seed: u64) -> Generator {
        Generator {
            inner: Mutex::new(Inner::seeded(seed)),
        }
    }

    pub fn manual_seed(&self, seed: u64) {
        *self.inner.lock() = Inner::seeded(seed);
    }

    /// Reseed from the operating system's entropy; returns the seed.
    pub fn seed(&self) -> u64 {
        let s: u64 = rand::rng().random();
        self.manual_seed(s);
        s
    }

    pub fn initial_seed(&self) -> u64 {
        self.inner.lock().initial_seed
    }

    /// The state as [`STATE_BYTES`] bytes; `set_state` of them replays the same draws.
    pub fn get_state(&self) -> Vec<u8> {
        let g = self.inner.lock();
        let mut v = Vec::with_capacity(STATE_BYTES);
        v.extend_from_slice(&g.rng.get_seed());
        v.extend_from_slice(&g.rng.get_stream().to_le_bytes());
        v.extend_from_slice(&g.rng.get_word_pos().to_le_bytes());
        v.extend_from_slice(&g.initial_seed.to_le_bytes());
        v
    }

    pub fn set_state(&self, bytes: &[u8]) -> Result<()> {
        let bad = || {
            Error::runtime(format!(
                "set_state: expected a generator state of {STATE_BYTES} bytes (from get_state()), \
                 but got {} bytes",
                bytes.len()
            ))
        };
        if bytes.len() != STATE_BYTES {
            return Err(bad());
        }
        let seed: [u8; 32] = field(bytes, 0).ok_or_else(bad)?;
        let stream = u64::from_le_bytes(field(bytes, 32).ok_or_else(bad)?);
        let word_pos = u128::from_le_bytes(field(bytes, 40).ok_or_else(bad)?);
        let initial_seed = u64::from_le_bytes(field(bytes, 56).ok_or_else(bad)?);
        let mut rng = ChaCha12Rng::from_seed(seed);
        rng.set_stream(stream);
        rng.set_word_pos(word_pos);
        *self.inner.lock() = Inner { rng, initial_seed };
        Ok(())
    }

    /// One 64-bit draw (the seed of a counter-based stream, e.g. attention's dropout).
    pub fn next_u64(&self) -> u64 {
        self.with(|r| r.random())
    }

    fn with<R>(&self, f: impl FnOnce(&mut ChaCha12Rng) -> R) -> R {
        f(&mut self.inner.lock().rng)
    }

    /// `n` draws of `draw`.
    fn draws<T>(&self, n: usize, mut draw: impl FnMut(&mut ChaCha12Rng) -> T) -> Vec<T> {
        self.with(|r| (0..n).map(|_| draw(r)).collect())
    }
}

/// `N` bytes of `bytes` from `at`.
fn field<const N: usize>(bytes: &[u8], at: usize) -> Option<[u8; N]> {
    bytes.get(at..at + N)?.try_into().ok()
}

/// The global generator (`gradstream.default_generator`): draws given no generator use it.
pub fn default_generator() -> &'static Arc<Generator> {
    static G: OnceLock<Arc<Generator>> = OnceLock::new();
    G.get_or_init(|| Arc::new(Generator::new(DEFAULT_SEED)))
}

/// `gradstream.manual_seed`: seed the global generator.
pub fn manual_seed(seed: u64) {
    default_generator().manual_seed(seed);
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

/// A tensor of `dtype` from `n` draws, in f64 for float64 and f32 otherwise.
fn float_draws(
    g: &Generator,
    dims: &[usize],
    dtype: DType,
    device: &Device,
    f32_draw: impl FnMut(&mut ChaCha12Rng) -> f32,
    f64_draw: impl FnMut(&mut ChaCha12Rng) -> f64,
) -> Result<Tensor> {
    crate::headroom::ensure("rand", dims, 8)?;
    let n = dims.iter().product();
    if dtype == DType::Float64 {
        from_vec(g.draws(n, f64_draw), dims, dtype, device)
    } else {
        from_vec(g.draws(n, f32_draw), dims, dtype, device)
    }
}

/// `rand`: U(0, 1) draws.
pub fn rand(dims: &[usize], dtype: DType, device: &Device, g: &Generator) -> Result<Tensor> {
    floating("rand", dtype)?;
    float_draws(g, dims, dtype, device, |r| r.random(), |r| r.random())
}

/// `randn`: N(0, 1) draws.
pub fn randn(dims: &[usize], dtype: DType, device: &Device, g: &Generator) -> Result<Tensor> {
    floating("randn", dtype)?;
    let f32_draw = |r: &mut ChaCha12Rng| StandardNormal.sample(r);
    let f64_draw = |r: &mut ChaCha12Rng| StandardNormal.sample(r);
    float_draws(g, dims, dtype, device, f32_draw, f64_draw)
}

/// `randint`: integers drawn uniformly from `low..high`.
pub fn randint(
    low: i64,
    high: i64,
    dims: &[usize],
    dtype: DType,
    device: &Device,
    g: &Generator,
) -> Result<Tensor> {
    if low >= high {
        return Err(Error::runtime(format!(
            "random_ expects 'from' to be less than 'to', but got from={low} >= to={high}"
        )));
    }
    crate::headroom::ensure("randint", dims, 8)?;
    let n = dims.iter().product();
    from_vec(
        g.draws(n, |r| r.random_range(low..high)),
        dims,
        dtype,
        device,
    )
}

/// `randperm`: a random permutation of `0..n`.
pub fn randperm(n: i64, dtype: DType, device: &Device, g: &Generator) -> Result<Tensor> {
    if n < 0 {
        return Err(Error::runtime(format!(
            "randperm: n must be non-negative, got {n}"
        )));
    }
    crate::headroom::ensure("randperm", &[n as usize], 8)?;
    let mut v: Vec<i64> = (0..n).collect();
    g.with(|r| v.shuffle(r));
    from_vec(v, &[n as usize], dtype, device)
}

/// Dropout's keep mask: each of `n` elements kept with probability `1 - p`.
pub fn keep_mask(n: usize, p: f64, g: &Generator) -> Vec<u8> {
    g.draws(n, |r| (r.random::<f64>() >= p) as u8)
}

/// New values for the floating-point `t` (its shape and dtype), drawn by `draw`.
fn draws_like(
    op: &'static str,
    t: &Tensor,
    g: &Generator,
    draw: impl FnMut(&mut ChaCha12Rng) -> f64,
) -> Result<Tensor> {
    if !t.dtype().is_floating_point() {
        return Err(Error::type_(format!(
            "{op}: expected a floating point tensor, got {}",
            t.dtype().name()
        )));
    }
    from_vec(g.draws(t.numel(), draw), &t.dims(), t.dtype(), &t.device())
}

/// U(a, b) values for `t` (`Tensor.uniform_`, `nn.init.uniform_`).
pub fn uniform(t: &Tensor, a: f64, b: f64, g: &Generator) -> Result<Tensor> {
    if a > b {
        return Err(Error::runtime(format!(
            "uniform_ expects to return a [from, to) range, but found from={a} > to={b}"
        )));
    }
    if !(b - a).is_finite() {
        return Err(Error::runtime(format!(
            "uniform_ expects a finite range, but found from={a}, to={b}"
        )));
    }
    draws_like("uniform_", t, g, |r| a + (b - a) * r.random::<f64>())
}

/// N(mean, std²) values for `t` (`Tensor.normal_`, `nn.init.normal_`).
pub fn normal(t: &Tensor, mean: f64, std: f64, g: &Generator) -> Result<Tensor> {
    if std.is_nan() || std < 0.0 {
        return Err(Error::runtime(format!(
            "normal_ expects std >= 0.0, but found std {std}"
        )));
    }
    draws_like("normal_", t, g, |r| {
        let z: f64 = StandardNormal.sample(r);
        mean + std * z
    })
}

/// `nn.init.uniform_`: U(a, b) in place, outside autograd.
pub fn uniform_(t: &Tensor, a: f64, b: f64, g: &Generator) -> Result<()> {
    update_data("uniform_", t, &uniform(t, a, b, g)?, Update::Assign)
}

/// `nn.init.normal_`: N(mean, std²) in place, outside autograd.
pub fn normal_(t: &Tensor, mean: f64, std: f64, g: &Generator) -> Result<()> {
    update_data("normal_", t, &normal(t, mean, std, g)?, Update::Assign)
}

/// The values of `t`, row-major, as f64 on the host, where the generator draws.
fn f64_values(t: &Tensor) -> Result<Vec<f64>> {
    t.to_vec::<f64>("random draws are made on the host")
}

/// 1 with probability `p[i]`, else 0, for each of the probabilities `p`.
fn bernoulli_draws(op: &str, p: &[f64], g: &Generator) -> Result<Vec<f64>> {
    if let Some(bad) = p.iter().find(|x| !(0.0..=1.0).contains(*x)) {
        return Err(Error::runtime(format!(
            "{op}: expected all probabilities to be in [0, 1], but got {bad}"
        )));
    }
    let mut it = p.iter();
    Ok(g.draws(p.len(), |r| {
        let p = it.next().copied().unwrap_or(0.0);
        f64::from(r.random::<f64>() < p)
    }))
}

/// `bernoulli(input)`: 1 with probability `input[i]`, in `input`'s (floating) dtype.
pub fn bernoulli(input: &Tensor, g: &Generator) -> Result<Tensor> {
    if !input.dtype().is_floating_point() {
        return Err(Error::NotImplemented(format!(
            "bernoulli: not implemented for input of dtype {} (probabilities must be floating \
             point)",
            input.dtype().name()
        )));
    }
    let v = bernoulli_draws("bernoulli", &f64_values(input)?, g)?;
    from_vec(v, &input.dims(), input.dtype(), &input.device())
}

/// `bernoulli(input, p)` / `Tensor.bernoulli_(p)` for a number `p`: `dims` draws of
/// probability `p`, as `dtype`.
pub fn bernoulli_scalar(
    op: &str,
    dims: &[usize],
    dtype: DType,
    device: &Device,
    p: f64,
    g: &Generator,
) -> Result<Tensor> {
    if !(0.0..=1.0).contains(&p) {
        return Err(Error::runtime(format!(
            "{op} expects p to be in [0, 1], but got p={p}"
        )));
    }
    let n = dims.iter().product();
    from_vec(
        g.draws(n, |r| f64::from(r.random::<f64>() < p)),
        dims,
        dtype,
        device,
    )
}

/// `Tensor.bernoulli_(p)` for a tensor `p`: new values for `t`, `p` broadcast to its shape.
pub fn bernoulli_like(t: &Tensor, p: &Tensor, g: &Generator) -> Result<Tensor> {
    const OP: &str = "bernoulli_";
    let dims = t.dims();
    let pd = p.dims();
    if broadcast_shape(OP, &dims, &pd)? != dims {
        return Err(Error::shape(format!(
            "{OP}: the probabilities of shape {pd:?} do not broadcast to the tensor's shape \
             {dims:?}"
        )));
    }
    let probs = to_dtype(p, DType::Float64)?
        .data()
        .broadcast_as(dims.as_slice())
        .op(OP)?;
    let probs = Tensor::new(probs, DType::Float64);
    let v = bernoulli_draws(OP, &f64_values(&probs)?, g)?;
    from_vec(v, &dims, t.dtype(), &t.device())
}

/// `multinomial(input, num_samples, replacement)`: for each row of probabilities (weights,
/// not necessarily normalised) `num_samples` category indices, as int64.
pub fn multinomial(
    input: &Tensor,
    num_samples: i64,
    replacement: bool,
    g: &Generator,
) -> Result<Tensor> {
    if !input.dtype().is_floating_point() {
        return Err(Error::runtime(format!(
            "multinomial only supports floating-point dtypes for input, got: {}",
            input.dtype().name()
        )));
    }
    let dims = input.dims();
    let (rows, k) = match dims.as_slice() {
        [k] => (1, *k),
        [r, k] => (*r, *k),
        _ => {
            return Err(Error::runtime(format!(
                "multinomial: prob_dist must be 1 or 2 dim, got {} dims",
                dims.len()
            )))
        }
    };
    if num_samples <= 0 {
        return Err(Error::runtime(format!(
            "multinomial: cannot sample n_sample <= 0 samples (num_samples={num_samples})"
        )));
    }
    let n = num_samples as usize;
    if !replacement && n > k {
        return Err(Error::runtime(format!(
            "multinomial: cannot sample n_sample > prob_dist.size(-1) samples without \
             replacement (num_samples={n}, {k} categories)"
        )));
    }
    if k > 1 << 24 {
        return Err(Error::runtime(format!(
            "multinomial: number of categories cannot exceed 2^24, got {k}"
        )));
    }
    let p = f64_values(input)?;
    if p.iter().any(|x| !x.is_finite() || *x < 0.0) {
        return Err(Error::runtime(
            "multinomial: probability tensor contains either `inf`, `nan` or element < 0",
        ));
    }
    let too_large = || {
        Error::runtime(format!(
            "multinomial: cannot allocate {rows} x {n} samples (num_samples={n} is too large)"
        ))
    };
    let total = rows.checked_mul(n).ok_or_else(too_large)?;
    crate::headroom::ensure("multinomial", &[rows, n], 8)?;
    let mut out: Vec<i64> = Vec::new();
    out.try_reserve_exact(total).map_err(|_| too_large())?;
    g.with(|r| -> Result<()> {
        for row in 0..rows {
            let w = p.get(row * k..(row + 1) * k).unwrap_or(&[]);
            let cum: Vec<f64> = w
                .iter()
                .scan(0.0, |s, x| {
                    *s += x;
                    Some(*s)
                })
                .collect();
            let total = cum.last().copied().unwrap_or(0.0);
            if total <= 0.0 {
                return Err(Error::runtime(
                    "multinomial: invalid multinomial distribution (sum of probabilities <= 0)",
                ));
            }
            if replacement {
                for _ in 0..n {
                    let u = r.random::<f64>() * total;
                    let j = cum.partition_point(|&c| c <= u).min(k - 1);
                    out.push(j as i64);
                }
            } else {
                // The `n` largest `w / E` (E ~ Exp(1)) are a draw without replacement
                // (what PyTorch does); zero weights come last, in random order.
                let mut keys: Vec<(f64, usize)> = w
                    .iter()
                    .enumerate()
                    .map(|(j, &x)| {
                        let key = if x > 0.0 {
                            let e: f64 = Exp1.sample(r);
                            x / e
                        } else {
                            -r.random::<f64>()
                        };
                        (key, j)
                    })
                    .collect();
                keys.sort_unstable_by(|a, b| b.0.total_cmp(&a.0));
                out.extend(keys.iter().take(n).map(|&(_, j)| j as i64));
            }
        }
        Ok(())
    })?;
    let out_dims = if dims.len() == 1 {
        vec![n]
    } else {
        vec![rows, n]
    };
    from_vec(out, &out_dims, DType::Int64, &input.device())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn state_round_trip_replays_the_draws() {
        let g = Generator::new(7);
        let _ = g.draws(5, |r| r.random::<u32>());
        let s = g.get_state();
        assert_eq!(s.len(), STATE_BYTES);
        let a = g.draws(37, |r| r.random::<f64>());
        g.set_state(&s).unwrap();
        assert_eq!(g.draws(37, |r| r.random::<f64>()), a);
        assert_eq!(g.initial_seed(), 7);
        assert!(g.set_state(&s[1..]).is_err());
    }

    #[test]
    fn generators_are_independent() {
        let (a, b) = (Generator::new(3), Generator::new(3));
        let x = a.draws(4, |r| r.random::<u64>());
        let _ = Generator::new(3).draws(9, |r| r.random::<u64>());
        assert_eq!(b.draws(4, |r| r.random::<u64>()), x);
    }
}
