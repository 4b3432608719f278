//! Dense decompositions on the CPU with faer: each matrix of a batch `(*, m, n)` is read
//! as a faer `MatRef` over the tensor's row-major elements, factored, and its factors are
//! written back row-major. Batches run in parallel (rayon) once they hold enough work;
//! faer itself runs sequentially per matrix, so the two never oversubscribe the cores.

use candle_core::{Tensor, WithDType};
use faer::linalg::triangular_solve as tri;
use faer::reborrow::ReborrowMut;
use faer::traits::RealField;
use faer::{Mat, MatMut, MatRef, Par, Side};
use rayon::prelude::*;

use super::dense::{by_float, from_vec, with_slice};
use super::Cpu;
use crate::backend::linalg::{LinalgOps, QrMode, WithInfo};
use crate::error::{Error, Result};

/// The float types faer factors and candle stores.
trait Float: RealField + WithDType + Copy + Send + Sync {}
impl Float for f32 {}
impl Float for f64 {}

/// Below this many elements in a batch, matrices are factored on one thread.
const PAR_BATCH_MIN: usize = 1 << 12;

/// `(batch dims, m, n)` of a tensor of rank >= 2.
fn split_dims(t: &Tensor) -> (Vec<usize>, usize, usize) {
    let d = t.dims();
    let r = d.len();
    (d[..r - 2].to_vec(), d[r - 2], d[r - 1])
}

/// `(matrix count, m, n)` of a tensor of rank >= 2.
fn shape3(t: &Tensor) -> (usize, usize, usize) {
    let (batch, m, n) = split_dims(t);
    (batch.iter().product(), m, n)
}

fn with_dims(batch: &[usize], tail: &[usize]) -> Vec<usize> {
    batch.iter().chain(tail).copied().collect()
}

/// `f(A_i)` for each of the `count` matrices of `s` (row-major `m × n` blocks), in order.
fn each<T: Float, R: Send>(
    s: &[T],
    (count, m, n): (usize, usize, usize),
    f: impl Fn(MatRef<'_, T>) -> R + Sync + Send,
) -> Vec<R> {
    let size = m * n;
    let one = |i: usize| {
        f(MatRef::from_row_major_slice(
            &s[i * size..(i + 1) * size],
            m,
            n,
        ))
    };
    if count > 1 && count * size * m.max(n) >= PAR_BATCH_MIN {
        (0..count).into_par_iter().map(one).collect()
    } else {
        (0..count).map(one).collect()
    }
}

/// A matrix's elements, row-major, appended to `out`.
fn push_rows<T: Float>(out: &mut Vec<T>, a: MatRef<'_, T>) {
    for i in 0..a.nrows() {
        for j in 0..a.ncols() {
            out.push(a[(i, j)]);
        }
    }
}

/// Concatenate per-matrix results into one tensor of shape `dims`.
fn gather<T: Float>(parts: impl IntoIterator<Item = Vec<T>>, dims: &[usize]) -> Result<Tensor> {
    let mut v = Vec::with_capacity(dims.iter().product());
    for p in parts {
        v.extend(p);
    }
    from_vec(v, dims)
}

fn empty<T: Float>() -> Result<Tensor> {
    from_vec(Vec::<T>::new(), &[0])
}

/// LAPACK's sequential row swaps (1-based) that apply the permutation `fwd` (row `i` of
/// `P A` is row `fwd[i]` of `A`), for the first `k` rows.
fn swaps_of(fwd: &[usize], k: usize) -> Vec<i32> {
    let m = fwd.len();
    let mut at: Vec<usize> = (0..m).collect(); // at[pos]: the original row now at pos
    let mut pos: Vec<usize> = (0..m).collect(); // pos[row]: where the original row is now
    let mut piv = Vec::with_capacity(k);
    for (i, &r) in fwd.iter().enumerate().take(k) {
        let j = pos[r];
        piv.push(j as i32 + 1);
        at.swap(i, j);
        pos[at[i]] = i;
        pos[at[j]] = j;
    }
    piv
}

/// Packed LU, pivots and info of one matrix.
fn lu_one<T: Float>(a: MatRef<'_, T>) -> (Vec<T>, Vec<i32>, i32) {
    let (m, n) = (a.nrows(), a.ncols());
    let k = m.min(n);
    let lu = a.partial_piv_lu();
    let (l, u) = (lu.L(), lu.U());
    let mut packed = Vec::with_capacity(m * n);
    for i in 0..m {
        for j in 0..n {
            packed.push(if i > j { l[(i, j)] } else { u[(i, j)] });
        }
    }
    let info = (0..k)
        .find(|&i| u[(i, i)] == T::from_f64(0.0))
        .map_or(0, |i| i as i32 + 1);
    (packed, swaps_of(lu.P().arrays().0, k), info)
}

fn lu_factor_t<T: Float>(a: &Tensor) -> Result<WithInfo<(Tensor, Tensor)>> {
    let (batch, m, n) = split_dims(a);
    let k = m.min(n);
    let parts = with_slice(a, |s: &[T]| each(s, shape3(a), lu_one))?;
    let mut lu = Vec::with_capacity(parts.len() * m * n);
    let mut piv = Vec::with_capacity(parts.len() * k);
    let mut info = Vec::with_capacity(parts.len());
    for (p, q, i) in parts {
        lu.extend(p);
        piv.extend(q);
        info.push(i);
    }
    let lu = from_vec(lu, &with_dims(&batch, &[m, n]))?;
    let piv = from_vec(piv, &with_dims(&batch, &[k]))?;
    Ok(((lu, piv), from_vec(info, &batch)?))
}

/// `A⁻¹ B` (`A⁻ᵀ B`) in place in `b`, from packed `lu` and 1-based `piv`.
fn lu_solve_one<T: Float>(lu: MatRef<'_, T>, piv: &[i32], mut b: MatMut<'_, T>, transpose: bool) {
    let swap = |b: &mut MatMut<'_, T>, i: usize| {
        let j = (piv[i] as usize).saturating_sub(1);
        if j != i && j < b.nrows() {
            for c in 0..b.ncols() {
                let t = b[(i, c)];
                b[(i, c)] = b[(j, c)];
                b[(j, c)] = t;
            }
        }
    };
    if transpose {
        tri::solve_lower_triangular_in_place(lu.transpose(), b.rb_mut(), Par::Seq);
        tri::solve_unit_upper_triangular_in_place(lu.transpose(), b.rb_mut(), Par::Seq);
        for i in (0..piv.len()).rev() {
            swap(&mut b, i);
        }
    } else {
        for i in 0..piv.len() {
            swap(&mut b, i);
        }
        tri::solve_unit_lower_triangular_in_place(lu, b.rb_mut(), Par::Seq);
        tri::solve_upper_triangular_in_place(lu, b.rb_mut(), Par::Seq);
    }
}

