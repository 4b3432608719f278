//! Optimizer state held in fewer bits than the parameter: how one state buffer is coded,
//! the code tables, and the per-block encode and decode every backend's kernel shares.
//!
//! A coded buffer is a byte tensor of codes and, except for bfloat16, float32 scales:
//! - block-wise (`Int8`, `Fp8`, `Int4`): each block of `block` elements keeps its absolute
//!   maximum; an element is `table[code] * absmax` (bitsandbytes' and torchao's layout);
//! - rank-1 (`Int4Rank1`, the 4-bit second moment of a matrix, Li et al. 2023): the matrix
//!   keeps each row's and each column's maximum; an element is
//!   `table[code] * min(row max, column max)`.
//!
//! The 8-bit code is the dynamic tree code of Dettmers et al. (2022): after the sign bit, a
//! run of zeros gives a power of ten and the bits after the first one a linear fraction in
//! (0.1, 1], so small and large values in one block both keep about two significant digits.
//! The 4-bit signed code is the same construction in three bits; the 4-bit unsigned one is
//! linear without zero, `(i + 1) / 16`, because a second moment rounded to zero would divide
//! the update by epsilon alone (Li et al., section 4).
//!
//! A block whose new values are not all finite stores a NaN scale, so each of its elements
//! reads back as NaN: a NaN or infinite gradient poisons its block's state, as it poisons
//! fp32 Adam's element, and is never clamped away.

use std::sync::LazyLock;

/// The `state_dtype` an optimizer keeps its state in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StateFormat {
    /// The parameter's own dtype (PyTorch's behaviour).
    Dense,
    BFloat16,
    Int8,
    Int4,
    Fp8,
}

impl StateFormat {
    pub fn parse(name: &str) -> Option<StateFormat> {
        Some(match name {
            "float32" | "dense" | "none" => StateFormat::Dense,
            "bfloat16" => StateFormat::BFloat16,
            "int8" => StateFormat::Int8,
            "int4" => StateFormat::Int4,
            "fp8" | "float8_e4m3fn" => StateFormat::Fp8,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            StateFormat::Dense => "float32",
            StateFormat::BFloat16 => "bfloat16",
            StateFormat::Int8 => "int8",
            StateFormat::Int4 => "int4",
            StateFormat::Fp8 => "fp8",
        }
    }

    /// The block size when the user gives none: torchao's defaults (256 for 8-bit and fp8,
    /// 128 for 4-bit, as Li et al. use).
    pub fn default_block(self) -> usize {
        match self {
            StateFormat::Int4 => 128,
            _ => 256,
        }
    }

    /// How one state buffer of a parameter of shape `dims` is coded. `signed`: whether the
    /// buffer can go negative (a first moment) or not (a second moment).
    pub fn coding(self, signed: bool, dims: &[usize]) -> Option<Coding> {
        Some(match self {
            StateFormat::Dense => return None,
            StateFormat::BFloat16 => Coding::BFloat16,
            StateFormat::Int8 => Coding::Int8 { signed },
            StateFormat::Fp8 => Coding::Fp8,
            StateFormat::Int4 if signed => Coding::Int4 { signed },
            StateFormat::Int4 => match matrix_of(dims) {
                Some((rows, cols)) => Coding::Int4Rank1 { rows, cols },
                None => Coding::Int4 { signed },
            },
        })
    }
}

/// A tensor of two or more dimensions as the matrix rank-1 normalisation sees it: every
/// dimension but the last as rows. `None` for 0-d and 1-d tensors, and for matrices with a
/// single row or column (their rank-1 scale would be the block scale of one long block).
pub fn matrix_of(dims: &[usize]) -> Option<(usize, usize)> {
    let (&cols, lead) = dims.split_last()?;
    let rows: usize = lead.iter().product();
    (!lead.is_empty() && rows > 1 && cols > 1).then_some((rows, cols))
}

/// One coded state buffer as a kernel receives it: its codes (uint8) and its float32
/// scales (none for bfloat16; the block maxima; or a matrix's row and column maxima).
pub struct CodedState<'a> {
    pub coding: Coding,
    pub block: usize,
    pub codes: &'a candle_core::Tensor,
    pub scales: &'a [candle_core::Tensor],
}

/// How one state buffer is coded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coding {
    /// bfloat16 values (round to nearest even), no scale.
    BFloat16,
    /// One byte per element, an index into the 8-bit dynamic code; a scale per block.
    Int8 { signed: bool },
    /// One fp8 e4m3 byte per element, scaled so the block's absmax is e4m3's 448.
    Fp8,
    /// Two elements per byte (the first in the low nibble); a scale per block.
    Int4 { signed: bool },
    /// Two elements per byte, linear without zero, scaled by `min(row max, column max)`.
    Int4Rank1 { rows: usize, cols: usize },
}

