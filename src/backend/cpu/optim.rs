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
use rayon::prelude::*;

use super::scalar::Real;
use super::Cpu;
use super::PAR_MIN;
use crate::backend::{GradPrep, OptimOps, StepRule};
use crate::error::{CandleContext, Error, Result};

/// A stored element and the float type it is computed in (half types in f32, as
/// PyTorch's CPU kernels compute in their opmath type). A type mapping, not math.
pub trait Elem: Copy + Send + Sync {
    type C: Real;
    /// The type's machine epsilon (`torch.finfo(dtype).eps`).
    const EPS: f64;
    fn load(self) -> Self::C;
    fn store(c: Self::C) -> Self;
}

impl Elem for f32 {
    const EPS: f64 = f32::EPSILON as f64;
    type C = f32;
    fn load(self) -> f32 {
        self
    }
    fn store(c: f32) -> f32 {
        c
    }
}

impl Elem for f64 {
    const EPS: f64 = f64::EPSILON;
    type C = f64;
    fn load(self) -> f64 {
        self
    }
    fn store(c: f64) -> f64 {
        c
    }
}

impl Elem for f16 {
    const EPS: f64 = f16::EPSILON.to_f64_const();
    type C = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(c: f32) -> f16 {
        f16::from_f32(c)
    }
}

impl Elem for bf16 {
    const EPS: f64 = bf16::EPSILON.to_f64_const();
    type C = f32;
    fn load(self) -> f32 {
        self.to_f32()
    }
    fn store(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
}

/// [`GradPrep`] in the compute type: applied to each gradient element as it is read.
///
/// Absent parts are neutral values, not `Option`s (scale 1, clip bounds ±inf, sign +1), so
/// the element loop has no branch on them and the compiler vectorises it; each neutral
/// value leaves every gradient, NaN included, as it was.
#[derive(Clone, Copy)]
pub(super) struct Prep<C> {
    scale: C,
    lo: C,
    hi: C,
    sign: C,
}

impl<C: Real> Prep<C> {
    pub(super) fn new(p: &GradPrep) -> Self {
        let (lo, hi) = match p.clip_value {
            Some(v) => (C::of(-v), C::of(v)),
            None => (C::neg_infinity(), C::infinity()),
        };
        Prep {
            scale: C::of(p.scale),
            lo,
            hi,
            sign: C::of(if p.maximize { -1.0 } else { 1.0 }),
        }
    }

    #[inline(always)]
    pub(super) fn apply(&self, g: C) -> C {
        let g = g * self.scale;
        let g = if g < self.lo {
            self.lo
        } else if g > self.hi {
            self.hi
        } else {
            g
        };
        g * self.sign
    }
}

/// PyTorch's `lerp`: two formulas, chosen by the weight, for accuracy at both ends.
#[inline(always)]
pub(super) fn lerp<C: Real>(a: C, b: C, w: C) -> C {
    if w.abs() < C::of(0.5) {
        a + w * (b - a)
    } else {
        b - (b - a) * (C::of(1.0) - w)
    }
}

/// `torch.maximum`: NaN wins.
#[inline(always)]
fn maximum<C: Real>(a: C, b: C) -> C {
    if a > b {
        a
    } else if b >= a {
        b
    } else {
        a + b
    }
}

/// One optimizer's per-element update: the new parameter from the parameter, the
/// (prepared) gradient and the element's state, updated in place. `K` is the number of
/// state buffers the step was given (see [`StepRule`]); the rule's coefficients are
/// already in the compute type.
pub(super) trait Rule<C: Real>: Sync {
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C;
}

/// L2 weight decay (`grad + wd * param`), or none.
#[inline(always)]
fn l2<C: Real>(g: C, p: C, wd: Option<C>) -> C {
    match wd {
        Some(wd) => g + wd * p,
        None => g,
    }
}

/// `Some(c)` for a non-zero coefficient.
fn nonzero<C: Real>(v: f64) -> Option<C> {
    (v != 0.0).then(|| C::of(v))
}

/// Weight decay as the Adam family applies it: L2 into the gradient, or decoupled onto the
/// parameter before the step (AdamW's `p *= 1 - lr * wd`). Branch-free, as [`Prep`]: the
/// parameter is always scaled (by 1 when not decoupled) and the L2 term chosen by a select.
#[derive(Clone, Copy)]
struct Decay<C> {
    keep: C,
    l2: C,
    has_l2: bool,
}

impl<C: Real> Decay<C> {
    fn new(weight_decay: f64, decoupled: bool, lr: f64) -> Self {
        let on = weight_decay != 0.0;
        Decay {
            keep: C::of(if on && decoupled {
                1.0 - lr * weight_decay
            } else {
                1.0
            }),
            l2: C::of(weight_decay),
            has_l2: on && !decoupled,
        }
    }

