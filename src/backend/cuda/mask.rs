//! relu/threshold on CUDA (`kernels/mask.cu`): the output and its 1-bit mask of the
//! elements that passed in one pass (each warp's ballot is 4 mask bytes), or over the input
//! in place; the backward's select by that mask, into a new buffer or over the gradient; the
//! mask unpacked to bytes. Semantics of the CPU kernels (`backend/cpu/mask.rs`): NaN passes,
//! the threshold and the value rounded to the input's dtype first.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor, WithDType};

use super::elementwise::{dense_like, table_addr, table_of};
use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::MaskOps;
use crate::error::{CandleContext, Error, Result};

const THREADS: u32 = 256;

fn kernel(name: String) -> Kernel {
    Kernel {
        module: &ptx::MASK,
        name: intern(name),
    }
}

/// `v` rounded to `dtype` as the CPU kernel rounds it (`WithDType::from_f64`: nearest for
/// floats, toward zero and saturating for integers), as an f64 the kernel converts back
/// exactly; `None` for a dtype the kernels do not take.
fn in_dtype(v: f64, dtype: DType) -> Option<f64> {
    fn round<T: WithDType>(v: f64) -> f64 {
        T::from_f64(v).to_f64()
    }
    Some(match dtype {
        DType::F32 => round::<f32>(v),
        DType::F64 => v,
        DType::F16 => round::<half::f16>(v),
        DType::BF16 => round::<half::bf16>(v),
        DType::U8 => round::<u8>(v),
        DType::U32 => round::<u32>(v),
        DType::I32 => round::<i32>(v),
        DType::I64 => round::<i64>(v),
        _ => return None,
    })
}

/// A buffer written in place: contiguous, as the CPU kernel requires.
fn dense_in_place(name: &'static str, t: &Tensor) -> Result<()> {
    if t.is_contiguous() {
        Ok(())
    } else {
        Err(Error::Candle {
            op: name,
            source: candle_core::Error::Msg(format!("{name}: the layout is not contiguous")),
        })
    }
}

/// The mask as the kernels read it: dense bytes, at least one per 8 of `n` elements.
fn mask_bytes(name: &'static str, mask: &Tensor, n: usize) -> Result<Tensor> {
    if mask.dtype() != DType::U8 || mask.elem_count() < n.div_ceil(8) {
        return Err(Error::runtime(format!(
            "{name}: a mask of {} bytes ({:?}) for {n} elements",
            mask.elem_count(),
            mask.dtype()
        )));
    }
    mask.dense().op(name)
}

fn float_gradient(node: &'static str, g: &Tensor) -> Result<()> {
    match g.dtype() {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(()),
        other => Err(Error::dtype(format!(
            "{node}: gradient dtype {other:?} is not a floating point dtype"
        ))),
    }
}

/// `gs_threshold_<dtype>` on `x` (any layout) into `out`, with the mask when given; `out`
/// may be `x` (dense).
fn run_threshold(
    name: &'static str,
    x: &Tensor,
    out: Option<&Tensor>,
    mask: Option<&Tensor>,
    th: f64,
    value: f64,
) -> Result<()> {
    let dtype = x.dtype();
    let (Some(th), Some(value)) = (in_dtype(th, dtype), in_dtype(value, dtype)) else {
        return Err(Error::NotImplemented(format!(
            "{name}: not implemented for {dtype:?} tensors"
        )));
    };
    let n = x.elem_count();
    if n == 0 {
        return Ok(());
    }
    let table = table_of(x)?;
    let xa = addr(x)?;
    let oa = out.map(addr).transpose()?;
    let ma = mask.map(addr).transpose()?;
    let (_t, ta) = table_addr(&table)?;
    let args = [
        Arg::I64(n as i64),
        Arg::Ptr(xa.addr),
        Arg::Ptr(ta),
        Arg::I32(x.rank() as i32),
        Arg::Ptr(oa.as_ref().map_or(xa.addr, |a| a.addr)),
        Arg::Ptr(ma.as_ref().map_or(0, |a| a.addr)),
        Arg::F64(th),
        Arg::F64(value),
    ];
    let k = kernel(format!("gs_threshold_{}", dtype_suffix(dtype)));
    launch(x.device(), k, Grid::elementwise(n, THREADS), &args)
}

/// `gs_select_by_mask_<dtype>` of `g` (any layout) into `out`, or over `g` (dense).
fn run_select(name: &'static str, g: &Tensor, mask: &Tensor, out: Option<&Tensor>) -> Result<()> {
    let n = g.elem_count();
    let mask = mask_bytes(name, mask, n)?;
    if n == 0 {
        return Ok(());
    }
    let table = table_of(g)?;
    let ga = addr(g)?;
    let oa = out.map(addr).transpose()?;
    let ma = addr(&mask)?;
    let (_t, ta) = table_addr(&table)?;
    let args = [
        Arg::I64(n as i64),
        Arg::Ptr(ga.addr),
        Arg::Ptr(ta),
        Arg::I32(g.rank() as i32),
        Arg::Ptr(ma.addr),
        Arg::Ptr(oa.as_ref().map_or(ga.addr, |a| a.addr)),
    ];
    let k = kernel(format!("gs_select_by_mask_{}", dtype_suffix(g.dtype())));
    launch(g.device(), k, Grid::elementwise(n, THREADS), &args)
}

