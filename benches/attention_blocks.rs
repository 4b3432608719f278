//! The block products of the CPU attention kernel (backend/cpu/attention.rs), through the
//! `gemm` crate against hand-written loops, on one thread at the kernel's block size (64
//! queries × 64 keys, head dim 64, f32): which one the kernel should use.
//!
//! cargo run --profile dev-release --example attention_blocks

use std::hint::black_box;

const B: usize = 64;
const E: usize = 64;
const REPEAT: usize = 2000;

#[path = "timing.rs"]
mod timing;

fn median_us(f: impl FnMut()) -> f64 {
    timing::median_ms(REPEAT, f) * 1e3
}

/// S (B×B) = Q (B×E) Kᵀ through gemm.
fn scores_gemm(s: &mut [f32], q: &[f32], k: &[f32]) {
    // SAFETY: the slices hold B×E and B×B elements, as the strides say.
    unsafe {
        gemm::gemm(
            B,
            B,
            E,
            s.as_mut_ptr(),
            1,
            B as isize,
            false,
            q.as_ptr(),
            1,
            E as isize,
            k.as_ptr(),
            E as isize,
            1,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// S = Q Kᵀ as dot products with 8 partial sums (vectorisable without fast-math).
fn scores_loops(s: &mut [f32], q: &[f32], k: &[f32]) {
    for (i, srow) in s.chunks_exact_mut(B).enumerate() {
        let qi = &q[i * E..(i + 1) * E];
        for (j, x) in srow.iter_mut().enumerate() {
            let kj = &k[j * E..(j + 1) * E];
            let mut acc = [0f32; 8];
            for (a, b) in qi.chunks_exact(8).zip(kj.chunks_exact(8)) {
                for l in 0..8 {
                    acc[l] += a[l] * b[l];
                }
            }
            *x = acc.iter().sum();
        }
    }
}

/// O (B×E) += P (B×B) V (B×E) through gemm.
fn pv_gemm(o: &mut [f32], p: &[f32], v: &[f32]) {
    // SAFETY: as above.
    unsafe {
        gemm::gemm(
            B,
            E,
            B,
            o.as_mut_ptr(),
            1,
            E as isize,
            true,
            p.as_ptr(),
            1,
            B as isize,
            v.as_ptr(),
            1,
            E as isize,
            1.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
}

/// O += P V as rows of axpy.
fn pv_loops(o: &mut [f32], p: &[f32], v: &[f32]) {
    for (orow, prow) in o.chunks_exact_mut(E).zip(p.chunks_exact(B)) {
        for (&pj, vrow) in prow.iter().zip(v.chunks_exact(E)) {
            for (x, &y) in orow.iter_mut().zip(vrow) {
                *x += pj * y;
            }
        }
    }
}

fn main() {
    let data = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| ((i as u32).wrapping_mul(2654435761) ^ seed) as f32 / u32::MAX as f32 - 0.5)
            .collect()
    };
    let (q, k, p) = (data(B * E, 1), data(B * E, 2), data(B * B, 3));
    let (mut s, mut o) = (vec![0f32; B * B], vec![0f32; B * E]);
    let flops = (2 * B * B * E) as f64;
    println!("| block product ({B}x{B}x{E}, f32, 1 thread) | gemm µs | loops µs | gemm GFLOP/s | loops GFLOP/s |");
    println!("|---|---|---|---|---|");
    let a = median_us(|| scores_gemm(black_box(&mut s), black_box(&q), black_box(&k)));
    let b = median_us(|| scores_loops(black_box(&mut s), black_box(&q), black_box(&k)));
    println!(
        "| S = Q Kᵀ | {a:.2} | {b:.2} | {:.1} | {:.1} |",
        flops / a / 1e3,
        flops / b / 1e3
    );
    let a = median_us(|| pv_gemm(black_box(&mut o), black_box(&p), black_box(&k)));
    let b = median_us(|| pv_loops(black_box(&mut o), black_box(&p), black_box(&k)));
    println!(
        "| O += P V | {a:.2} | {b:.2} | {:.1} | {:.1} |",
        flops / a / 1e3,
        flops / b / 1e3
    );
}