    /// The decayed (parameter, gradient).
    #[inline(always)]
    fn apply(self, p: C, g: C) -> (C, C) {
        // Not `g + 0 * p`: an infinite parameter would turn the gradient into NaN.
        let with_l2 = g + self.l2 * p;
        (p * self.keep, if self.has_l2 { with_l2 } else { g })
    }
}

/// Adam's two moments, updated in `s[0]`, `s[1]`: `m = lerp(m, g, 1 - b1)` and
/// `v = b2 v + (1 - b2) g^2`.
#[derive(Clone, Copy)]
struct Moments<C> {
    w1: C,
    b2: C,
    w2: C,
}

impl<C: Real> Moments<C> {
    fn new(beta1: f64, beta2: f64) -> Self {
        Moments {
            w1: C::of(1.0 - beta1),
            b2: C::of(beta2),
            w2: C::of(1.0 - beta2),
        }
    }

    #[inline(always)]
    fn update<const K: usize>(self, s: &mut [C; K], g: C) -> (C, C) {
        let m = lerp(s[0], g, self.w1);
        let v = s[1] * self.b2 + self.w2 * g * g;
        s[0] = m;
        s[1] = v;
        (m, v)
    }
}

struct Sgd<C> {
    wd: Option<C>,
    mom: C,
    damp: C,
    neg_lr: C,
    nesterov: bool,
    init: bool,
}

impl<C: Real> Rule<C> for Sgd<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let d = l2(g, p, self.wd);
        if K == 0 {
            return p + self.neg_lr * d;
        }
        let b = if self.init {
            d
        } else {
            s[0] * self.mom + self.damp * d
        };
        s[0] = b;
        let step = if self.nesterov { d + self.mom * b } else { b };
        p + self.neg_lr * step
    }
}

struct Adam<C> {
    decay: Decay<C>,
    moments: Moments<C>,
    bc2: C,
    eps: C,
    neg_step: C,
}

impl<C: Real> Rule<C> for Adam<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let (p, d) = self.decay.apply(p, g);
        let (m, v) = self.moments.update(s, d);
        let src = if K == 3 {
            s[K - 1] = maximum(s[K - 1], v);
            s[K - 1]
        } else {
            v
        };
        let denom = src.sqrt() / self.bc2 + self.eps;
        p + self.neg_step * m / denom
    }
}

struct RmsProp<C> {
    wd: Option<C>,
    alpha: C,
    w: C,
    eps: C,
    mom: Option<C>,
    centered: bool,
    neg_lr: C,
}

impl<C: Real> Rule<C> for RmsProp<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let g = l2(g, p, self.wd);
        let sq = s[0] * self.alpha + self.w * g * g;
        s[0] = sq;
        let avg = if self.centered {
            let ga = lerp(s[K - 1], g, self.w);
            s[K - 1] = ga;
            (sq + C::of(-1.0) * ga * ga).sqrt()
        } else {
            sq.sqrt()
        } + self.eps;
        match self.mom {
            Some(m) => {
                let b = s[1] * m + g / avg;
                s[1] = b;
                p + self.neg_lr * b
            }
            None => p + self.neg_lr * g / avg,
        }
    }
}

struct Adagrad<C> {
    wd: Option<C>,
    eps: C,
    neg_clr: C,
}

