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

use multiversion::multiversion;

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
            StateFormat::Fp8 => Coding::Fp8 { signed },
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
    Fp8 { signed: bool },
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
            Coding::Fp8 { .. } => "fp8",
            Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => "int4",
        }
    }

    /// Bytes of codes for `n` elements.
    pub fn code_bytes(self, n: usize) -> usize {
        match self {
            Coding::BFloat16 => 2 * n,
            Coding::Int8 { .. } | Coding::Fp8 { .. } => n,
            Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => n.div_ceil(2),
        }
    }

    /// The lengths of the float32 scale tensors for `n` elements in blocks of `block`.
    pub fn scale_lens(self, n: usize, block: usize) -> Vec<usize> {
        match self {
            Coding::BFloat16 => vec![],
            Coding::Int8 { .. } | Coding::Fp8 { .. } | Coding::Int4 { .. } => {
                vec![n.div_ceil(block)]
            }
            Coding::Int4Rank1 { rows, cols } => vec![rows, cols],
        }
    }

    /// The state-dict keys of the scale tensors, after the buffer's own name.
    pub fn scale_suffixes(self) -> &'static [&'static str] {
        match self {
            Coding::BFloat16 => &[],
            Coding::Int8 { .. } | Coding::Fp8 { .. } | Coding::Int4 { .. } => &["absmax"],
            Coding::Int4Rank1 { .. } => &["row_max", "col_max"],
        }
    }

    /// The code of a table coding (none for bfloat16).
    pub fn code(self) -> Option<&'static Code> {
        Some(match self {
            Coding::Int8 { signed: true } => &SIGNED8,
            Coding::Int8 { signed: false } => &UNSIGNED8,
            Coding::Int4 { signed: true } => &SIGNED4,
            Coding::Int4 { signed: false } | Coding::Int4Rank1 { .. } => &LINEAR4,
            Coding::Fp8 { signed: true } => &FP8,
            Coding::Fp8 { signed: false } => &UNSIGNED_FP8,
            Coding::BFloat16 => return None,
        })
    }
}

/// How a code lays out its bytes around the magnitude's index.
#[derive(Clone, Copy, Debug)]
enum Layout {
    /// Values sorted from -1 to 1, zero at `zero`: the code is `zero ± index`.
    Symmetric { zero: u8 },
    /// Non-negative values only: the code is the index (a negative input codes as its
    /// magnitude; second moments never are negative).
    Unsigned,
    /// A sign bit over the index (fp8: the index is the e4m3 byte of the magnitude).
    SignBit,
}

/// A code of at most 256 values in [-1, 1]: what each code decodes to, and a fast nearest
/// search over the magnitudes. The search is one table lookup: the top 16 bits of a
/// magnitude's float32 representation (exponent and 8 mantissa bits) name a bucket 2^-8
/// relative wide, narrower than the gap between two codes' midpoints (0.7% apart at the top
/// of the 8-bit code), so each bucket holds at most one midpoint; the nearest magnitude's
/// index is the count of midpoints below the bucket, plus one if past the bucket's own.
pub struct Code {
    /// The value of each code byte (a decode table; unused bytes decode to 0).
    pub values: [f32; 256],
    #[cfg_attr(not(test), allow(dead_code))] // the tests' brute-force search
    magnitudes: Vec<f32>,
    /// Per bucket from `first`, packed in one u32 so a vector encoder gathers once: the
    /// count of midpoints below the bucket (high 16 bits) and the low 15 bits of its own
    /// midpoint's float32 representation (the high bits are the bucket's; 0xFFFF: none).
    buckets: Vec<u32>,
    first: usize,
    layout: Layout,
    /// 1 for an unsigned code with a zero: a non-zero value never codes as zero (a second
    /// moment read back as zero would divide the update by epsilon alone).
    keep_nonzero: u32,
}

/// The bucket of a non-negative float32: its top 16 bits.
#[inline(always)]
fn bucket(x: f32) -> usize {
    (x.to_bits() >> 15) as usize
}

