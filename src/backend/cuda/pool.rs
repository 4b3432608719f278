//! Pooling and resampling on CUDA (`kernels/pool.cu`), on planes (P, H, W) in the compute
//! dtypes the CPU kernels take (f32, f64): one thread per output element, and the adjoints
//! as gathers (each input element sums the outputs that read it, in the CPU kernels'
//! order), so every result is deterministic and needs no atomics.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::pool::{PoolOps, Taps, Window, WindowAxis};
use crate::error::{CandleContext, Error, Result};

const THREADS: u32 = 256;

fn kernel(name: String) -> Kernel {
    Kernel {
        module: &ptx::POOL,
        name: intern(name),
    }
}

fn float_suffix(name: &str, t: &Tensor) -> Result<&'static str> {
    match t.dtype() {
        DType::F32 | DType::F64 => Ok(dtype_suffix(t.dtype())),
        other => Err(Error::dtype(format!(
            "{name}: expected float32 or float64 planes, got {other:?}"
        ))),
    }
}

/// The suffix of an argmax dtype: u8, or i32 for windows of more than 256 positions.
fn arg_suffix(name: &str, argmax: &Tensor) -> Result<&'static str> {
    match argmax.dtype() {
        DType::U8 | DType::I32 => Ok(dtype_suffix(argmax.dtype())),
        other => Err(Error::dtype(format!(
            "{name}: expected the window positions as uint8 or int32, got {other:?}"
        ))),
    }
}

/// A window's parameters, in the order the kernels take them.
fn window_args(w: &Window) -> Vec<Arg> {
    let axis = |a: &WindowAxis| {
        [
            Arg::I64(a.input as i64),
            Arg::I64(a.output as i64),
            Arg::I64(a.kernel as i64),
            Arg::I64(a.stride as i64),
            Arg::I64(a.padding as i64),
            Arg::I64(a.dilation as i64),
            Arg::I32(i32::from(a.adaptive)),
        ]
    };
    axis(&w.h).into_iter().chain(axis(&w.w)).collect()
}

/// A dense view of `t` with at least `n` elements (what the kernel will index).
fn dense(name: &'static str, t: &Tensor, n: usize) -> Result<Tensor> {
    if t.elem_count() < n {
        return Err(Error::shape(format!(
            "{name}: expected at least {n} elements, got a tensor of shape {:?}",
            t.dims()
        )));
    }
    t.dense().op(name)
}

/// Planes of output positions, from the argmax tensor (P, OH, OW).
fn planes_of(argmax: &Tensor, w: &Window) -> usize {
    argmax.elem_count() / (w.h.output * w.w.output).max(1)
}

/// One axis of a separable map as compressed rows: `off[o]..off[o + 1]` index `idx` (input
/// positions) and `weights`.
struct Csr {
    off: Vec<i64>,
    idx: Vec<i64>,
    weights: Vec<f64>,
}

impl Csr {
    fn forward(t: &Taps) -> Csr {
        let mut idx = Vec::with_capacity(t.weights.len());
        for o in 0..t.output() {
            let (start, w) = t.tap(o);
            idx.extend((0..w.len()).map(|k| (start + k) as i64));
        }
        Csr {
            off: t.offset.iter().map(|&o| o as i64).collect(),
            idx,
            weights: t.weights.clone(),
        }
    }

    /// The transposed taps: for each input position, the outputs reading it, ascending.
    fn adjoint(t: &Taps) -> Csr {
        let mut count = vec![0usize; t.input + 1];
        for o in 0..t.output() {
            let (start, w) = t.tap(o);
            for c in &mut count[start + 1..start + 1 + w.len()] {
                *c += 1;
            }
        }
        for a in 0..t.input {
            count[a + 1] += count[a];
        }
        let mut next = count.clone();
        let (mut idx, mut weights) = (vec![0i64; count[t.input]], vec![0.0; count[t.input]]);
        for o in 0..t.output() {
            let (start, w) = t.tap(o);
            for (k, &wk) in w.iter().enumerate() {
                let slot = &mut next[start + k];
                idx[*slot] = o as i64;
                weights[*slot] = wk;
                *slot += 1;
            }
        }
        Csr {
            off: count.into_iter().map(|c| c as i64).collect(),
            idx,
            weights,
        }
    }
}

