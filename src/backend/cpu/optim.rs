//! The fused per-parameter update kernels: one pass over the parameter, its gradient and
//! its state buffers, in place, with PyTorch's single-tensor formulas and operation order.
//! Why not candle's ops: an update written with them reads and writes every buffer once
//! per op (about ten passes and as many temporaries for Adam), and candle has no
//! in-place arithmetic.
//!
//! Elements are computed in `f32` (`f64` for float64 parameters), as PyTorch's CPU
//! kernels compute half types in their opmath type. Large parameters run on rayon.

use std::cell::RefCell;

use candle_core::backend::BackendStorage;
use candle_core::{CpuStorage, InplaceOp1, Layout, Storage};
use half::{bf16, f16};
use num_traits::Float;
use rayon::prelude::*;

use super::scalar::Real;
use super::Cpu;
use super::PAR_MIN;
use crate::backend::optim::AdamState;
use crate::backend::{AdamStep, GradPrep, OptimOps, SgdStep};
use crate::error::{CandleContext, Error, Result};

/// A stored element and the float type it is computed in (half types in f32, as
/// PyTorch's CPU kernels compute in their opmath type). A type mapping, not math.
pub trait Elem: Copy + Send + Sync {
    type C: Real;
    fn load(self) -> Self::C;
    fn store(c: Self::C) -> Self;
}

impl Elem for f32 {
    type C = f32;
    fn load(self) -> f32 {
        self
    }
    fn store(c: f32) -> f32 {
        c
    }
}

impl Elem for f64 {
    type C = f64;
    fn load(self) -> f64 {
        self
    }
    fn store(c: f64) -> f64 {
        c
    }
}

impl Elem for f16 {
    type C = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(c: f32) -> f16 {
        f16::from_f32(c)
    }
}

impl Elem for bf16 {
    type C = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
}

impl GradPrep {
    #[inline(always)]
    fn apply<C: Real>(&self, g: C, scale: C, lo: C, hi: C) -> C {
        let mut g = if self.scale != 1.0 { g * scale } else { g };
        if self.clip_value.is_some() {
            g = if g < lo {
                lo
            } else if g > hi {
                hi
            } else {
                g
            };
        }
        if self.maximize {
            -g
        } else {
            g
        }
    }
}

/// PyTorch's `lerp`: two formulas, chosen by the weight, for accuracy at both ends.
#[inline(always)]
fn lerp<C: Real>(a: C, b: C, w: C) -> C {
    if w.abs() < C::of(0.5) {
        a + w * (b - a)
    } else {
        b - (b - a) * (C::of(1.0) - w)
    }
}

fn sgd_elems<E: Elem>(p: &mut [E], g: &[E], buf: Option<&mut [E]>, s: &SgdStep, prep: &GradPrep) {
    let c = |v: f64| E::C::of(v);
    let (scale, lo, hi) = (
        c(prep.scale),
        c(-prep.clip_value.unwrap_or(0.0)),
        c(prep.clip_value.unwrap_or(0.0)),
    );
    let (wd, mom, damp, neg_lr) = (
        c(s.weight_decay),
        c(s.momentum),
        c(1.0 - s.dampening),
        c(-s.lr),
    );
    let grad = move |gi: E, pi: E::C| {
        let mut d = prep.apply(gi.load(), scale, lo, hi);
        if s.weight_decay != 0.0 {
            d += wd * pi;
        }
        d
    };
    match buf {
        None => {
            let body = |(pc, gc): (&mut [E], &[E])| {
                for (pi, &gi) in pc.iter_mut().zip(gc) {
                    let pv = pi.load();
                    let d = grad(gi, pv);
                    *pi = E::store(pv + neg_lr * d);
                }
            };
            if p.len() >= PAR_MIN {
                p.par_chunks_mut(PAR_MIN)
                    .zip(g.par_chunks(PAR_MIN))
                    .for_each(body);
            } else {
                body((p, g));
            }
        }
        Some(b) => {
            let body = |((pc, gc), bc): ((&mut [E], &[E]), &mut [E])| {
                for ((pi, &gi), bi) in pc.iter_mut().zip(gc).zip(bc.iter_mut()) {
                    let pv = pi.load();
                    let d = grad(gi, pv);
                    let bv = if s.init_buffer {
                        d
                    } else {
                        bi.load() * mom + damp * d
                    };
                    *bi = E::store(bv);
                    let step = if s.nesterov { d + mom * bv } else { bv };
                    *pi = E::store(pv + neg_lr * step);
                }
            };
            if p.len() >= PAR_MIN {
                p.par_chunks_mut(PAR_MIN)
                    .zip(g.par_chunks(PAR_MIN))
                    .zip(b.par_chunks_mut(PAR_MIN))
                    .for_each(body);
            } else {
                body(((p, g), b));
            }
        }
    }
}

