//! Adafactor's step on CUDA (`kernels/adafactor.cu`): the CPU kernel's formulas
//! (`backend/cpu/adafactor.rs`) in four to six launches on the stream, the two norms that
//! scale and clip the step kept on the device, so the step reads nothing back and
//! allocates nothing the size of the parameter.

use candle_core::{DType, Tensor};
use half::{bf16, f16};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx};
use crate::backend::{AdafactorStep, GradPrep};
use crate::error::{Error, Result};

const THREADS: u32 = 256;

fn kernel(name: &str, dtype: DType) -> Kernel {
    Kernel {
        module: &ptx::ADAFACTOR,
        name: intern(format!("gs_adafactor_{name}_{}", dtype_suffix(dtype))),
    }
}

/// A state buffer of `elems` elements of the parameter's dtype, contiguous.
fn check(what: &str, t: &Tensor, dtype: DType, elems: usize) -> Result<()> {
    if !t.is_contiguous() || t.dtype() != dtype || t.elem_count() != elems {
        return Err(Error::runtime(format!(
            "Adafactor step: the {what} must be contiguous, of the parameter's dtype ({dtype:?}) \
             and {elems} elements; got {:?} of {} elements",
            t.dtype(),
            t.elem_count()
        )));
    }
    Ok(())
}

/// PyTorch's default `eps[0]`: the parameter dtype's machine epsilon.
fn machine_epsilon(dtype: DType) -> f64 {
    match dtype {
        DType::F64 => f64::EPSILON,
        DType::F16 => f16::EPSILON.to_f64(),
        DType::BF16 => bf16::EPSILON.to_f64(),
        _ => f32::EPSILON as f64,
    }
}