/// `resample` or its adjoint: the planes of `x` (P, h_in, w_in) mapped by `rows` x `cols`.
fn resample(
    name: &'static str,
    x: &Tensor,
    rows: &Taps,
    cols: &Taps,
    adjoint: bool,
) -> Result<Tensor> {
    let suffix = float_suffix(name, x)?;
    let (inp, outp) = match adjoint {
        false => ((rows.input, cols.input), (rows.output(), cols.output())),
        true => ((rows.output(), cols.output()), (rows.input, cols.input)),
    };
    let planes = x.elem_count().checked_div(inp.0 * inp.1).unwrap_or(0);
    let out = crate::device::zeros((planes, outp.0, outp.1), x.dtype(), x.device()).op(name)?;
    let n = planes * outp.0 * outp.1;
    if n == 0 {
        return Ok(out);
    }
    let x = dense(name, x, planes * inp.0 * inp.1)?;
    let (r, c) = match adjoint {
        false => (Csr::forward(rows), Csr::forward(cols)),
        true => (Csr::adjoint(rows), Csr::adjoint(cols)),
    };
    // One int64 table [r.off, c.off, c.idx, r.idx] and one f64 table [r.weights, c.weights].
    let c_off_at = r.off.len();
    let c_idx_at = c_off_at + c.off.len();
    let r_idx_at = c_idx_at + c.idx.len();
    let taps: Vec<i64> = [r.off, c.off, c.idx, r.idx].concat();
    let c_w_at = r.weights.len();
    let mut weights = [r.weights, c.weights].concat();
    if weights.is_empty() {
        weights.push(0.0); // candle makes no empty device buffers
    }
    let (nt, nw) = (taps.len(), weights.len());
    let taps = crate::device::from_vec(taps, nt, x.device()).op(name)?;
    let weights = crate::device::from_vec(weights, nw, x.device()).op(name)?;
    let (xa, oa, ta, wa) = (addr(&x)?, addr(&out)?, addr(&taps)?, addr(&weights)?);
    let args = [
        Arg::I64(planes as i64),
        Arg::Ptr(xa.addr),
        Arg::Ptr(oa.addr),
        Arg::I64(inp.0 as i64),
        Arg::I64(inp.1 as i64),
        Arg::I64(outp.0 as i64),
        Arg::I64(outp.1 as i64),
        Arg::Ptr(ta.addr),
        Arg::Ptr(wa.addr),
        Arg::I64(c_off_at as i64),
        Arg::I64(c_idx_at as i64),
        Arg::I64(r_idx_at as i64),
        Arg::I64(c_w_at as i64),
        Arg::I32(i32::from(adjoint)),
    ];
    let k = kernel(format!("gs_resample_{suffix}"));
    launch(x.device(), k, Grid::elementwise(n, THREADS), &args)?;
    drop(oa);
    Ok(out)
}

impl PoolOps for Cuda {
    /// See `PoolOps::max_pool`.
    fn max_pool(&self, name: &'static str, x: &Tensor, w: Window) -> Result<(Tensor, Tensor)> {
        let suffix = float_suffix(name, x)?;
        let (ip, op) = (w.h.input * w.w.input, w.h.output * w.w.output);
        let planes = x.elem_count().checked_div(ip).unwrap_or(0);
        let arg_dtype = if w.h.kernel * w.w.kernel <= 256 {
            DType::U8
        } else {
            DType::I32
        };
        let dims = (planes, w.h.output, w.w.output);
        let vals = crate::device::zeros(dims, x.dtype(), x.device()).op(name)?;
        let args = crate::device::zeros(dims, arg_dtype, x.device()).op(name)?;
        let n = planes * op;
        if n > 0 {
            let x = dense(name, x, planes * ip)?;
            let (xa, va, aa) = (addr(&x)?, addr(&vals)?, addr(&args)?);
            let mut a = vec![
                Arg::I64(planes as i64),
                Arg::Ptr(xa.addr),
                Arg::Ptr(va.addr),
                Arg::Ptr(aa.addr),
            ];
            a.extend(window_args(&w));
            let k = kernel(format!("gs_max_pool_{suffix}_{}", dtype_suffix(arg_dtype)));
            launch(x.device(), k, Grid::elementwise(n, THREADS), &a)?;
        }
        Ok((vals, args))
    }

