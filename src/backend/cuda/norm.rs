//! Batch norm's per-channel kernels on CUDA (`kernels/norm.cu`), with the CPU kernels'
//! semantics (`backend/cpu/norm.rs`): per-channel sums in double in two launches (partial
//! sums per channel and chunk of the batch, then each channel's partials in chunk order: no
//! atomics, the same result on every run), the statistics two-pass (the mean, then the
//! squares about it); the affine map and the input gradient one pass over the elements.

use crate::backend::cast::Convert;
use candle_core::{DType, Device, Tensor};

use super::launch::{addr, launch, Addr, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::norm::{ChannelCoef, NormOps};
use crate::error::{CandleContext, Error, Result};

/// Threads per block of the element-wise kernels.
const BLOCK: u32 = 256;
/// Blocks that keep a large GPU busy, for the sums' first launch.
const BUSY_BLOCKS: usize = 1024;
/// Blocks in y at most (a grid's limit); the kernel loops over the rest.
const MAX_Y: usize = 65535;

/// What `gs_channel_sums` adds up (`Sums` in norm.cu).
#[derive(Clone, Copy)]
enum Sums {
    X = 0,
    Squares = 1,
    Grad = 2,
}

fn kernel(name: &str, dtype: Option<DType>) -> Kernel {
    let name = match dtype {
        Some(d) => format!("gs_{name}_{}", dtype_suffix(d)),
        None => format!("gs_{name}"),
    };
    Kernel {
        module: &ptx::NORM,
        name: intern(name),
    }
}

fn p(a: &Addr<'_>) -> Arg {
    Arg::Ptr(a.addr)
}

/// (N, C, S) of a dense f32/f64 tensor the op layer has shaped so.
fn ncs(op: &str, x: &Tensor) -> Result<(usize, usize, usize)> {
    if !matches!(x.dtype(), DType::F32 | DType::F64) {
        return Err(Error::dtype(format!(
            "{op}: unsupported dtype {:?}",
            x.dtype()
        )));
    }
    match x.dims() {
        &[n, c, s] => Ok((n, c, s)),
        d => Err(Error::shape(format!("{op}: expected (N, C, S), got {d:?}"))),
    }
}

/// An f64 (C,) vector, dense.
fn channels(op: &'static str, v: &Tensor) -> Result<Tensor> {
    v.cast(DType::F64).and_then(|v| v.dense()).op(op)
}

/// Per-channel sums of `x` (and `g`) of (N, C, S), each divided by `divisor`, as f64 (C,)
/// tensors: one for `X` and `Squares` (about `centre`), two for `Grad`.
fn channel_sums(
    op: &'static str,
    what: Sums,
    x: &Tensor,
    g: Option<&Tensor>,
    centre: Option<&Tensor>,
    divisor: f64,
) -> Result<Vec<Tensor>> {
    let (n, c, s) = ncs(op, x)?;
    let dev: &Device = x.device();
    let outs = if matches!(what, Sums::Grad) { 2 } else { 1 };
    let out: Vec<Tensor> = (0..outs)
        .map(|_| crate::device::zeros(c, DType::F64, dev).op(op))
        .collect::<Result<_>>()?;
    if c == 0 {
        return Ok(out);
    }
    let per = if s < 32 { 32 / s.max(1) } else { 1 };
    let groups = c.div_ceil(per);
    let chunks = if n * s == 0 {
        0
    } else {
        BUSY_BLOCKS
            .div_ceil(groups)
            .clamp(1, n.div_ceil(8))
            .min(MAX_Y)
    };
    let per_chunk = if chunks == 0 { 0 } else { n.div_ceil(chunks) };
    let chunks = if chunks == 0 {
        0
    } else {
        n.div_ceil(per_chunk)
    };
    let parts: Vec<Tensor> = (0..outs)
        .map(|_| crate::device::zeros((c, chunks.max(1)), DType::F64, dev).op(op))
        .collect::<Result<_>>()?;
    let pa: Vec<Addr<'_>> = parts.iter().map(addr).collect::<Result<_>>()?;
    if chunks > 0 {
        let xa = addr(x)?;
        let ga = g.map(addr).transpose()?;
        let ca = centre.map(addr).transpose()?;
        let args = [
            Arg::I32(what as i32),
            Arg::I64(n as i64),
            Arg::I64(c as i64),
            Arg::I64(s as i64),
            Arg::I64(per_chunk as i64),
            p(&xa),
            Arg::Ptr(ga.as_ref().map_or(0, |a| a.addr)),
            Arg::Ptr(ca.as_ref().map_or(0, |a| a.addr)),
            p(&pa[0]),
            Arg::Ptr(pa.get(1).map_or(0, |a| a.addr)),
        ];
        let grid = Grid {
            blocks: (chunks as u32, groups.min(MAX_Y) as u32, 1),
            threads: (32, 8, 1),
            shared: 0,
        };
        launch(dev, kernel("channel_sums", Some(x.dtype())), grid, &args)?;
    }
    for (part, o) in pa.iter().zip(&out) {
        let oa = addr(o)?;
        let args = [
            Arg::I64(c as i64),
            Arg::I64(chunks as i64),
            p(part),
            Arg::F64(divisor),
            p(&oa),
        ];
        launch(
            dev,
            kernel("channel_total", None),
            Grid::elementwise(c, BLOCK),
            &args,
        )?;
    }
    Ok(out)
}

/// A per-element kernel over (N, C, S): `y` from `inputs` (tensors) and `coefs` (f64 (C,)).
fn per_element(
    op: &'static str,
    name: &str,
    inputs: &[&Tensor],
    coefs: &[&Tensor],
) -> Result<Tensor> {
    let x = inputs[inputs.len() - 1];
    let (n, c, s) = ncs(op, x)?;
    let inputs: Vec<Tensor> = inputs
        .iter()
        .map(|t| {
            if t.dtype() != x.dtype() || t.dims() != x.dims() {
                return Err(Error::shape(format!(
                    "{op}: operands differ in dtype or shape"
                )));
            }
            t.dense().op(op)
        })
        .collect::<Result<_>>()?;
    let coefs: Vec<Tensor> = coefs
        .iter()
        .map(|t| channels(op, t))
        .collect::<Result<_>>()?;
    let y = crate::device::zeros((n, c, s), x.dtype(), x.device()).op(op)?;
    let total = n * c * s;
    if total > 0 {
        let ia: Vec<Addr<'_>> = inputs.iter().map(addr).collect::<Result<_>>()?;
        let ca: Vec<Addr<'_>> = coefs.iter().map(addr).collect::<Result<_>>()?;
        let ya = addr(&y)?;
        let mut args = vec![Arg::I64(n as i64), Arg::I64(c as i64), Arg::I64(s as i64)];
        args.extend(ia.iter().map(p));
        args.extend(ca.iter().map(p));
        args.push(p(&ya));
        launch(
            x.device(),
            kernel(name, Some(x.dtype())),
            Grid::elementwise(total, BLOCK),
            &args,
        )?;
    }
    Ok(y)
}

impl NormOps for Cuda {
    fn channel_stats(&self, name: &'static str, x: &Tensor) -> Result<(Tensor, Tensor)> {
        let (n, _, s) = ncs(name, x)?;
        let x = x.dense().op(name)?;
        let m = (n * s) as f64;
        let mean = channel_sums(name, Sums::X, &x, None, None, m)?.remove(0);
        let var = channel_sums(name, Sums::Squares, &x, None, Some(&mean), m)?.remove(0);
        Ok((mean, var))
    }

    fn channel_affine(
        &self,
        name: &'static str,
        x: &Tensor,
        centre: &Tensor,
        scale: &Tensor,
        shift: &Tensor,
    ) -> Result<Tensor> {
        per_element(name, "channel_affine", &[x], &[centre, scale, shift])
    }

    fn channel_grad_sums(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        centre: &Tensor,
    ) -> Result<(Tensor, Tensor)> {
        if g.dtype() != x.dtype() || g.dims() != x.dims() {
            return Err(Error::shape(format!(
                "{name}: g and x differ in dtype or shape"
            )));
        }
        let (g, x) = (g.dense().op(name)?, x.dense().op(name)?);
        let centre = channels(name, centre)?;
        let mut sums = channel_sums(name, Sums::Grad, &x, Some(&g), Some(&centre), 1.0)?;
        let sgx = sums.remove(1);
        Ok((sums.remove(0), sgx))
    }

    fn channel_combine(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        k: ChannelCoef<'_>,
    ) -> Result<Tensor> {
        per_element(name, "channel_combine", &[g, x], &[k.a, k.centre, k.b, k.d])
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Tensor};

    use super::super::testing::{assert_close, sample, tolerance};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::norm::{ChannelCoef, NormOps};

    /// (N, C, S): runs of 1 (BatchNorm1d), a few, 31, 33, many; one channel, many; one sample.
    const SHAPES: &[(usize, usize, usize)] = &[
        (1, 1, 1),
        (8, 3, 1),
        (64, 40, 1),
        (4, 3, 5),
        (2, 7, 31),
        (3, 5, 33),
        (2, 3, 1000),
        (1, 2, 5000),
        (100, 2, 3),
        (5000, 1, 2),
        (0, 3, 4),
        (2, 3, 0),
        (2, 0, 3),
    ];

    fn channel(c: usize, seed: u64, lo: f64, hi: f64) -> Tensor {
        sample(&[c], DType::F64, seed, lo, hi)
    }

    #[test]
    fn statistics_and_gradient_sums_match_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(n, c, s)) in SHAPES.iter().enumerate() {
                let x = sample(&[n, c, s], dtype, i as u64, 2.0, 6.0);
                let g = sample(&[n, c, s], dtype, 50 + i as u64, -1.0, 1.0);
                let what = format!("batch_norm {dtype:?} ({n}, {c}, {s})");
                let (m, v) = Cuda.channel_stats("batch_norm", &x).unwrap();
                let (mc, vc) = Cpu.channel_stats("batch_norm", &x).unwrap();
                // Sums in double on both: close to double precision whatever the dtype.
                let (rtol, atol) = tolerance(DType::F64, n * s);
                assert_close(&what, &m, &mc, rtol, atol);
                assert_close(&what, &v, &vc, rtol, atol);
                let centre = channel(c, 7, 3.0, 5.0);
                let (sg, sgx) = Cuda
                    .channel_grad_sums("batch_norm", &g, &x, &centre)
                    .unwrap();
                let (sgc, sgxc) = Cpu
                    .channel_grad_sums("batch_norm", &g, &x, &centre)
                    .unwrap();
                assert_close(&what, &sg, &sgc, rtol, atol);
                assert_close(&what, &sgx, &sgxc, rtol, atol);
            }
        }
    }

    #[test]
    fn affine_and_combine_match_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(n, c, s)) in SHAPES.iter().enumerate() {
                let x = sample(&[n, c, s], dtype, i as u64, -2.0, 2.0);
                let g = sample(&[n, c, s], dtype, 50 + i as u64, -1.0, 1.0);
                let (centre, scale, shift) = (
                    channel(c, 1, -1.0, 1.0),
                    channel(c, 2, 0.5, 2.0),
                    channel(c, 3, -1.0, 1.0),
                );
                let what = format!("batch_norm {dtype:?} ({n}, {c}, {s})");
                let a = Cuda
                    .channel_affine("batch_norm", &x, &centre, &scale, &shift)
                    .unwrap();
                let b = Cpu
                    .channel_affine("batch_norm", &x, &centre, &scale, &shift)
                    .unwrap();
                let (rtol, atol) = tolerance(dtype, 4);
                assert_close(&what, &a, &b, rtol, atol);
                let d = channel(c, 4, -0.1, 0.1);
                let coef = ChannelCoef {
                    a: &scale,
                    centre: &centre,
                    b: &shift,
                    d: &d,
                };
                let a = Cuda.channel_combine("batch_norm", &g, &x, coef).unwrap();
                let b = Cpu.channel_combine("batch_norm", &g, &x, coef).unwrap();
                assert_close(&what, &a, &b, rtol, atol);
            }
        }
    }
}