impl MaskOps for Cuda {
    fn packs_masks(&self) -> bool {
        true
    }

    fn threshold(
        &self,
        name: &'static str,
        x: &Tensor,
        th: f64,
        value: f64,
        want_mask: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let out = dense_like(name, x, x.dtype())?;
        let mask = want_mask
            .then(|| crate::device::zeros(x.elem_count().div_ceil(8), DType::U8, x.device()))
            .transpose()
            .op(name)?;
        run_threshold(name, x, Some(&out), mask.as_ref(), th, value)?;
        Ok((out, mask))
    }

    fn threshold_in_place(
        &self,
        name: &'static str,
        x: &Tensor,
        th: f64,
        value: f64,
    ) -> Result<()> {
        dense_in_place(name, x)?;
        run_threshold(name, x, None, None, th, value)
    }

    fn select_by_mask(&self, name: &'static str, g: &Tensor, mask: &Tensor) -> Result<Tensor> {
        float_gradient(name, g)?;
        let out = dense_like(name, g, g.dtype())?;
        run_select(name, g, mask, Some(&out))?;
        Ok(out)
    }

    fn select_by_mask_in_place(&self, name: &'static str, g: &Tensor, mask: &Tensor) -> Result<()> {
        dense_in_place(name, g)?;
        if in_dtype(0.0, g.dtype()).is_none() {
            return Err(Error::NotImplemented(format!(
                "{name}: not implemented for {:?} tensors",
                g.dtype()
            )));
        }
        run_select(name, g, mask, None)
    }

    fn unpack_mask(&self, name: &'static str, mask: &Tensor, dims: &[usize]) -> Result<Tensor> {
        let n: usize = dims.iter().product();
        let out = crate::device::zeros(dims, DType::U8, mask.device()).op(name)?;
        let mask = mask_bytes(name, mask, n)?;
        if n == 0 {
            return Ok(out);
        }
        {
            let (ma, oa) = (addr(&mask)?, addr(&out)?);
            let args = [Arg::I64(n as i64), Arg::Ptr(ma.addr), Arg::Ptr(oa.addr)];
            let k = kernel("gs_unpack_mask".into());
            launch(mask.device(), k, Grid::elementwise(n, THREADS), &args)?;
        }
        Ok(out)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, IndexOp, Tensor};

    use super::super::testing::assert_same_bits;
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::MaskOps;

    const DTYPES: [DType; 8] = [
        DType::F32,
        DType::F64,
        DType::F16,
        DType::BF16,
        DType::U8,
        DType::U32,
        DType::I32,
        DType::I64,
    ];
    const SIZES: [usize; 7] = [0, 1, 31, 33, 1000, 70000, 70001];

