//! The matrix products of the bench workloads through each candidate GEMM, float32, on the
//! layouts gradstream hands them (a transposed operand is a strided view, never a copy):
//!
//! - `candle`: `Tensor::matmul`, the path every gradstream matmul took before (a zero-filled
//!   output, then the `gemm` crate with `Parallelism::Rayon(RAYON_NUM_THREADS)`);
//! - `gemm`: the same `gemm` 0.19 called directly on the strided operands into an unfilled
//!   output (its AVX-512 kernels only with the `avx512` feature, on by default);
//! - `faer`: `faer::linalg::matmul` (its own x86 kernels, AVX-512 detected at run time);
//! - `ours`: gradstream's CPU backend product (`backend::cpu::matmul`).
//!
//! Each product runs on a rayon pool of `--threads` threads (2 by default), except the rows
//! marked `1t`: conv and attention call their GEMMs from one worker per thread. Times are the
//! median of 7 batches after a warm-up. `--json` prints one JSON object per row instead of the
//! table, for `benches/gemm_compare.py`, which adds PyTorch's `torch.mm` beside them.
//!
//! cargo run --profile dev-release --example gemm_compare -- [--threads 2] [--json]

use std::hint::black_box;
use std::time::Instant;

use _core::backend::cpu::matmul as ours;
use candle_core::{Device, Tensor};
use faer::{Accum, MatMut, MatRef, Par};
use gemm::Parallelism;

#[path = "timing.rs"]
mod timing;

/// One product `(m, k) @ (k, n)`: which operands are transposed views of row-major
/// buffers, and whether it runs on one thread.
#[derive(Clone, Copy)]
struct Shape {
    name: &'static str,
    m: usize,
    n: usize,
    k: usize,
    lhs_t: bool,
    rhs_t: bool,
    single: bool,
}

const fn mm(name: &'static str, m: usize, n: usize, k: usize, lhs_t: bool, rhs_t: bool) -> Shape {
    Shape {
        name,
        m,
        n,
        k,
        lhs_t,
        rhs_t,
        single: false,
    }
}

const fn one_thread(s: Shape) -> Shape {
    Shape { single: true, ..s }
}

/// Forward `x @ Wᵀ`, input gradient `g @ W`, weight gradient `gᵀ @ x` of a Linear layer
/// `(rows, fin) -> (rows, fout)`.
const fn linear(
    fwd: &'static str,
    dx: &'static str,
    dw: &'static str,
    rows: usize,
    fin: usize,
    fout: usize,
) -> [Shape; 3] {
    [
        mm(fwd, rows, fout, fin, false, true),
        mm(dx, rows, fin, fout, false, false),
        mm(dw, fout, fin, rows, true, false),
    ]
}

fn shapes() -> Vec<Shape> {
    let mut v = Vec::new();
    v.extend(linear(
        "mlp fwd x@Wt",
        "mlp bwd g@W",
        "mlp bwd gt@x",
        64,
        2048,
        2048,
    ));
    v.extend(linear(
        "nerf fwd x@Wt",
        "nerf bwd g@W",
        "nerf bwd gt@x",
        65536,
        256,
        256,
    ));
    // conv3x3's im2col tiles (backend/cpu/conv.rs): weight (co, 9ci) @ columns (9ci, tile)
    // forward, Wᵀ @ g for the input gradient, g @ columnsᵀ for the weight's.
    for (c, t) in [(32, 896), (64, 448), (128, 224)] {
        let k = 9 * c;
        v.push(one_thread(mm("cnn fwd W@cols", c, t, k, false, false)));
        v.push(one_thread(mm("cnn bwd Wt@g", k, t, c, true, false)));
        v.push(one_thread(mm("cnn bwd g@colst", c, k, t, false, true)));
    }
    for fout in [768, 2304, 3072] {
        // Frozen weights: forward and the input gradient only.
        v.push(mm("lora fwd x@Wt", 1024, fout, 768, false, true));
        v.push(mm("lora bwd g@W", 1024, 768, fout, false, false));
    }
    v.push(mm("lora fwd x@Wt", 1024, 768, 3072, false, true));
    v.push(mm("lora bwd g@W", 1024, 3072, 768, false, false));
    v.extend(linear(
        "lora adapter x@At",
        "lora adapter g@A",
        "lora adapter gt@x",
        1024,
        768,
        8,
    ));
    v.push(one_thread(mm("attn block q@kt", 64, 64, 64, false, true)));
    v
}

/// A row-major `rows × cols` buffer, or the transposed view of a `cols × rows` one:
/// `(buffer, row stride, col stride)`.
fn operand(rows: usize, cols: usize, transposed: bool, seed: u32) -> (Vec<f32>, isize, isize) {
    let data = (0..rows * cols)
        .map(|i| (((i as u32).wrapping_mul(2654435761) ^ seed) % 1000) as f32 / 500.0 - 1.0)
        .collect();
    if transposed {
        (data, 1, rows as isize)
    } else {
        (data, cols as isize, 1)
    }
}

fn candle_operand(data: &[f32], rows: usize, cols: usize, transposed: bool) -> Tensor {
    let dims = if transposed {
        (cols, rows)
    } else {
        (rows, cols)
    };
    let t = Tensor::from_slice(data, dims, &Device::Cpu).unwrap();
    if transposed {
        t.t().unwrap()
    } else {
        t
    }
}

fn median_ms(mut f: impl FnMut()) -> f64 {
    f();
    // Batches of at least ~20 ms, so small products are timed over many calls.
    let s = Instant::now();
    f();
    let once = s.elapsed().as_secs_f64();
    let reps = ((0.02 / once.max(1e-9)) as usize).clamp(1, 10_000);
    timing::median_ms(reps, f)
}

