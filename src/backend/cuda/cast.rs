//! Casts on CUDA (`kernels/cast.cu`): every pair of gradstream's dtypes, from any layout
//! into a dense tensor, with `backend/cast.rs`'s rules. candle's CUDA casts miss int32 and
//! int64 to or from the 16-bit floats, and differ from PyTorch's for bool and for floats out
//! of an integer type's range.

use candle_core::Tensor;

use super::elementwise::{dense_like, table_addr, table_of};
use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::cast::CastOps;
use crate::dtype::DType;
use crate::error::Result;

const THREADS: u32 = 256;

/// The kernel name's part for a dtype: bool has its own (it is stored as u8).
fn suffix(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        d => dtype_suffix(d.candle()),
    }
}

impl CastOps for Cuda {
    fn cast(&self, x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
        let out = dense_like("to", x, to.candle())?;
        let n = x.elem_count();
        if n == 0 {
            return Ok(out);
        }
        // bool is read as the u8 it is stored as
        let source = if from == DType::Bool {
            DType::UInt8
        } else {
            from
        };
        let kernel = Kernel {
            module: &ptx::CAST,
            name: intern(format!("gs_cast_{}_{}", suffix(source), suffix(to))),
        };
        let table = table_of(x)?;
        {
            let (xa, oa) = (addr(x)?, addr(&out)?);
            let (_t, ta) = table_addr(&table)?;
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(xa.addr),
                Arg::Ptr(ta),
                Arg::I32(x.rank() as i32),
                Arg::Ptr(oa.addr),
            ];
            launch(x.device(), kernel, Grid::elementwise(n, THREADS), &args)?;
        }
        Ok(out)
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{Device, Tensor};

    use super::super::testing::assert_same_bits;
    use super::Cuda;
    use crate::backend::cast::CastOps;
    use crate::backend::cpu::Cpu;
    use crate::dtype::DType;

    /// Values every cast must get right: the specials, rounding ties of each float type,
    /// the edges of each integer type, and a spread of ordinary ones.
    fn values() -> Vec<f64> {
        let mut v = vec![
            f64::NAN,
            f64::INFINITY,
            f64::NEG_INFINITY,
            0.0,
            -0.0,
            0.5,
            -0.5,
            1.5,
            -2.5,
            255.0,
            256.0,
            -1.5,
            300.7,
            -129.7,
            65504.0,
            65520.0,
            1.0 + f64::EPSILON,
            1.0 + 2f64.powi(-11) + 2f64.powi(-40),
            1.0 + 2f64.powi(-8) + 2f64.powi(-40),
            2147483647.0,
            2147483648.0,
            -2147483648.0,
            -2147483649.0,
            3e9,
            9.3e18,
            -9.223_372_036_854_776e18,
            16777217.0,
            1e-8,
            6e-8,
            1e300,
        ];
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for i in 0..200 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let u = (x >> 11) as f64 / (1u64 << 53) as f64;
            v.push((u - 0.5) * [8.0, 600.0, 1e6, 1e12][i % 4]);
        }
        v
    }

    /// `values()` as `dtype` (through the CPU cast from float64), a strided view of it
    /// when `strided`.
    fn source(dtype: DType, strided: bool) -> Tensor {
        let v = values();
        let n = v.len();
        let base = Tensor::from_vec(v, n, &Device::Cpu).unwrap();
        let t = if dtype == DType::Float64 {
            base
        } else {
            Cpu.cast(&base, DType::Float64, dtype).unwrap()
        };
        if strided {
            // every other element, backwards: a negative-free strided view via a 2-d transpose
            let m = n / 2;
            t.narrow(0, 0, 2 * m)
                .unwrap()
                .reshape((m, 2))
                .unwrap()
                .t()
                .unwrap()
        } else {
            t
        }
    }

    #[test]
    fn every_pair_matches_the_cpu_bit_for_bit() {
        for from in DType::ALL {
            for to in DType::ALL {
                if from == to {
                    continue;
                }
                for strided in [false, true] {
                    let x = source(from, strided);
                    let want = Cpu.cast(&x, from, to).unwrap();
                    let got = Cuda.cast(&x, from, to).unwrap();
                    assert!(got.is_contiguous());
                    assert_same_bits(
                        &format!("{from:?} -> {to:?} strided={strided}"),
                        &got,
                        &want,
                    );
                }
            }
        }
    }

    #[test]
    fn empty_and_0d() {
        for dims in [&[0usize][..], &[3, 0, 2], &[]] {
            let x = Tensor::ones(dims, candle_core::DType::F32, &Device::Cpu).unwrap();
            let got = Cuda.cast(&x, DType::Float32, DType::Int32).unwrap();
            assert_eq!(got.dims(), dims);
            assert_eq!(got.dtype(), candle_core::DType::I32);
        }
    }
}