    /// Values around the thresholds below (NaN, ±inf, ±0, exact ties) in `dtype`.
    fn input(n: usize, seed: u64, dtype: DType) -> Tensor {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let v: Vec<f64> = (0..n)
            .map(|i| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                match (x >> 33) % 13 {
                    0 if dtype.is_float() => f64::NAN,
                    1 if dtype.is_float() => f64::INFINITY,
                    2 if dtype.is_float() => f64::NEG_INFINITY,
                    3 => -0.0,
                    4 => 0.5,
                    5 => 1.0,
                    _ => ((x >> 20) % 2001) as f64 / 100.0 - 10.0 + (i % 3) as f64,
                }
            })
            .collect();
        let t = Tensor::from_vec(v, n, &Device::Cpu).unwrap();
        if dtype.is_float() {
            t.to_dtype(dtype).unwrap()
        } else {
            // Through i64 so negative values wrap (u8, u32) rather than clamp to zero.
            let t = t.to_dtype(DType::I64).unwrap();
            let v = t.to_vec1::<i64>().unwrap();
            match dtype {
                DType::U8 => {
                    Tensor::new(v.iter().map(|&a| a as u8).collect::<Vec<_>>(), &Device::Cpu)
                }
                DType::U32 => Tensor::new(
                    v.iter().map(|&a| a as u32).collect::<Vec<_>>(),
                    &Device::Cpu,
                ),
                DType::I32 => Tensor::new(
                    v.iter().map(|&a| a as i32).collect::<Vec<_>>(),
                    &Device::Cpu,
                ),
                _ => Ok(t),
            }
            .unwrap()
        }
    }

    fn same(what: &str, a: &Tensor, b: &Tensor) {
        assert_same_bits(what, a, b);
    }

    /// (threshold, value) pairs: relu's, ties, NaN, values that round in a 16-bit dtype or
    /// truncate in an integer one, beyond an integer type's range.
    const RULES: [(f64, f64); 7] = [
        (0.0, 0.0),
        (0.5, -1.0),
        (-2.25, 7.5),
        (1.0, f64::NAN),
        (f64::NAN, 3.0),
        (0.1, 1e10),
        (-1e30, -1e30),
    ];

    #[test]
    fn threshold_matches_the_cpu_kernel() {
        for dtype in DTYPES {
            for (s, &n) in SIZES.iter().enumerate() {
                let x = input(n, s as u64, dtype);
                let mut views = vec![("dense".to_string(), x.clone())];
                if n > 1 {
                    // Every other element from the second (stride 2, start 1), and a
                    // transposed matrix.
                    let w = input(2 * n + 1, s as u64 + 1, dtype)
                        .narrow(0, 1, 2 * n)
                        .unwrap()
                        .reshape((n, 2))
                        .unwrap()
                        .i((.., 0))
                        .unwrap();
                    views.push(("stepped".into(), w));
                }
                if n == 1000 {
                    let t = x.reshape((40, 25)).unwrap().t().unwrap();
                    views.push(("transposed".into(), t));
                }
                for (view, x) in &views {
                    for (th, value) in RULES {
                        let what = format!("{dtype:?} {n} {view} th {th} value {value}");
                        let (out, mask) = Cuda.threshold("test", x, th, value, true).unwrap();
                        let (cout, cmask) = Cpu.threshold("test", x, th, value, true).unwrap();
                        same(&what, &out, &cout);
                        same(&format!("{what} mask"), &mask.unwrap(), &cmask.unwrap());
                        let (out, mask) = Cuda.threshold("test", x, th, value, false).unwrap();
                        assert!(mask.is_none());
                        same(&what, &out, &cout);
                        if x.is_contiguous() {
                            // In place gives the output (the CPU's in-place kernels take
                            // no u32; these do).
                            let (a, b) = (x.copy().unwrap(), x.copy().unwrap());
                            Cuda.threshold_in_place("test", &a, th, value).unwrap();
                            same(&format!("{what} in place"), &a, &cout);
                            if Cpu.threshold_in_place("test", &b, th, value).is_ok() {
                                same(&format!("{what} in place, cpu"), &a, &b);
                            }
                        } else {
                            assert!(Cuda.threshold_in_place("test", x, th, value).is_err());
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn select_and_unpack_match_the_cpu_kernel() {
        for (s, &n) in SIZES.iter().enumerate() {
            let x = input(n, s as u64 + 20, DType::F32);
            let (_, mask) = Cpu.threshold("test", &x, 0.25, 0.0, true).unwrap();
            let mask = mask.unwrap();
            let dims = [n];
            let bits = Cuda.unpack_mask("test", &mask, &dims).unwrap();
            same(
                &format!("unpack {n}"),
                &bits,
                &Cpu.unpack_mask("test", &mask, &dims).unwrap(),
            );
            for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                let g = input(n, s as u64 + 30, dtype);
                let what = format!("select {dtype:?} {n}");
                let want = Cpu.select_by_mask("test", &g, &mask).unwrap();
                same(
                    &what,
                    &Cuda.select_by_mask("test", &g, &mask).unwrap(),
                    &want,
                );
                let h = g.copy().unwrap();
                Cuda.select_by_mask_in_place("test", &h, &mask).unwrap();
                same(&format!("{what} in place"), &h, &want);
                if n == 1000 {
                    // A transposed gradient is read through its strides.
                    let gt = g.reshape((25, 40)).unwrap().t().unwrap();
                    let want = Cpu.select_by_mask("test", &gt, &mask).unwrap();
                    let got = Cuda.select_by_mask("test", &gt, &mask).unwrap();
                    same(&format!("{what} transposed"), &got, &want);
                }
            }
        }
        let ints = input(16, 1, DType::I64);
        let mask = Tensor::zeros(2, DType::U8, &Device::Cpu).unwrap();
        assert!(Cuda.select_by_mask("test", &ints, &mask).is_err());
        let short = Tensor::zeros(1, DType::U8, &Device::Cpu).unwrap();
        let g = input(16, 1, DType::F32);
        assert!(Cuda.select_by_mask("test", &g, &short).is_err());
    }

    #[test]
    fn unpacked_mask_has_the_input_shape() {
        let x = input(3 * 7 * 5, 3, DType::F32).reshape((3, 7, 5)).unwrap();
        let (_, mask) = Cuda.threshold("test", &x, 0.0, 0.0, true).unwrap();
        let bits = Cuda
            .unpack_mask("test", &mask.unwrap(), &[3, 7, 5])
            .unwrap();
        let want = x.gt(0.0).unwrap().to_dtype(DType::U8).unwrap();
        let nan = x.ne(&x).unwrap();
        // NaN passes; elsewhere the bit is x > 0.
        let want = nan.where_cond(&nan, &want).unwrap();
        same("unpack 3x7x5", &bits, &want);
    }
}