/// One Adafactor step of `param` (the caller checked its dtype and the gradient's layout);
/// `state` is `[row_var, col_var]` for a matrix, `[variance]` otherwise.
pub(super) fn step(
    param: &Tensor,
    grad: &Tensor,
    state: &[&Tensor],
    s: &AdafactorStep,
    prep: &GradPrep,
) -> Result<()> {
    let (n, dtype, device) = (param.elem_count(), param.dtype(), param.device());
    if n == 0 {
        return Ok(());
    }
    let (rows, cols) = s.matrix.unwrap_or((1, n));
    if rows == 0 || cols == 0 || n % (rows * cols) != 0 {
        return Err(Error::runtime(format!(
            "Adafactor step: a parameter of {n} elements is no stack of {rows}×{cols} matrices"
        )));
    }
    let batch = n / (rows * cols);
    match s.matrix {
        Some(_) => {
            check("row variance", state[0], dtype, batch * rows)?;
            check("column variance", state[1], dtype, batch * cols)?;
        }
        None => check("variance", state[0], dtype, n)?,
    }
    let op = "Adafactor step";
    let candle = |e| Error::Candle { op, source: e };
    // norms[0]: |p|^2 before decay; norms[1]: |update|^2. Then each matrix's mean row
    // variance.
    let norms = crate::device::zeros(2, DType::F64, device).map_err(candle)?;
    let row_mean = crate::device::zeros(batch, DType::F64, device).map_err(candle)?;
    let (p, g, nm, rm) = (addr(param)?, addr(grad)?, addr(&norms)?, addr(&row_mean)?);
    let (norm_p, norm_u) = (nm.addr, nm.addr + 8);
    let v0 = addr(state[0])?;
    let v1 = state.get(1).map(|t| addr(t)).transpose()?;
    let (lo, hi) = prep
        .clip_value
        .map_or((f64::NEG_INFINITY, f64::INFINITY), |v| (-v, v));
    let prep_args = [
        Arg::F64(prep.scale),
        Arg::F64(lo),
        Arg::F64(hi),
        Arg::F64(if prep.maximize { -1.0 } else { 1.0 }),
    ];
    let w = Arg::F64(s.beta2_weight);
    let eps1 = s.eps1.unwrap_or_else(|| machine_epsilon(dtype));
    let elementwise = Grid::elementwise(n, THREADS);
    let with = |head: &[Arg], tail: &[Arg]| [head, &prep_args, tail].concat();

    launch(
        device,
        kernel("sumsq", dtype),
        elementwise,
        &[Arg::I64(n as i64), Arg::Ptr(p.addr), Arg::Ptr(norm_p)],
    )?;
    match &v1 {
        None => launch(
            device,
            kernel("variance", dtype),
            elementwise,
            &with(
                &[Arg::I64(n as i64), Arg::Ptr(g.addr), Arg::Ptr(v0.addr)],
                &[w],
            ),
        )?,
        Some(v1) => {
            launch(
                device,
                kernel("row_var", dtype),
                Grid::rows(batch * rows, THREADS, 0),
                &with(
                    &[Arg::I64(cols as i64), Arg::Ptr(g.addr), Arg::Ptr(v0.addr)],
                    &[w],
                ),
            )?;
            launch(
                device,
                kernel("col_var", dtype),
                Grid::elementwise(batch * cols, THREADS),
                &with(
                    &[
                        Arg::I64(batch as i64),
                        Arg::I64(rows as i64),
                        Arg::I64(cols as i64),
                        Arg::Ptr(g.addr),
                        Arg::Ptr(v1.addr),
                    ],
                    &[w],
                ),
            )?;
            launch(
                device,
                kernel("row_mean", dtype),
                Grid::rows(batch, THREADS, 0),
                &[
                    Arg::I64(rows as i64),
                    Arg::Ptr(v0.addr),
                    Arg::F64(eps1),
                    Arg::Ptr(rm.addr),
                ],
            )?;
        }
    }
    let scale_args = [
        Arg::Ptr(v0.addr),
        Arg::Ptr(v1.as_ref().map_or(0, |a| a.addr)),
        Arg::Ptr(rm.addr),
        Arg::I64(rows as i64),
        Arg::I64(cols as i64),
        Arg::F64(eps1 * eps1),
    ];
    launch(
        device,
        kernel("update_norm", dtype),
        elementwise,
        &with(
            &[&[Arg::I64(n as i64), Arg::Ptr(g.addr)][..], &scale_args].concat(),
            &[Arg::Ptr(norm_u)],
        ),
    )?;
    let decay = s.weight_decay != 0.0;
    launch(
        device,
        kernel("apply", dtype),
        elementwise,
        &with(
            &[
                &[Arg::I64(n as i64), Arg::Ptr(p.addr), Arg::Ptr(g.addr)][..],
                &scale_args,
            ]
            .concat(),
            &[
                Arg::Ptr(nm.addr),
                Arg::F64(s.rho),
                Arg::F64(s.eps2),
                Arg::F64(s.d),
                Arg::F64(1.0 - s.lr * s.weight_decay),
                Arg::I32(i32::from(decay)),
            ],
        ),
    )
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Tensor};

    use super::super::testing::{assert_close, sample};
    use super::super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::{AdafactorStep, GradPrep, OptimOps, StepRule};

    /// The step's state: a row and a column variance for a stack of matrices, else one.
    fn state(dims: &[usize], dtype: DType, seed: u64) -> Vec<Tensor> {
        match dims {
            [.., r, c] => {
                let lead = &dims[..dims.len() - 2];
                vec![
                    sample(&[lead, &[*r, 1]].concat(), dtype, seed, 0.0, 0.1),
                    sample(&[lead, &[1, *c]].concat(), dtype, seed + 1, 0.0, 0.1),
                ]
            }
            _ => vec![sample(dims, dtype, seed, 0.0, 0.1)],
        }
    }

    /// One step by each backend from the same start; parameter and state compared.
    fn compare(dims: &[usize], dtype: DType, s: AdafactorStep, prep: GradPrep, seed: u64) {
        let what = format!("{dims:?} {dtype:?} {s:?} {prep:?}");
        let p0 = sample(dims, dtype, seed, -1.0, 1.0);
        let g = sample(dims, dtype, seed + 7, -2.0, 2.0);
        let s0 = state(dims, dtype, seed + 11);
        let run = |ops: &dyn OptimOps| {
            let p = p0.copy().unwrap();
            let st: Vec<Tensor> = s0.iter().map(|t| t.copy().unwrap()).collect();
            let refs: Vec<&Tensor> = st.iter().collect();
            ops.optim_step(&p, &g, &refs, &StepRule::Adafactor(s), &prep)
                .unwrap();
            (p, st)
        };
        let (pa, sa) = run(&Cuda);
        let (pb, sb) = run(&Cpu);
        // Sums of squares run in double on both; the rest rounds once per element in the
        // compute type, so the difference is a few of its ulps, times the step's scale.
        let (rtol, atol) = match dtype {
            DType::F64 => (1e-12, 1e-13),
            DType::F32 => (1e-5, 1e-6),
            _ => (1e-2, 1e-2),
        };
        assert_close(&format!("param {what}"), &pa, &pb, rtol, atol);
        for (i, (a, b)) in sa.iter().zip(&sb).enumerate() {
            assert_close(&format!("state {i} {what}"), a, b, rtol, atol);
        }
    }

    fn rule(dims: &[usize]) -> AdafactorStep {
        AdafactorStep {
            lr: 0.1,
            // A step of about a tenth of the parameter's scale: larger than any dtype's
            // tolerance below, so a step not taken cannot pass.
            rho: 0.1,
            beta2_weight: 0.2,
            eps1: None,
            eps2: 1e-3,
            d: 1.0,
            weight_decay: 0.0,
            matrix: (dims.len() >= 2).then(|| (dims[dims.len() - 2], dims[dims.len() - 1])),
        }
    }

    const PLAIN: GradPrep = GradPrep {
        scale: 1.0,
        clip_value: None,
        maximize: false,
    };

    #[test]
    fn matches_the_cpu_kernel_on_vectors_and_stacks_of_matrices() {
        let shapes: [&[usize]; 9] = [
            &[],
            &[1],
            &[1000],
            &[1, 1],
            &[3, 5],
            &[37, 300],
            &[2, 1, 1500],
            &[4, 33, 7],
            &[2, 2, 3, 65],
        ];
        for (k, dims) in shapes.iter().enumerate() {
            for dtype in [DType::F32, DType::F64, DType::F16, DType::BF16] {
                compare(dims, dtype, rule(dims), PLAIN, k as u64);
            }
        }
    }

    #[test]
    fn weight_decay_eps_clipping_and_the_gradient_preparation() {
        let preps = [
            PLAIN,
            GradPrep {
                scale: 0.5,
                clip_value: Some(0.3),
                maximize: true,
            },
        ];
        for dims in [&[300][..], &[20, 30]] {
            for dtype in [DType::F32, DType::F64, DType::BF16] {
                for prep in preps {
                    // d small: the update's norm clips the step.
                    let s = AdafactorStep {
                        weight_decay: 0.1,
                        eps1: Some(1e-2),
                        d: 0.05,
                        rho: 0.5,
                        ..rule(dims)
                    };
                    compare(dims, dtype, s, prep, 3);
                    compare(dims, dtype, rule(dims), prep, 4);
                }
            }
        }
    }

    #[test]
    fn a_state_of_the_wrong_size_is_an_error_not_a_wild_write() {
        let p = sample(&[4, 6], DType::F32, 1, -1.0, 1.0);
        let g = p.copy().unwrap();
        let (r, c) = (
            sample(&[4, 1], DType::F32, 2, 0.0, 1.0),
            sample(&[1, 5], DType::F32, 3, 0.0, 1.0),
        );
        let e = Cuda
            .optim_step(
                &p,
                &g,
                &[&r, &c],
                &StepRule::Adafactor(rule(&[4, 6])),
                &PLAIN,
            )
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("column variance") && e.contains("6 elements"),
            "{e}"
        );
    }
}
