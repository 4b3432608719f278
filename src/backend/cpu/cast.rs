//! Casts: candle's where it gives PyTorch's values (`cast::candle_cast_but_float_to_int`),
//! and float to integer by `cast::float_to_int`, one pass over float64 values.

use candle_core::{DType as C, Tensor};
use rayon::prelude::*;

use super::dense::{from_vec, with_slice};
use super::{Cpu, PAR_MIN};
use crate::backend::cast::{candle_cast_but_float_to_int, float_to_int, CastOps};
use crate::dtype::DType;
use crate::error::{CandleContext, Result};

impl CastOps for Cpu {
    fn cast(&self, x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
        if let Some(r) = candle_cast_but_float_to_int(x, from, to) {
            return r;
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