fn lu_solve_t<T: Float>(lu: &Tensor, piv: &Tensor, b: &Tensor, transpose: bool) -> Result<Tensor> {
    let (batch, n, _) = split_dims(lu);
    let k = b.dims()[b.rank() - 1];
    let piv: Vec<i32> = with_slice(piv, |p: &[i32]| p.to_vec())?;
    let lus: Vec<T> = with_slice(lu, |s: &[T]| s.to_vec())?;
    let parts = with_slice(b, |s: &[T]| {
        let count = shape3(b).0;
        let one = |i: usize| {
            let a = MatRef::from_row_major_slice(&lus[i * n * n..(i + 1) * n * n], n, n);
            let mut x =
                MatRef::from_row_major_slice(&s[i * n * k..(i + 1) * n * k], n, k).to_owned();
            lu_solve_one(a, &piv[i * n..(i + 1) * n], x.as_mut(), transpose);
            let mut v = Vec::with_capacity(n * k);
            push_rows(&mut v, x.as_ref());
            v
        };
        if count > 1 && count * n * n * k >= PAR_BATCH_MIN {
            (0..count).into_par_iter().map(one).collect::<Vec<_>>()
        } else {
            (0..count).map(one).collect()
        }
    })?;
    gather(parts, &with_dims(&batch, &[n, k]))
}

fn slogdet_t<T: Float>(a: &Tensor) -> Result<(Tensor, Tensor)> {
    let (batch, n, _) = split_dims(a);
    let parts = with_slice(a, |s: &[T]| {
        each(s, shape3(a), |m: MatRef<'_, T>| {
            let (packed, piv, _) = lu_one(m);
            let mut sign = 1.0f64;
            let mut log = 0.0f64;
            for i in 0..n {
                let d = packed[i * n + i].to_f64();
                if d < 0.0 {
                    sign = -sign;
                }
                if piv[i] as usize != i + 1 {
                    sign = -sign;
                }
                log += d.abs().ln();
            }
            if log == f64::NEG_INFINITY {
                sign = 0.0;
            }
            (T::from_f64(sign), T::from_f64(log))
        })
    })?;
    let (sign, log): (Vec<T>, Vec<T>) = parts.into_iter().unzip();
    Ok((from_vec(sign, &batch)?, from_vec(log, &batch)?))
}

