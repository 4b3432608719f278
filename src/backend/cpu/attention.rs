//! FlashAttention-2 on the CPU. Forward: rayon over (batch item, block of `BQ` queries);
//! each task walks the key blocks keeping a running max and sum per query row, so only a
//! `BQ`×`BK` block of scores exists at a time. Backward: rayon over batch items; each
//! walks key blocks (accumulating dK, dV in place) and, inside, query blocks (dQ), so no
//! two tasks write one element and no atomics are needed. Block products go through the
//! `gemm` crate (candle's own matmul kernel), single-threaded inside a task, reading the
//! operands in place through their row strides.

use candle_core::Tensor;
use gemm::Parallelism;
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice, with_storage};
use super::scalar::Real;
use super::vmath;
use super::Cpu;
use crate::backend::attention::{
    dropout_keep, dropout_threshold, AttentionOps, AttnArgs, AttnGrads, AttnNeeds, AttnRows,
};
use crate::error::Result;

/// Queries per block.
const BQ: usize = 64;
/// Keys per block.
const BK: usize = 64;

/// The float types of the kernel: `exp` of a row (a vectorisable polynomial for f32).
trait Flash: Real + num_traits::NumAssign + Send + Sync + 'static {
    /// `row[c] = exp(row[c] - shift)`.
    fn exp_shifted(row: &mut [Self], shift: Self);
}

impl Flash for f32 {
    fn exp_shifted(row: &mut [f32], shift: f32) {
        for x in row.iter_mut() {
            *x = vmath::exp(*x - shift);
        }
    }
}

impl Flash for f64 {
    fn exp_shifted(row: &mut [f64], shift: f64) {
        for x in row.iter_mut() {
            *x = (*x - shift).exp();
        }
    }
}

/// Sum with 8 partial sums (vectorises without reassociating a single chain).
#[inline(always)]
fn sum<T: Flash>(row: &[T]) -> T {
    let mut acc = [T::zero(); 8];
    let mut chunks = row.chunks_exact(8);
    for c in &mut chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += x;
        }
    }
    let mut s = chunks.remainder().iter().fold(T::zero(), |s, &x| s + x);
    for a in acc {
        s += a;
    }
    s
}

#[inline(always)]
fn max<T: Flash>(row: &[T]) -> T {
    row.iter()
        .fold(T::neg_infinity(), |m, &x| if x > m { x } else { m })
}

/// A matrix view: element (r, c) at `data[r * rs + c * cs]`.
#[derive(Clone, Copy)]
struct Mat<'a, T> {
    data: &'a [T],
    rs: usize,
    cs: usize,
}

fn mat<T>(data: &[T], rs: usize, cs: usize) -> Mat<'_, T> {
    Mat { data, rs, cs }
}

impl<'a, T> Mat<'a, T> {
    /// Batch item `n`'s rows of an operand whose storage is `data`.
    fn item(data: &'a [T], rows: AttnRows<'_>, n: usize) -> Self {
        mat(&data[rows.base[n]..], rows.row, 1)
    }

    /// The rows from `r0` on.
    fn rows_from(self, r0: usize) -> Self {
        Mat {
            data: &self.data[r0 * self.rs..],
            ..self
        }
    }

    fn t(self) -> Self {
        Mat {
            rs: self.cs,
            cs: self.rs,
            ..self
        }
    }

    /// Row `r`'s first `len` elements (the columns of a row are adjacent).
    fn row(self, r: usize, len: usize) -> &'a [T] {
        &self.data[r * self.rs..r * self.rs + len]
    }
}

/// `dst` (m×n, row stride `ld`) = `dst` (if `acc`, else 0) + `alpha` · lhs (m×k) × rhs (k×n).
#[allow(clippy::too_many_arguments)]
fn mm<T: Real + 'static>(
    dst: &mut [T],
    ld: usize,
    (m, n, k): (usize, usize, usize),
    lhs: Mat<'_, T>,
    rhs: Mat<'_, T>,
    acc: bool,
    alpha: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !acc {
            for r in 0..m {
                dst[r * ld..r * ld + n].fill(T::zero());
            }
        }
        return;
    }
    let last = |x: Mat<'_, T>, rows: usize, cols: usize| (rows - 1) * x.rs + (cols - 1) * x.cs;
    // The views come from shapes the op checked; a violation is a bug here, not bad input.
    assert!(
        last(lhs, m, k) < lhs.data.len()
            && last(rhs, k, n) < rhs.data.len()
            && (m - 1) * ld + n <= dst.len(),
        "attention: block product out of bounds"
    );
    // SAFETY: every element read or written is in bounds (checked above); the slices
    // outlive the call and `dst` does not alias the inputs (it is borrowed mutably).
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            dst.as_mut_ptr(),
            1,
            ld as isize,
            acc,
            lhs.data.as_ptr(),
            lhs.cs as isize,
            lhs.rs as isize,
            rhs.data.as_ptr(),
            rhs.cs as isize,
            rhs.rs as isize,
            T::one(),
            alpha,
            false,
            false,
            false,
            Parallelism::None,
        );
    }
}

