//! gradstream's dtypes: PyTorch's names over candle's storage types, and PyTorch's
//! type-promotion rules.

use std::sync::atomic::{AtomicU8, Ordering};

use candle_core::DType as CDType;

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum DType {
    Bool,
    UInt8,
    Int32,
    Int64,
    Float16,
    BFloat16,
    Float32,
    Float64,
}

/// Category order used by promotion: bool < integral < floating.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Category {
    Bool,
    Integral,
    Floating,
}

impl DType {
    pub const ALL: [DType; 8] = [
        DType::Bool,
        DType::UInt8,
        DType::Int32,
        DType::Int64,
        DType::Float16,
        DType::BFloat16,
        DType::Float32,
        DType::Float64,
    ];

    pub fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::UInt8 => "uint8",
            DType::Int32 => "int32",
            DType::Int64 => "int64",
            DType::Float16 => "float16",
            DType::BFloat16 => "bfloat16",
            DType::Float32 => "float32",
            DType::Float64 => "float64",
        }
    }

    pub fn from_name(name: &str) -> Option<DType> {
        Some(match name {
            "bool" => DType::Bool,
            "uint8" => DType::UInt8,
            "int32" | "int" => DType::Int32,
            "int64" | "long" => DType::Int64,
            "float16" | "half" => DType::Float16,
            "bfloat16" => DType::BFloat16,
            "float32" | "float" => DType::Float32,
            "float64" | "double" => DType::Float64,
            _ => return None,
        })
    }

    /// The dtype a float kernel computes in: float64 as it is, the half types in float32.
    pub fn compute(self) -> DType {
        match self {
            DType::Float64 => DType::Float64,
            _ => DType::Float32,
        }
    }

    /// The candle storage type; bool is stored as u8 holding 0 or 1.
    pub fn candle(self) -> CDType {
        match self {
            DType::Bool | DType::UInt8 => CDType::U8,
            DType::Int32 => CDType::I32,
            DType::Int64 => CDType::I64,
            DType::Float16 => CDType::F16,
            DType::BFloat16 => CDType::BF16,
            DType::Float32 => CDType::F32,
            DType::Float64 => CDType::F64,
        }
    }

    pub fn from_candle(dt: CDType) -> Result<DType> {
        Ok(match dt {
            CDType::U8 => DType::UInt8,
            CDType::I32 => DType::Int32,
            CDType::I64 => DType::Int64,
            CDType::F16 => DType::Float16,
            CDType::BF16 => DType::BFloat16,
            CDType::F32 => DType::Float32,
            CDType::F64 => DType::Float64,
            other => return Err(Error::dtype(format!("unsupported storage dtype {other:?}"))),
        })
    }

    pub fn size_in_bytes(self) -> usize {
        self.candle().size_in_bytes()
    }

    pub fn category(self) -> Category {
        match self {
            DType::Bool => Category::Bool,
            DType::UInt8 | DType::Int32 | DType::Int64 => Category::Integral,
            _ => Category::Floating,
        }
    }

    pub fn is_floating_point(self) -> bool {
        self.category() == Category::Floating
    }

    /// PyTorch's `promote_types` restricted to gradstream's dtypes.
    pub fn promote(a: DType, b: DType) -> DType {
        use DType::*;
        if a == b {
            return a;
        }
        match (a, b) {
            (Bool, x) | (x, Bool) => x,
            (Float16, BFloat16) | (BFloat16, Float16) => Float32,
            _ => {
                let (ca, cb) = (a.category(), b.category());
                if ca == cb {
                    // Same category: the wider one (enum order is by width within a category).
                    a.max(b)
                } else if ca == Category::Floating {
                    a
                } else {
                    b
                }
            }
        }
    }
}

/// The process-wide default float dtype, as its index in `DType::ALL` (float32 at start).
static DEFAULT_FLOAT: AtomicU8 = AtomicU8::new(6);