impl Coding {
    pub fn name(self) -> &'static str {
        match self {
            Coding::BFloat16 => "bfloat16",
            Coding::Int8 { .. } => "int8",
            Coding::Fp8 => "fp8",
            Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => "int4",
        }
    }

    /// Bytes of codes for `n` elements.
    pub fn code_bytes(self, n: usize) -> usize {
        match self {
            Coding::BFloat16 => 2 * n,
            Coding::Int8 { .. } | Coding::Fp8 => n,
            Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => n.div_ceil(2),
        }
    }

    /// The lengths of the float32 scale tensors for `n` elements in blocks of `block`.
    pub fn scale_lens(self, n: usize, block: usize) -> Vec<usize> {
        match self {
            Coding::BFloat16 => vec![],
            Coding::Int8 { .. } | Coding::Fp8 | Coding::Int4 { .. } => vec![n.div_ceil(block)],
            Coding::Int4Rank1 { rows, cols } => vec![rows, cols],
        }
    }

    /// The state-dict keys of the scale tensors, after the buffer's own name.
    pub fn scale_suffixes(self) -> &'static [&'static str] {
        match self {
            Coding::BFloat16 => &[],
            Coding::Int8 { .. } | Coding::Fp8 | Coding::Int4 { .. } => &["absmax"],
            Coding::Int4Rank1 { .. } => &["row_max", "col_max"],
        }
    }

    /// The sorted values a code indexes (empty for bfloat16 and fp8, which are floats).
    pub fn table(self) -> &'static [f32] {
        match self {
            Coding::Int8 { signed: true } => &SIGNED8,
            Coding::Int8 { signed: false } => &UNSIGNED8,
            Coding::Int4 { signed: true } => &SIGNED4,
            Coding::Int4 { signed: false } | Coding::Int4Rank1 { .. } => &LINEAR4,
            Coding::BFloat16 | Coding::Fp8 => &[],
        }
    }
}

/// The dynamic tree code of `bits` bits (sign included when `signed`), sorted, without
/// duplicates: for each count `e` of leading zeros after the sign, the `2^f` fractions
/// `0.1 + 0.9 k / 2^f` (k = 1..2^f, so 1.0 itself is a code), times `10^-e`; and zero.
fn dynamic_code(bits: u32, signed: bool) -> Vec<f32> {
    let magnitude_bits = bits - u32::from(signed);
    let mut v = vec![0.0f64];
    for e in 0..magnitude_bits {
        let f = magnitude_bits - e - 1;
        let n = 1u32 << f;
        for k in 1..=n {
            let frac = 0.1 + 0.9 * f64::from(k) / f64::from(n);
            let x = frac * 10f64.powi(-(e as i32));
            v.push(x);
            if signed {
                v.push(-x);
            }
        }
    }
    let mut v: Vec<f32> = v.into_iter().map(|x| x as f32).collect();
    v.sort_by(f32::total_cmp);
    v.dedup();
    v
}

static SIGNED8: LazyLock<Vec<f32>> = LazyLock::new(|| dynamic_code(8, true));
static UNSIGNED8: LazyLock<Vec<f32>> = LazyLock::new(|| dynamic_code(8, false));
static SIGNED4: LazyLock<Vec<f32>> = LazyLock::new(|| dynamic_code(4, true));
static LINEAR4: LazyLock<Vec<f32>> = LazyLock::new(|| (1..=16).map(|i| i as f32 / 16.0).collect());

/// e4m3's largest finite value: a block's absmax maps to it.
pub const FP8_MAX: f32 = 448.0;

/// Every e4m3 byte's value, for decoding by lookup.
pub static FP8_VALUES: LazyLock<[f32; 256]> =
    LazyLock::new(|| std::array::from_fn(|b| float8::F8E4M3::from_bits(b as u8).to_f32()));

/// The code of the table value nearest `x` (ties to the smaller; `x` finite).
#[inline]
pub fn nearest(table: &[f32], x: f32) -> u8 {
    let i = table.partition_point(|&t| t < x);
    if i == 0 {
        return 0;
    }
    if i == table.len() {
        return (i - 1) as u8;
    }
    if x - table[i - 1] <= table[i] - x {
        (i - 1) as u8
    } else {
        i as u8
    }
}

/// The scale of a block of new values: their absolute maximum, or NaN when one is not
/// finite (so the whole block reads back as NaN).
#[inline]
pub fn absmax(values: &[f32]) -> f32 {
    let mut m = 0.0f32;
    let mut finite = true;
    for &x in values {
        finite &= x.is_finite();
        m = m.max(x.abs());
    }
    if finite {
        m
    } else {
        f32::NAN
    }
}

/// Encode one block of `values` with `scale` (from [`absmax`], or the rank-1 scales per
/// element via `scale_at`) into `codes` (its bytes; for 4-bit, two elements per byte, the
/// block starting on a byte boundary).
pub fn encode_block(
    coding: Coding,
    values: &[f32],
    codes: &mut [u8],
    scale_at: impl Fn(usize) -> f32,
) {
    match coding {
        Coding::BFloat16 => {
            for (i, &x) in values.iter().enumerate() {
                let b = half::bf16::from_f32(x).to_bits().to_le_bytes();
                codes[2 * i] = b[0];
                codes[2 * i + 1] = b[1];
            }
        }
        Coding::Fp8 => {
            for (i, &x) in values.iter().enumerate() {
                let s = scale_at(i);
                let y = if s > 0.0 { x * (FP8_MAX / s) } else { 0.0 };
                codes[i] = float8::F8E4M3::from_f32(y).to_bits();
            }
        }
        Coding::Int8 { .. } => {
            let table = coding.table();
            for (i, &x) in values.iter().enumerate() {
                codes[i] = quantize(table, x, scale_at(i));
            }
        }
        Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => {
            let table = coding.table();
            for (i, pair) in values.chunks(2).enumerate() {
                let lo = quantize(table, pair[0], scale_at(2 * i));
                let hi = match pair.get(1) {
                    Some(&x) => quantize(table, x, scale_at(2 * i + 1)),
                    None => 0,
                };
                codes[i] = lo | (hi << 4);
            }
        }
    }
}

