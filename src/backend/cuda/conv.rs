//! Convolution on CUDA: im2col, col2im and a swap of the image and channel dims
//! (`kernels/conv.cu`) around candle's matmul, which is cuBLAS on a CUDA tensor, so the
//! products are the library's GEMMs and the kernels only move data. Any stride, padding
//! and dilation per axis, any groups; dense NCHW operands in f32 or f64 (the op hands half
//! types over as f32).
//!
//! The batch is taken a chunk of images at a time, so that one GEMM per chunk covers all
//! its images (a column buffer of K x (chunk · oh · ow) per group, all groups one batched
//! GEMM) while the columns stay within [`COLUMN_BUDGET`] (unless one image's do not). The
//! GEMM's output runs (channel, image, position); `swap_outer` moves it into the NCHW
//! output, adding the bias on the way, and moves gradients the other way.
//!
//! - forward: `y_g = W_g · cols_g`;
//! - input gradient: `cols_g = W_g^T · g_g`, then col2im, a gather (each input element
//!   sums the column entries that read it): deterministic, no atomics;
//! - weight gradient: `dw_g = sum over chunks of g_g · cols_g^T`.
//!
//! A 1x1 convolution with stride 1 and no padding reads its input as its columns where a
//! chunk is one image (as the CPU kernels do); with several images the columns must be
//! rearranged anyway, which is what im2col then does.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::conv::{ConvGeometry, ConvOps};
use crate::error::{CandleContext, Error, Result};

/// The most bytes of im2col columns one chunk of images makes.
pub const COLUMN_BUDGET: usize = 64 << 20;

const THREADS: u32 = 256;

fn kernel(name: &str, suffix: &str) -> Kernel {
    Kernel {
        module: &ptx::CONV,
        name: intern(format!("gs_{name}_{suffix}")),
    }
}

fn float_suffix(name: &str, t: &Tensor) -> Result<&'static str> {
    match t.dtype() {
        DType::F32 | DType::F64 => Ok(dtype_suffix(t.dtype())),
        other => Err(Error::dtype(format!(
            "{name}: expected float32 or float64 operands, got {other:?}"
        ))),
    }
}

/// `t` checked to hold `len` elements of `dtype`, dense.
fn operand(name: &'static str, what: &str, t: &Tensor, len: usize, dtype: DType) -> Result<Tensor> {
    if t.elem_count() != len {
        return Err(Error::shape(format!(
            "{name}: {what} has {} elements, expected {len}",
            t.elem_count()
        )));
    }
    if t.dtype() != dtype {
        return Err(Error::dtype(format!(
            "{name}: {what} is {:?}, expected {dtype:?}",
            t.dtype()
        )));
    }
    t.dense().op(name)
}

fn product(d: [usize; 4]) -> usize {
    d.iter().product()
}

/// Whether the columns of an image are its input itself (1x1 kernel, stride 1, no padding).
fn pointwise(geo: &ConvGeometry) -> bool {
    geo.kh == 1 && geo.kw == 1 && geo.stride == (1, 1) && geo.padding == (0, 0)
}

/// Images per chunk: as many as keep the columns (of all groups) within `budget` bytes,
/// at least one.
fn chunk(geo: &ConvGeometry, dtype: DType, budget: usize) -> usize {
    let per_image = geo.c_in * geo.kh * geo.kw * geo.l() * dtype.size_in_bytes();
    (budget / per_image.max(1)).clamp(1, geo.n.max(1))
}

/// The chunks of the batch: (first image, images).
fn chunks(n: usize, per: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..n).step_by(per).map(move |a| (a, per.min(n - a)))
}

/// The geometry of a chunk of `nc` images, in the order conv.cu's kernels take it.
fn geometry_args(geo: &ConvGeometry, nc: usize) -> Vec<Arg> {
    [
        nc,
        geo.c_in,
        geo.h,
        geo.w,
        geo.kh,
        geo.kw,
        geo.stride.0,
        geo.stride.1,
        geo.padding.0,
        geo.padding.1,
        geo.dilation.0,
        geo.dilation.1,
        geo.oh,
        geo.ow,
    ]
    .into_iter()
    .map(|v| Arg::I64(v as i64))
    .collect()
}