impl<C: Real> Rule<C> for Adagrad<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let g = l2(g, p, self.wd);
        let sum = s[0] + C::of(1.0) * g * g;
        s[0] = sum;
        p + self.neg_clr * g / (sum.sqrt() + self.eps)
    }
}

struct Adamax<C> {
    wd: Option<C>,
    w1: C,
    b2: C,
    eps: C,
    neg_clr: C,
}

impl<C: Real> Rule<C> for Adamax<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let g = l2(g, p, self.wd);
        let m = lerp(s[0], g, self.w1);
        let u = maximum(s[1] * self.b2, g.abs() + self.eps);
        s[0] = m;
        s[1] = u;
        p + self.neg_clr * m / u
    }
}

struct NAdam<C> {
    decay: Decay<C>,
    moments: Moments<C>,
    bc2: C,
    eps: C,
    c_grad: C,
    c_avg: C,
}

impl<C: Real> Rule<C> for NAdam<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let (p, g) = self.decay.apply(p, g);
        let (m, v) = self.moments.update(s, g);
        let denom = (v / self.bc2).sqrt() + self.eps;
        let p = p + self.c_grad * g / denom;
        p + self.c_avg * m / denom
    }
}

struct RAdam<C> {
    decay: Decay<C>,
    moments: Moments<C>,
    bc1: C,
    bc2_sqrt: C,
    eps: C,
    lr: C,
    rect: Option<C>,
}

impl<C: Real> Rule<C> for RAdam<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let (p, g) = self.decay.apply(p, g);
        let (m, v) = self.moments.update(s, g);
        let u = m / self.bc1 * self.lr;
        let u = match self.rect {
            Some(r) => u * (self.bc2_sqrt / (v.sqrt() + self.eps)) * r,
            None => u,
        };
        p + C::of(-1.0) * u
    }
}

struct Adadelta<C> {
    wd: Option<C>,
    rho: C,
    w: C,
    eps: C,
    neg_lr: C,
}

impl<C: Real> Rule<C> for Adadelta<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let g = l2(g, p, self.wd);
        let sq = s[0] * self.rho + self.w * g * g;
        let std = (sq + self.eps).sqrt();
        let delta = (s[1] + self.eps).sqrt() / std * g;
        s[0] = sq;
        s[1] = s[1] * self.rho + self.w * delta * delta;
        p + self.neg_lr * delta
    }
}

struct Rprop<C> {
    eta_minus: C,
    eta_plus: C,
    lo: C,
    hi: C,
}

impl<C: Real> Rule<C> for Rprop<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let zero = C::of(0.0);
        let prod = g * s[0];
        let factor = if prod > zero {
            self.eta_plus
        } else if prod < zero {
            self.eta_minus
        } else if prod == zero {
            C::of(1.0)
        } else {
            prod // NaN stays NaN, as PyTorch's masked writes leave it
        };
        // clamp_: NaN propagates.
        let ss = s[1] * factor;
        let ss = if ss < self.lo {
            self.lo
        } else if ss > self.hi {
            self.hi
        } else {
            ss
        };
        let g = if factor == self.eta_minus { zero } else { g };
        s[0] = g;
        s[1] = ss;
        let sign = if g > zero {
            C::of(1.0)
        } else if g < zero {
            C::of(-1.0)
        } else if g == zero {
            zero
        } else {
            g
        };
        p + C::of(-1.0) * sign * ss
    }
}

struct Asgd<C> {
    wd: Option<C>,
    decay: C,
    neg_eta: C,
    mu: Option<C>,
}

impl<C: Real> Rule<C> for Asgd<C> {
    #[inline(always)]
    fn update<const K: usize>(&self, p: C, g: C, s: &mut [C; K]) -> C {
        let g = l2(g, p, self.wd);
        let p = p * self.decay;
        let p = p + self.neg_eta * g;
        s[0] = match self.mu {
            Some(mu) => s[0] + (p - s[0]) * mu,
            None => p,
        };
        p
    }
}

