//! Adafactor's step (Shazeer & Stern 2018, with PyTorch's `torch.optim.Adafactor`
//! formulas and order). Not an element-wise walk like the other rules: a matrix's second
//! moment is kept as a row and a column variance (R + C numbers instead of R × C), and the
//! step is scaled by the parameter's norm and clipped by the update's. The update is never
//! stored: it is computed once to measure its norm and again to apply it, so the step
//! allocates nothing the size of the parameter (PyTorch's makes several such temporaries).

use num_traits::Float;
use rayon::prelude::*;

use super::optim::{lerp, Elem, Prep};
use super::scalar::Real;
use super::PAR_MIN;
use crate::backend::{AdafactorStep, GradPrep};

/// `f(i)` summed over `0..n`, in parallel when the work is large.
fn sum_over(n: usize, par: bool, f: impl Fn(usize) -> f64 + Sync + Send) -> f64 {
    if par {
        (0..n).into_par_iter().map(f).sum()
    } else {
        (0..n).map(f).sum()
    }
}

/// `f(i, row)` over the rows of width `width` of `v`, in parallel when the work is large.
fn each_row<T: Send>(v: &mut [T], width: usize, par: bool, f: impl Fn(usize, &mut [T]) + Sync) {
    if par {
        v.par_chunks_mut(width)
            .enumerate()
            .for_each(|(i, r)| f(i, r));
    } else {
        v.chunks_mut(width).enumerate().for_each(|(i, r)| f(i, r));
    }
}

/// The column sums of `f(r, j)` over a `rows` × `cols` matrix, read row by row.
fn column_sums(
    rows: usize,
    cols: usize,
    par: bool,
    f: impl Fn(usize, usize) -> f64 + Sync + Send,
) -> Vec<f64> {
    let add_row = |mut acc: Vec<f64>, r: usize| {
        acc.iter_mut().enumerate().for_each(|(j, a)| *a += f(r, j));
        acc
    };
    if par {
        (0..rows)
            .into_par_iter()
            .fold(|| vec![0.0; cols], add_row)
            .reduce(
                || vec![0.0; cols],
                |mut a, b| {
                    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
                    a
                },
            )
    } else {
        (0..rows).fold(vec![0.0; cols], add_row)
    }
}

fn sq(x: f64) -> f64 {
    x * x
}

/// One Adafactor step of `p` with gradient `g`; `bufs` is `[row_var, col_var]` for a
/// matrix (shapes `[..., R, 1]` and `[..., 1, C]`) or `[variance]`.
pub(super) fn run<E: Elem>(
    p: &mut [E],
    g: &[E],
    mut bufs: Vec<&mut [E]>,
    s: &AdafactorStep,
    prep: &GradPrep,
) {
    let n = p.len();
    if n == 0 {
        return;
    }
    let prep = Prep::<E::C>::new(prep);
    let c = |v: f64| E::C::of(v);
    let grad = |i: usize| prep.apply(g[i].load());
    let par = n >= PAR_MIN;
    let eps1 = s.eps1.unwrap_or(E::EPS);
    let eps1_sq = c(eps1 * eps1);

    // The step size reads the parameter before weight decay.
    let p_norm = sum_over(n, par, |i| sq(p[i].load().widen())).sqrt();
    let alpha = s.eps2.max(p_norm / (n as f64).sqrt()) * s.rho;
    if s.weight_decay != 0.0 {
        let keep = c(1.0 - s.lr * s.weight_decay);
        each_row(p, n.min(PAR_MIN), par, |_, r| {
            r.iter_mut().for_each(|x| *x = E::store(x.load() * keep))
        });
    }
    let w = c(s.beta2_weight);

    // `scale(i)`: the factor `rsqrt(max(variance estimate, eps1^2))` of element i.
    let update_norm_sq;
    let apply: Box<dyn Fn(usize) -> E::C + Sync + '_>;
    match s.matrix {
        Some((rows, cols)) => {
            let [row_var, col_var] = <[&mut [E]; 2]>::try_from(std::mem::take(&mut bufs))
                .unwrap_or_else(|_| unreachable!("a matrix has a row and a column variance"));
            let batch = n / (rows * cols);
            let sq_g = |i: usize| sq(grad(i).widen());
            each_row(row_var, 1, par, |br, v| {
                let start = br * cols;
                let mean = sum_over(cols, false, |j| sq_g(start + j)) / cols as f64;
                v[0] = E::store(lerp(v[0].load(), c(mean), w));
            });
            for (b, cv) in col_var.chunks_mut(cols).enumerate() {
                let base = b * rows * cols;
                let sums = column_sums(rows, cols, par, |r, j| sq_g(base + r * cols + j));
                for (v, sum) in cv.iter_mut().zip(sums) {
                    *v = E::store(lerp(v.load(), c(sum / rows as f64), w));
                }
            }
            let (row_var, col_var) = (&*row_var, &*col_var);
            // Per matrix: the mean row variance, clamped below by eps1.
            let row_means: Vec<E::C> = (0..batch)
                .map(|b| {
                    let m = row_var[b * rows..(b + 1) * rows]
                        .iter()
                        .map(|v| v.load())
                        .fold(c(0.0), |a, v| a + v)
                        / c(rows as f64);
                    if m < c(eps1) {
                        c(eps1)
                    } else {
                        m
                    }
                })
                .collect();
            let scale = move |i: usize| {
                let (br, j) = (i / cols, i % cols);
                let b = br / rows;
                let est = row_var[br].load() * col_var[b * cols + j].load() / row_means[b];
                let est = if est < eps1_sq { eps1_sq } else { est };
                c(1.0) / est.sqrt()
            };
            update_norm_sq = sum_over(n / cols, par, |br| {
                (0..cols)
                    .map(|j| {
                        let i = br * cols + j;
                        sq((grad(i) * scale(i)).widen())
                    })
                    .sum()
            });
            apply = Box::new(move |i| grad(i) * scale(i));
        }
        None => {
            let [variance] = <[&mut [E]; 1]>::try_from(std::mem::take(&mut bufs))
                .unwrap_or_else(|_| unreachable!("a vector has one variance"));
            each_row(variance, n.min(PAR_MIN), par, |k, v| {
                let start = k * n.min(PAR_MIN);
                for (j, x) in v.iter_mut().enumerate() {
                    let gi = grad(start + j);
                    *x = E::store(lerp(x.load(), gi * gi, w));
                }
            });
            let variance = &*variance;
            let scale = move |i: usize| {
                let v = variance[i].load();
                let v = if v < eps1_sq { eps1_sq } else { v };
                c(1.0) / v.sqrt()
            };
            update_norm_sq = sum_over(n, par, |i| sq((grad(i) * scale(i)).widen()));
            apply = Box::new(move |i| grad(i) * scale(i));
        }
    }
    let denom = 1.0f64.max(update_norm_sq.sqrt() / ((n as f64).sqrt() * s.d));
    let coef = c(-alpha / denom);
    let width = s.matrix.map_or(n.min(PAR_MIN), |(_, cols)| cols);
    each_row(p, width, par, |k, r| {
        for (j, x) in r.iter_mut().enumerate() {
            *x = E::store(x.load() + coef * apply(k * width + j));
        }
    });
}