/// The columns (groups, K, nc · oh · ow) of images `n0..n0 + nc` of the dense input `x`.
fn columns(
    name: &'static str,
    x: &Tensor,
    geo: &ConvGeometry,
    (n0, nc): (usize, usize),
) -> Result<Tensor> {
    let (g, k, l) = (geo.groups, geo.k(), geo.l());
    if pointwise(geo) && nc == 1 {
        return x.narrow(0, n0, 1).op(name)?.reshape((g, k, l)).op(name);
    }
    let cols = crate::device::zeros((g, k, nc * l), x.dtype(), x.device()).op(name)?;
    let xs = x.narrow(0, n0, nc).op(name)?;
    let (xa, ca) = (addr(&xs)?, addr(&cols)?);
    let mut args = vec![Arg::Ptr(xa.addr), Arg::Ptr(ca.addr)];
    args.extend(geometry_args(geo, nc));
    let grid = Grid::elementwise(cols.elem_count(), THREADS);
    launch(
        x.device(),
        kernel("im2col", float_suffix(name, x)?),
        grid,
        &args,
    )?;
    drop(ca);
    Ok(cols)
}

/// Adds nothing: writes `dx` of images `n0..n0 + nc` (of the dense `dx`) from their columns.
fn col2im(
    name: &'static str,
    cols: &Tensor,
    dx: &Tensor,
    geo: &ConvGeometry,
    (n0, nc): (usize, usize),
) -> Result<()> {
    let dxs = dx.narrow(0, n0, nc).op(name)?;
    let (ca, da) = (addr(cols)?, addr(&dxs)?);
    let mut args = vec![Arg::Ptr(ca.addr), Arg::Ptr(da.addr)];
    args.extend(geometry_args(geo, nc));
    let grid = Grid::elementwise(dxs.elem_count(), THREADS);
    launch(
        dx.device(),
        kernel("col2im", float_suffix(name, dx)?),
        grid,
        &args,
    )
}

/// `dst (b, a, l) = src (a, b, l)` (+ `bias[a]`), `dst` a dense tensor or view of that
/// many elements.
fn swap_outer(
    name: &'static str,
    src: &Tensor,
    dst: &Tensor,
    (a, b, l): (usize, usize, usize),
    bias: Option<&Tensor>,
) -> Result<()> {
    let (sa, da) = (addr(src)?, addr(dst)?);
    let ba = bias.map(addr).transpose()?;
    let args = [
        Arg::Ptr(sa.addr),
        Arg::Ptr(da.addr),
        Arg::I64(a as i64),
        Arg::I64(b as i64),
        Arg::I64(l as i64),
        Arg::Ptr(ba.as_ref().map_or(0, |p| p.addr)),
    ];
    let grid = Grid::elementwise(a * b * l, THREADS);
    launch(
        dst.device(),
        kernel("swap_outer", float_suffix(name, dst)?),
        grid,
        &args,
    )
}

/// A chunk of the dense gradient `g` (n, c_out, oh, ow) as (groups, c_out / groups,
/// nc · oh · ow), the right operand of the chunk's GEMMs.
fn grad_rows(
    name: &'static str,
    g: &Tensor,
    geo: &ConvGeometry,
    (n0, nc): (usize, usize),
) -> Result<Tensor> {
    let (groups, og, l) = (geo.groups, geo.cout_g(), geo.l());
    let gs = g.narrow(0, n0, nc).op(name)?;
    if nc == 1 {
        return gs.reshape((groups, og, l)).op(name);
    }
    let rows = crate::device::zeros((groups, og, nc * l), g.dtype(), g.device()).op(name)?;
    swap_outer(name, &gs, &rows, (nc, geo.c_out, l), None)?;
    Ok(rows)
}

fn forward(
    name: &'static str,
    x: &Tensor,
    w: &Tensor,
    bias: Option<&Tensor>,
    geo: &ConvGeometry,
    budget: usize,
) -> Result<Tensor> {
    let dtype = x.dtype();
    float_suffix(name, x)?;
    let x = operand(name, "input", x, product(geo.input_dims()), dtype)?;
    let w = operand(name, "weight", w, product(geo.weight_dims()), dtype)?;
    let bias = bias
        .map(|b| operand(name, "bias", b, geo.c_out, dtype))
        .transpose()?;
    let dims = geo.output_dims();
    let y = crate::device::zeros(&dims[..], dtype, x.device()).op(name)?;
    if y.elem_count() == 0 {
        return Ok(y);
    }
    let (groups, og, k, l) = (geo.groups, geo.cout_g(), geo.k(), geo.l());
    if k == 0 {
        // No input channels: every sum is empty, y is the bias.
        return match bias {
            Some(b) => y
                .broadcast_add(&b.reshape((1, geo.c_out, 1, 1)).op(name)?)
                .op(name),
            None => Ok(y),
        };
    }
    let wg = w.reshape((groups, og, k)).op(name)?;
    for part in chunks(geo.n, chunk(geo, dtype, budget)) {
        let cols = columns(name, &x, geo, part)?;
        let rows = wg.matmul(&cols).op(name)?; // (c_out, nc, l)
        let ys = y.narrow(0, part.0, part.1).op(name)?;
        swap_outer(name, &rows, &ys, (geo.c_out, part.1, l), bias.as_ref())?;
    }
    Ok(y)
}