/// The default float dtype (PyTorch's `get_default_dtype()`): what a Python float, a float
/// factory (`zeros`, `rand`...) and int-to-float promotion (`exp(int)`, `int / int`) give.
pub fn default_float() -> DType {
    DType::ALL
        .get(DEFAULT_FLOAT.load(Ordering::Relaxed) as usize)
        .copied()
        .unwrap_or(DType::Float32)
}

/// `set_default_dtype`: any floating-point dtype, as in PyTorch; others are a TypeError.
pub fn set_default_float(dtype: DType) -> Result<()> {
    if !dtype.is_floating_point() {
        return Err(Error::type_(
            "only floating-point types are supported as the default type",
        ));
    }
    let i = DType::ALL.iter().position(|&d| d == dtype).unwrap_or(6);
    DEFAULT_FLOAT.store(i as u8, Ordering::Relaxed);
    Ok(())
}

/// How an operand takes part in type promotion (PyTorch's `ResultTypeState`).
#[derive(Clone, Copy, Debug)]
pub enum PromotionOperand {
    /// A tensor with at least one dimension.
    Dim(DType),
    /// A 0-d tensor.
    ZeroDim(DType),
    /// A Python scalar of the given category.
    Scalar(Category),
}

fn combine_categories(higher: Option<DType>, lower: Option<DType>) -> Option<DType> {
    match (higher, lower) {
        (None, l) => l,
        (Some(h), None) => Some(h),
        (Some(h), Some(l)) => {
            if h.is_floating_point() {
                Some(h)
            } else if h == DType::Bool || l.is_floating_point() {
                Some(DType::promote(h, l))
            } else {
                Some(h)
            }
        }
    }
}

/// PyTorch's `result_type` over several operands.
pub fn result_type(operands: &[PromotionOperand]) -> DType {
    let mut dim: Option<DType> = None;
    let mut zero: Option<DType> = None;
    let mut wrapped: Option<DType> = None;
    let fold = |slot: &mut Option<DType>, dt: DType| {
        *slot = Some(match *slot {
            None => dt,
            Some(s) => DType::promote(s, dt),
        })
    };
    for op in operands {
        match *op {
            PromotionOperand::Dim(dt) => fold(&mut dim, dt),
            PromotionOperand::ZeroDim(dt) => fold(&mut zero, dt),
            PromotionOperand::Scalar(c) => fold(
                &mut wrapped,
                match c {
                    Category::Bool => DType::Bool,
                    Category::Integral => DType::Int64,
                    Category::Floating => default_float(),
                },
            ),
        }
    }
    combine_categories(dim, combine_categories(zero, wrapped)).unwrap_or_else(default_float)
}

#[cfg(test)]
mod tests {
    use super::*;
    use PromotionOperand::*;

    #[test]
    fn promotion_follows_pytorch() {
        assert_eq!(DType::promote(DType::Int32, DType::Float16), DType::Float16);
        assert_eq!(
            DType::promote(DType::Float16, DType::BFloat16),
            DType::Float32
        );
        assert_eq!(DType::promote(DType::UInt8, DType::Int64), DType::Int64);
        assert_eq!(DType::promote(DType::Bool, DType::UInt8), DType::UInt8);
        let cases: [(&[PromotionOperand], DType); 5] = [
            // float32 tensor / 0-d float64 tensor stays float32
            (
                &[Dim(DType::Float32), ZeroDim(DType::Float64)],
                DType::Float32,
            ),
            // int tensor * float scalar -> default float
            (
                &[Dim(DType::Int64), Scalar(Category::Floating)],
                DType::Float32,
            ),
            // int32 tensor + int scalar stays int32
            (
                &[Dim(DType::Int32), Scalar(Category::Integral)],
                DType::Int32,
            ),
            // int tensor + 0-d float64 tensor -> float64
            (
                &[Dim(DType::Int64), ZeroDim(DType::Float64)],
                DType::Float64,
            ),
            // float16 tensor + float scalar stays float16
            (
                &[Dim(DType::Float16), Scalar(Category::Floating)],
                DType::Float16,
            ),
        ];
        for (operands, expected) in cases {
            assert_eq!(result_type(operands), expected, "{operands:?}");
        }
    }
}