/// The index of the magnitude nearest `a` (`0 <= a <= 1`; ties to the smaller): one
/// lookup in the packed buckets.
#[inline(always)]
fn nearest(buckets: &[u32], first: usize, last: usize, a: f32) -> u32 {
    // Below the first bucket, `a` reads as the bucket's start: under its midpoint too.
    let bits = a.to_bits().max((first as u32) << 15);
    let e = buckets[((bits >> 15) as usize - first).min(last)];
    (e >> 16) + u32::from((bits & 0x7FFF) > (e & 0xFFFF))
}

impl Code {
    fn new(magnitudes: Vec<f32>, layout: Layout, values: [f32; 256]) -> Code {
        assert!(magnitudes.len() <= 256 && magnitudes.windows(2).all(|w| w[0] < w[1]));
        let mids: Vec<f32> = magnitudes.windows(2).map(|w| 0.5 * (w[0] + w[1])).collect();
        let first = mids.first().map_or(0, |&m| bucket(m));
        let mut buckets = vec![];
        for b in first..=bucket(1.0) {
            let start = f32::from_bits((b as u32) << 15);
            let end = f32::from_bits(((b + 1) as u32) << 15);
            let inside: Vec<f32> = mids
                .iter()
                .copied()
                .filter(|&m| start <= m && m < end)
                .collect();
            assert!(inside.len() <= 1, "two midpoints in one bucket");
            let below = mids.iter().filter(|&&m| m < start).count() as u32;
            let low = inside.first().map_or(0xFFFF, |m| m.to_bits() & 0x7FFF);
            buckets.push(below << 16 | low);
        }
        let keep_nonzero =
            u32::from(matches!(layout, Layout::Unsigned) && magnitudes.first() == Some(&0.0));
        Code {
            values,
            magnitudes,
            buckets,
            first,
            layout,
            keep_nonzero,
        }
    }

    /// The code of `x` (already divided by its scale: in [-1, 1]).
    pub fn encode(&self, x: f32) -> u8 {
        match self.layout {
            Layout::Symmetric { .. } => self.encoder::<SYMMETRIC>()(x),
            Layout::Unsigned => self.encoder::<UNSIGNED>()(x),
            Layout::SignBit => self.encoder::<SIGN_BIT>()(x),
        }
    }

    /// The per-element encoder for layout `L` (the caller's match on the layout is then
    /// out of the element loop), with the tables as local slices.
    #[inline(always)]
    fn encoder<const L: u8>(&self) -> impl Fn(f32) -> u8 + '_ {
        let e = self.lanes();
        move |x: f32| e.code::<L>(x)
    }

    /// What the per-element encoder reads, as plain values and slices.
    fn lanes(&self) -> Lanes<'_> {
        Lanes {
            buckets: &self.buckets,
            first: self.first,
            zero: match self.layout {
                Layout::Symmetric { zero } => u32::from(zero),
                _ => 0,
            },
            keep: self.keep_nonzero,
        }
    }
}

/// A [`Code`]'s encoder state: its packed buckets, first bucket, zero's code and whether
/// a non-zero value keeps a non-zero code.
#[derive(Clone, Copy)]
struct Lanes<'a> {
    buckets: &'a [u32],
    first: usize,
    zero: u32,
    keep: u32,
}

impl Lanes<'_> {
    /// The code of `x` (already divided by its scale: in [-1, 1]) in layout `L`.
    #[inline(always)]
    fn code<const L: u8>(self, x: f32) -> u8 {
        let a = x.abs();
        let a = if a <= 1.0 { a } else { 1.0 }; // NaN too: its block reads back as NaN
        let last = self.buckets.len() - 1;
        let i = nearest(self.buckets, self.first, last, a).max(self.keep & u32::from(a > 0.0));
        let code = match L {
            SYMMETRIC => {
                if x < 0.0 {
                    self.zero - i
                } else {
                    self.zero + i
                }
            }
            UNSIGNED => i,
            _ => i | (u32::from(x.is_sign_negative() && i != 0) << 7),
        };
        code as u8
    }
}

const SYMMETRIC: u8 = 0;
const UNSIGNED: u8 = 1;
const SIGN_BIT: u8 = 2;