fn input_grad(
    name: &'static str,
    g: &Tensor,
    w: &Tensor,
    geo: &ConvGeometry,
    budget: usize,
) -> Result<Tensor> {
    let dtype = g.dtype();
    float_suffix(name, g)?;
    let g = operand(name, "grad_output", g, product(geo.output_dims()), dtype)?;
    let w = operand(name, "weight", w, product(geo.weight_dims()), dtype)?;
    let dx = crate::device::zeros(&geo.input_dims()[..], dtype, g.device()).op(name)?;
    let (groups, og, k, l) = (geo.groups, geo.cout_g(), geo.k(), geo.l());
    if dx.elem_count() == 0 || og * k * l == 0 {
        return Ok(dx);
    }
    let wt = w
        .reshape((groups, og, k))
        .and_then(|w| w.transpose(1, 2))
        .op(name)?;
    for part in chunks(geo.n, chunk(geo, dtype, budget)) {
        let cols = wt.matmul(&grad_rows(name, &g, geo, part)?).op(name)?;
        col2im(name, &cols, &dx, geo, part)?;
    }
    Ok(dx)
}

fn weight_grad(
    name: &'static str,
    g: &Tensor,
    x: &Tensor,
    geo: &ConvGeometry,
    budget: usize,
) -> Result<Tensor> {
    let dtype = g.dtype();
    float_suffix(name, g)?;
    let g = operand(name, "grad_output", g, product(geo.output_dims()), dtype)?;
    let x = operand(name, "input", x, product(geo.input_dims()), dtype)?;
    let dims = geo.weight_dims();
    if product(dims) == 0 || geo.n * geo.l() == 0 {
        return crate::device::zeros(&dims[..], dtype, g.device()).op(name);
    }
    let mut dw: Option<Tensor> = None;
    for part in chunks(geo.n, chunk(geo, dtype, budget)) {
        let cols = columns(name, &x, geo, part)?;
        let cols_t = cols.transpose(1, 2).op(name)?;
        let term = grad_rows(name, &g, geo, part)?.matmul(&cols_t).op(name)?;
        dw = Some(match dw {
            None => term,
            Some(sum) => (sum + term).op(name)?,
        });
    }
    match dw {
        Some(dw) => dw.reshape(&dims[..]).op(name),
        None => crate::device::zeros(&dims[..], dtype, g.device()).op(name),
    }
}

impl ConvOps for Cuda {
    /// See `ConvOps::conv2d`.
    fn conv2d(
        &self,
        name: &'static str,
        x: &Tensor,
        w: &Tensor,
        bias: Option<&Tensor>,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        forward(name, x, w, bias, geo, COLUMN_BUDGET)
    }

