//! The nn kernels on CUDA (`kernels/nn.cu`), with the CPU kernels' semantics
//! (`backend/cpu/nn.rs`): layer_norm a team of threads per row (forward, input gradient) and
//! its weight and bias gradients as column sums in two launches (per-chunk partials, then
//! each column's partials in chunk order); nll_loss's row gather/scatter; embedding and its
//! backward.
//!
//! embedding's backward adds rows with atomics: into the output for float32 and float64, and
//! for float16 and bfloat16 into a float32 buffer rounded once at the end (16-bit atomic
//! adds would round at every add). Where ids repeat, the order of the adds, and so the last
//! bits of a sum, vary from run to run; a deterministic order needs the ids sorted first,
//! which costs more than the backward itself.

use crate::backend::cast::Convert;
use candle_core::{DType, Device, Tensor};

use super::launch::{addr, launch, Addr, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::nn::{Affine, NnOps, Targets};
use crate::error::{CandleContext, Error, Result};

/// Threads per block, and per row at most.
const BLOCK: usize = 256;
const ROW_MAX: usize = 512;
/// Blocks of a launch at most; the kernels loop over the rest.
const MAX_BLOCKS: usize = 65535;
/// Blocks that keep a large GPU busy, for the column sums' first launch.
const BUSY_BLOCKS: usize = 1024;

fn kernel(name: &str, dtype: DType) -> Kernel {
    Kernel {
        module: &ptx::NN,
        name: intern(format!("gs_{name}_{}", dtype_suffix(dtype))),
    }
}

fn zeros(
    shape: impl Into<candle_core::Shape>,
    dtype: DType,
    dev: &Device,
    op: &'static str,
) -> Result<Tensor> {
    crate::device::zeros(shape, dtype, dev).op(op)
}

fn p(a: &Addr<'_>) -> Arg {
    Arg::Ptr(a.addr)
}

/// The input's dtype, if the kernel takes it.
fn check(op: &str, t: &Tensor, allowed: &[DType]) -> Result<DType> {
    if allowed.contains(&t.dtype()) {
        return Ok(t.dtype());
    }
    Err(Error::dtype(format!(
        "{op}: unsupported dtype {:?} (expected one of {allowed:?})",
        t.dtype()
    )))
}

const FLOATS: [DType; 2] = [DType::F32, DType::F64];
const ALL_FLOATS: [DType; 4] = [DType::F32, DType::F64, DType::F16, DType::BF16];

/// A team of `r` threads per row of `n` (blockDim = (1, r, g)), as `team.cuh` lays out.
fn row_grid(rows: usize, n: usize) -> Grid {
    let r = n.next_power_of_two().clamp(4, ROW_MAX);
    let g = (BLOCK / r).max(1);
    Grid {
        blocks: (rows.div_ceil(g).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        threads: (1, r as u32, g as u32),
        shared: 0,
    }
}

/// Rows of `d` elements: blockDim = (x, y), y rows at a time, x threads along a row.
fn rows_of(len: usize, d: usize) -> Grid {
    let x = d.next_power_of_two().min(BLOCK);
    let y = BLOCK / x;
    Grid {
        blocks: (len.div_ceil(y).clamp(1, MAX_BLOCKS) as u32, 1, 1),
        threads: (x as u32, y as u32, 1),
        shared: 0,
    }
}

/// A contiguous tensor of `dtype`, the dtype of the op's other operands.
fn dense(op: &'static str, t: &Tensor, dtype: DType) -> Result<Tensor> {
    if t.dtype() != dtype {
        return Err(Error::dtype(format!(
            "{op}: expected {dtype:?} operands, got {:?}",
            t.dtype()
        )));
    }
    t.dense().op(op)
}

/// layer_norm's weight and bias gradients from the rows: Σ g·x̂ and Σ g per column, in two
/// launches.
#[allow(clippy::too_many_arguments)]
fn param_sums(
    name: &'static str,
    (g, x): (&Addr<'_>, &Addr<'_>),
    (mu, rs): (&Addr<'_>, &Addr<'_>),
    rows: usize,
    n: usize,
    dtype: DType,
    dev: &Device,
) -> Result<(Tensor, Tensor)> {
    let (dw, db) = (zeros(n, dtype, dev, name)?, zeros(n, dtype, dev, name)?);
    if rows == 0 || n == 0 {
        return Ok((dw, db));
    }
    let tiles = n.div_ceil(32);
    let chunks = BUSY_BLOCKS
        .div_ceil(tiles)
        .clamp(1, rows.div_ceil(8))
        .min(MAX_BLOCKS);
    let per_chunk = rows.div_ceil(chunks);
    let chunks = rows.div_ceil(per_chunk);
    let (pw, pb) = (
        zeros((chunks, n), DType::F64, dev, name)?,
        zeros((chunks, n), DType::F64, dev, name)?,
    );
    let (pwa, pba) = (addr(&pw)?, addr(&pb)?);
    let grid = Grid {
        blocks: (tiles as u32, chunks as u32, 1),
        threads: (32, 8, 1),
        shared: 0,
    };
    let args = [
        Arg::I64(rows as i64),
        Arg::I64(n as i64),
        Arg::I64(per_chunk as i64),
        p(g),
        p(x),
        p(mu),
        p(rs),
        p(&pwa),
        p(&pba),
    ];
    launch(dev, kernel("layer_norm_param_parts", dtype), grid, &args)?;
    {
        let (dwa, dba) = (addr(&dw)?, addr(&db)?);
        let args = [
            Arg::I64(n as i64),
            Arg::I64(chunks as i64),
            p(&pwa),
            p(&pba),
            p(&dwa),
            p(&dba),
        ];
        launch(
            dev,
            kernel("column_sums", dtype),
            Grid::elementwise(n, BLOCK as u32),
            &args,
        )?;
    }
    Ok((dw, db))
}

impl NnOps for Cuda {
    fn layer_norm(
        &self,
        name: &'static str,
        x: &Tensor,
        affine: Affine<'_>,
        n: usize,
        eps: f64,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        let dtype = check(name, x, &FLOATS)?;
        let x = x.dense().op(name)?;
        let dev = x.device();
        let rows = x.elem_count().checked_div(n).unwrap_or(0);
        let y = zeros(x.shape(), dtype, dev, name)?;
        let (mean, rstd) = (
            zeros(rows, dtype, dev, name)?,
            zeros(rows, dtype, dev, name)?,
        );
        if rows > 0 {
            let w = affine.weight.map(|w| dense(name, w, dtype)).transpose()?;
            let b = affine.bias.map(|b| dense(name, b, dtype)).transpose()?;
            let (xa, ya, ma, ra) = (addr(&x)?, addr(&y)?, addr(&mean)?, addr(&rstd)?);
            let (wa, ba) = (
                w.as_ref().map(addr).transpose()?,
                b.as_ref().map(addr).transpose()?,
            );
            let args = [
                Arg::I64(rows as i64),
                Arg::I64(n as i64),
                p(&xa),
                Arg::Ptr(wa.as_ref().map_or(0, |a| a.addr)),
                Arg::Ptr(ba.as_ref().map_or(0, |a| a.addr)),
                Arg::F64(eps),
                p(&ya),
                p(&ma),
                p(&ra),
            ];
            launch(dev, kernel("layer_norm", dtype), row_grid(rows, n), &args)?;
        }
        Ok((y, mean, rstd))
    }

    fn layer_norm_backward(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        stats: (&Tensor, &Tensor),
        w: Option<&Tensor>,
        n: usize,
        params: bool,
    ) -> Result<(Tensor, Option<(Tensor, Tensor)>)> {
        let dtype = check(name, x, &FLOATS)?;
        let dev = x.device();
        let (g, x) = (dense(name, g, dtype)?, x.dense().op(name)?);
        let (mu, rs) = (dense(name, stats.0, dtype)?, dense(name, stats.1, dtype)?);
        let w = w.map(|w| dense(name, w, dtype)).transpose()?;
        let rows = x.elem_count().checked_div(n).unwrap_or(0);
        let gx = zeros(x.shape(), dtype, dev, name)?;
        let (ga, xa, ma, ra) = (addr(&g)?, addr(&x)?, addr(&mu)?, addr(&rs)?);
        if rows > 0 {
            let (wa, gxa) = (w.as_ref().map(addr).transpose()?, addr(&gx)?);
            let args = [
                Arg::I64(rows as i64),
                Arg::I64(n as i64),
                p(&ga),
                p(&xa),
                p(&ma),
                p(&ra),
                Arg::Ptr(wa.as_ref().map_or(0, |a| a.addr)),
                p(&gxa),
            ];
            launch(
                dev,
                kernel("layer_norm_backward", dtype),
                row_grid(rows, n),
                &args,
            )?;
        }
        let sums = match params {
            true => Some(param_sums(
                name,
                (&ga, &xa),
                (&ma, &ra),
                rows,
                n,
                dtype,
                dev,
            )?),
            false => None,
        };
        Ok((gx, sums))
    }

    fn gather_rows(&self, name: &'static str, x: &Tensor, t: Targets<'_>) -> Result<Tensor> {
        let dtype = check(name, x, &ALL_FLOATS)?;
        let x = x.dense().op(name)?;
        let classes = dense(name, t.classes, DType::I64)?;
        let (rows, c) = (classes.elem_count(), x.dims().last().copied().unwrap_or(1));
        let y = zeros(rows, dtype, x.device(), name)?;
        if rows > 0 {
            let (xa, ta, ya) = (addr(&x)?, addr(&classes)?, addr(&y)?);
            let args = [
                Arg::I64(rows as i64),
                Arg::I64(c as i64),
                p(&xa),
                p(&ta),
                Arg::I64(t.ignore),
                p(&ya),
            ];
            launch(
                x.device(),
                kernel("gather_rows", dtype),
                Grid::elementwise(rows, BLOCK as u32),
                &args,
            )?;
        }
        Ok(y)
    }

    fn scatter_rows(
        &self,
        name: &'static str,
        g: &Tensor,
        t: Targets<'_>,
        c: usize,
    ) -> Result<Tensor> {
        let dtype = check(name, g, &ALL_FLOATS)?;
        let g = g.dense().op(name)?;
        let classes = dense(name, t.classes, DType::I64)?;
        let rows = classes.elem_count();
        let y = zeros((rows, c), dtype, g.device(), name)?;
        if rows > 0 && c > 0 {
            let (ga, ta, ya) = (addr(&g)?, addr(&classes)?, addr(&y)?);
            let args = [
                Arg::I64(rows as i64),
                Arg::I64(c as i64),
                p(&ga),
                p(&ta),
                Arg::I64(t.ignore),
                p(&ya),
            ];
            launch(
                g.device(),
                kernel("scatter_rows", dtype),
                Grid::elementwise(rows, BLOCK as u32),
                &args,
            )?;
        }
        Ok(y)
    }

    fn embedding(
        &self,
        name: &'static str,
        w: &Tensor,
        ids: &Tensor,
        zero_index: Option<i64>,
    ) -> Result<Tensor> {
        let dtype = check(name, w, &ALL_FLOATS)?;
        let w = w.dense().op(name)?;
        let ids = dense(name, ids, DType::I64)?;
        let (len, d) = (ids.elem_count(), w.dims().last().copied().unwrap_or(1));
        let y = zeros((len, d), dtype, w.device(), name)?;
        if len > 0 && d > 0 {
            let (wa, ia, ya) = (addr(&w)?, addr(&ids)?, addr(&y)?);
            let args = [
                Arg::I64(len as i64),
                Arg::I64(d as i64),
                p(&wa),
                p(&ia),
                Arg::I32(i32::from(zero_index.is_some())),
                Arg::I64(zero_index.unwrap_or(0)),
                p(&ya),
            ];
            launch(
                w.device(),
                kernel("embedding", dtype),
                rows_of(len, d),
                &args,
            )?;
        }
        Ok(y)
    }

    fn embedding_backward(
        &self,
        name: &'static str,
        g: &Tensor,
        ids: &Tensor,
        v: usize,
        padding: Option<i64>,
    ) -> Result<Tensor> {
        let dtype = check(name, g, &ALL_FLOATS)?;
        let g = g.dense().op(name)?;
        let ids = dense(name, ids, DType::I64)?;
        let (len, d) = (ids.elem_count(), g.dims().last().copied().unwrap_or(1));
        let acc_dtype = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let acc = zeros((v, d), acc_dtype, g.device(), name)?;
        if len > 0 && d > 0 {
            let (ga, ia, aa) = (addr(&g)?, addr(&ids)?, addr(&acc)?);
            let args = [
                Arg::I64(len as i64),
                Arg::I64(d as i64),
                p(&ga),
                p(&ia),
                Arg::I32(i32::from(padding.is_some())),
                Arg::I64(padding.unwrap_or(0)),
                p(&aa),
            ];
            launch(
                g.device(),
                kernel("embedding_backward", dtype),
                rows_of(len, d),
                &args,
            )?;
        }
        acc.cast(dtype).op(name)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{assert_close, assert_same_bits, sample, tolerance};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::nn::{Affine, NnOps, Targets};

    /// (rows, n): rows of 1, 31, 33, 1000 and 5000 elements, one row, many rows, none.
    const ROWS: &[(usize, usize)] = &[
        (1, 1),
        (7, 31),
        (5, 33),
        (3, 1000),
        (2, 5000),
        (300, 16),
        (1, 70_000),
        (0, 8),
        (2000, 3),
    ];

    /// Normalised values are O(1) whatever the row's length: (rtol, atol) for them.
    fn normalised(dtype: DType) -> (f64, f64) {
        match dtype {
            DType::F64 => (1e-11, 1e-11),
            _ => (2e-5, 2e-5),
        }
    }

    fn ids(len: usize, v: usize, seed: u64) -> Tensor {
        sample(&[len], DType::I64, seed, 0.0, v as f64)
    }

    #[test]
    fn layer_norm_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(rows, n)) in ROWS.iter().enumerate() {
                let x = sample(&[rows, n], dtype, i as u64, -3.0, 5.0);
                let w = sample(&[n], dtype, 100 + i as u64, 0.5, 1.5);
                let b = sample(&[n], dtype, 200 + i as u64, -1.0, 1.0);
                for (wo, bo) in [
                    (None, None),
                    (Some(&w), None),
                    (None, Some(&b)),
                    (Some(&w), Some(&b)),
                ] {
                    let affine = Affine {
                        weight: wo,
                        bias: bo,
                    };
                    let what = format!(
                        "layer_norm {dtype:?} ({rows}, {n}) w {} b {}",
                        wo.is_some(),
                        bo.is_some()
                    );
                    let got = Cuda.layer_norm("layer_norm", &x, affine, n, 1e-5).unwrap();
                    let want = Cpu.layer_norm("layer_norm", &x, affine, n, 1e-5).unwrap();
                    let (rtol, atol) = normalised(dtype);
                    assert_close(&what, &got.0, &want.0, rtol, atol);
                    assert_close(&what, &got.1, &want.1, rtol, atol);
                    assert_close(&what, &got.2, &want.2, rtol, atol);
                }
            }
        }
    }

    #[test]
    fn layer_norm_backward_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(rows, n)) in ROWS.iter().enumerate() {
                let x = sample(&[rows, n], dtype, i as u64, -3.0, 5.0);
                let g = sample(&[rows, n], dtype, 50 + i as u64, -1.0, 1.0);
                let w = sample(&[n], dtype, 100 + i as u64, 0.5, 1.5);
                let (_, mu, rs) = Cpu
                    .layer_norm("layer_norm", &x, Affine::default(), n, 1e-5)
                    .unwrap();
                for wo in [None, Some(&w)] {
                    for params in [false, true] {
                        let what = format!(
                            "layer_norm_backward {dtype:?} ({rows}, {n}) w {} params {params}",
                            wo.is_some()
                        );
                        let run = |be: &dyn NnOps| {
                            be.layer_norm_backward("layer_norm", &g, &x, (&mu, &rs), wo, n, params)
                                .unwrap()
                        };
                        let (gx, sums) = run(&Cuda);
                        let (gx_c, sums_c) = run(&Cpu);
                        let (rtol, atol) = normalised(dtype);
                        assert_close(&what, &gx, &gx_c, rtol, atol);
                        assert_eq!(sums.is_some(), sums_c.is_some(), "{what}");
                        if let (Some((dw, db)), Some((dw_c, db_c))) = (sums, sums_c) {
                            let (rtol, atol) = tolerance(dtype, rows);
                            assert_close(&what, &dw, &dw_c, rtol, atol);
                            assert_close(&what, &db, &db_c, rtol, atol);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn nll_rows_gather_and_scatter() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(rows, c)) in [(1usize, 1usize), (33, 5), (1000, 31), (0, 4), (7, 1000)]
                .iter()
                .enumerate()
            {
                let x = sample(&[rows, c], dtype, i as u64, -2.0, 2.0);
                let g = sample(&[rows], dtype, 10 + i as u64, -2.0, 2.0);
                let mut t = ids(rows, c, 20 + i as u64).to_vec1::<i64>().unwrap();
                // Every third row is ignored.
                t.iter_mut().step_by(3).for_each(|v| *v = -100);
                let t = Tensor::from_vec(t, rows, &Device::Cpu).unwrap();
                let targets = Targets {
                    classes: &t,
                    ignore: -100,
                };
                let what = format!("nll {dtype:?} ({rows}, {c})");
                let a = Cuda.gather_rows("nll_loss", &x, targets).unwrap();
                assert_same_bits(
                    &what,
                    &a,
                    &Cpu.gather_rows("nll_loss", &x, targets).unwrap(),
                );
                let a = Cuda.scatter_rows("nll_loss", &g, targets, c).unwrap();
                assert_same_bits(
                    &what,
                    &a,
                    &Cpu.scatter_rows("nll_loss", &g, targets, c).unwrap(),
                );
            }
        }
        // A strided input is read densely.
        let x = sample(&[6, 9], DType::F32, 1, -1.0, 1.0).t().unwrap();
        let t = ids(9, 6, 2);
        let targets = Targets {
            classes: &t,
            ignore: -100,
        };
        let a = Cuda.gather_rows("nll_loss", &x, targets).unwrap();
        let b = Cpu
            .gather_rows("nll_loss", &x.contiguous().unwrap(), targets)
            .unwrap();
        assert_same_bits("nll strided", &a, &b);
    }

    #[test]
    fn embedding_and_its_backward() {
        for dtype in [DType::F32, DType::F64] {
            for (i, &(len, v, d)) in [
                (1usize, 1usize, 1usize),
                (33, 5, 3),
                (1000, 31, 33),
                (0, 4, 8),
                (50, 1000, 300),
            ]
            .iter()
            .enumerate()
            {
                let w = sample(&[v, d], dtype, i as u64, -2.0, 2.0);
                let g = sample(&[len, d], dtype, 10 + i as u64, -2.0, 2.0);
                let t = ids(len, v, 20 + i as u64);
                for skip in [None, Some(0i64), Some(v as i64 - 1)] {
                    let what = format!("embedding {dtype:?} ({len}, {v}, {d}) skip {skip:?}");
                    let a = Cuda.embedding("embedding", &w, &t, skip).unwrap();
                    assert_same_bits(
                        &what,
                        &a,
                        &Cpu.embedding("embedding", &w, &t, skip).unwrap(),
                    );
                    let a = Cuda
                        .embedding_backward("embedding", &g, &t, v, skip)
                        .unwrap();
                    let b = Cpu
                        .embedding_backward("embedding", &g, &t, v, skip)
                        .unwrap();
                    let (rtol, atol) = tolerance(dtype, len);
                    assert_close(&what, &a, &b, rtol, atol);
                }
            }
        }
    }

    #[test]
    fn embedding_in_16_bit_floats() {
        // The CPU kernels take f32/f64 only: compare with them in f32, then rounded.
        let (len, v, d) = (500, 7, 33);
        let w = sample(&[v, d], DType::F32, 1, -2.0, 2.0);
        let g = sample(&[len, d], DType::F32, 2, -2.0, 2.0);
        let t = ids(len, v, 3);
        for dtype in [DType::F16, DType::BF16] {
            let (wh, gh) = (w.to_dtype(dtype).unwrap(), g.to_dtype(dtype).unwrap());
            let a = Cuda.embedding("embedding", &wh, &t, Some(2)).unwrap();
            let b = Cpu
                .embedding("embedding", &wh.to_dtype(DType::F32).unwrap(), &t, Some(2))
                .unwrap();
            assert_same_bits("embedding 16-bit", &a.to_dtype(DType::F32).unwrap(), &b);
            let a = Cuda
                .embedding_backward("embedding", &gh, &t, v, Some(2))
                .unwrap();
            assert_eq!(a.dtype(), dtype);
            let b = Cpu
                .embedding_backward(
                    "embedding",
                    &gh.to_dtype(DType::F32).unwrap(),
                    &t,
                    v,
                    Some(2),
                )
                .unwrap();
            // One rounding of an f32 sum: within half an ulp of the 16-bit type.
            assert_close(
                "embedding_backward 16-bit",
                &a.to_dtype(DType::F32).unwrap(),
                &b,
                1e-2,
                1e-5,
            );
            let x = sample(&[9, 5], dtype, 4, -2.0, 2.0);
            let c = ids(9, 5, 5);
            let targets = Targets {
                classes: &c,
                ignore: 1,
            };
            let a = Cuda.gather_rows("nll_loss", &x, targets).unwrap();
            let b = Cpu
                .gather_rows("nll_loss", &x.to_dtype(DType::F32).unwrap(), targets)
                .unwrap();
            assert_same_bits("gather 16-bit", &a.to_dtype(DType::F32).unwrap(), &b);
        }
    }
}
