//! Branch-free f32 math for the kernels' hot transcendental functions. libm's `expf` and
//! `erff` are scalar calls with branches, so a loop over them runs one element at a time;
//! these are straight-line polynomials and selects, so a loop over a slice vectorises, and
//! a loop compiled with `multiversion` gets the CPU's full vector width.

use std::f32::consts::{FRAC_1_SQRT_2, LOG2_E};

/// 1/√(2π), the standard normal density at 0.
const INV_SQRT_2PI: f32 = 0.398_942_3;

/// e^x: Cephes' polynomial on the reduced argument, about 1 ulp; 0 below -87 (and for
/// -inf), NaN for NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    let xc = x.clamp(-87.0, 88.0);
    // Round to nearest by adding and removing 1.5 * 2^23: the sum's low mantissa bits are
    // then n itself, so 2^n is built from them with integer ops (a float-to-int `as` cast
    // saturates, which does not vectorise).
    let k = xc * LOG2_E + 12_582_912.0;
    let n = k - 12_582_912.0;
    let r = xc - n * 0.693_359_4 + n * 2.121_944_4e-4;
    let mut p = 1.987_569_1e-4f32;
    p = p * r + 1.398_199_9e-3;
    p = p * r + 8.333_452e-3;
    p = p * r + 4.166_579_6e-2;
    p = p * r + 1.666_666_5e-1;
    p = p * r + 0.5;
    let y = p * r * r + r + 1.0;
    let pow2n = f32::from_bits(k.to_bits().wrapping_sub(0x4B40_0000 - 127) << 23);
    if x < -87.0 {
        0.0
    } else {
        y * pow2n
    }
}

/// The standard normal CDF Φ(x) = erfc(-x/√2) / 2. erfc(z) for z ≥ 0 is Numerical Recipes'
/// Chebyshev fit t·exp(-z² + P(t)), t = 1/(1 + z/2), whose relative error is below 1.2e-7
/// everywhere; taking Φ of the lower tail from it directly (not as 1 + erf, which cancels)
/// keeps Φ's relative accuracy where it is tiny.
#[inline(always)]
#[allow(clippy::excessive_precision)] // the coefficients as published
pub fn normal_cdf(x: f32) -> f32 {
    let z = (x * FRAC_1_SQRT_2).abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let mut p = 0.170_872_77f32;
    p = p * t - 0.822_152_23;
    p = p * t + 1.488_515_87;
    p = p * t - 1.135_203_98;
    p = p * t + 0.278_868_07;
    p = p * t - 0.186_288_06;
    p = p * t + 0.096_784_18;
    p = p * t + 0.374_091_96;
    p = p * t + 1.000_023_68;
    p = p * t - 1.265_512_23;
    let tail = 0.5 * t * exp(p - z * z);
    if x < 0.0 {
        tail
    } else {
        1.0 - tail
    }
}

/// GELU, x·Φ(x) (PyTorch's `approximate='none'`).
#[inline(always)]
pub fn gelu(x: f32) -> f32 {
    x * normal_cdf(x)
}

/// GELU's derivative, Φ(x) + x·φ(x).
#[inline(always)]
pub fn gelu_grad(x: f32) -> f32 {
    normal_cdf(x) + x * INV_SQRT_2PI * exp(-0.5 * x * x)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Φ in f64 from libm's erfc, the reference.
    fn cdf64(x: f64) -> f64 {
        0.5 * candle_core::cpu::erf::erfc_f64(-x / std::f64::consts::SQRT_2)
    }

    fn grid() -> impl Iterator<Item = f32> {
        (-140_000..=140_000).map(|i| i as f32 * 1e-4)
    }

    #[test]
    fn exp_is_within_two_ulp_of_f64() {
        for x in (-870_000..=880_000).map(|i| i as f32 * 1e-4) {
            let want = (x as f64).exp();
            let got = exp(x) as f64;
            assert!(
                (got - want).abs() <= 2.5e-7 * want,
                "exp({x}) = {got}, want {want}"
            );
        }
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert!(exp(f32::NAN).is_nan());
    }

    #[test]
    fn normal_cdf_keeps_its_relative_accuracy_in_both_tails() {
        for x in grid() {
            let x64 = x as f64;
            let want = cdf64(x64);
            let got = normal_cdf(x) as f64;
            // Where Φ is a normal f32: within a few ulp, plus the f32 rounding of x/√2 and of
            // the exponent -x²/2 (an absolute error e there is a relative error e of Φ).
            if want > 1e-36 {
                let tol = 1e-6 + 3e-7 * (x64 * x64 / 2.0);
                assert!(
                    (got - want).abs() <= tol * want,
                    "Φ({x}) = {got}, want {want}"
                );
            }
        }
        assert_eq!(normal_cdf(f32::NEG_INFINITY), 0.0);
        assert_eq!(normal_cdf(f32::INFINITY), 1.0);
        assert!(normal_cdf(f32::NAN).is_nan());
    }

    #[test]
    fn gelu_and_its_derivative_match_f64() {
        for x in grid() {
            let x64 = x as f64;
            let pdf = (-0.5 * x64 * x64).exp() / (2.0 * std::f64::consts::PI).sqrt();
            let (want, dwant) = (x64 * cdf64(x64), cdf64(x64) + x64 * pdf);
            // The derivative's two terms cancel in the lower tail: its error is relative to
            // the terms, not to their sum.
            let scale = x64.abs().max(1.0);
            assert!((gelu(x) as f64 - want).abs() <= 2e-7 * scale, "gelu({x})");
            assert!(
                (gelu_grad(x) as f64 - dwant).abs() <= 4e-7 * scale,
                "gelu'({x})"
            );
        }
    }
}