/// The dynamic tree code's magnitudes for `magnitude_bits` bits: for each count `e` of
/// leading zeros, the `2^f` fractions `0.1 + 0.9 k / 2^f` (k = 1..2^f, so 1.0 itself is a
/// code), times `10^-e`; and zero. Sorted.
fn dynamic_magnitudes(magnitude_bits: u32) -> Vec<f32> {
    let mut v = vec![0.0f32];
    for e in 0..magnitude_bits {
        let f = magnitude_bits - e - 1;
        let n = 1u32 << f;
        for k in 1..=n {
            let frac = 0.1 + 0.9 * f64::from(k) / f64::from(n);
            v.push((frac * 10f64.powi(-(e as i32))) as f32);
        }
    }
    v.sort_by(f32::total_cmp);
    v
}

/// A signed code from its magnitudes: values `-m[last] .. 0 .. m[last]`.
fn symmetric(m: Vec<f32>) -> Code {
    let zero = m.len() - 1;
    let mut values = [0f32; 256];
    for (i, &x) in m.iter().enumerate() {
        values[zero + i] = x;
        values[zero - i] = -x;
    }
    Code::new(m, Layout::Symmetric { zero: zero as u8 }, values)
}

fn unsigned(m: Vec<f32>) -> Code {
    let mut values = [0f32; 256];
    values[..m.len()].copy_from_slice(&m);
    Code::new(m, Layout::Unsigned, values)
}

static SIGNED8: LazyLock<Code> = LazyLock::new(|| symmetric(dynamic_magnitudes(7)));
static UNSIGNED8: LazyLock<Code> = LazyLock::new(|| unsigned(dynamic_magnitudes(8)));
static SIGNED4: LazyLock<Code> = LazyLock::new(|| symmetric(dynamic_magnitudes(3)));
static LINEAR4: LazyLock<Code> =
    LazyLock::new(|| unsigned((1..=16).map(|i| i as f32 / 16.0).collect()));

/// e4m3's largest finite value: a block's absmax maps to it.
pub const FP8_MAX: f32 = 448.0;

/// fp8 e4m3 as a code: byte `b`'s value is e4m3's, over 448; the magnitudes are the
/// finite non-negative bytes 0x00..=0x7E, in order (e4m3's bit patterns sort as its
/// values), so a code byte is the e4m3 byte of the scaled value rounded to nearest.
static FP8: LazyLock<Code> = LazyLock::new(|| {
    let e4m3 = |b: u8| float8::F8E4M3::from_bits(b).to_f32() / FP8_MAX;
    let values = std::array::from_fn(|b| {
        let v = e4m3(b as u8);
        if v.is_nan() {
            0.0
        } else {
            v
        }
    });
    Code::new((0..=0x7E).map(e4m3).collect(), Layout::SignBit, values)
});

/// A decoded state value: float32, or float64 for a float64 parameter's step.
pub trait StateValue: Copy + Send + Sync {
    fn of_f32(x: f32) -> Self;
    fn f32(self) -> f32;
    /// The values as float32 without a copy, when they are float32.
    fn as_f32(values: &[Self]) -> Option<&[f32]>;
    fn as_f32_mut(values: &mut [Self]) -> Option<&mut [f32]>;
}

impl StateValue for f32 {
    #[inline(always)]
    fn of_f32(x: f32) -> f32 {
        x
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self
    }
    fn as_f32(values: &[f32]) -> Option<&[f32]> {
        Some(values)
    }
    fn as_f32_mut(values: &mut [f32]) -> Option<&mut [f32]> {
        Some(values)
    }
}

impl StateValue for f64 {
    #[inline(always)]
    fn of_f32(x: f32) -> f64 {
        f64::from(x)
    }
    #[inline(always)]
    fn f32(self) -> f32 {
        self as f32
    }
    fn as_f32(_: &[f64]) -> Option<&[f32]> {
        None
    }
    fn as_f32_mut(_: &mut [f64]) -> Option<&mut [f32]> {
        None
    }
}

/// fp8 for a second moment: the same bytes, non-negative, and a non-zero value never
/// codes as zero (e4m3 spans 2^18 in a block; g^2 easily spans more).
static UNSIGNED_FP8: LazyLock<Code> = LazyLock::new(|| {
    let e4m3 = |b: u8| float8::F8E4M3::from_bits(b).to_f32() / FP8_MAX;
    let mut values = [0f32; 256];
    for (b, v) in values.iter_mut().enumerate().take(0x7F) {
        *v = e4m3(b as u8);
    }
    Code::new((0..=0x7E).map(e4m3).collect(), Layout::Unsigned, values)
});

