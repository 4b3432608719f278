//! A Python number taking part in an op: kept as the integer or float it was, so an int64
//! beyond 2**53 reaches a kernel exactly (a float64 would round it).

use crate::dtype::{Category, DType};
use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub enum Scalar {
    Bool(bool),
    Int(i64),
    Float(f64),
}

impl From<f64> for Scalar {
    fn from(v: f64) -> Self {
        Scalar::Float(v)
    }
}

impl Scalar {
    pub fn as_f64(self) -> f64 {
        match self {
            Scalar::Bool(b) => b as i64 as f64,
            Scalar::Int(i) => i as f64,
            Scalar::Float(f) => f,
        }
    }

    /// The value as an int64 element holds it: integers exactly, floats truncated toward
    /// zero (saturating, as Rust's `as`; [`Scalar::checked`] refuses what does not fit).
    pub fn as_i64(self) -> i64 {
        match self {
            Scalar::Bool(b) => b as i64,
            Scalar::Int(i) => i,
            Scalar::Float(f) => f as i64,
        }
    }

    /// The dtype a Python number makes a tensor of: bool, int64, or the default float.
    pub fn default_dtype(self) -> DType {
        match self {
            Scalar::Bool(_) => DType::Bool,
            Scalar::Int(_) => DType::Int64,
            Scalar::Float(_) => crate::dtype::default_float(),
        }
    }

    pub fn category(self) -> Category {
        match self {
            Scalar::Bool(_) => Category::Bool,
            Scalar::Int(_) => Category::Integral,
            Scalar::Float(_) => Category::Floating,
        }
    }

    /// The value, refused with PyTorch's error when `dtype` cannot hold it (`full`, `fill_`,
    /// `tensor(v, dtype=...)`), by PyTorch's rules: an integer into an unsigned dtype may be
    /// as low as -max (it wraps: -1 is 255 in uint8) but a float may not be negative; a
    /// float into an integer dtype must lie within its range, not NaN; float32 refuses a
    /// finite value past its largest, while float16 and bfloat16 round it to infinity; bool
    /// takes anything.
    pub fn checked(self, dtype: DType) -> Result<Scalar> {
        let (lo, hi): (f64, f64) = match dtype {
            DType::Bool | DType::Float16 | DType::BFloat16 | DType::Float64 => return Ok(self),
            DType::UInt8 => (0.0, 255.0),
            DType::Int32 => (i32::MIN as f64, i32::MAX as f64),
            DType::Int64 => (i64::MIN as f64, i64::MAX as f64),
            DType::Float32 => (f32::MIN as f64, f32::MAX as f64),
        };
        let fits = match self {
            Scalar::Bool(_) => true,
            Scalar::Int(_) if dtype.is_floating_point() || dtype == DType::Int64 => true,
            Scalar::Int(i) if dtype == DType::UInt8 => (-255..=255).contains(&i),
            Scalar::Int(i) => (lo..=hi).contains(&(i as f64)),
            Scalar::Float(f) if dtype.is_floating_point() => {
                !f.is_finite() || (lo..=hi).contains(&f)
            }
            Scalar::Float(f) => (lo..=hi).contains(&f),
        };
        if fits {
            Ok(self)
        } else {
            Err(Error::runtime(format!(
                "value cannot be converted to type {} without overflow",
                c_type_name(dtype)
            )))
        }
    }
}

/// The C++ type PyTorch's overflow message names.
fn c_type_name(dtype: DType) -> &'static str {
    match dtype {
        DType::Bool => "bool",
        DType::UInt8 => "uint8_t",
        DType::Int32 => "int32_t",
        DType::Int64 => "int64_t",
        DType::Float16 => "c10::Half",
        DType::BFloat16 => "c10::BFloat16",
        DType::Float32 => "float",
        DType::Float64 => "double",
    }
}