/// The inputs of one batch item: (L, E), (S, E) and (S, Ev) matrices.
struct Item<'a, T> {
    n: usize,
    q: Mat<'a, T>,
    k: Mat<'a, T>,
    v: Mat<'a, T>,
    mask: Option<&'a [T]>,
}

impl<'a, T: Flash> Item<'a, T> {
    fn new(n: usize, q: &'a [T], k: &'a [T], v: &'a [T], m: Option<&'a [T]>, a: &AttnArgs) -> Self {
        Item {
            n,
            q: Mat::item(q, a.q, n),
            k: Mat::item(k, a.k, n),
            v: Mat::item(v, a.v, n),
            mask: m,
        }
    }

    /// Scaled scores of queries i0.. (bq) against keys j0.. (bk) into `sb` (bq×bk), plus
    /// the mask, -inf above the causal diagonal.
    fn scores(
        &self,
        sb: &mut [T],
        a: &AttnArgs,
        (i0, bq): (usize, usize),
        (j0, bk): (usize, usize),
    ) {
        mm(
            sb,
            bk,
            (bq, bk, a.shape.e),
            self.q.rows_from(i0),
            self.k.rows_from(j0).t(),
            false,
            T::of(a.scale),
        );
        if let (Some(md), Some(m)) = (self.mask, a.mask.as_ref()) {
            let base = m.base[self.n];
            for r in 0..bq {
                let row = base + (i0 + r) * m.row + j0 * m.col;
                for (c, x) in sb[r * bk..(r + 1) * bk].iter_mut().enumerate() {
                    *x += md[row + c * m.col];
                }
            }
        }
        if a.causal {
            for r in 0..bq {
                let first_masked = (i0 + r + 1).saturating_sub(j0).min(bk);
                sb[r * bk + first_masked..(r + 1) * bk].fill(T::neg_infinity());
            }
        }
    }

    /// Multiply `pb` (bq×bk probabilities at i0, j0) by the dropout mask and 1/(1-p).
    fn drop(&self, pb: &mut [T], a: &AttnArgs, (i0, bq): (usize, usize), (j0, bk): (usize, usize)) {
        let Some(d) = a.dropout else { return };
        let (thr, keep) = (dropout_threshold(d.p), T::of(1.0 / (1.0 - d.p)));
        let s = a.shape;
        for r in 0..bq {
            let at = ((self.n * s.l + i0 + r) * s.s + j0) as u64;
            for (c, x) in pb[r * bk..(r + 1) * bk].iter_mut().enumerate() {
                *x = if dropout_keep(d.seed, at + c as u64, thr) {
                    *x * keep
                } else {
                    T::zero()
                };
            }
        }
    }

    /// The causal end of the keys seen by queries i0..i1.
    fn key_end(a: &AttnArgs, i1: usize) -> usize {
        if a.causal {
            i1.min(a.shape.s)
        } else {
            a.shape.s
        }
    }

    /// Output rows i0.. (`out`: bq×Ev) and their log-sum-exp.
    fn forward_block(&self, a: &AttnArgs, i0: usize, out: &mut [T], lse: &mut [T]) {
        let (bq, ev) = (lse.len(), a.shape.ev);
        let mut m = vec![T::neg_infinity(); bq];
        let mut l = vec![T::zero(); bq];
        out.fill(T::zero());
        let mut sb = vec![T::zero(); bq * BK];
        let end = Self::key_end(a, i0 + bq);
        for j0 in (0..end).step_by(BK) {
            let bk = BK.min(a.shape.s - j0);
            let sb = &mut sb[..bq * bk];
            self.scores(sb, a, (i0, bq), (j0, bk));
            for r in 0..bq {
                let row = &mut sb[r * bk..(r + 1) * bk];
                let mnew = num_traits::Float::max(m[r], max(row));
                if mnew == T::neg_infinity() {
                    row.fill(T::zero());
                    continue;
                }
                T::exp_shifted(row, mnew);
                let corr = (m[r] - mnew).exp();
                l[r] = l[r] * corr + sum(row);
                m[r] = mnew;
                if corr != T::one() {
                    for o in &mut out[r * ev..(r + 1) * ev] {
                        *o *= corr;
                    }
                }
            }
            self.drop(sb, a, (i0, bq), (j0, bk));
            mm(
                out,
                ev,
                (bq, ev, bk),
                mat(sb, bk, 1),
                self.v.rows_from(j0),
                true,
                T::one(),
            );
        }
        for r in 0..bq {
            if l[r] > T::zero() {
                let inv = T::one() / l[r];
                for o in &mut out[r * ev..(r + 1) * ev] {
                    *o *= inv;
                }
                lse[r] = m[r] + l[r].ln();
            } else {
                lse[r] = T::neg_infinity();
            }
        }
    }