/// Parameter, gradient, first and second moment chunks of one Adam step.
type AdamChunks<'a, E> = (((&'a mut [E], &'a [E]), &'a mut [E]), &'a mut [E]);

#[allow(clippy::too_many_arguments)]
fn adam_elems<E: Elem>(
    p: &mut [E],
    g: &[E],
    m: &mut [E],
    v: &mut [E],
    vmax: Option<&mut [E]>,
    s: &AdamStep,
    prep: &GradPrep,
) {
    let c = |x: f64| E::C::of(x);
    let (scale, lo, hi) = (
        c(prep.scale),
        c(-prep.clip_value.unwrap_or(0.0)),
        c(prep.clip_value.unwrap_or(0.0)),
    );
    let decay = c(1.0 - s.lr * s.weight_decay);
    let wd = c(s.weight_decay);
    let w1 = c(1.0 - s.beta1);
    let (b2, w2) = (c(s.beta2), c(1.0 - s.beta2));
    let (bc2, eps, neg_step) = (c(s.bias_correction2_sqrt), c(s.eps), c(-s.step_size));
    let has_wd = s.weight_decay != 0.0;
    let decoupled = s.decoupled;
    // One element: returns the new (param, exp_avg, exp_avg_sq, max_exp_avg_sq).
    let one = move |pv: E::C, gv: E, mv: E, vv: E, maxv: Option<E>| {
        let mut pv = pv;
        let mut d = prep.apply(gv.load(), scale, lo, hi);
        if has_wd {
            if decoupled {
                pv *= decay;
            } else {
                d += wd * pv;
            }
        }
        let mn = lerp(mv.load(), d, w1);
        let vn = vv.load() * b2 + w2 * d * d;
        let (denom_src, maxn) = match maxv {
            Some(x) => {
                let xm = x.load();
                // torch.maximum: NaN wins.
                let mx = if xm > vn {
                    xm
                } else if vn >= xm {
                    vn
                } else {
                    xm + vn
                };
                (mx, Some(mx))
            }
            None => (vn, None),
        };
        let denom = denom_src.sqrt() / bc2 + eps;
        (pv + neg_step * mn / denom, mn, vn, maxn)
    };
    match vmax {
        None => {
            let body = |(((pc, gc), mc), vc): AdamChunks<'_, E>| {
                for (((pi, &gi), mi), vi) in pc.iter_mut().zip(gc).zip(mc.iter_mut()).zip(vc) {
                    let (pn, mn, vn, _) = one(pi.load(), gi, *mi, *vi, None);
                    *pi = E::store(pn);
                    *mi = E::store(mn);
                    *vi = E::store(vn);
                }
            };
            if p.len() >= PAR_MIN {
                p.par_chunks_mut(PAR_MIN)
                    .zip(g.par_chunks(PAR_MIN))
                    .zip(m.par_chunks_mut(PAR_MIN))
                    .zip(v.par_chunks_mut(PAR_MIN))
                    .for_each(body);
            } else {
                body((((p, g), m), v));
            }
        }
        Some(x) => {
            type Chunks<'a, E> = (
                (((&'a mut [E], &'a [E]), &'a mut [E]), &'a mut [E]),
                &'a mut [E],
            );
            let body = |((((pc, gc), mc), vc), xc): Chunks<'_, E>| {
                for ((((pi, &gi), mi), vi), xi) in pc
                    .iter_mut()
                    .zip(gc)
                    .zip(mc.iter_mut())
                    .zip(vc.iter_mut())
                    .zip(xc.iter_mut())
                {
                    let (pn, mn, vn, xn) = one(pi.load(), gi, *mi, *vi, Some(*xi));
                    *pi = E::store(pn);
                    *mi = E::store(mn);
                    *vi = E::store(vn);
                    if let Some(xn) = xn {
                        *xi = E::store(xn);
                    }
                }
            };
            if p.len() >= PAR_MIN {
                p.par_chunks_mut(PAR_MIN)
                    .zip(g.par_chunks(PAR_MIN))
                    .zip(m.par_chunks_mut(PAR_MIN))
                    .zip(v.par_chunks_mut(PAR_MIN))
                    .zip(x.par_chunks_mut(PAR_MIN))
                    .for_each(body);
            } else {
                body(((((p, g), m), v), x));
            }
        }
    }
}

// ---- access to several candle buffers at once, in place ----

type MutFn<'a> = Box<dyn FnOnce(&mut CpuStorage, &Layout) -> candle_core::Result<()> + 'a>;