    /// See `PoolOps::max_pool_scatter`: a gather per input element, deterministic.
    fn max_pool_scatter(
        &self,
        name: &'static str,
        g: &Tensor,
        argmax: &Tensor,
        w: Window,
    ) -> Result<Tensor> {
        let suffix = float_suffix(name, g)?;
        let arg = arg_suffix(name, argmax)?;
        let planes = planes_of(argmax, &w);
        let out =
            crate::device::zeros((planes, w.h.input, w.w.input), g.dtype(), g.device()).op(name)?;
        let n = planes * w.h.input * w.w.input;
        if n > 0 && w.h.output * w.w.output > 0 {
            let op = planes * w.h.output * w.w.output;
            let (g, argmax) = (dense(name, g, op)?, dense(name, argmax, op)?);
            let (ga, aa, oa) = (addr(&g)?, addr(&argmax)?, addr(&out)?);
            let mut a = vec![
                Arg::I64(planes as i64),
                Arg::Ptr(ga.addr),
                Arg::Ptr(aa.addr),
                Arg::Ptr(oa.addr),
            ];
            a.extend(window_args(&w));
            let k = kernel(format!("gs_max_pool_scatter_{suffix}_{arg}"));
            launch(g.device(), k, Grid::elementwise(n, THREADS), &a)?;
        }
        Ok(out)
    }

    /// See `PoolOps::max_pool_gather`.
    fn max_pool_gather(
        &self,
        name: &'static str,
        x: &Tensor,
        argmax: &Tensor,
        w: Window,
    ) -> Result<Tensor> {
        let suffix = float_suffix(name, x)?;
        let arg = arg_suffix(name, argmax)?;
        let planes = planes_of(argmax, &w);
        let out = crate::device::zeros((planes, w.h.output, w.w.output), x.dtype(), x.device())
            .op(name)?;
        let n = planes * w.h.output * w.w.output;
        if n > 0 {
            let x = dense(name, x, planes * w.h.input * w.w.input)?;
            let argmax = dense(name, argmax, n)?;
            let (xa, aa, oa) = (addr(&x)?, addr(&argmax)?, addr(&out)?);
            let mut a = vec![
                Arg::I64(planes as i64),
                Arg::Ptr(xa.addr),
                Arg::Ptr(aa.addr),
                Arg::Ptr(oa.addr),
            ];
            a.extend(window_args(&w));
            let k = kernel(format!("gs_max_pool_gather_{suffix}_{arg}"));
            launch(x.device(), k, Grid::elementwise(n, THREADS), &a)?;
        }
        Ok(out)
    }

    /// See `PoolOps::max_pool_indices`.
    fn max_pool_indices(&self, name: &'static str, argmax: &Tensor, w: Window) -> Result<Tensor> {
        let arg = arg_suffix(name, argmax)?;
        let planes = planes_of(argmax, &w);
        let dims = (planes, w.h.output, w.w.output);
        let out = crate::device::zeros(dims, DType::I64, argmax.device()).op(name)?;
        let n = planes * w.h.output * w.w.output;
        if n > 0 {
            let argmax = dense(name, argmax, n)?;
            let (aa, oa) = (addr(&argmax)?, addr(&out)?);
            let mut a = vec![Arg::I64(n as i64), Arg::Ptr(aa.addr), Arg::Ptr(oa.addr)];
            a.extend(window_args(&w));
            let k = kernel(format!("gs_max_pool_indices_{arg}"));
            launch(argmax.device(), k, Grid::elementwise(n, THREADS), &a)?;
        }
        Ok(out)
    }

    /// See `PoolOps::resample`.
    fn resample(&self, name: &'static str, x: &Tensor, rows: &Taps, cols: &Taps) -> Result<Tensor> {
        resample(name, x, rows, cols, false)
    }

