//! Matrix products on the CPU: the `gemm` crate (candle's own matmul crate, same version)
//! called on the operands' own strides. Why not candle's `Tensor::matmul`, which calls the
//! same crate: it takes only row- or column-major matrices under one batch stride (others
//! had to be copied dense, and a broadcast batch expanded), zero-fills an output that gemm
//! then overwrites, runs a batch one small product after another, and sizes its threads
//! from `RAYON_NUM_THREADS` instead of the pool the op runs on. `benches/gemm_compare.rs`
//! times this against candle's matmul, faer and PyTorch.
//!
//! gemm packs its operands into blocks itself, so any strides work without a copy: a
//! transposed weight, a broadcast batch (stride 0) or a sliced view are read in place.

use std::mem::MaybeUninit;

use candle_core::{DType, Storage, Tensor, WithDType};
use gemm::Parallelism;
use half::f16;
use rayon::prelude::*;

use super::Cpu;
use crate::backend::matmul::{candle_matmul, MatmulOps};
use crate::error::{CandleContext, Error, Result};

/// A batch of products smaller than this (m·n·k) runs one matrix per task; larger ones each
/// run on all threads in turn (gemm splits one product across threads from 48·48·256 up).
const PER_MATRIX_MIN: usize = 48 * 48 * 256;

/// A strided operand: its elements, the offset of each batch item, and the row and column
/// strides of its matrices.
struct Operand<'a, T> {
    data: &'a [T],
    offsets: Vec<usize>,
    rs: isize,
    cs: isize,
}

/// The offset of every batch item of `t` (row-major over the batch dims), from its layout.
fn batch_offsets(t: &Tensor) -> Vec<usize> {
    let l = t.layout();
    let r = l.dims().len();
    let mut offsets = vec![l.start_offset()];
    for (&d, &s) in l.dims()[..r - 2].iter().zip(&l.stride()[..r - 2]) {
        offsets = offsets
            .iter()
            .flat_map(|&o| (0..d).map(move |i| o + i * s))
            .collect();
    }
    offsets
}

/// `f(operand)` for the elements of a CPU tensor of dtype `T`.
fn with_operand<T: WithDType, R>(t: &Tensor, f: impl FnOnce(Operand<'_, T>) -> R) -> Result<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(Error::NotImplemented(
            "matmul: the CPU kernel got a tensor on another device".into(),
        ));
    };
    let r = layout.dims().len();
    let stride = layout.stride();
    Ok(f(Operand {
        data: cpu.as_slice::<T>().op("matmul")?,
        offsets: batch_offsets(t),
        rs: stride[r - 2] as isize,
        cs: stride[r - 1] as isize,
    }))
}

/// `a @ b` for f16/f32/f64 operands of rank >= 2 with the same batch dims, any strides.
pub fn product(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    match a.dtype() {
        DType::F16 => typed::<f16>(a, b),
        DType::F32 => typed::<f32>(a, b),
        DType::F64 => typed::<f64>(a, b),
        _ => candle_matmul(a, b),
    }
}

fn typed<T: WithDType>(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ad, bd) = (a.dims(), b.dims());
    let r = ad.len();
    let (m, k, n) = (ad[r - 2], ad[r - 1], bd[r - 1]);
    let mut dims = ad[..r - 1].to_vec();
    dims.push(n);
    let count: usize = ad[..r - 2].iter().product();
    let size = m * n;
    if size * count == 0 || k == 0 {
        return crate::device::zeros(dims, T::DTYPE, a.device()).op("matmul");
    }
    let threads = rayon::current_num_threads().max(1);
    let out = with_operand::<T, _>(a, |lhs| {
        with_operand::<T, _>(b, |rhs| {
            let mut out: Vec<T> = Vec::with_capacity(count * size);
            let one = |i: usize, dst: &mut [MaybeUninit<T>], par: Parallelism| {
                // SAFETY: candle's layout keeps every element of batch item i (its offset
                // plus (m-1)·rs + (k-1)·cs, and likewise for rhs) inside the storage, and
                // dst holds m·n elements; gemm writes each of them (read_dst = false) and
                // reads nothing of dst.
                unsafe {
                    gemm::gemm(
                        m,
                        n,
                        k,
                        dst.as_mut_ptr().cast::<T>(),
                        1,
                        n as isize,
                        false,
                        lhs.data.as_ptr().add(lhs.offsets[i]),
                        lhs.cs,
                        lhs.rs,
                        rhs.data.as_ptr().add(rhs.offsets[i]),
                        rhs.cs,
                        rhs.rs,
                        T::zero(),
                        T::one(),
                        false,
                        false,
                        false,
                        par,
                    )
                }
            };
            let spare = &mut out.spare_capacity_mut()[..count * size];
            if count > 1 && threads > 1 && m * n * k < PER_MATRIX_MIN {
                spare
                    .par_chunks_mut(size)
                    .enumerate()
                    .for_each(|(i, dst)| one(i, dst, Parallelism::None));
            } else {
                let par = if threads > 1 {
                    Parallelism::Rayon(threads)
                } else {
                    Parallelism::None
                };
                for (i, dst) in spare.chunks_mut(size).enumerate() {
                    one(i, dst, par);
                }
            }
            // SAFETY: every one of the count·size elements was written above.
            unsafe { out.set_len(count * size) };
            out
        })
    })??;
    Tensor::from_vec(out, dims, a.device()).op("matmul")
}

impl MatmulOps for Cpu {
    fn matmul(&self, a: &Tensor, b: &Tensor) -> Result<Tensor> {
        product(a, b)
    }
}
