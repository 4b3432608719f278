//! The fused optimizer steps on CUDA (`kernels/optim.cu`): one launch per parameter, in
//! place on the parameter and its state buffers, each element read and written once. The
//! coefficients are the CPU kernels' (`backend/cpu/optim.rs`), in the order the kernel's
//! rule reads them.

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, ptx, Cuda};
use crate::backend::{not_implemented, GradPrep, OptimOps, StepRule};
use crate::error::{Error, Result};

const THREADS: u32 = 256;

/// The kernel of a rule, and its coefficients and flags (see `optim.cu`).
fn coefficients(rule: &StepRule) -> Option<(&'static str, [f64; 10], i32)> {
    let mut c = [0.0; 10];
    let flag = |on: bool, bit: i32| if on { bit } else { 0 };
    let flags = match *rule {
        StepRule::Sgd(s) => {
            c[..4].copy_from_slice(&[s.weight_decay, s.momentum, 1.0 - s.dampening, -s.lr]);
            let f = flag(s.nesterov, 1)
                | flag(s.init_buffer, 2)
                | flag(s.weight_decay != 0.0, 4)
                | flag(s.momentum != 0.0, 8);
            return Some(("sgd", c, f));
        }
        StepRule::Adam(s) => {
            let f = adam_base(&mut c, &s.base);
            c[5..8].copy_from_slice(&[s.bias_correction2_sqrt, s.base.eps, -s.step_size]);
            return Some(("adam", c, f | flag(s.amsgrad, 2)));
        }
        StepRule::RmsProp(s) => {
            c[..6].copy_from_slice(&[
                s.weight_decay,
                s.alpha,
                1.0 - s.alpha,
                s.eps,
                s.momentum,
                -s.lr,
            ]);
            flag(s.weight_decay != 0.0, 1) | flag(s.momentum > 0.0, 2) | flag(s.centered, 4)
        }
        StepRule::Adagrad(s) => {
            c[..3].copy_from_slice(&[s.weight_decay, s.eps, -s.clr]);
            flag(s.weight_decay != 0.0, 1)
        }
        StepRule::Adamax(s) => {
            c[..5].copy_from_slice(&[s.weight_decay, 1.0 - s.beta1, s.beta2, s.eps, -s.clr]);
            flag(s.weight_decay != 0.0, 1)
        }
        StepRule::NAdam(s) => {
            let f = adam_base(&mut c, &s.base);
            c[5..9].copy_from_slice(&[s.bias_correction2, s.base.eps, s.c_grad, s.c_avg]);
            return Some(("nadam", c, f));
        }
        StepRule::RAdam(s) => {
            let f = adam_base(&mut c, &s.base);
            c[5..10].copy_from_slice(&[
                s.bias_correction2_sqrt,
                s.base.eps,
                s.base.lr,
                s.bias_correction1,
                s.rect.unwrap_or(0.0),
            ]);
            return Some(("radam", c, f | flag(s.rect.is_some(), 2)));
        }
        StepRule::Adadelta(s) => {
            c[..5].copy_from_slice(&[s.weight_decay, s.rho, 1.0 - s.rho, s.eps, -s.lr]);
            flag(s.weight_decay != 0.0, 1)
        }
        StepRule::Rprop(s) => {
            c[..4].copy_from_slice(&[s.eta_minus, s.eta_plus, s.step_size_min, s.step_size_max]);
            0
        }
        StepRule::Asgd(s) => {
            c[..4].copy_from_slice(&[s.weight_decay, 1.0 - s.lambd * s.eta, -s.eta, s.mu]);
            flag(s.weight_decay != 0.0, 1) | flag(s.mu != 1.0, 2)
        }
        StepRule::Adafactor(_) => return None, // its own kernels: adafactor.rs
    };
    let name = match rule {
        StepRule::RmsProp(_) => "rmsprop",
        StepRule::Adagrad(_) => "adagrad",
        StepRule::Adamax(_) => "adamax",
        StepRule::Adadelta(_) => "adadelta",
        StepRule::Rprop(_) => "rprop",
        _ => "asgd",
    };
    Some((name, c, flags))
}

