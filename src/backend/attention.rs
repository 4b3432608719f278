//! Scaled dot-product attention kernels (FlashAttention-2): the forward gives the output
//! and one log-sum-exp per query row; the backward recomputes the probabilities block by
//! block from them, so no L×S matrix is ever stored.
//!
//! Operands are in a compute dtype (f32 or f64) and strided: each is a storage plus, for each
//! output batch item `n` (of `N`), where its rows start ([`AttnRows`]); a row's elements are
//! adjacent. That is how batch broadcasting and grouped-query heads reach a kernel (items
//! share rows), and how heads sliced out of one projection, `(B, T, H, E)` viewed as
//! `(B, H, T, E)`, are read in place instead of copied first.

use candle_core::Tensor;

use super::no_fallback;
use crate::error::Result;

/// Sizes of one attention problem: `n` output batch items of `l` queries over `s` keys,
/// `e` features per query/key and `ev` per value.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub n: usize,
    pub l: usize,
    pub s: usize,
    pub e: usize,
    pub ev: usize,
}

/// An additive float mask (bool masks arrive as 0 / -inf), broadcast without copying: the
/// score (n, i, j) gets `data[base[n] + i * row + j * col]`.
pub struct AttnMask<'a> {
    pub data: &'a Tensor,
    pub base: &'a [usize],
    pub row: usize,
    pub col: usize,
}

/// Dropout on the probabilities: element (n, i, j) is kept when [`dropout_keep`] says so,
/// a pure function of the seed, so the backward regenerates the forward's mask.
#[derive(Clone, Copy, Debug)]
pub struct AttnDropout {
    pub p: f64,
    pub seed: u64,
}

/// Where an operand's rows are in its storage: row `r` of batch item `n` starts at element
/// `base[n] + r * row`, and its elements are adjacent.
#[derive(Clone, Copy, Debug)]
pub struct AttnRows<'a> {
    pub base: &'a [usize],
    pub row: usize,
}

/// Everything but the tensors.
pub struct AttnArgs<'a> {
    pub shape: AttnShape,
    pub q: AttnRows<'a>,
    pub k: AttnRows<'a>,
    pub v: AttnRows<'a>,
    /// The saved output's and the incoming gradient's rows (read by the backward only; the
    /// forward writes a dense (N, L, Ev) output).
    pub out: AttnRows<'a>,
    pub dout: AttnRows<'a>,
    pub mask: Option<AttnMask<'a>>,
    /// Query i attends to keys j <= i (the top-left lower triangle, as PyTorch).
    pub causal: bool,
    pub scale: f64,
    pub dropout: Option<AttnDropout>,
}

/// Which of dq, dk, dv the backward computes (the others come back `None`).
#[derive(Clone, Copy, Debug)]
pub struct AttnNeeds {
    pub q: bool,
    pub k: bool,
    pub v: bool,
}

/// (dq, dk, dv) per output batch item: (N, L, E), (N, S, E), (N, S, Ev).
pub type AttnGrads = (Option<Tensor>, Option<Tensor>, Option<Tensor>);

/// Whether dropout keeps element `index` (`(n * L + i) * S + j`) under `seed`: a
/// splitmix64 hash of the two compared with `p` (53-bit uniform).
#[inline(always)]
pub fn dropout_keep(seed: u64, index: u64, threshold: u64) -> bool {
    let mut z = seed.wrapping_add(index.wrapping_mul(0x9E37_79B9_7F4A_7C15));
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    (z >> 11) >= threshold
}

/// The threshold of [`dropout_keep`] for a drop probability `p`.
pub fn dropout_threshold(p: f64) -> u64 {
    (p.clamp(0.0, 1.0) * (1u64 << 53) as f64) as u64
}

pub trait AttentionOps {
    no_fallback! {
        /// The attention output (N, L, Ev) and the log-sum-exp of each query row's scores
        /// (N, L); -inf (and a zero output row) where every key is masked.
        fn flash_forward(&self, name: &'static str, q: &Tensor, k: &Tensor, v: &Tensor,
            args: &AttnArgs<'_>) -> Result<(Tensor, Tensor)> = name, q;
        /// The gradients of `flash_forward` for the incoming `dout` (N, L, Ev), from the
        /// saved inputs, output and log-sum-exp.
        #[allow(clippy::too_many_arguments)]
        fn flash_backward(&self, name: &'static str, q: &Tensor, k: &Tensor, v: &Tensor,
            out: &Tensor, lse: &Tensor, dout: &Tensor, args: &AttnArgs<'_>, needs: AttnNeeds)
            -> Result<AttnGrads> = name, q;
    }
}