/// A rank-1 coded element's scale: `min(row max, column max)`, NaN when either is (f32::min
/// would drop the NaN of a poisoned row or column).
#[inline]
pub fn rank1_scale(row: f32, col: f32) -> f32 {
    if row.is_nan() || col.is_nan() {
        f32::NAN
    } else {
        row.min(col)
    }
}

/// The scale of a block of new values: their absolute maximum, or NaN when one is not
/// finite (so the whole block reads back as NaN). Eight lanes, so it runs vectorised.
#[inline]
pub fn absmax<T: StateValue>(values: &[T]) -> f32 {
    match T::as_f32(values) {
        Some(v) => absmax_f32(v),
        None => absmax_of(values),
    }
}

#[multiversion(targets = "simd")]
fn absmax_f32(values: &[f32]) -> f32 {
    absmax_of(values)
}

#[inline(always)]
fn absmax_of<T: StateValue>(values: &[T]) -> f32 {
    let mut max = [0f32; 8];
    let mut nan = [false; 8];
    let lanes = values.chunks_exact(8);
    let rest = lanes.remainder();
    for c in lanes {
        for j in 0..8 {
            let a = c[j].f32().abs();
            max[j] = if a > max[j] { a } else { max[j] };
            nan[j] |= a.is_nan();
        }
    }
    for (j, x) in rest.iter().enumerate() {
        let a = x.f32().abs();
        max[j] = if a > max[j] { a } else { max[j] };
        nan[j] |= a.is_nan();
    }
    let m = max.iter().fold(0f32, |m, &a| if a > m { a } else { m });
    if nan.contains(&true) || m.is_infinite() {
        f32::NAN
    } else {
        m
    }
}

/// Encode one block of `values` into `codes` (its bytes; for 4-bit, two elements per
/// byte, the block starting on a byte boundary), each element divided by `scale_at(i)`
/// (its block's absmax, or its rank-1 scale). A zero or non-finite scale codes the values
/// as zero; the scale itself makes them read back as zero or NaN.
pub fn encode_block<T: StateValue>(
    coding: Coding,
    values: &[T],
    codes: &mut [u8],
    scale_at: impl Fn(usize) -> f32,
) {
    let Some(code) = coding.code() else {
        for (i, &x) in values.iter().enumerate() {
            let b = half::bf16::from_f32(x.f32()).to_bits().to_le_bytes();
            codes[2 * i] = b[0];
            codes[2 * i + 1] = b[1];
        }
        return;
    };
    let inv = |s: f32| {
        if s > 0.0 && s.is_finite() {
            1.0 / s
        } else {
            0.0
        }
    };
    if let (Coding::Int8 { .. } | Coding::Fp8 { .. }, Some(v)) = (coding, T::as_f32(values)) {
        let s = scale_at(0); // block-wise: one scale
        return match code.layout {
            Layout::Symmetric { .. } => encode_lanes::<SYMMETRIC>(code, v, inv(s), codes),
            Layout::Unsigned => encode_lanes::<UNSIGNED>(code, v, inv(s), codes),
            Layout::SignBit => encode_lanes::<SIGN_BIT>(code, v, inv(s), codes),
        };
    }
    // One loop per layout, so the layout's match is not in the element loop.
    match (code.layout, coding) {
        (Layout::Symmetric { .. }, Coding::Int4 { .. }) => {
            encode_nibbles::<T, SYMMETRIC>(code, values, codes, &scale_at, inv)
        }
        (_, Coding::Int4 { .. } | Coding::Int4Rank1 { .. }) => {
            encode_nibbles::<T, UNSIGNED>(code, values, codes, &scale_at, inv)
        }
        (Layout::Symmetric { .. }, _) => {
            encode_bytes::<T, SYMMETRIC>(code, values, codes, &scale_at, inv)
        }
        (Layout::Unsigned, _) => encode_bytes::<T, UNSIGNED>(code, values, codes, &scale_at, inv),
        (Layout::SignBit, _) => encode_bytes::<T, SIGN_BIT>(code, values, codes, &scale_at, inv),
    }
}