/// The walk every rule shares, for `$k` state buffers: parameter, gradient and buffers in
/// step, in parallel chunks above `PAR_MIN`; each element loaded once and stored once.
/// Each buffer is its own `&mut` argument, so the compiler knows they do not alias: a
/// first version indexing an array of slices ran the 1M-element Adam step about 30%
/// slower.
macro_rules! walk_fn {
    ($name:ident, $k:literal $(, ($b:ident, $v:ident))*) => {
        fn $name<E: Elem, S: Elem<C = E::C>, R: Rule<E::C>>(
            p: &mut [E],
            g: &[E],
            bufs: [&mut [S]; $k],
            rule: &R,
            prep: &Prep<E::C>,
        ) {
            // Not inlined: as a function of its own its slices and coefficients are
            // non-aliasing arguments, so the compiler keeps the coefficients in registers
            // and vectorises the loop; inlined into rayon's closure, it reloaded them for
            // every element and ran scalar (3x slower on a 4M-element Adam step, 16x with
            // the branches on absent options that `Prep` and `Decay` no longer have).
            // Compiled for each vector width (`multiversion`: the wheel's baseline is SSE2):
            // memory-bound on dense state, compute-bound on decoded blocks in L1.
            #[inline(never)]
            #[allow(clippy::extra_unused_type_parameters)] // S: the state's; walk0 has none
            #[multiversion::multiversion(targets = "simd")]
            fn body<E: Elem, S: Elem<C = E::C>, R: Rule<E::C>>(
                p: &mut [E],
                g: &[E],
                $($b: &mut [S],)*
                rule: &R,
                prep: &Prep<E::C>,
            ) {
                let n = p.len();
                let g = &g[..n];
                $(let $b = &mut $b[..n];)*
                for i in 0..n {
                    let mut s: [E::C; $k] = [$($b[i].load()),*];
                    let pn = rule.update(p[i].load(), prep.apply(g[i].load()), &mut s);
                    p[i] = E::store(pn);
                    let [$($v),*] = s;
                    $($b[i] = S::store($v);)*
                }
            }
            if p.len() < PAR_MIN {
                let [$($b),*] = bufs;
                return body::<E, S, R>(p, g, $($b,)* rule, prep);
            }
            let mut chunks = bufs.map(|b| b.chunks_mut(PAR_MIN));
            let groups: Vec<[&mut [S]; $k]> = (0..p.len().div_ceil(PAR_MIN))
                .map(|_| std::array::from_fn(|k| chunks[k].next().expect("same length")))
                .collect();
            p.par_chunks_mut(PAR_MIN)
                .zip(g.par_chunks(PAR_MIN))
                .zip(groups)
                .for_each(|((pc, gc), bc)| {
                    let [$($b),*] = bc;
                    body::<E, S, R>(pc, gc, $($b,)* rule, prep)
                });
        }
    };
}

walk_fn!(walk0, 0);
walk_fn!(walk1, 1, (b0, v0));
walk_fn!(walk2, 2, (b0, v0), (b1, v1));
walk_fn!(walk3, 3, (b0, v0), (b1, v1), (b2, v2));

/// The buffers as an array of the length the rule was checked to take.
fn arr<T, const K: usize>(v: Vec<T>) -> [T; K] {
    v.try_into()
        .unwrap_or_else(|_| unreachable!("checked against the rule's buffer count"))
}

/// The walk for a rule over `bufs.len()` state buffers of element type `S` (the
/// parameter's own for dense state; the compute type for decoded coded state).
pub(super) fn walk<E: Elem, S: Elem<C = E::C>, R: Rule<E::C>>(
    p: &mut [E],
    g: &[E],
    bufs: Vec<&mut [S]>,
    rule: &R,
    prep: &GradPrep,
) {
    let prep = Prep::new(prep);
    match bufs.len() {
        0 => walk0::<E, S, R>(p, g, [], rule, &prep),
        1 => walk1(p, g, arr(bufs), rule, &prep),
        2 => walk2(p, g, arr(bufs), rule, &prep),
        3 => walk3(p, g, arr(bufs), rule, &prep),
        n => unreachable!("optimizer step: {n} state buffers"),
    }
}

/// A walk over one parameter's elements that any element-wise rule can drive: the dense
/// one here, the coded-state one in `optim_coded.rs`.
pub(super) trait Walker<C: Real> {
    fn walk<R: Rule<C>>(self, rule: &R);
}

