//! Dtype casts with PyTorch's semantics, on any layout, into a dense tensor.
//!
//! candle's casts differ from PyTorch's where PyTorch's own are defined by its CPU kernels:
//! a float that does not fit the integer type (NaN, ±inf, out of range) becomes the type's
//! minimum (x86's `cvttsd2si`), `uint8` takes the low byte of the int64 value (`-1.5 ->
//! 255`), and `bool` is `x != 0` (NaN is true). candle's CUDA build also has no casts to or
//! from int32, nor between int64 and the 16-bit floats; the CUDA backend casts with its own
//! kernel.
//!
//! The rules, for every device's kernel (`float_to_int` is the reference):
//! - to bool: `x != 0`;
//! - float to an integer type: `float_to_int`;
//! - integer to integer: two's-complement wrap (Rust's `as`);
//! - to float16/bfloat16: through float32 (PyTorch rounds twice, `1 + 2^-11 + 2^-40` is 1);
//! - everything else: round to nearest even.

use candle_core::Tensor;

use crate::dtype::DType;
use crate::error::{CandleContext, Result};

/// candle's `Tensor::to_dtype` through the tensor's backend ([`CastOps`]), as a drop-in:
/// candle's own is disallowed outside the kernels (`clippy.toml`), for its CUDA build has
/// no casts to or from int32 nor between int64 and the 16-bit floats. A candle dtype is
/// read as the gradstream dtype it stores (`u8` as uint8: 0/1 casts the same either way).
pub trait Convert {
    fn cast(&self, dtype: candle_core::DType) -> candle_core::Result<Tensor>;
    /// candle's `Tensor::contiguous`, copying through the backend (`InplaceOps::dense_copy`).
    fn dense(&self) -> candle_core::Result<Tensor>;
}

impl Convert for Tensor {
    fn cast(&self, dtype: candle_core::DType) -> candle_core::Result<Tensor> {
        if self.dtype() == dtype {
            return Ok(self.clone());
        }
        match (DType::from_candle(self.dtype()), DType::from_candle(dtype)) {
            (Ok(from), Ok(to)) => crate::backend::on(self)
                .cast(self, from, to)
                .map_err(|e| candle_core::Error::Msg(e.to_string())),
            // a dtype of candle's own (argmax's u32): candle's cast has it
            #[allow(clippy::disallowed_methods)]
            _ => self.to_dtype(dtype),
        }
    }

    fn dense(&self) -> candle_core::Result<Tensor> {
        if self.is_contiguous() {
            return Ok(self.clone());
        }
        crate::backend::on(self)
            .dense_copy("contiguous", self)
            .map_err(|e| candle_core::Error::Msg(e.to_string()))
    }
}

pub trait CastOps {
    /// `x` (holding `from`) as a dense tensor of `to`; `from != to`.
    fn cast(&self, x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
        candle_cast(x, from, to)
    }
}

/// PyTorch's float to integer conversion on x86: toward zero, and the type's minimum for
/// NaN, ±inf and whatever does not fit; `uint8` is the low byte of the int64 value.
pub fn float_to_int(v: f64, to: DType) -> i64 {
    let wide = if v.is_nan() || !(-9.223_372_036_854_776e18..9.223_372_036_854_776e18).contains(&v)
    {
        i64::MIN
    } else {
        v as i64
    };
    match to {
        DType::Int32 if !(i32::MIN as i64..=i32::MAX as i64).contains(&wide) => i32::MIN as i64,
        DType::UInt8 => wide as u8 as i64,
        _ => wide,
    }
}

/// candle's cast where it gives PyTorch's values: to bool (`x != 0`), float64 to the 16-bit
/// floats (through float32, as PyTorch rounds) and every pair but float to integer, which is
/// `None`: each backend truncates and saturates that its own way.
#[allow(clippy::disallowed_methods)]
pub(crate) fn candle_cast_but_float_to_int(
    x: &Tensor,
    from: DType,
    to: DType,
) -> Option<Result<Tensor>> {
    use candle_core::DType as C;
    if to == DType::Bool {
        return Some(x.ne(0f64).op("to(bool)"));
    }
    if from == DType::Float64 && matches!(to, DType::Float16 | DType::BFloat16) {
        return Some(
            x.to_dtype(C::F32)
                .and_then(|f| f.to_dtype(to.candle()))
                .op("to"),
        );
    }
    if !from.is_floating_point() || to.is_floating_point() {
        return Some(x.to_dtype(to.candle()).op("to"));
    }
    None
}

/// The cast in candle's ops (the fallback of a device with no kernel for it).
#[allow(clippy::disallowed_methods)]
fn candle_cast(x: &Tensor, from: DType, to: DType) -> Result<Tensor> {
    use candle_core::DType as C;
    if let Some(r) = candle_cast_but_float_to_int(x, from, to) {
        return r;
    }
    let go = || -> candle_core::Result<Tensor> {
        let f = x.to_dtype(C::F64)?;
        let (lo, hi) = match to {
            DType::Int32 => (i32::MIN as f64, i32::MAX as f64 + 1.0),
            _ => (i64::MIN as f64, -(i64::MIN as f64)),
        };
        // toward zero: floor above 0, ceil below
        let up = f.ge(0f64)?.to_dtype(C::F64)?;
        let down = f.lt(0f64)?.to_dtype(C::F64)?;
        let t = ((f.floor()? * up)? + (f.ceil()? * down)?)?;
        let bad = ((t.ne(&t)?.to_dtype(C::U32)? + t.ge(hi)?.to_dtype(C::U32)?)?
            + t.lt(lo)?.to_dtype(C::U32)?)?
        .ne(0u32)?;
        let zero = t.zeros_like()?;
        let int = bad.where_cond(&zero, &t)?.to_dtype(C::I64)?;
        let min = Tensor::full(lo as i64, int.shape(), int.device())?;
        bad.where_cond(&min, &int)?.to_dtype(to.candle())
    };
    go().op("to")
}

#[cfg(test)]
mod tests {
    use super::float_to_int;
    use crate::dtype::DType;

    #[test]
    fn float_to_int_is_pytorchs_on_x86() {
        let cases = [
            (-1.5, DType::UInt8, 255),
            (300.0, DType::UInt8, 44),
            (-129.7, DType::UInt8, 127),
            (3e9, DType::UInt8, 0),
            (f64::NAN, DType::UInt8, 0),
            (3e9, DType::Int32, i32::MIN as i64),
            (-2147483648.9, DType::Int32, i32::MIN as i64),
            (2147483647.9, DType::Int32, i32::MAX as i64),
            (f64::INFINITY, DType::Int64, i64::MIN),
            (9.3e18, DType::Int64, i64::MIN),
            (-9.223_372_036_854_776e18, DType::Int64, i64::MIN),
            (-2.5, DType::Int64, -2),
        ];
        for (v, to, want) in cases {
            assert_eq!(float_to_int(v, to), want, "{v} to {to:?}");
        }
    }
}