fn cholesky_t<T: Float>(a: &Tensor, upper: bool) -> Result<WithInfo<Tensor>> {
    let (batch, n, _) = split_dims(a);
    let parts = with_slice(a, |s: &[T]| {
        each(s, shape3(a), |m: MatRef<'_, T>| {
            // PyTorch reads the lower triangle (upper=False) or the upper one.
            let side = if upper { Side::Upper } else { Side::Lower };
            let mut v = Vec::with_capacity(n * n);
            match m.llt(side) {
                Ok(llt) => {
                    let l = llt.L();
                    let f = if upper { l.transpose() } else { l };
                    push_rows(&mut v, f);
                    (v, 0)
                }
                Err(faer::linalg::cholesky::llt::factor::LltError::NonPositivePivot { index }) => {
                    v.resize(n * n, T::from_f64(0.0));
                    (v, index as i32 + 1)
                }
            }
        })
    })?;
    let info = from_vec(parts.iter().map(|p| p.1).collect::<Vec<i32>>(), &batch)?;
    Ok((
        gather(parts.into_iter().map(|p| p.0), &with_dims(&batch, &[n, n]))?,
        info,
    ))
}

fn qr_t<T: Float>(a: &Tensor, mode: QrMode) -> Result<(Tensor, Tensor)> {
    let (batch, m, n) = split_dims(a);
    let k = m.min(n);
    let (qc, rr) = match mode {
        QrMode::Complete => (m, m),
        QrMode::Reduced | QrMode::R => (k, k),
    };
    let parts = with_slice(a, |s: &[T]| {
        each(s, shape3(a), |x: MatRef<'_, T>| {
            let qr = x.qr();
            let mut q = Vec::new();
            if mode != QrMode::R {
                let qm = if mode == QrMode::Complete {
                    qr.compute_Q()
                } else {
                    qr.compute_thin_Q()
                };
                push_rows(&mut q, qm.as_ref());
            }
            let r = qr.R();
            let mut rv = Vec::with_capacity(rr * n);
            for i in 0..rr {
                for j in 0..n {
                    rv.push(if i <= j && i < r.nrows() {
                        r[(i, j)]
                    } else {
                        T::from_f64(0.0)
                    });
                }
            }
            (q, rv)
        })
    })?;
    let (q, r): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let q = if mode == QrMode::R {
        empty::<T>()?
    } else {
        gather(q, &with_dims(&batch, &[m, qc]))?
    };
    Ok((q, gather(r, &with_dims(&batch, &[rr, n]))?))
}

fn not_converged(name: &str) -> Error {
    Error::LinAlg(format!(
        "{name}: The algorithm failed to converge because the input matrix is ill-conditioned \
         or has too many repeated singular values"
    ))
}

type Svd3<T> = (Vec<T>, Vec<T>, Vec<T>);

fn svd_t<T: Float>(
    name: &str,
    a: &Tensor,
    full: bool,
    vectors: bool,
) -> Result<(Tensor, Tensor, Tensor)> {
    let (batch, m, n) = split_dims(a);
    let k = m.min(n);
    let (uc, vr) = if full { (m, n) } else { (k, k) };
    let parts = with_slice(a, |s: &[T]| {
        each(s, shape3(a), |x: MatRef<'_, T>| -> Option<Svd3<T>> {
            if !vectors {
                let sv = x.singular_values().ok()?;
                return Some((Vec::new(), sv, Vec::new()));
            }
            let svd = if full { x.svd() } else { x.thin_svd() }.ok()?;
            let (mut u, mut vh) = (Vec::with_capacity(m * uc), Vec::with_capacity(vr * n));
            push_rows(&mut u, svd.U());
            push_rows(&mut vh, svd.V().transpose());
            let sv = svd.S().column_vector().iter().copied().collect();
            Some((u, sv, vh))
        })
    })?;
    let parts: Vec<Svd3<T>> = parts
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| not_converged(name))?;
    let mut u = Vec::new();
    let mut sv = Vec::new();
    let mut vh = Vec::new();
    for (a, b, c) in parts {
        u.push(a);
        sv.push(b);
        vh.push(c);
    }
    let sv = gather(sv, &with_dims(&batch, &[k]))?;
    if !vectors {
        return Ok((empty::<T>()?, sv, empty::<T>()?));
    }
    Ok((
        gather(u, &with_dims(&batch, &[m, uc]))?,
        sv,
        gather(vh, &with_dims(&batch, &[vr, n]))?,
    ))
}

