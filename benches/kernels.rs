//! Each of gradstream's own CPU kernels against candle's equivalent, on the sizes the
//! workloads use: the CPU backend against the candle backend (candle's ops), on the same
//! CPU tensors. Prints a Markdown table (median of 7 runs after a warm-up; at the small sizes
//! each run repeats the op enough times to outlast the timer's noise).
//!
//! cargo run --profile dev-release --example kernels

// CPU tensors only: candle's ops are what this bench compares against.
#![allow(clippy::disallowed_methods)]

use _core::backend::candle::Candle;
use _core::backend::cpu::Cpu;
use _core::backend::nn::Affine;
use _core::backend::{
    AdamBase, AdamStep, Bin, ElementwiseOps, GradPrep, InplaceOps, LineKernel, MaskOps, NnOps,
    OptimOps, ReduceOps, SortOps, StepRule, UnaryOp, Update,
};
use candle_core::{Device, Tensor};

#[path = "timing.rs"]
mod timing;
use timing::median_ms;

fn row(op: &str, size: &str, ours: impl FnMut(), candle: impl FnMut()) {
    row_reps(op, size, 1, ours, candle)
}

fn row_reps(op: &str, size: &str, reps: usize, ours: impl FnMut(), candle: impl FnMut()) {
    let (a, b) = (median_ms(reps, ours), median_ms(reps, candle));
    let digits = if a < 0.1 { 4 } else { 2 };
    println!(
        "| {op} | {size} | {a:.digits$} | {b:.digits$} | {:.1}x |",
        b / a
    );
}

fn randn(dims: &[usize]) -> Tensor {
    Tensor::randn(0f32, 1f32, dims, &Device::Cpu).unwrap()
}

fn adam_candle(p: &Tensor, g: &Tensor, m: &Tensor, v: &Tensor) -> candle_core::Result<()> {
    // The same update from candle's ops: every op a pass and a temporary, then copy back.
    let m2 = (m.affine(0.9, 0.0)? + g.affine(0.1, 0.0)?)?;
    let v2 = (v.affine(0.999, 0.0)? + g.sqr()?.affine(0.001, 0.0)?)?;
    let step = (m2.affine(1e-3, 0.0)? / v2.sqrt()?.affine(1.0, 1e-8)?)?;
    let p2 = (p - step)?;
    for (dst, src) in [(p, &p2), (m, &m2), (v, &v2)] {
        dst.slice_set(src, 0, 0)?;
    }
    Ok(())
}

type Kernel<'a> = Box<dyn Fn() + Sync + 'a>;

/// Where rayon starts to pay: each kernel in a one-thread pool against the global pool, by
/// size. Below the crossing a kernel should stay on the calling thread.
fn parallel_threshold(cpu: &Cpu) {
    let one = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let threads = rayon::current_num_threads();
    println!();
    println!("| op | size | 1 thread ms | {threads} threads ms | 1 thread / {threads} threads |");
    println!("|---|---|---:|---:|---:|");
    let s = StepRule::Adam(AdamStep {
        base: AdamBase {
            lr: 1e-3,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled: false,
        },
        step_size: 1e-3,
        bias_correction2_sqrt: 1.0,
        amsgrad: false,
    });
    let prep = GradPrep {
        scale: 1.0,
        clip_value: None,
        maximize: false,
    };
    for n in [
        1usize << 15,
        1 << 16,
        1 << 17,
        1 << 18,
        1 << 19,
        1 << 20,
        1 << 21,
    ] {
        let size = format!("{}K", n >> 10);
        let reps = ((1 << 21) / n).max(1);
        let (x, y) = (randn(&[n]), randn(&[n]));
        let (m, v) = (randn(&[n]).abs().unwrap(), randn(&[n]).abs().unwrap());
        let kernels: [(&str, Kernel); 4] = [
            (
                "add",
                Box::new(|| drop(cpu.binary("op", Bin::Add, &x, &y).unwrap())),
            ),
            (
                "exp",
                Box::new(|| drop(cpu.unary("op", UnaryOp::Exp, &x).unwrap())),
            ),
            (
                "add_ (in place)",
                Box::new(|| cpu.update("add_", &m, &y, Update::Add).unwrap()),
            ),
            (
                "Adam step (in place)",
                Box::new(|| cpu.optim_step(&x, &y, &[&m, &v], &s, &prep).unwrap()),
            ),
        ];
        for (name, k) in &kernels {
            let serial = median_ms(reps, || one.install(k));
            let pool = median_ms(reps, k);
            println!(
                "| {name} | {size} | {serial:.4} | {pool:.4} | {:.2}x |",
                serial / pool
            );
        }
    }
}