/// An `InplaceOp1` that runs a closure on the buffer: nesting these gives a kernel
/// mutable access to several buffers (param, momentum, second moment) in one pass.
struct WithMut<'a>(RefCell<Option<MutFn<'a>>>);

impl InplaceOp1 for WithMut<'_> {
    fn name(&self) -> &'static str {
        "optimizer-step"
    }
    fn cpu_fwd(&self, s: &mut CpuStorage, l: &Layout) -> candle_core::Result<()> {
        match self.0.borrow_mut().take() {
            Some(f) => f(s, l),
            None => candle_core::bail!("optimizer step: buffer visited twice"),
        }
    }
}

fn with_mut<'a>(
    t: &candle_core::Tensor,
    f: impl FnOnce(&mut CpuStorage, &Layout) -> candle_core::Result<()> + 'a,
) -> Result<()> {
    t.inplace_op1(&WithMut(RefCell::new(Some(Box::new(f)))))
        .op("optimizer step")
}

fn range(l: &Layout) -> candle_core::Result<(usize, usize)> {
    l.contiguous_offsets()
        .ok_or_else(|| candle_core::Error::Msg("optimizer step: buffer is not contiguous".into()))
}

/// Read access to a (contiguous) gradient's elements.
fn with_ref<R>(
    t: &candle_core::Tensor,
    f: impl FnOnce(&CpuStorage, (usize, usize)) -> candle_core::Result<R>,
) -> candle_core::Result<R> {
    let (s, l) = t.storage_and_layout();
    let r = range(l)?;
    match &*s {
        Storage::Cpu(c) => f(c, r),
        _ => candle_core::bail!("optimizer step: only CPU tensors are supported"),
    }
}

macro_rules! float_storage {
    ($s:expr, $t:ident) => {
        match $s {
            CpuStorage::$t(v) => v,
            other => candle_core::bail!(
                "optimizer step: state buffer dtype {:?} differs from the parameter's",
                other.dtype()
            ),
        }
    };
}

macro_rules! each_float {
    ($p:expr, |$t:ident| $body:block) => {
        match $p {
            CpuStorage::F32(_) => {
                type $t = f32;
                macro_rules! variant {
                    ($x:expr) => {
                        float_storage!($x, F32)
                    };
                }
                $body
            }
            CpuStorage::F64(_) => {
                type $t = f64;
                macro_rules! variant {
                    ($x:expr) => {
                        float_storage!($x, F64)
                    };
                }
                $body
            }
            CpuStorage::F16(_) => {
                type $t = f16;
                macro_rules! variant {
                    ($x:expr) => {
                        float_storage!($x, F16)
                    };
                }
                $body
            }
            CpuStorage::BF16(_) => {
                type $t = bf16;
                macro_rules! variant {
                    ($x:expr) => {
                        float_storage!($x, BF16)
                    };
                }
                $body
            }
            other => candle_core::bail!(
                "optimizer step: parameters must be floating point, got {:?}",
                other.dtype()
            ),
        }
    };
}