/// `(m, n)` output of `lhs @ rhs` into a fresh unfilled buffer through `gemm`.
fn gemm_direct(
    s: &Shape,
    a: &(Vec<f32>, isize, isize),
    b: &(Vec<f32>, isize, isize),
    par: Parallelism,
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(s.m * s.n);
    // SAFETY: the operands hold m×k and k×n elements at the strides given; the output has
    // room for m×n and gemm writes every element (read_dst = false) before `set_len`.
    unsafe {
        gemm::gemm(
            s.m,
            s.n,
            s.k,
            out.as_mut_ptr(),
            1,
            s.n as isize,
            false,
            a.0.as_ptr(),
            a.2,
            a.1,
            b.0.as_ptr(),
            b.2,
            b.1,
            0.0,
            1.0,
            false,
            false,
            false,
            par,
        );
        out.set_len(s.m * s.n);
    }
    out
}

fn faer_direct(
    s: &Shape,
    a: &(Vec<f32>, isize, isize),
    b: &(Vec<f32>, isize, isize),
    par: Par,
) -> Vec<f32> {
    let mut out: Vec<f32> = Vec::with_capacity(s.m * s.n);
    // SAFETY: as in `gemm_direct`; faer writes every element with `Accum::Replace`.
    unsafe {
        let dst = MatMut::from_raw_parts_mut(out.as_mut_ptr(), s.m, s.n, s.n as isize, 1);
        let lhs = MatRef::from_raw_parts(a.0.as_ptr(), s.m, s.k, a.1, a.2);
        let rhs = MatRef::from_raw_parts(b.0.as_ptr(), s.k, s.n, b.1, b.2);
        faer::linalg::matmul::matmul(dst, Accum::Replace, lhs, rhs, 1.0f32, par);
        out.set_len(s.m * s.n);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let json = args.iter().any(|a| a == "--json");
    let threads = args
        .iter()
        .position(|a| a == "--threads")
        .and_then(|i| args.get(i + 1))
        .map(|s| s.parse::<usize>().expect("--threads N"))
        .unwrap_or(2);
    let pool = |n: usize| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .build()
            .unwrap()
    };
    let (multi, single) = (pool(threads), pool(1));
    // candle's matmul sizes its gemm parallelism from RAYON_NUM_THREADS.
    std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
    let avx512 = cfg!(feature = "avx512");
    if !json {
        println!("{threads} threads (rows marked 1t: one), float32, median ms; gemm's AVX-512 kernels: {avx512}");
        println!();
        println!("| product | m × n × k | candle | gemm | faer | ours | candle / ours |");
        println!("|---|---|---:|---:|---:|---:|---:|");
    }
    for s in shapes() {
        let a = operand(s.m, s.k, s.lhs_t, 1);
        let b = operand(s.k, s.n, s.rhs_t, 2);
        let (ca, cb) = (
            candle_operand(&a.0, s.m, s.k, s.lhs_t),
            candle_operand(&b.0, s.k, s.n, s.rhs_t),
        );
        let n = if s.single { 1 } else { threads };
        let p = if s.single { &single } else { &multi };
        let (gpar, fpar) = if n > 1 {
            (Parallelism::Rayon(n), Par::rayon(n))
        } else {
            (Parallelism::None, Par::Seq)
        };
        let t_candle = p.install(|| {
            if s.single {
                std::env::set_var("RAYON_NUM_THREADS", "1");
            }
            let t = median_ms(|| {
                black_box(ca.matmul(&cb).unwrap());
            });
            std::env::set_var("RAYON_NUM_THREADS", threads.to_string());
            t
        });
        let t_gemm = p.install(|| median_ms(|| drop(black_box(gemm_direct(&s, &a, &b, gpar)))));
        let t_faer = p.install(|| median_ms(|| drop(black_box(faer_direct(&s, &a, &b, fpar)))));
        let t_ours = p.install(|| {
            median_ms(|| {
                black_box(ours::product(&ca, &cb).unwrap());
            })
        });
        // The candidates agree (the sums are short enough for f32).
        let want = ca
            .matmul(&cb)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1::<f32>()
            .unwrap();
        for got in [gemm_direct(&s, &a, &b, gpar), faer_direct(&s, &a, &b, fpar)] {
            let err = want
                .iter()
                .zip(&got)
                .map(|(x, y)| (x - y).abs())
                .fold(0f32, f32::max);
            assert!(
                err <= 1e-4 * s.k as f32,
                "{}: candidates differ by {err}",
                s.name
            );
        }
        let dims = format!("{} × {} × {}", s.m, s.n, s.k);
        let name = if s.single {
            format!("{} 1t", s.name)
        } else {
            s.name.to_string()
        };
        if json {
            println!(
                "{{\"name\": \"{name}\", \"m\": {}, \"n\": {}, \"k\": {}, \"lhs_t\": {}, \"rhs_t\": {}, \
                 \"threads\": {n}, \"candle\": {t_candle:.4}, \"gemm\": {t_gemm:.4}, \"faer\": {t_faer:.4}, \
                 \"ours\": {t_ours:.4}, \"avx512\": {avx512}}}",
                s.m, s.n, s.k, s.lhs_t, s.rhs_t
            );
        } else {
            println!(
                "| {name} | {dims} | {t_candle:.3} | {t_gemm:.3} | {t_faer:.3} | {t_ours:.3} | {:.2}x |",
                t_candle / t_ours
            );
        }
    }
}
