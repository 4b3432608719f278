//! Casts: candle's, except where it gives other values than PyTorch: to bool (`x != 0`),
//! float to integer (`cast::float_to_int`, one pass over float64 values), and float64 to
//! the 16-bit floats (through float32).

use candle_core::{DType as C, Tensor};
use rayon::prelude::*;

use super::dense::{from_vec, with_slice};
use super::{Cpu, PAR_MIN};
use crate::backend::cast::{float_to_int, CastOps};
use crate::dtype::DType;
use crate::error::{CandleContext, Result};

impl CastOps for Cpu {
    fn cast(&self, x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
        if to == DType::Bool {
            return x.ne(0f64).op("to(bool)");
        }
        if from == DType::Float64 && matches!(to, DType::Float16 | DType::BFloat16) {
            // through float32, as PyTorch rounds
            return x
                .to_dtype(C::F32)
                .and_then(|f| f.to_dtype(to.candle()))
                .op("to");
        }
        if !from.is_floating_point() || to.is_floating_point() {
            return x.to_dtype(to.candle()).op("to");
        }
        let wide = x.to_dtype(C::F64).op("to")?;
        let dims = x.dims();
        with_slice(&wide, |v: &[f64]| {
            fn map<T: Send>(v: &[f64], f: impl Fn(f64) -> T + Sync + Send) -> Vec<T> {
                if v.len() < PAR_MIN {
                    v.iter().map(|&x| f(x)).collect()
                } else {
                    v.par_iter().map(|&x| f(x)).collect()
                }
            }
            match to {
                DType::UInt8 => from_vec(map(v, |x| float_to_int(x, to) as u8), dims),
                DType::Int32 => from_vec(map(v, |x| float_to_int(x, to) as i32), dims),
                _ => from_vec(map(v, |x| float_to_int(x, to)), dims),
            }
        })?
    }
}