fn fail(e: Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

fn map_inplace(
    t: &candle_core::Tensor,
    f: impl Fn(f64) -> f64 + Sync,
    op: &'static str,
) -> Result<()> {
    fn go<E: Elem>(v: &mut [E], f: &(impl Fn(f64) -> f64 + Sync)) {
        let one = |x: &mut E| *x = E::store(<E::C as Real>::of(f(x.load().widen())));
        if v.len() >= PAR_MIN {
            v.par_chunks_mut(PAR_MIN)
                .for_each(|c| c.iter_mut().for_each(one));
        } else {
            v.iter_mut().for_each(one);
        }
    }
    with_mut(t, |s, l| {
        let (a, b) = range(l)?;
        match s {
            CpuStorage::F32(v) => go(&mut v[a..b], &f),
            CpuStorage::F64(v) => go(&mut v[a..b], &f),
            CpuStorage::F16(v) => go(&mut v[a..b], &f),
            CpuStorage::BF16(v) => go(&mut v[a..b], &f),
            other => candle_core::bail!(
                "{op}: expected a floating point tensor, got {:?}",
                other.dtype()
            ),
        }
        Ok(())
    })
}

impl OptimOps for Cpu {
    /// `param -= lr * (momentum-smoothed, decayed) grad`, in place; `buf` is the momentum buffer.
    fn sgd(
        &self,
        param: &candle_core::Tensor,
        grad: &candle_core::Tensor,
        buf: Option<&candle_core::Tensor>,
        s: &SgdStep,
        prep: &GradPrep,
    ) -> Result<()> {
        with_mut(param, |ps, pl| {
            let pr = range(pl)?;
            let run = |bs: Option<(&mut CpuStorage, (usize, usize))>| {
                with_ref(grad, |gs, gr| {
                    each_float!(ps, |T| {
                        let p: &mut [T] = &mut variant!(ps)[pr.0..pr.1];
                        let g: &[T] = &variant!(gs)[gr.0..gr.1];
                        let b: Option<&mut [T]> = match bs {
                            Some((bs, br)) => Some(&mut variant!(bs)[br.0..br.1]),
                            None => None,
                        };
                        sgd_elems(p, g, b, s, prep);
                    });
                    Ok(())
                })
            };
            match buf {
                None => run(None),
                Some(b) => with_mut(b, |bs, bl| {
                    let br = range(bl)?;
                    run(Some((bs, br)))
                })
                .map_err(fail),
            }
        })
    }

    /// One Adam/AdamW step, in place on the parameter and its moments.
    fn adam(
        &self,
        param: &candle_core::Tensor,
        grad: &candle_core::Tensor,
        state: AdamState<'_>,
        s: &AdamStep,
        prep: &GradPrep,
    ) -> Result<()> {
        let ((exp_avg, exp_avg_sq), max_exp_avg_sq) = state;
        with_mut(param, |ps, pl| {
            let pr = range(pl)?;
            with_mut(exp_avg, |ms, ml| {
                let mr = range(ml)?;
                with_mut(exp_avg_sq, |vs, vl| {
                    let vr = range(vl)?;
                    let run = |xs: Option<(&mut CpuStorage, (usize, usize))>| {
                        with_ref(grad, |gs, gr| {
                            each_float!(ps, |T| {
                                let p: &mut [T] = &mut variant!(ps)[pr.0..pr.1];
                                let g: &[T] = &variant!(gs)[gr.0..gr.1];
                                let m: &mut [T] = &mut variant!(ms)[mr.0..mr.1];
                                let v: &mut [T] = &mut variant!(vs)[vr.0..vr.1];
                                let x: Option<&mut [T]> = match xs {
                                    Some((xs, xr)) => Some(&mut variant!(xs)[xr.0..xr.1]),
                                    None => None,
                                };
                                adam_elems(p, g, m, v, x, s, prep);
                            });
                            Ok(())
                        })
                    };
                    match max_exp_avg_sq {
                        None => run(None),
                        Some(x) => with_mut(x, |xs, xl| {
                            let xr = range(xl)?;
                            run(Some((xs, xr)))
                        })
                        .map_err(fail),
                    }
                })
                .map_err(fail)
            })
            .map_err(fail)
        })
    }

    /// `sum(|g|^p)` (or `max |g|` for p = inf) of a gradient, in f64, after scaling.
    fn norm_pow(&self, grad: &candle_core::Tensor, norm_type: f64) -> Result<f64> {
        fn go<E: Elem>(g: &[E], p: f64) -> f64 {
            if p.is_infinite() {
                return g.iter().map(|x| x.load().widen().abs()).fold(0.0, f64::max);
            }
            let f = |x: &E| {
                let a = x.load().widen().abs();
                if p == 2.0 {
                    a * a
                } else if p == 1.0 {
                    a
                } else {
                    a.powf(p)
                }
            };
            if g.len() >= PAR_MIN {
                g.par_chunks(PAR_MIN)
                    .map(|c| c.iter().map(f).sum::<f64>())
                    .sum()
            } else {
                g.iter().map(f).sum()
            }
        }
        let g = grad.contiguous().op("grad norm")?;
        with_ref(&g, |s, (a, b)| {
            Ok(match s {
                CpuStorage::F32(v) => go(&v[a..b], norm_type),
                CpuStorage::F64(v) => go(&v[a..b], norm_type),
                CpuStorage::F16(v) => go(&v[a..b], norm_type),
                CpuStorage::BF16(v) => go(&v[a..b], norm_type),
                other => candle_core::bail!(
                    "grad norm: gradients must be floating point, got {:?}",
                    other.dtype()
                ),
            })
        })
        .op("grad norm")
    }

    /// `t *= factor`, in place (contiguous floating point `t`).
    fn scale_inplace(&self, t: &candle_core::Tensor, factor: f64) -> Result<()> {
        map_inplace(t, |x| x * factor, "scale_")
    }

    /// `t = clamp(t, lo, hi)`, in place (contiguous floating point `t`).
    fn clamp_inplace(&self, t: &candle_core::Tensor, lo: f64, hi: f64) -> Result<()> {
        map_inplace(
            t,
            |x| {
                if x < lo {
                    lo
                } else if x > hi {
                    hi
                } else {
                    x
                }
            },
            "clamp_",
        )
    }
}