/// The code of `x / scale` (a zero or non-finite scale: the code nearest zero; its block
/// reads back as zero or NaN through the scale).
#[inline]
fn quantize(table: &[f32], x: f32, scale: f32) -> u8 {
    if scale > 0.0 && scale.is_finite() {
        nearest(table, x / scale)
    } else {
        nearest(table, 0.0)
    }
}

/// Decode one block (`out.len()` elements) from its `codes` and scales.
pub fn decode_block(
    coding: Coding,
    codes: &[u8],
    out: &mut [f32],
    scale_at: impl Fn(usize) -> f32,
) {
    match coding {
        Coding::BFloat16 => {
            for (i, o) in out.iter_mut().enumerate() {
                *o = half::bf16::from_bits(u16::from_le_bytes([codes[2 * i], codes[2 * i + 1]]))
                    .to_f32();
            }
        }
        Coding::Fp8 => {
            let values = &*FP8_VALUES;
            for (i, o) in out.iter_mut().enumerate() {
                *o = values[usize::from(codes[i])] * (scale_at(i) / FP8_MAX);
            }
        }
        Coding::Int8 { .. } => {
            let table = coding.table();
            for (i, o) in out.iter_mut().enumerate() {
                *o = table[usize::from(codes[i])] * scale_at(i);
            }
        }
        Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => {
            let table = coding.table();
            for (i, o) in out.iter_mut().enumerate() {
                let b = codes[i / 2];
                let c = if i % 2 == 0 { b & 0xF } else { b >> 4 };
                *o = table[usize::from(c)] * scale_at(i);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_codes_have_the_sizes_their_bits_allow() {
        // signed 8-bit: 127 magnitudes each sign and one zero; unsigned: 255 and zero.
        assert_eq!(SIGNED8.len(), 255);
        assert_eq!(UNSIGNED8.len(), 256);
        assert_eq!(SIGNED4.len(), 15);
        assert_eq!(LINEAR4.len(), 16);
        for t in [&*SIGNED8, &*UNSIGNED8, &*SIGNED4, &*LINEAR4] {
            assert_eq!(*t.last().unwrap(), 1.0);
            assert!(t.windows(2).all(|w| w[0] < w[1]));
        }
        assert_eq!(SIGNED8[0], -1.0);
        assert_eq!(UNSIGNED8[0], 0.0);
    }

    #[test]
    fn nearest_picks_the_closest_value() {
        let t = &*UNSIGNED8;
        for &x in &[0.0f32, 1e-9, 0.003, 0.5, 0.77777, 1.0, 2.0] {
            let c = usize::from(nearest(t, x));
            let best = t
                .iter()
                .map(|v| (v - x).abs())
                .fold(f32::INFINITY, f32::min);
            assert_eq!((t[c] - x).abs(), best, "x = {x}");
        }
    }

    #[test]
    fn a_block_round_trips_within_its_code_step() {
        let values: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        for coding in [
            Coding::Int8 { signed: true },
            Coding::Fp8,
            Coding::Int4 { signed: true },
            Coding::BFloat16,
        ] {
            let s = absmax(&values);
            let mut codes = vec![0u8; coding.code_bytes(values.len())];
            encode_block(coding, &values, &mut codes, |_| s);
            let mut back = vec![0f32; values.len()];
            decode_block(coding, &codes, &mut back, |_| s);
            let tol = match coding {
                Coding::BFloat16 => s / 128.0,
                Coding::Int8 { .. } | Coding::Fp8 => s * 0.05,
                _ => s * 0.3,
            };
            for (a, b) in values.iter().zip(&back) {
                assert!((a - b).abs() <= tol, "{coding:?}: {a} -> {b}");
            }
            if matches!(coding, Coding::Int8 { .. } | Coding::Int4 { .. }) {
                // 1.0 is a code: the block's absmax reads back exactly.
                assert_eq!(
                    back.iter().fold(0f32, |m, x| m.max(x.abs())),
                    s,
                    "{coding:?}"
                );
            }
        }
    }

    #[test]
    fn a_non_finite_block_reads_back_as_nan() {
        let values = [1.0f32, f32::INFINITY, -2.0];
        assert!(absmax(&values).is_nan());
        assert!(absmax(&[1.0, f32::NAN]).is_nan());
        assert_eq!(absmax(&[0.5, -3.0]), 3.0);
    }
}