/// The dense walk: parameter, gradient and state buffers all of the parameter's dtype.
struct Dense<'a, E> {
    p: &'a mut [E],
    g: &'a [E],
    bufs: Vec<&'a mut [E]>,
    prep: &'a GradPrep,
}

impl<E: Elem> Walker<E::C> for Dense<'_, E> {
    fn walk<R: Rule<E::C>>(self, rule: &R) {
        walk(self.p, self.g, self.bufs, rule, self.prep)
    }
}

/// Run `rule` over one parameter's elements: the shared walk, monomorphised per rule
/// (Adafactor, which is not element-wise, has its own).
fn run_rule<E: Elem>(p: &mut [E], g: &[E], bufs: Vec<&mut [E]>, rule: &StepRule, prep: &GradPrep) {
    if let StepRule::Adafactor(s) = *rule {
        return super::adafactor::run(p, g, bufs, &s, prep);
    }
    with_rule(rule, Dense { p, g, bufs, prep });
}

/// Build `rule`'s element-wise update with its coefficients in the compute type `C` and
/// hand it to `w`. Adafactor is not element-wise: the walker is not run (callers route it
/// elsewhere first) and `false` is returned.
pub(super) fn with_rule<C: Real, W: Walker<C>>(rule: &StepRule, w: W) -> bool {
    let c = |v: f64| C::of(v);
    match *rule {
        StepRule::Sgd(s) => {
            let r = Sgd {
                wd: nonzero(s.weight_decay),
                mom: c(s.momentum),
                damp: c(1.0 - s.dampening),
                neg_lr: c(-s.lr),
                nesterov: s.nesterov,
                init: s.init_buffer,
            };
            w.walk(&r)
        }
        StepRule::Adam(s) => {
            let r = Adam {
                decay: Decay::new(s.base.weight_decay, s.base.decoupled, s.base.lr),
                moments: Moments::new(s.base.beta1, s.base.beta2),
                bc2: c(s.bias_correction2_sqrt),
                eps: c(s.base.eps),
                neg_step: c(-s.step_size),
            };
            w.walk(&r)
        }
        StepRule::RmsProp(s) => {
            let r = RmsProp {
                wd: nonzero(s.weight_decay),
                alpha: c(s.alpha),
                w: c(1.0 - s.alpha),
                eps: c(s.eps),
                mom: (s.momentum > 0.0).then(|| c(s.momentum)),
                centered: s.centered,
                neg_lr: c(-s.lr),
            };
            w.walk(&r)
        }
        StepRule::Adagrad(s) => {
            let r = Adagrad {
                wd: nonzero(s.weight_decay),
                eps: c(s.eps),
                neg_clr: c(-s.clr),
            };
            w.walk(&r)
        }
        StepRule::Adamax(s) => {
            let r = Adamax {
                wd: nonzero(s.weight_decay),
                w1: c(1.0 - s.beta1),
                b2: c(s.beta2),
                eps: c(s.eps),
                neg_clr: c(-s.clr),
            };
            w.walk(&r)
        }
        StepRule::NAdam(s) => {
            let r = NAdam {
                decay: Decay::new(s.base.weight_decay, s.base.decoupled, s.base.lr),
                moments: Moments::new(s.base.beta1, s.base.beta2),
                bc2: c(s.bias_correction2),
                eps: c(s.base.eps),
                c_grad: c(s.c_grad),
                c_avg: c(s.c_avg),
            };
            w.walk(&r)
        }
        StepRule::RAdam(s) => {
            let r = RAdam {
                decay: Decay::new(s.base.weight_decay, s.base.decoupled, s.base.lr),
                moments: Moments::new(s.base.beta1, s.base.beta2),
                bc1: c(s.bias_correction1),
                bc2_sqrt: c(s.bias_correction2_sqrt),
                eps: c(s.base.eps),
                lr: c(s.base.lr),
                rect: s.rect.map(c),
            };
            w.walk(&r)
        }
        StepRule::Adadelta(s) => {
            let r = Adadelta {
                wd: nonzero(s.weight_decay),
                rho: c(s.rho),
                w: c(1.0 - s.rho),
                eps: c(s.eps),
                neg_lr: c(-s.lr),
            };
            w.walk(&r)
        }
        StepRule::Rprop(s) => {
            let r = Rprop {
                eta_minus: c(s.eta_minus),
                eta_plus: c(s.eta_plus),
                lo: c(s.step_size_min),
                hi: c(s.step_size_max),
            };
            w.walk(&r)
        }
        StepRule::Adafactor(_) => return false,
        StepRule::Asgd(s) => {
            let r = Asgd {
                wd: nonzero(s.weight_decay),
                decay: c(1.0 - s.lambd * s.eta),
                neg_eta: c(-s.eta),
                mu: (s.mu != 1.0).then(|| c(s.mu)),
            };
            w.walk(&r)
        }
    }
    true
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
pub(super) fn with_ref<R>(
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

/// A buffer's storage, and the element range its contiguous layout covers.
pub(super) type Buf<'a> = (&'a mut CpuStorage, (usize, usize));

/// Mutable access to all of `ts` at once (nested in-place ops), then `f` on them.
pub(super) fn nest<'a>(
    ts: &[&candle_core::Tensor],
    acc: Vec<Buf<'a>>,
    f: &mut dyn FnMut(Vec<Buf<'_>>) -> candle_core::Result<()>,
) -> Result<()> {
    match ts.split_first() {
        None => f(acc).op("optimizer step"),
        Some((t, rest)) => with_mut(t, |s, l| {
            let r = range(l)?;
            let mut acc = acc;
            acc.push((s, r));
            nest(rest, acc, f).map_err(fail)
        }),
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

/// `$body` with `$t` the parameter's float type and `variant!(storage)` a buffer's slice of
/// that type, one arm per float dtype (`$d` passes `$` to the inner macro's definition).
macro_rules! each_float {
    ($p:expr, |$t:ident| $body:block) => {
        each_float!(@arms ($) $p, $t, $body, F32 f32, F64 f64, F16 f16, BF16 bf16)
    };
    (@arms ($d:tt) $p:expr, $t:ident, $body:block, $($variant:ident $ty:ty),*) => {
        match $p {
            $(CpuStorage::$variant(_) => {
                type $t = $ty;
                macro_rules! variant {
                    ($d x:expr) => {
                        float_storage!($d x, $variant)
                    };
                }
                $body
            })*
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
    /// One step of `rule`, in place on the parameter and its state buffers.
    fn optim_step(
        &self,
        param: &candle_core::Tensor,
        grad: &candle_core::Tensor,
        state: &[&candle_core::Tensor],
        rule: &StepRule,
        prep: &GradPrep,
    ) -> Result<()> {
        if state.len() != rule.buffers() {
            return Err(Error::value(format!(
                "{} step: expected {} state buffers, got {}",
                rule.name(),
                rule.buffers(),
                state.len()
            )));
        }
        let mut all = Vec::with_capacity(state.len() + 1);
        all.push(param);
        all.extend_from_slice(state);
        nest(&all, Vec::new(), &mut |mut bufs| {
            let (ps, pr) = bufs.remove(0);
            with_ref(grad, |gs, gr| {
                each_float!(ps, |T| {
                    let p: &mut [T] = &mut variant!(ps)[pr.0..pr.1];
                    let g: &[T] = &variant!(gs)[gr.0..gr.1];
                    let mut b: Vec<&mut [T]> = Vec::with_capacity(bufs.len());
                    for (bs, br) in bufs {
                        b.push(&mut variant!(bs)[br.0..br.1]);
                    }
                    run_rule(p, g, b, rule, prep);
                });
                Ok(())
            })
        })
    }

    fn optim_step_coded(
        &self,
        param: &candle_core::Tensor,
        grad: &candle_core::Tensor,
        state: &[crate::backend::coded::CodedState<'_>],
        rule: &StepRule,
        prep: &GradPrep,
    ) -> Result<()> {
        super::optim_coded::step(param, grad, state, rule, prep)
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