    /// See `PoolOps::resample_adjoint`: the map with its taps transposed on the host (a
    /// gather per input element).
    fn resample_adjoint(
        &self,
        name: &'static str,
        g: &Tensor,
        rows: &Taps,
        cols: &Taps,
    ) -> Result<Tensor> {
        resample(name, g, rows, cols, true)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::super::testing::{same, tensor, uniform};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::pool::{PoolOps, Taps, Window, WindowAxis};

    /// A strided window axis with PyTorch's output size (ceil_mode included).
    fn axis(
        input: usize,
        kernel: usize,
        stride: usize,
        padding: usize,
        dilation: usize,
        ceil: bool,
    ) -> WindowAxis {
        let (i, k, s, p, d) = (
            input as i64,
            kernel as i64,
            stride as i64,
            padding as i64,
            dilation as i64,
        );
        let num = i + 2 * p - d * (k - 1) - 1 + if ceil { s - 1 } else { 0 };
        let mut out = num.div_euclid(s) + 1;
        if ceil && (out - 1) * s >= i + p {
            out -= 1;
        }
        WindowAxis {
            input,
            output: out.max(0) as usize,
            kernel,
            stride,
            padding,
            dilation,
            adaptive: false,
        }
    }

    fn windows() -> Vec<Window> {
        let one = axis(1, 1, 1, 0, 1, false);
        vec![
            // 1-d (H = 1)
            Window {
                h: one,
                w: axis(10, 3, 2, 1, 1, false),
            },
            Window {
                h: one,
                w: axis(11, 3, 2, 1, 2, true),
            },
            Window {
                h: one,
                w: axis(7, 2, 3, 1, 1, true),
            },
            // 2-d: plain, padded, dilated, ceil_mode overhanging the input
            Window {
                h: axis(6, 2, 2, 0, 1, false),
                w: axis(7, 2, 2, 0, 1, false),
            },
            Window {
                h: axis(7, 3, 2, 1, 1, true),
                w: axis(9, 3, 1, 1, 2, false),
            },
            Window {
                h: axis(5, 3, 3, 1, 1, true),
                w: axis(8, 2, 3, 1, 3, true),
            },
            Window {
                h: axis(9, 4, 1, 2, 1, false),
                w: axis(4, 3, 2, 0, 1, true),
            },
            // a window over 256 positions: int32 positions
            Window {
                h: axis(20, 17, 3, 2, 1, false),
                w: axis(19, 17, 2, 8, 1, true),
            },
            // adaptive, shrinking and growing
            Window {
                h: WindowAxis::adaptive(5, 3),
                w: WindowAxis::adaptive(2, 3),
            },
            Window {
                h: WindowAxis::adaptive(10, 4),
                w: WindowAxis::adaptive(7, 7),
            },
            Window {
                h: WindowAxis::adaptive(1, 1),
                w: WindowAxis::adaptive(13, 5),
            },
        ]
    }

    /// Planes with ties (values on a coarse grid), NaNs and infinities.
    fn planes(p: usize, w: &Window, seed: u64, dtype: DType) -> Tensor {
        let n = p * w.h.input * w.w.input;
        let v: Vec<f64> = uniform(n, seed, 0.0, 1.0)
            .into_iter()
            .enumerate()
            .map(|(i, u)| match i % 29 {
                7 => f64::NAN,
                11 => f64::NEG_INFINITY,
                13 if seed % 2 == 0 => f64::INFINITY,
                _ => (u * 8.0).floor() - 4.0,
            })
            .collect();
        crate::device::from_vec(v, (p, w.h.input, w.w.input), &Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .unwrap()
    }

    #[test]
    fn max_pool_matches_the_cpu_kernel() {
        for dtype in [DType::F32, DType::F64] {
            for (i, w) in windows().into_iter().enumerate() {
                for p in [0, 1, 3] {
                    let what = format!("{dtype:?} window {i} planes {p}");
                    let x = planes(p, &w, i as u64, dtype);
                    let (va, aa) = Cuda.max_pool("t", &x, w).unwrap();
                    let (vb, ab) = Cpu.max_pool("t", &x, w).unwrap();
                    same(&format!("max {what}"), &va, &vb);
                    assert_eq!(aa.dtype(), ab.dtype(), "{what}");
                    let wide = w.h.kernel * w.w.kernel > 256;
                    assert_eq!(aa.dtype() == DType::I32, wide, "{what}: position dtype");
                    same(&format!("argmax {what}"), &aa, &ab);

                    let ia = Cuda.max_pool_indices("t", &ab, w).unwrap();
                    let ib = Cpu.max_pool_indices("t", &ab, w).unwrap();
                    same(&format!("indices {what}"), &ia, &ib);

                    // The adjoint: integer-valued gradients would hide a wrong order, so
                    // take fractions.
                    let g = tensor(va.dims(), 100 + i as u64, -1.0, 1.0, dtype);
                    let sa = Cuda.max_pool_scatter("t", &g, &ab, w).unwrap();
                    let sb = Cpu.max_pool_scatter("t", &g, &ab, w).unwrap();
                    same(&format!("scatter {what}"), &sa, &sb);

                    let xx = tensor(x.dims(), 200 + i as u64, -1.0, 1.0, dtype);
                    let ga = Cuda.max_pool_gather("t", &xx, &ab, w).unwrap();
                    let gb = Cpu.max_pool_gather("t", &xx, &ab, w).unwrap();
                    same(&format!("gather {what}"), &ga, &gb);
                }
            }
        }
    }

    // Every window of a ceil_mode axis can start in the padding only at its left edge; a
    // window wholly in the padding (kernel < padding is refused by the op, so build it
    // directly) keeps -inf and position 0, and PyTorch's index of the first unpadded place.
    #[test]
    fn windows_in_the_padding() {
        let w = Window {
            h: axis(1, 1, 1, 0, 1, false),
            w: WindowAxis {
                input: 4,
                output: 3,
                kernel: 1,
                stride: 2,
                padding: 1,
                dilation: 1,
                adaptive: false,
            },
        };
        let x = tensor(&[2, 1, 4], 3, -1.0, 1.0, DType::F32);
        let (va, aa) = Cuda.max_pool("t", &x, w).unwrap();
        let (vb, ab) = Cpu.max_pool("t", &x, w).unwrap();
        same("values", &va, &vb);
        same("positions", &aa, &ab);
        let ia = Cuda.max_pool_indices("t", &aa, w).unwrap();
        let ib = Cpu.max_pool_indices("t", &ab, w).unwrap();
        same("indices", &ia, &ib);
        let g = tensor(va.dims(), 4, -1.0, 1.0, DType::F32);
        same(
            "scatter",
            &Cuda.max_pool_scatter("t", &g, &aa, w).unwrap(),
            &Cpu.max_pool_scatter("t", &g, &ab, w).unwrap(),
        );
    }

    /// Taps of `n` outputs over `input` positions: windows of 1..=4 from random starts,
    /// overlapping and out of order, with random weights.
    fn taps(input: usize, n: usize, seed: u64) -> Taps {
        let u = uniform(3 * n, seed, 0.0, 1.0);
        let mut t = Taps::new(input);
        for o in 0..n {
            let len = 1 + ((u[3 * o] * 4.0) as usize).min(input - 1).min(3);
            let start = ((u[3 * o + 1] * (input - len + 1) as f64) as usize).min(input - len);
            let w: Vec<f64> = (0..len)
                .map(|k| u[3 * o + 2] * (k as f64 + 0.37) - 0.2)
                .collect();
            t.push(start, &w);
        }
        t
    }

    /// Taps of an average pool of `kernel` with stride `stride` (PyTorch's divisor).
    fn average(input: usize, kernel: usize, stride: usize) -> Taps {
        let mut t = Taps::new(input);
        let mut o = 0;
        while o * stride + kernel <= input {
            t.push(o * stride, &vec![1.0 / kernel as f64; kernel]);
            o += 1;
        }
        t
    }

    #[test]
    fn resample_and_its_adjoint_match_the_cpu_kernel() {
        let cases = [
            (taps(1, 1, 1), taps(9, 5, 2)),
            (taps(6, 11, 3), taps(7, 3, 4)),
            (average(8, 2, 2), average(9, 3, 2)),
            (taps(33, 40, 5), taps(17, 70, 6)),
            (taps(5, 0, 7), taps(5, 3, 8)),
        ];
        for dtype in [DType::F32, DType::F64] {
            for (i, (rows, cols)) in cases.iter().enumerate() {
                for p in [0, 1, 4] {
                    let what = format!("{dtype:?} case {i} planes {p}");
                    let x = tensor(&[p, rows.input, cols.input], i as u64, -2.0, 2.0, dtype);
                    let a = Cuda.resample("t", &x, rows, cols).unwrap();
                    let b = Cpu.resample("t", &x, rows, cols).unwrap();
                    same(&format!("resample {what}"), &a, &b);
                    let g = tensor(
                        &[p, rows.output(), cols.output()],
                        50 + i as u64,
                        -2.0,
                        2.0,
                        dtype,
                    );
                    let a = Cuda.resample_adjoint("t", &g, rows, cols).unwrap();
                    let b = Cpu.resample_adjoint("t", &g, rows, cols).unwrap();
                    same(&format!("adjoint {what}"), &a, &b);
                }
            }
        }
    }
}