/// Two elements per byte, the first in the low nibble.
#[inline(always)]
fn encode_nibbles<T: StateValue, const L: u8>(
    code: &Code,
    values: &[T],
    codes: &mut [u8],
    scale_at: &impl Fn(usize) -> f32,
    inv: impl Fn(f32) -> f32,
) {
    let enc = code.encoder::<L>();
    for (i, (c, pair)) in codes.iter_mut().zip(values.chunks(2)).enumerate() {
        let lo = enc(pair[0].f32() * inv(scale_at(2 * i)));
        let hi = match pair.get(1) {
            Some(&x) => enc(x.f32() * inv(scale_at(2 * i + 1))),
            None => 0,
        };
        *c = lo | (hi << 4);
    }
}

/// One byte per element of a block with one scale (`inv` is its reciprocal), float32,
/// compiled for each vector width (`multiversion`: the wheel's baseline is SSE2). LLVM
/// keeps the bucket lookup scalar even with AVX-512; the loop stays apart so that an
/// explicit gather can replace it.
fn encode_lanes<const L: u8>(code: &Code, values: &[f32], inv: f32, codes: &mut [u8]) {
    encode_lanes_simd::<L>(values, inv, code.lanes(), codes)
}

#[multiversion(targets = "simd")]
fn encode_lanes_simd<const L: u8>(values: &[f32], inv: f32, lanes: Lanes<'_>, codes: &mut [u8]) {
    for (c, &x) in codes.iter_mut().zip(values) {
        *c = lanes.code::<L>(x * inv);
    }
}

/// One byte per element.
#[inline(always)]
fn encode_bytes<T: StateValue, const L: u8>(
    code: &Code,
    values: &[T],
    codes: &mut [u8],
    scale_at: &impl Fn(usize) -> f32,
    inv: impl Fn(f32) -> f32,
) {
    let enc = code.encoder::<L>();
    for (i, (c, &x)) in codes.iter_mut().zip(values).enumerate() {
        *c = enc(x.f32() * inv(scale_at(i)));
    }
}

/// `out = values[code] * scale`, float32, compiled for each vector width (a gather with
/// AVX2 or AVX-512).
#[multiversion(targets = "simd")]
fn decode_lanes(values: &[f32; 256], codes: &[u8], scale: f32, out: &mut [f32]) {
    for (o, &c) in out.iter_mut().zip(codes) {
        *o = values[usize::from(c)] * scale;
    }
}