    /// (dq, dk, dv) of this item (empty where not needed).
    #[allow(clippy::too_many_arguments)]
    fn backward(
        &self,
        a: &AttnArgs,
        out: Mat<'_, T>,
        lse: &[T],
        dout: Mat<'_, T>,
        needs: AttnNeeds,
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let s = a.shape;
        let (e, ev) = (s.e, s.ev);
        let zeros = |on: bool, len: usize| if on { vec![T::zero(); len] } else { Vec::new() };
        let (mut dq, mut dk, mut dv) = (
            zeros(needs.q, s.l * e),
            zeros(needs.k, s.s * e),
            zeros(needs.v, s.s * ev),
        );
        let scores_grad = needs.q || needs.k;
        // D = rowsum(dO ∘ O).
        let dd: Vec<T> = (0..s.l)
            .map(|i| {
                let (o, g) = (out.row(i, ev), dout.row(i, ev));
                o.iter().zip(g).fold(T::zero(), |acc, (&x, &y)| acc + x * y)
            })
            .collect();
        let (mut pb, mut pdb, mut dsb) = (
            vec![T::zero(); BQ * BK],
            vec![T::zero(); BQ * BK],
            vec![T::zero(); BQ * BK],
        );
        let scale = T::of(a.scale);
        for j0 in (0..s.s).step_by(BK) {
            let bk = BK.min(s.s - j0);
            let first = if a.causal { (j0 / BQ) * BQ } else { 0 };
            for i0 in (first..s.l).step_by(BQ) {
                let bq = BQ.min(s.l - i0);
                let n = bq * bk;
                let pb = &mut pb[..n];
                self.scores(pb, a, (i0, bq), (j0, bk));
                for r in 0..bq {
                    let row = &mut pb[r * bk..(r + 1) * bk];
                    if lse[i0 + r] == T::neg_infinity() {
                        row.fill(T::zero());
                    } else {
                        T::exp_shifted(row, lse[i0 + r]);
                    }
                }
                // Pd = P ∘ Z (the dropped, rescaled probabilities the forward used).
                let pd: &[T] = if a.dropout.is_some() {
                    let pdb = &mut pdb[..n];
                    pdb.copy_from_slice(pb);
                    self.drop(pdb, a, (i0, bq), (j0, bk));
                    pdb
                } else {
                    pb
                };
                let go = dout.rows_from(i0);
                if needs.v {
                    mm(
                        &mut dv[j0 * ev..],
                        ev,
                        (bk, ev, bq),
                        mat(pd, 1, bk),
                        go,
                        true,
                        T::one(),
                    );
                }
                if !scores_grad {
                    continue;
                }
                // dS = P ∘ (dP - D), dP = (dO Vᵀ) ∘ Z.
                let ds = &mut dsb[..n];
                mm(
                    ds,
                    bk,
                    (bq, bk, ev),
                    go,
                    self.v.rows_from(j0).t(),
                    false,
                    T::one(),
                );
                self.drop(ds, a, (i0, bq), (j0, bk));
                for r in 0..bq {
                    let d = dd[i0 + r];
                    for (x, &p) in ds[r * bk..(r + 1) * bk].iter_mut().zip(&pb[r * bk..]) {
                        *x = p * (*x - d);
                    }
                }
                if needs.q {
                    mm(
                        &mut dq[i0 * e..],
                        e,
                        (bq, e, bk),
                        mat(ds, bk, 1),
                        self.k.rows_from(j0),
                        true,
                        scale,
                    );
                }
                if needs.k {
                    mm(
                        &mut dk[j0 * e..],
                        e,
                        (bk, e, bq),
                        mat(ds, 1, bk),
                        self.q.rows_from(i0),
                        true,
                        scale,
                    );
                }
            }
        }
        (dq, dk, dv)
    }
}