fn main() {
    let (cpu, cdl) = (Cpu, Candle);
    println!("| op | size | ours ms | candle ms | candle / ours |");
    println!("|---|---|---:|---:|---:|");
    // 8K: an activation of the small workload (batch 32 × 256); 64K: one of its weights.
    for n in [1usize << 13, 1 << 16, 1 << 20, 1 << 24] {
        let size = if n >= 1 << 20 {
            format!("{}M", n >> 20)
        } else {
            format!("{}K", n >> 10)
        };
        let reps = ((1 << 20) / n).max(1);
        let x = randn(&[n]);
        let y = randn(&[n]);
        row_reps(
            "relu (+1-bit mask)",
            &size,
            reps,
            || drop(cpu.threshold("relu", &x, 0.0, 0.0, true).unwrap()),
            || drop(cdl.threshold("relu", &x, 0.0, 0.0, true).unwrap()),
        );
        let softplus = UnaryOp::Softplus {
            beta: 1.0,
            threshold: 20.0,
        };
        for (name, op) in [
            ("sigmoid", UnaryOp::Sigmoid),
            ("silu", UnaryOp::Silu),
            ("gelu", UnaryOp::Gelu),
            ("gelu tanh", UnaryOp::GeluTanh),
            ("softplus", softplus),
            ("exp", UnaryOp::Exp),
        ] {
            row_reps(
                name,
                &size,
                reps,
                || drop(cpu.unary("op", op, &x).unwrap()),
                || drop(cdl.unary("op", op, &x).unwrap()),
            );
        }
        for (name, op) in [
            ("sigmoid backward", Bin::Grad(UnaryOp::Sigmoid)),
            ("gelu backward", Bin::Grad(UnaryOp::Gelu)),
            ("add", Bin::Add),
            ("mul", Bin::Mul),
        ] {
            row_reps(
                name,
                &size,
                reps,
                || drop(cpu.binary("op", op, &y, &x).unwrap()),
                || drop(cdl.binary("op", op, &y, &x).unwrap()),
            );
        }
        let acc = randn(&[n]);
        row_reps(
            "add_ (in place)",
            &size,
            reps,
            || cpu.update("add_", &acc, &x, Update::Add).unwrap(),
            || cdl.update("add_", &acc, &x, Update::Add).unwrap(),
        );
        let (p, m, v) = (
            randn(&[n]),
            randn(&[n]).abs().unwrap(),
            randn(&[n]).abs().unwrap(),
        );
        let s = AdamStep {
            base: AdamBase {
                lr: 1e-3,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.0,
                decoupled: false,
            },
            step_size: 1e-3,
            bias_correction2_sqrt: 1.0,
            amsgrad: false,
        };
        let rule = StepRule::Adam(s);
        let prep = GradPrep {
            scale: 1.0,
            clip_value: None,
            maximize: false,
        };
        row_reps(
            "Adam step (in place)",
            &size,
            reps,
            || cpu.optim_step(&p, &y, &[&m, &v], &rule, &prep).unwrap(),
            || adam_candle(&p, &y, &m, &v).unwrap(),
        );
    }
    parallel_threshold(&cpu);
    let rows = randn(&[65536, 256]);
    let size = "65536x256";
    for (name, k) in [
        ("softmax", LineKernel::Softmax { log: false }),
        ("log_softmax", LineKernel::Softmax { log: true }),
        ("max (dim 1)", LineKernel::Extreme { max: true }),
        ("argmax (dim 1)", LineKernel::ArgExtreme { max: true }),
        (
            "cumsum (dim 1)",
            LineKernel::Scan {
                prod: false,
                reverse: false,
            },
        ),
    ] {
        row(
            name,
            size,
            || drop(cpu.lines(&rows, 1, k).unwrap()),
            || drop(cdl.lines(&rows, 1, k).unwrap()),
        );
    }
    let (w, b) = (rows.get(0).unwrap(), rows.get(1).unwrap());
    let affine = Affine {
        weight: Some(&w),
        bias: Some(&b),
    };
    row(
        "layer_norm (affine)",
        size,
        || {
            drop(
                cpu.layer_norm("layer_norm", &rows, affine, 256, 1e-5)
                    .unwrap(),
            )
        },
        || {
            drop(
                cdl.layer_norm("layer_norm", &rows, affine, 256, 1e-5)
                    .unwrap(),
            )
        },
    );
    let (_, mean, rstd) = cpu
        .layer_norm("layer_norm", &rows, affine, 256, 1e-5)
        .unwrap();
    let grad = |be: &dyn NnOps| {
        drop(
            be.layer_norm_backward(
                "layer_norm",
                &rows,
                &rows,
                (&mean, &rstd),
                Some(&w),
                256,
                true,
            )
            .unwrap(),
        )
    };
    row(
        "layer_norm backward (affine)",
        size,
        || grad(&cpu),
        || grad(&cdl),
    );
    row(
        "sum (dim 0, bias grad)",
        size,
        || drop(cpu.block_sum(&rows, &[0]).unwrap().unwrap()),
        || drop(rows.sum_keepdim(0).unwrap()),
    );
    let table = randn(&[4096, 256]);
    let ids: Vec<i64> = (0..65536).map(|i| (i * 7919) % 4096).collect();
    let ids = Tensor::from_vec(ids, 65536, &Device::Cpu).unwrap();
    row(
        "embedding",
        "65536 of 4096x256",
        || drop(cpu.embedding("embedding", &table, &ids, None).unwrap()),
        || drop(cdl.embedding("embedding", &table, &ids, None).unwrap()),
    );
    // NeRF's hierarchical sampling sorts 64+128 samples per ray; candle's argsort is not
    // stable (the row compares speed only).
    let z = randn(&[4096, 192]);
    row(
        "sort (stable argsort)",
        "4096x192",
        || drop(cpu.argsort(&z, false).unwrap()),
        || drop(z.arg_sort_last_dim(true).unwrap()),
    );
}