fn eigh_t<T: Float>(
    name: &str,
    a: &Tensor,
    upper: bool,
    vectors: bool,
) -> Result<(Tensor, Tensor)> {
    let (batch, n, _) = split_dims(a);
    let side = if upper { Side::Upper } else { Side::Lower };
    let parts = with_slice(a, |s: &[T]| {
        each(
            s,
            shape3(a),
            |x: MatRef<'_, T>| -> Option<(Vec<T>, Vec<T>)> {
                if !vectors {
                    return Some((x.self_adjoint_eigenvalues(side).ok()?, Vec::new()));
                }
                let e = x.self_adjoint_eigen(side).ok()?;
                let mut v = Vec::with_capacity(n * n);
                push_rows(&mut v, e.U());
                Some((e.S().column_vector().iter().copied().collect(), v))
            },
        )
    })?;
    let parts: Vec<(Vec<T>, Vec<T>)> = parts
        .into_iter()
        .collect::<Option<_>>()
        .ok_or_else(|| not_converged(name))?;
    let (w, v): (Vec<_>, Vec<_>) = parts.into_iter().unzip();
    let w = gather(w, &with_dims(&batch, &[n]))?;
    let v = if vectors {
        gather(v, &with_dims(&batch, &[n, n]))?
    } else {
        empty::<T>()?
    };
    Ok((w, v))
}

fn solve_triangular_t<T: Float>(a: &Tensor, b: &Tensor, upper: bool, unit: bool) -> Result<Tensor> {
    let (batch, n, _) = split_dims(a);
    let k = b.dims()[b.rank() - 1];
    let av: Vec<T> = with_slice(a, |s: &[T]| s.to_vec())?;
    let parts = with_slice(b, |s: &[T]| {
        each(s, shape3(b), |x: MatRef<'_, T>| x.to_owned())
            .into_iter()
            .enumerate()
            .map(|(i, mut x): (usize, Mat<T>)| {
                let t = MatRef::from_row_major_slice(&av[i * n * n..(i + 1) * n * n], n, n);
                match (upper, unit) {
                    (false, false) => tri::solve_lower_triangular_in_place(t, x.as_mut(), Par::Seq),
                    (false, true) => {
                        tri::solve_unit_lower_triangular_in_place(t, x.as_mut(), Par::Seq)
                    }
                    (true, false) => tri::solve_upper_triangular_in_place(t, x.as_mut(), Par::Seq),
                    (true, true) => {
                        tri::solve_unit_upper_triangular_in_place(t, x.as_mut(), Par::Seq)
                    }
                }
                let mut v = Vec::with_capacity(n * k);
                push_rows(&mut v, x.as_ref());
                v
            })
            .collect::<Vec<_>>()
    })?;
    gather(parts, &with_dims(&batch, &[n, k]))
}

impl LinalgOps for Cpu {
    fn lu_factor(&self, _: &'static str, a: &Tensor) -> Result<WithInfo<(Tensor, Tensor)>> {
        by_float!(a.dtype(), |T| lu_factor_t::<T>(a))
    }
    fn lu_solve(
        &self,
        _: &'static str,
        lu: &Tensor,
        pivots: &Tensor,
        b: &Tensor,
        transpose: bool,
    ) -> Result<Tensor> {
        by_float!(lu.dtype(), |T| lu_solve_t::<T>(lu, pivots, b, transpose))
    }
    fn slogdet(&self, _: &'static str, a: &Tensor) -> Result<(Tensor, Tensor)> {
        by_float!(a.dtype(), |T| slogdet_t::<T>(a))
    }
    fn cholesky(&self, _: &'static str, a: &Tensor, upper: bool) -> Result<WithInfo<Tensor>> {
        by_float!(a.dtype(), |T| cholesky_t::<T>(a, upper))
    }
    fn qr(&self, _: &'static str, a: &Tensor, mode: QrMode) -> Result<(Tensor, Tensor)> {
        by_float!(a.dtype(), |T| qr_t::<T>(a, mode))
    }
    fn svd(
        &self,
        name: &'static str,
        a: &Tensor,
        full_matrices: bool,
        vectors: bool,
    ) -> Result<(Tensor, Tensor, Tensor)> {
        by_float!(a.dtype(), |T| svd_t::<T>(name, a, full_matrices, vectors))
    }
    fn eigh(
        &self,
        name: &'static str,
        a: &Tensor,
        upper: bool,
        vectors: bool,
    ) -> Result<(Tensor, Tensor)> {
        by_float!(a.dtype(), |T| eigh_t::<T>(name, a, upper, vectors))
    }
    fn solve_triangular(
        &self,
        _: &'static str,
        a: &Tensor,
        b: &Tensor,
        upper: bool,
        unitriangular: bool,
    ) -> Result<Tensor> {
        by_float!(a.dtype(), |T| solve_triangular_t::<T>(
            a,
            b,
            upper,
            unitriangular
        ))
    }
}
