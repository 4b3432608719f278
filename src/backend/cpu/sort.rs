//! CPU kernels of sorting and searching: std's stable merge sort per line (rayon over
//! independent lines), a lexicographic stable sort of rows, runs of equal rows, and
//! `partition_point` binary searches. Why not candle's: its `arg_sort_last_dim` is not
//! stable, has no NaN order, and there is no search.

use std::cmp::Ordering;

use candle_core::{DType, Tensor};
use rayon::prelude::*;

use super::{Cpu, PAR_MIN};
use crate::backend::SortOps;
use crate::error::{CandleContext, Error, Result};

/// An element in PyTorch's sort order: NaN after every number, `-0.0 == 0.0`.
trait Key: Copy + Send + Sync + PartialEq + PartialOrd + candle_core::WithDType {
    fn order(a: &Self, b: &Self) -> Ordering;
}

#[allow(clippy::eq_op)]
fn float_order<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    match (a != a, b != b) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
    }
}

impl Key for f32 {
    fn order(a: &f32, b: &f32) -> Ordering {
        float_order(a, b)
    }
}

impl Key for f64 {
    fn order(a: &f64, b: &f64) -> Ordering {
        float_order(a, b)
    }
}

impl Key for i64 {
    fn order(a: &i64, b: &i64) -> Ordering {
        a.cmp(b)
    }
}

/// `x`'s elements (contiguous, 2-d) and its `(rows, n)`.
fn rows_of<T: Key>(x: &Tensor, op: &'static str) -> Result<(Vec<T>, usize, usize)> {
    let (rows, n) = x.dims2().op(op)?;
    Ok((x.flatten_all().op(op)?.to_vec1::<T>().op(op)?, rows, n))
}

fn long(v: Vec<i64>, dims: &[usize], x: &Tensor, op: &'static str) -> Result<Tensor> {
    Tensor::from_vec(v, dims, x.device()).op(op)
}

/// Run `f` on each `n`-element chunk of `out` (with its index), in parallel when big.
fn per_row<T: Send>(out: &mut [T], n: usize, total: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if n == 0 {
        return;
    }
    if total >= PAR_MIN {
        out.par_chunks_mut(n)
            .enumerate()
            .with_min_len((PAR_MIN / n).max(1))
            .for_each(|(r, o)| f(r, o));
    } else {
        out.chunks_mut(n).enumerate().for_each(|(r, o)| f(r, o));
    }
}

fn argsort_t<T: Key>(x: &Tensor, descending: bool) -> Result<Tensor> {
    let (v, rows, n) = rows_of::<T>(x, "sort")?;
    let mut out = vec![0i64; rows * n];
    per_row(&mut out, n, rows * n, |r, o| {
        let line = &v[r * n..(r + 1) * n];
        let mut perm: Vec<usize> = (0..n).collect();
        if descending {
            perm.sort_by(|&a, &b| T::order(&line[b], &line[a]));
        } else {
            perm.sort_by(|&a, &b| T::order(&line[a], &line[b]));
        }
        for (o, p) in o.iter_mut().zip(perm) {
            *o = p as i64;
        }
    });
    long(out, &[rows, n], x, "sort")
}

fn argsort_rows_t<T: Key>(x: &Tensor) -> Result<Tensor> {
    let (v, rows, m) = rows_of::<T>(x, "unique")?;
    let mut perm: Vec<usize> = (0..rows).collect();
    let row = |r: usize| &v[r * m..(r + 1) * m];
    let cmp = |&a: &usize, &b: &usize| {
        row(a)
            .iter()
            .zip(row(b))
            .map(|(p, q)| T::order(p, q))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    };
    if rows * m >= PAR_MIN {
        perm.par_sort_by(cmp);
    } else {
        perm.sort_by(cmp);
    }
    long(
        perm.into_iter().map(|p| p as i64).collect(),
        &[rows],
        x,
        "unique",
    )
}

fn run_ids_t<T: Key>(x: &Tensor) -> Result<Tensor> {
    let (v, rows, m) = rows_of::<T>(x, "unique")?;
    let mut out = Vec::with_capacity(rows);
    let mut id = 0i64;
    for r in 0..rows {
        if r > 0 && v[(r - 1) * m..r * m] != v[r * m..(r + 1) * m] {
            id += 1;
        }
        out.push(id);
    }
    // NaN != NaN: a row holding NaN never equals its predecessor, as the slice `!=` says.
    long(out, &[rows], x, "unique")
}

/// PyTorch's binary search, step for step (`cus_lower_bound`/`cus_upper_bound`), so a line
/// holding NaN gives the same answer: go right while `!(e >= x)` (left) or `!(e > x)`
/// (right). A NaN value lands after every element.
fn bound<T: PartialOrd>(line: &[T], x: &T, right: bool) -> usize {
    let (mut start, mut end) = (0, line.len());
    while start < end {
        let mid = start + (end - start) / 2;
        let Some(e) = line.get(mid) else { break };
        let go_right = match e.partial_cmp(x) {
            None | Some(Ordering::Less) => true,
            Some(Ordering::Equal) => right,
            Some(Ordering::Greater) => false,
        };
        if go_right {
            start = mid + 1;
        } else {
            end = mid;
        }
    }
    start
}

fn search_t<T: Key>(seq: &Tensor, values: &Tensor, right: bool) -> Result<Tensor> {
    let (s, srows, m) = rows_of::<T>(seq, "searchsorted")?;
    let (v, rows, n) = rows_of::<T>(values, "searchsorted")?;
    let mut out = vec![0i64; rows * n];
    per_row(
        &mut out,
        n,
        rows * n * (m.max(2).ilog2() as usize),
        |r, o| {
            let r_seq = if srows == 1 { 0 } else { r };
            let line = &s[r_seq * m..(r_seq + 1) * m];
            for (o, x) in o.iter_mut().zip(&v[r * n..(r + 1) * n]) {
                let p = bound(line, x, right);
                *o = p as i64;
            }
        },
    );
    long(out, &[rows, n], values, "searchsorted")
}

fn unsupported(op: &str, dt: DType) -> Error {
    Error::dtype(format!("{op}: unsupported compute dtype {dt:?}"))
}

/// `f::<T>(args)` for the compute dtype `dt` (f32, f64 or i64); others are `op`'s error.
macro_rules! per_dtype {
    ($dt:expr, $op:literal, $f:ident($($arg:expr),*)) => {
        match $dt {
            DType::F32 => $f::<f32>($($arg),*),
            DType::F64 => $f::<f64>($($arg),*),
            DType::I64 => $f::<i64>($($arg),*),
            dt => Err(unsupported($op, dt)),
        }
    };
}

impl SortOps for Cpu {
    fn argsort(&self, x: &Tensor, descending: bool) -> Result<Tensor> {
        per_dtype!(x.dtype(), "sort", argsort_t(x, descending))
    }

    fn argsort_rows(&self, x: &Tensor) -> Result<Tensor> {
        per_dtype!(x.dtype(), "unique", argsort_rows_t(x))
    }

    fn run_ids(&self, x: &Tensor) -> Result<Tensor> {
        per_dtype!(x.dtype(), "unique", run_ids_t(x))
    }

    fn search(&self, seq: &Tensor, values: &Tensor, right: bool) -> Result<Tensor> {
        per_dtype!(seq.dtype(), "searchsorted", search_t(seq, values, right))
    }
}