/// Decode one block (`out.len()` elements) from its `codes` and scales.
pub fn decode_block<T: StateValue>(
    coding: Coding,
    codes: &[u8],
    out: &mut [T],
    scale_at: impl Fn(usize) -> f32,
) {
    let Some(code) = coding.code() else {
        for (i, o) in out.iter_mut().enumerate() {
            let b = half::bf16::from_bits(u16::from_le_bytes([codes[2 * i], codes[2 * i + 1]]));
            *o = T::of_f32(b.to_f32());
        }
        return;
    };
    let values = &code.values;
    if let (Coding::Int8 { .. } | Coding::Fp8 { .. }, Some(o)) = (coding, T::as_f32_mut(out)) {
        let s = scale_at(0);
        return decode_lanes(values, &codes[..o.len()], s, o);
    }
    match coding {
        Coding::Int4 { .. } | Coding::Int4Rank1 { .. } => {
            for (i, o) in out.iter_mut().enumerate() {
                let b = codes[i / 2];
                let c = if i % 2 == 0 { b & 0xF } else { b >> 4 };
                *o = T::of_f32(values[usize::from(c)] * scale_at(i));
            }
        }
        _ => {
            for (i, (o, &c)) in out.iter_mut().zip(codes).enumerate() {
                *o = T::of_f32(values[usize::from(c)] * scale_at(i));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code of `x` by a full search: the nearest decoded value (ties to the smaller
    /// magnitude), over the codes the layout uses.
    fn brute(code: &Code, x: f32) -> f32 {
        let mut best = (f32::INFINITY, 0.0f32);
        let negative = code.magnitudes.iter().map(|m| -m);
        let used: Vec<f32> = match code.layout {
            Layout::Unsigned => code.magnitudes.clone(),
            _ => code.magnitudes.iter().copied().chain(negative).collect(),
        };
        for &v in used.iter() {
            let d = (v - x).abs();
            if d < best.0 || (d == best.0 && v.abs() < best.1.abs()) {
                best = (d, v);
            }
        }
        best.1
    }

    #[test]
    fn the_codes_have_the_sizes_their_bits_allow() {
        // signed 8-bit: 127 magnitudes and zero; unsigned: 255 and zero.
        assert_eq!(SIGNED8.magnitudes.len(), 128);
        assert_eq!(UNSIGNED8.magnitudes.len(), 256);
        assert_eq!(SIGNED4.magnitudes.len(), 8);
        assert_eq!(LINEAR4.magnitudes.len(), 16);
        assert_eq!(FP8.magnitudes.len(), 127);
        for c in [&*SIGNED8, &*UNSIGNED8, &*SIGNED4, &*LINEAR4, &*FP8] {
            assert_eq!(*c.magnitudes.last().unwrap(), 1.0);
        }
        assert_eq!(SIGNED8.values[0], -1.0);
        assert_eq!(SIGNED8.values[254], 1.0);
    }

    #[test]
    fn encode_picks_the_nearest_code() {
        let mut xs: Vec<f32> = (0..20000).map(|i| (i as f32 / 10000.0) - 1.0).collect();
        xs.extend([
            0.0,
            1e-9,
            1e-7,
            3e-6,
            0.003,
            0.1,
            0.77777,
            1.0,
            -1.0,
            1.0 - 1e-7,
        ]);
        for (name, code) in [
            ("signed8", &*SIGNED8),
            ("signed4", &*SIGNED4),
            ("fp8", &*FP8),
        ] {
            for &x in &xs {
                let got = code.values[usize::from(code.encode(x))];
                // equal, or a tie decided by the float32 midpoint's rounding
                let (d, best) = ((got - x).abs(), (brute(code, x) - x).abs());
                assert!(d <= best + 1e-7, "{name}: x = {x}: {d} > {best}");
            }
        }
        for (name, code) in [("unsigned8", &*UNSIGNED8), ("linear4", &*LINEAR4)] {
            for &x in xs.iter().filter(|x| **x >= 0.0) {
                let got = code.values[usize::from(code.encode(x))];
                let (d, best) = ((got - x).abs(), (brute(code, x) - x).abs());
                assert!(d <= best + 1e-7, "{name}: x = {x}: {d} > {best}");
            }
        }
    }

    #[test]
    fn a_second_moment_never_codes_a_non_zero_value_as_zero() {
        for code in [&*UNSIGNED8, &*UNSIGNED_FP8] {
            assert_eq!(code.encode(0.0), 0);
            assert_ne!(code.encode(1e-30), 0);
            assert_eq!(code.encode(1.0), code.encode(0.99999));
        }
        assert_eq!(UNSIGNED_FP8.encode(1e-30), 1); // e4m3's smallest subnormal
        assert_eq!(LINEAR4.encode(0.0), 0); // no zero: index 0 is 1/16
        assert_eq!(SIGNED8.values[usize::from(SIGNED8.encode(1e-30))], 0.0);
    }

    #[test]
    fn fp8_codes_are_e4m3_bytes() {
        for &x in &[0.5f32, -0.25, 1.0, 0.013, -0.0001] {
            let b = FP8.encode(x);
            assert_eq!(
                b,
                float8::F8E4M3::from_f32(x * FP8_MAX).to_bits(),
                "x = {x}"
            );
        }
    }

    #[test]
    fn a_block_round_trips_within_its_code_step() {
        let values: Vec<f32> = (0..256)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) * 0.013)
            .collect();
        for coding in [
            Coding::Int8 { signed: true },
            Coding::Fp8 { signed: true },
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
                Coding::Int8 { .. } | Coding::Fp8 { .. } => s * 0.05,
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
        assert!(absmax(&[1.0f32, f32::INFINITY, -2.0]).is_nan());
        assert!(absmax(&[1.0f32, f32::NAN]).is_nan());
        assert_eq!(absmax(&[0.5f32, -3.0]), 3.0);
    }
}