/// Weight decay and moments as the Adam family's kernels read them (c0..c4); the L2 flag.
fn adam_base(c: &mut [f64; 10], b: &crate::backend::AdamBase) -> i32 {
    let on = b.weight_decay != 0.0;
    let keep = if on && b.decoupled {
        1.0 - b.lr * b.weight_decay
    } else {
        1.0
    };
    c[..5].copy_from_slice(&[keep, b.weight_decay, 1.0 - b.beta1, b.beta2, 1.0 - b.beta2]);
    i32::from(on && !b.decoupled)
}

/// A float tensor's kernel suffix, or the error naming the op.
fn float_suffix(op: &str, t: &Tensor) -> Result<&'static str> {
    match t.dtype() {
        DType::F32 | DType::F64 | DType::F16 | DType::BF16 => Ok(dtype_suffix(t.dtype())),
        other => Err(Error::dtype(format!(
            "{op}: expected a floating point tensor, got {other:?}"
        ))),
    }
}

/// A buffer the kernel may read and write: contiguous, of the parameter's dtype and size.
fn check(op: &str, what: &str, t: &Tensor, like: &Tensor) -> Result<()> {
    if !t.is_contiguous() || t.dtype() != like.dtype() || t.elem_count() != like.elem_count() {
        return Err(Error::runtime(format!(
            "{op}: the {what} must be contiguous, of the parameter's dtype ({:?}) and size \
             ({}); got {:?} of {} elements",
            like.dtype(),
            like.elem_count(),
            t.dtype(),
            t.elem_count()
        )));
    }
    Ok(())
}

impl OptimOps for Cuda {
    fn optim_step(
        &self,
        param: &Tensor,
        grad: &Tensor,
        state: &[&Tensor],
        rule: &StepRule,
        prep: &GradPrep,
    ) -> Result<()> {
        let op = rule.name();
        if state.len() != rule.buffers() {
            return Err(Error::value(format!(
                "{op} step: expected {} state buffers, got {}",
                rule.buffers(),
                state.len()
            )));
        }
        if let StepRule::Adafactor(s) = rule {
            float_suffix(op, param)?;
            check(op, "gradient", grad, param)?;
            return super::adafactor::step(param, grad, state, s, prep);
        }
        let Some((name, c, flags)) = coefficients(rule) else {
            return Err(not_implemented(&format!("{op} step"), param.device()));
        };
        let suffix = float_suffix(op, param)?;
        check(op, "gradient", grad, param)?;
        for s in state {
            check(op, "state buffer", s, param)?;
        }
        let n = param.elem_count();
        let p = addr(param)?;
        let g = addr(grad)?;
        let s: Vec<_> = state.iter().map(|t| addr(t)).collect::<Result<_>>()?;
        let at = |i: usize| Arg::Ptr(s.get(i).map_or(0, |a| a.addr));
        let (lo, hi) = prep
            .clip_value
            .map_or((f64::NEG_INFINITY, f64::INFINITY), |v| (-v, v));
        let mut args = vec![
            Arg::I64(n as i64),
            Arg::Ptr(p.addr),
            Arg::Ptr(g.addr),
            at(0),
            at(1),
            at(2),
            Arg::F64(prep.scale),
            Arg::F64(lo),
            Arg::F64(hi),
            Arg::F64(if prep.maximize { -1.0 } else { 1.0 }),
        ];
        args.extend(c.iter().map(|&v| Arg::F64(v)));
        args.push(Arg::I32(flags));
        let kernel = Kernel {
            module: &ptx::OPTIM,
            name: kernel_name(name, suffix),
        };
        launch(param.device(), kernel, Grid::elementwise(n, THREADS), &args)
    }

    fn norm_pow(&self, grad: &Tensor, norm_type: f64) -> Result<f64> {
        let op = "grad norm";
        let suffix = float_suffix(op, grad)?;
        let g = grad.dense().map_err(|e| Error::Candle { op, source: e })?;
        let out = crate::device::zeros(1, DType::F64, g.device())
            .map_err(|e| Error::Candle { op, source: e })?;
        {
            let (ga, oa) = (addr(&g)?, addr(&out)?);
            let n = g.elem_count();
            let args = [
                Arg::I64(n as i64),
                Arg::Ptr(ga.addr),
                Arg::F64(norm_type),
                Arg::Ptr(oa.addr),
            ];
            let kernel = Kernel {
                module: &ptx::OPTIM,
                name: kernel_name("norm_pow", suffix),
            };
            launch(g.device(), kernel, Grid::elementwise(n, THREADS), &args)?;
        }
        crate::host::read_scalar::<f64>("gradient norm (clipping)", &out)
    }

