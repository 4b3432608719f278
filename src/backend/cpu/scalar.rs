//! The scalar math of the CPU kernels, on `num-traits`: one float trait for every kernel
//! that computes in f32/f64 (element-wise, nn, reductions, the renderer, optimizers), and
//! the integer bounds of the wrapping integer kernels.

use candle_core::WithDType;
use num_traits::{AsPrimitive, Float, PrimInt, WrappingAdd, WrappingMul, WrappingNeg, WrappingSub};

/// f32 or f64: `num_traits::Float` and candle's element trait, plus what they lack.
pub trait Real: Float + WithDType {
    #[inline(always)]
    fn of(v: f64) -> Self {
        <Self as WithDType>::from_f64(v)
    }
    #[inline(always)]
    fn widen(self) -> f64 {
        <Self as WithDType>::to_f64(self)
    }
    fn erf(self) -> Self;
    /// GELU, x·Φ(x), and its derivative (f32: `vmath`'s vectorisable forms).
    fn gelu(self) -> Self;
    fn gelu_grad(self) -> Self;
    /// Round half to even, as PyTorch's `round`.
    fn round_even(self) -> Self;
}

macro_rules! real {
    ($t:ty, $erf:path, $gelu:path, $gelu_grad:path) => {
        impl Real for $t {
            #[inline(always)]
            fn erf(self) -> Self {
                $erf(self)
            }
            #[inline(always)]
            fn gelu(self) -> Self {
                $gelu(self)
            }
            #[inline(always)]
            fn gelu_grad(self) -> Self {
                $gelu_grad(self)
            }
            #[inline(always)]
            fn round_even(self) -> Self {
                self.round_ties_even()
            }
        }
    };
}

real!(
    f32,
    candle_core::cpu::erf::erf_f32,
    super::vmath::gelu,
    super::vmath::gelu_grad
);
real!(f64, candle_core::cpu::erf::erf_f64, gelu_f64, gelu_grad_f64);

/// Φ(x), the standard normal CDF, in f64.
fn normal_cdf_f64(x: f64) -> f64 {
    0.5 * (1.0 + candle_core::cpu::erf::erf_f64(x * std::f64::consts::FRAC_1_SQRT_2))
}

fn gelu_f64(x: f64) -> f64 {
    x * normal_cdf_f64(x)
}

fn gelu_grad_f64(x: f64) -> f64 {
    let pdf = (-0.5 * x * x).exp() / (2.0 * std::f64::consts::PI).sqrt();
    normal_cdf_f64(x) + x * pdf
}

/// u8, i32, i64: num-traits' primitive integers with wrapping arithmetic, like PyTorch's
/// integer kernels.
pub trait Int:
    PrimInt + WrappingAdd + WrappingSub + WrappingMul + WrappingNeg + AsPrimitive<i64> + Send + Sync
{
}

impl<T> Int for T where
    T: PrimInt
        + WrappingAdd
        + WrappingSub
        + WrappingMul
        + WrappingNeg
        + AsPrimitive<i64>
        + Send
        + Sync
{
}

/// Whether an integer type is signed.
#[inline(always)]
pub fn signed<I: Int>() -> bool {
    I::min_value() < I::zero()
}