    /// See `ConvOps::conv2d_input_grad`.
    fn conv2d_input_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        w: &Tensor,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        input_grad(name, g, w, geo, COLUMN_BUDGET)
    }

    /// See `ConvOps::conv2d_weight_grad`.
    fn conv2d_weight_grad(
        &self,
        name: &'static str,
        g: &Tensor,
        x: &Tensor,
        geo: &ConvGeometry,
    ) -> Result<Tensor> {
        weight_grad(name, g, x, geo, COLUMN_BUDGET)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Tensor};

    use super::super::testing::{assert_close, sample, tolerance};
    use super::{forward, input_grad, weight_grad, Cuda, COLUMN_BUDGET};
    use crate::backend::conv::{ConvGeometry, ConvOps};
    use crate::backend::cpu::Cpu;

    /// A convolution's geometry with PyTorch's output size.
    #[allow(clippy::too_many_arguments)]
    fn geo(
        n: usize,
        c_in: usize,
        (h, w): (usize, usize),
        c_out: usize,
        (kh, kw): (usize, usize),
        stride: (usize, usize),
        padding: (usize, usize),
        dilation: (usize, usize),
        groups: usize,
    ) -> ConvGeometry {
        let out = |i: usize, p: usize, d: usize, k: usize, s: usize| {
            (i + 2 * p - d * (k - 1) - 1) / s + 1
        };
        ConvGeometry {
            n,
            c_in,
            h,
            w,
            c_out,
            kh,
            kw,
            stride,
            padding,
            dilation,
            groups,
            oh: out(h, padding.0, dilation.0, kh, stride.0),
            ow: out(w, padding.1, dilation.1, kw, stride.1),
        }
    }

    fn geometries() -> Vec<(&'static str, ConvGeometry)> {
        vec![
            (
                "plain 3x3",
                geo(2, 3, (7, 6), 4, (3, 3), (1, 1), (0, 0), (1, 1), 1),
            ),
            (
                "padded 3x3",
                geo(3, 2, (5, 5), 3, (3, 3), (1, 1), (1, 1), (1, 1), 1),
            ),
            (
                "asymmetric stride, padding, dilation",
                geo(2, 3, (9, 11), 5, (3, 2), (2, 3), (1, 2), (2, 1), 1),
            ),
            (
                "stride leaving rows out",
                geo(2, 2, (8, 10), 3, (2, 3), (3, 2), (0, 1), (1, 2), 1),
            ),
            (
                "groups 2",
                geo(3, 4, (6, 7), 6, (3, 3), (2, 1), (1, 0), (1, 2), 2),
            ),
            (
                "depthwise",
                geo(2, 5, (6, 6), 5, (3, 3), (1, 1), (1, 1), (1, 1), 5),
            ),
            (
                "depthwise multiplier 2",
                geo(2, 3, (5, 7), 6, (2, 3), (1, 2), (0, 1), (1, 1), 3),
            ),
            (
                "kernel over the input, padded",
                geo(2, 2, (3, 2), 3, (5, 4), (1, 1), (2, 2), (1, 1), 1),
            ),
            (
                "1x1",
                geo(3, 5, (4, 5), 7, (1, 1), (1, 1), (0, 0), (1, 1), 1),
            ),
            (
                "1x1 groups",
                geo(2, 6, (3, 3), 4, (1, 1), (1, 1), (0, 0), (1, 1), 2),
            ),
            (
                "1x1 strided",
                geo(2, 3, (5, 6), 2, (1, 1), (2, 2), (0, 0), (1, 1), 1),
            ),
            (
                "1x1 padded",
                geo(2, 3, (3, 3), 2, (1, 1), (1, 1), (1, 0), (1, 1), 1),
            ),
            (
                "1-d",
                geo(3, 4, (1, 17), 6, (1, 5), (1, 2), (0, 2), (1, 2), 2),
            ),
            (
                "1-d pointwise",
                geo(2, 3, (1, 9), 4, (1, 1), (1, 1), (0, 0), (1, 1), 1),
            ),
            (
                "odd sizes",
                geo(5, 3, (13, 9), 7, (4, 3), (3, 2), (2, 1), (1, 3), 1),
            ),
            (
                "one pixel",
                geo(1, 1, (1, 1), 1, (1, 1), (1, 1), (0, 0), (1, 1), 1),
            ),
            (
                "empty batch",
                geo(0, 3, (5, 5), 4, (3, 3), (1, 1), (1, 1), (1, 1), 1),
            ),
            (
                "no input channels",
                geo(2, 0, (4, 4), 3, (3, 3), (1, 1), (0, 0), (1, 1), 1),
            ),
            (
                "no output channels",
                geo(2, 3, (4, 4), 0, (3, 3), (1, 1), (0, 0), (1, 1), 1),
            ),
        ]
    }

    /// Budgets: the default, one image per chunk, and two (a ragged last chunk for odd n).
    fn budgets(g: &ConvGeometry, dtype: DType) -> [usize; 3] {
        let per_image = g.c_in * g.kh * g.kw * g.l() * dtype.size_in_bytes();
        [COLUMN_BUDGET, 1, 2 * per_image.max(1)]
    }

    /// (rtol, atol) for sums of `terms` products of values in [-1, 1] (plus a bias): the
    /// rounding grows with the terms' magnitudes, not the result's, which cancels.
    fn tol(dtype: DType, terms: usize) -> (f64, f64) {
        let eps = match dtype {
            DType::F64 => f64::EPSILON,
            _ => f32::EPSILON as f64,
        };
        (tolerance(dtype, terms).0, 2.0 * eps * (terms + 1) as f64)
    }

    fn operands(g: &ConvGeometry, dtype: DType, seed: u64) -> (Tensor, Tensor, Tensor, Tensor) {
        let x = sample(&g.input_dims(), dtype, seed, -1.0, 1.0);
        let w = sample(&g.weight_dims(), dtype, seed + 1, -1.0, 1.0);
        let b = sample(&[g.c_out], dtype, seed + 2, -1.0, 1.0);
        let dy = sample(&g.output_dims(), dtype, seed + 3, -1.0, 1.0);
        (x, w, b, dy)
    }

    #[test]
    fn forward_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, (what, g)) in geometries().into_iter().enumerate() {
                let (x, w, b, _) = operands(&g, dtype, 10 * i as u64);
                let (rtol, atol) = tol(dtype, g.k());
                for bias in [None, Some(&b)] {
                    let want = Cpu.conv2d("conv2d", &x, &w, bias, &g).unwrap();
                    for budget in budgets(&g, dtype) {
                        let got = forward("conv2d", &x, &w, bias, &g, budget).unwrap();
                        let case =
                            format!("{what} {dtype:?} bias {} budget {budget}", bias.is_some());
                        assert_close(&case, &got, &want, rtol, atol);
                    }
                    let got = Cuda.conv2d("conv2d", &x, &w, bias, &g).unwrap();
                    assert_close(what, &got, &want, rtol, atol);
                }
            }
        }
    }

    #[test]
    fn input_grad_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, (what, g)) in geometries().into_iter().enumerate() {
                let (_, w, _, dy) = operands(&g, dtype, 100 + 10 * i as u64);
                let terms = g.cout_g() * g.kh * g.kw;
                let (rtol, atol) = tol(dtype, terms);
                let want = Cpu
                    .conv2d_input_grad("conv_transpose2d", &dy, &w, &g)
                    .unwrap();
                for budget in budgets(&g, dtype) {
                    let got = input_grad("conv_transpose2d", &dy, &w, &g, budget).unwrap();
                    assert_close(
                        &format!("{what} {dtype:?} budget {budget}"),
                        &got,
                        &want,
                        rtol,
                        atol,
                    );
                }
                let got = Cuda
                    .conv2d_input_grad("conv_transpose2d", &dy, &w, &g)
                    .unwrap();
                assert_close(what, &got, &want, rtol, atol);
            }
        }
    }

    #[test]
    fn weight_grad_matches_the_cpu() {
        for dtype in [DType::F32, DType::F64] {
            for (i, (what, g)) in geometries().into_iter().enumerate() {
                let (x, _, _, dy) = operands(&g, dtype, 200 + 10 * i as u64);
                let (rtol, atol) = tol(dtype, g.n * g.l());
                let want = Cpu
                    .conv2d_weight_grad("conv2d_weight_grad", &dy, &x, &g)
                    .unwrap();
                for budget in budgets(&g, dtype) {
                    let got = weight_grad("conv2d_weight_grad", &dy, &x, &g, budget).unwrap();
                    assert_close(
                        &format!("{what} {dtype:?} budget {budget}"),
                        &got,
                        &want,
                        rtol,
                        atol,
                    );
                }
                let got = Cuda
                    .conv2d_weight_grad("conv2d_weight_grad", &dy, &x, &g)
                    .unwrap();
                assert_close(what, &got, &want, rtol, atol);
            }
        }
    }

    /// A transposed convolution's geometry can leave input rows no output reads (output
    /// padding): their gradient is zero.
    #[test]
    fn input_grad_with_unread_rows_matches_the_cpu() {
        let mut g = geo(2, 4, (7, 8), 6, (3, 2), (2, 3), (1, 0), (1, 1), 2);
        g.h += 1;
        g.w += 2;
        for dtype in [DType::F32, DType::F64] {
            let (_, w, _, dy) = operands(&g, dtype, 7);
            let (rtol, atol) = tol(dtype, g.cout_g() * g.kh * g.kw);
            let want = Cpu
                .conv2d_input_grad("conv_transpose2d", &dy, &w, &g)
                .unwrap();
            let got = Cuda
                .conv2d_input_grad("conv_transpose2d", &dy, &w, &g)
                .unwrap();
            assert_close("output padding", &got, &want, rtol, atol);
        }
    }

    #[test]
    fn other_dtypes_are_refused() {
        let g = geo(1, 1, (3, 3), 1, (1, 1), (1, 1), (0, 0), (1, 1), 1);
        let x = sample(&g.input_dims(), DType::F16, 1, -1.0, 1.0);
        let w = sample(&g.weight_dims(), DType::F16, 2, -1.0, 1.0);
        assert!(Cuda.conv2d("conv2d", &x, &w, None, &g).is_err());
    }
}