    fn scale_inplace(&self, t: &Tensor, factor: f64) -> Result<()> {
        scale_clamp("scale_", t, factor, 0.0, 0.0, false)
    }

    fn clamp_inplace(&self, t: &Tensor, lo: f64, hi: f64) -> Result<()> {
        scale_clamp("clamp_", t, 0.0, lo, hi, true)
    }
}

fn scale_clamp(op: &str, t: &Tensor, factor: f64, lo: f64, hi: f64, clamp: bool) -> Result<()> {
    let suffix = float_suffix(op, t)?;
    if !t.is_contiguous() {
        return Err(Error::runtime(format!(
            "{op}: expected a contiguous tensor"
        )));
    }
    let n = t.elem_count();
    let a = addr(t)?;
    let args = [
        Arg::I64(n as i64),
        Arg::Ptr(a.addr),
        Arg::F64(factor),
        Arg::F64(lo),
        Arg::F64(hi),
        Arg::I32(i32::from(clamp)),
    ];
    let kernel = Kernel {
        module: &ptx::OPTIM,
        name: kernel_name("scale_clamp", suffix),
    };
    launch(t.device(), kernel, Grid::elementwise(n, THREADS), &args)
}

/// `gs_<name>_<suffix>`, interned: a kernel name lives as long as the process.
fn kernel_name(name: &str, suffix: &str) -> &'static str {
    super::intern(format!("gs_{name}_{suffix}"))
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Device, Tensor};

    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::*;

    fn sample(n: usize, seed: u64, lo: f32, hi: f32) -> Tensor {
        // A small LCG: reproducible values without a dependency on rand's streams.
        let mut x = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        let v: Vec<f32> = (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                lo + (hi - lo) * ((x >> 40) as f32 / (1u64 << 24) as f32)
            })
            .collect();
        Tensor::from_vec(v, n, &Device::Cpu).unwrap()
    }

    fn rules() -> Vec<StepRule> {
        let base = |decoupled| AdamBase {
            lr: 1e-2,
            beta1: 0.9,
            beta2: 0.99,
            eps: 1e-8,
            weight_decay: 0.1,
            decoupled,
        };
        let sgd = |momentum: f64, nesterov, init_buffer| {
            StepRule::Sgd(SgdStep {
                lr: 0.1,
                momentum,
                dampening: 0.1,
                nesterov,
                weight_decay: 0.01,
                init_buffer,
            })
        };
        vec![
            sgd(0.0, false, false),
            sgd(0.9, true, true),
            sgd(0.9, false, false),
            StepRule::Adam(AdamStep {
                base: base(false),
                step_size: 0.05,
                bias_correction2_sqrt: 0.3,
                amsgrad: false,
            }),
            StepRule::Adam(AdamStep {
                base: base(true),
                step_size: 0.05,
                bias_correction2_sqrt: 0.3,
                amsgrad: true,
            }),
            StepRule::RmsProp(RmsPropStep {
                lr: 0.01,
                alpha: 0.99,
                eps: 1e-8,
                weight_decay: 0.1,
                momentum: 0.9,
                centered: true,
            }),
            StepRule::RmsProp(RmsPropStep {
                lr: 0.01,
                alpha: 0.99,
                eps: 1e-8,
                weight_decay: 0.0,
                momentum: 0.0,
                centered: false,
            }),
            StepRule::Adagrad(AdagradStep {
                clr: 0.01,
                eps: 1e-10,
                weight_decay: 0.1,
            }),
            StepRule::Adamax(AdamaxStep {
                clr: 0.02,
                beta1: 0.9,
                beta2: 0.999,
                eps: 1e-8,
                weight_decay: 0.1,
            }),
            StepRule::NAdam(NAdamStep {
                base: base(false),
                bias_correction2: 0.1,
                c_grad: -0.004,
                c_avg: -0.003,
            }),
            StepRule::RAdam(RAdamStep {
                base: base(true),
                bias_correction1: 0.3,
                bias_correction2_sqrt: 0.2,
                rect: Some(0.7),
            }),
            StepRule::RAdam(RAdamStep {
                base: base(false),
                bias_correction1: 0.3,
                bias_correction2_sqrt: 0.2,
                rect: None,
            }),
            StepRule::Adadelta(AdadeltaStep {
                lr: 1.0,
                rho: 0.9,
                eps: 1e-6,
                weight_decay: 0.1,
            }),
            StepRule::Rprop(RpropStep {
                eta_minus: 0.5,
                eta_plus: 1.2,
                step_size_min: 1e-6,
                step_size_max: 50.0,
            }),
            StepRule::Asgd(AsgdStep {
                eta: 0.01,
                lambd: 1e-4,
                mu: 0.5,
                weight_decay: 0.1,
            }),
        ]
    }

    fn close(what: &str, a: &Tensor, b: &Tensor) {
        let a = a.to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap();
        let b = b.to_dtype(DType::F64).unwrap().to_vec1::<f64>().unwrap();
        for (i, (x, y)) in a.iter().zip(&b).enumerate() {
            let ok = (x.is_nan() && y.is_nan()) || (x - y).abs() <= 1e-6 * (1.0 + y.abs());
            assert!(ok, "{what}: element {i}: emulated {x} vs cpu {y}");
        }
    }

    // Every rule on every float dtype: two steps of the emulated CUDA kernel against two of
    // the CPU kernel, from the same parameter, gradient and state, with clipping and
    // maximize on.
    #[test]
    fn steps_match_the_cpu_kernels() {
        let n = 1000;
        for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
            for (r, rule) in rules().iter().enumerate() {
                let make = |seed, lo, hi| sample(n, seed, lo, hi).to_dtype(dtype).unwrap();
                let p0 = make(1, -1.0, 1.0);
                let g = make(2, -2.0, 2.0);
                let mut states = Vec::new();
                for k in 0..rule.buffers() {
                    // Positive where a rule takes square roots of its buffers.
                    states.push(make(10 + k as u64, 0.01, 1.0));
                }
                let prep = GradPrep {
                    scale: 0.5,
                    clip_value: Some(0.8),
                    maximize: r % 2 == 1,
                };
                let run = |be: &dyn OptimOps| {
                    let p = p0.copy().unwrap();
                    let s: Vec<Tensor> = states.iter().map(|t| t.copy().unwrap()).collect();
                    let refs: Vec<&Tensor> = s.iter().collect();
                    for _ in 0..2 {
                        be.optim_step(&p, &g, &refs, rule, &prep).unwrap();
                    }
                    (p, s)
                };
                let (pe, se) = run(&Cuda);
                let (pc, sc) = run(&Cpu);
                let what = format!("{} {dtype:?}", rule.name());
                close(&what, &pe, &pc);
                for (a, b) in se.iter().zip(&sc) {
                    close(&what, a, b);
                }
            }
        }
    }

    #[test]
    fn norms_scale_and_clamp_match_the_cpu_kernels() {
        let g = sample(5000, 3, -3.0, 3.0);
        for p in [1.0, 2.0, 3.0, f64::INFINITY] {
            let (a, b) = (Cuda.norm_pow(&g, p).unwrap(), Cpu.norm_pow(&g, p).unwrap());
            assert!((a - b).abs() <= 1e-9 * b.abs(), "norm {p}: {a} vs {b}");
        }
        let (x, y) = (g.copy().unwrap(), g.copy().unwrap());
        Cuda.scale_inplace(&x, 0.25).unwrap();
        Cpu.scale_inplace(&y, 0.25).unwrap();
        close("scale_", &x, &y);
        Cuda.clamp_inplace(&x, -0.3, 0.2).unwrap();
        Cpu.clamp_inplace(&y, -0.3, 0.2).unwrap();
        close("clamp_", &x, &y);
    }
}