fn forward<T: Flash>(
    q: &[T],
    k: &[T],
    v: &[T],
    mask: Option<&[T]>,
    a: &AttnArgs,
) -> (Vec<T>, Vec<T>) {
    let s = a.shape;
    let mut out = vec![T::zero(); s.n * s.l * s.ev];
    let mut lse = vec![T::neg_infinity(); s.n * s.l];
    if s.l == 0 || s.ev == 0 {
        return (out, lse);
    }
    out.par_chunks_mut(s.l * s.ev)
        .zip(lse.par_chunks_mut(s.l))
        .enumerate()
        .for_each(|(n, (o, ls))| {
            let item = Item::new(n, q, k, v, mask, a);
            o.par_chunks_mut(BQ * s.ev)
                .zip(ls.par_chunks_mut(BQ))
                .enumerate()
                .for_each(|(b, (ob, lb))| item.forward_block(a, b * BQ, ob, lb));
        });
    (out, lse)
}

#[allow(clippy::too_many_arguments)]
fn backward<T: Flash>(
    (q, k, v): (&[T], &[T], &[T]),
    mask: Option<&[T]>,
    out: &[T],
    lse: &[T],
    dout: &[T],
    a: &AttnArgs,
    needs: AttnNeeds,
) -> (Vec<T>, Vec<T>, Vec<T>) {
    let s = a.shape;
    let parts: Vec<(Vec<T>, Vec<T>, Vec<T>)> = (0..s.n)
        .into_par_iter()
        .map(|n| {
            let item = Item::new(n, q, k, v, mask, a);
            item.backward(
                a,
                Mat::item(out, a.out, n),
                &lse[n * s.l..(n + 1) * s.l],
                Mat::item(dout, a.dout, n),
                needs,
            )
        })
        .collect();
    let (mut dq, mut dk, mut dv) = (Vec::new(), Vec::new(), Vec::new());
    for (a, b, c) in parts {
        dq.extend(a);
        dk.extend(b);
        dv.extend(c);
    }
    (dq, dk, dv)
}

/// `f` on the slice of an optional mask tensor.
fn with_mask<T: Flash, R>(m: Option<&Tensor>, f: impl FnOnce(Option<&[T]>) -> R) -> Result<R> {
    match m {
        Some(t) => with_slice::<T, _>(t, |s| f(Some(s))),
        None => Ok(f(None)),
    }
}

impl AttentionOps for Cpu {
    /// See `AttentionOps::flash_forward`.
    fn flash_forward(
        &self,
        _name: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        a: &AttnArgs<'_>,
    ) -> Result<(Tensor, Tensor)> {
        let s = a.shape;
        let mask = a.mask.as_ref().map(|m| m.data);
        Ok(by_float!(q.dtype(), |T| {
            let (o, l) = with_storage::<T, _>(q, |q| {
                with_storage::<T, _>(k, |k| {
                    with_storage::<T, _>(v, |v| with_mask::<T, _>(mask, |m| forward(q, k, v, m, a)))
                })
            })????;
            (from_vec(o, &[s.n, s.l, s.ev])?, from_vec(l, &[s.n, s.l])?)
        }))
    }

    /// See `AttentionOps::flash_backward`.
    fn flash_backward(
        &self,
        _name: &'static str,
        q: &Tensor,
        k: &Tensor,
        v: &Tensor,
        out: &Tensor,
        lse: &Tensor,
        dout: &Tensor,
        a: &AttnArgs<'_>,
        needs: AttnNeeds,
    ) -> Result<AttnGrads> {
        let s = a.shape;
        let mask = a.mask.as_ref().map(|m| m.data);
        Ok(by_float!(q.dtype(), |T| {
            let (dq, dk, dv) = with_storage::<T, _>(q, |q| {
                with_storage::<T, _>(k, |k| {
                    with_storage::<T, _>(v, |v| {
                        with_mask::<T, _>(mask, |m| {
                            with_storage::<T, _>(out, |o| {
                                with_slice::<T, _>(lse, |l| {
                                    with_storage::<T, _>(dout, |g| {
                                        backward((q, k, v), m, o, l, g, a, needs)
                                    })
                                })
                            })
                        })
                    })
                })
            })???????;
            let wrap = |on: bool, d: Vec<T>, dims: &[usize]| -> Result<Option<Tensor>> {
                on.then(|| from_vec(d, dims)).transpose()
            };
            (
                wrap(needs.q, dq, &[s.n, s.l, s.e])?,
                wrap(needs.k, dk, &[s.n, s.s, s.e])?,
                wrap(needs.v, dv, &[s.n, s.s, s.ev])?,
            )
        }))
    }
}
