//! The fused NeRF volume renderer on the CPU: one pass per ray forward, and an O(S)
//! backward that recomputes the ray and runs back to front with one suffix sum
//! (`ops::volume_render` has the maths). Why not candle's ops: the composite takes about
//! twenty passes over (R, S) tensors, and candle's cumsum/cumprod for the transmittance
//! builds an S×S matrix.

use std::sync::RwLockReadGuard;

use candle_core::{Device, Layout, Storage, Tensor, WithDType};
use rayon::prelude::*;

use super::dense::by_float;
use super::elementwise::sigmoid;
use super::scalar::Real;
use super::{Cpu, PAR_MIN};
use crate::backend::render::{RenderGrads, RenderInputs, RenderOps, RenderShape, HEAD};
use crate::error::{CandleContext, Error, Result};

const OP: &str = "volume_render";
/// The distance given to the last sample of every ray (NeRF's "infinity").
const FAR: f64 = 1e10;
/// Added to every transmittance factor, as in NeRF.
const EPS: f64 = 1e-10;

/// A dense candle tensor's elements, borrowed while `guard` lives.
fn slice<'a, T: WithDType>(
    guard: &'a RwLockReadGuard<'_, Storage>,
    layout: &Layout,
) -> Result<&'a [T]> {
    let Storage::Cpu(c) = &**guard else {
        return Err(Error::NotImplemented(format!(
            "{OP}: only CPU tensors are supported"
        )));
    };
    let v = c.as_slice::<T>().op(OP)?;
    let (a, b) = layout
        .contiguous_offsets()
        .ok_or_else(|| Error::shape(format!("{OP}: expected a contiguous tensor")))?;
    Ok(&v[a..b])
}

/// Borrow the elements of several dense tensors (absent ones as `None`) for `f`.
fn with_slices<T: WithDType, R>(
    ts: &[Option<&candle_core::Tensor>],
    f: impl FnOnce(&[Option<&[T]>]) -> Result<R>,
) -> Result<R> {
    let held: Vec<_> = ts
        .iter()
        .map(|t| t.map(|t| t.storage_and_layout()))
        .collect();
    let slices = held
        .iter()
        .map(|h| h.as_ref().map(|(g, l)| slice::<T>(g, l)).transpose())
        .collect::<Result<Vec<_>>>()?;
    f(&slices)
}

/// Rays per rayon task: enough that a task holds about `PAR_MIN` elements.
fn min_rays(samples: usize) -> usize {
    (PAR_MIN / (samples * 4).max(1)).max(1)
}

/// One ray's inputs.
#[derive(Clone, Copy)]
struct Ray<'a, T> {
    raw: &'a [T],
    z: &'a [T],
    dir: Option<&'a [T]>,
    noise: Option<&'a [T]>,
}

fn ray<'a, T>(s: &[Option<&'a [T]>], r: usize, n: usize) -> Ray<'a, T> {
    Ray {
        raw: &s[0].unwrap_or_default()[r * n * 4..(r + 1) * n * 4],
        z: &s[1].unwrap_or_default()[r * n..(r + 1) * n],
        dir: s[2].map(|d| &d[r * 3..r * 3 + 3]),
        noise: s[3].map(|v| &v[r * n..(r + 1) * n]),
    }
}

impl<T: Real> Ray<'_, T> {
    fn norm(&self) -> T {
        match self.dir {
            Some(d) => (d[0] * d[0] + d[1] * d[1] + d[2] * d[2]).sqrt(),
            None => T::of(1.0),
        }
    }
    /// `sigma_i` before the relu (density plus noise).
    fn pre_sigma(&self, i: usize) -> T {
        let s = self.raw[4 * i + 3];
        match self.noise {
            Some(v) => s + v[i],
            None => s,
        }
    }
    /// The distance to the next sample, before scaling by the direction's norm.
    fn step(&self, i: usize) -> T {
        if i + 1 < self.z.len() {
            self.z[i + 1] - self.z[i]
        } else {
            T::of(FAR)
        }
    }
}

fn relu<T: Real>(x: T) -> T {
    if x > T::of(0.0) {
        x
    } else {
        T::of(0.0)
    }
}

/// Render one ray into `out` = [rgb(3), depth, acc, weights(S)].
fn forward_ray<T: Real>(r: Ray<'_, T>, white: bool, out: &mut [T]) {
    let (one, zero) = (T::of(1.0), T::of(0.0));
    let norm = r.norm();
    let (mut trans, mut rgb, mut depth, mut acc) = (one, [zero; 3], zero, zero);
    for i in 0..r.z.len() {
        let sigma = relu(r.pre_sigma(i));
        let alpha = one - (-(sigma * (r.step(i) * norm))).exp();
        let w = alpha * trans;
        out[HEAD + i] = w;
        for (k, c) in rgb.iter_mut().enumerate() {
            *c += w * sigmoid(r.raw[4 * i + k]);
        }
        depth += w * r.z[i];
        acc += w;
        trans *= (one - alpha) + T::of(EPS);
    }
    if white {
        for c in rgb.iter_mut() {
            *c += one - acc;
        }
    }
    out[..3].copy_from_slice(&rgb);
    out[3] = depth;
    out[4] = acc;
}

/// One ray's gradients from the output row's `g`: `graw` (S, 4), and where wanted
/// `gz` (S) and `gdir` (3).
fn backward_ray<T: Real>(
    r: Ray<'_, T>,
    white: bool,
    g: &[T],
    graw: &mut [T],
    mut gz: Option<&mut [T]>,
    gdir: Option<&mut [T]>,
) {
    let (one, zero) = (T::of(1.0), T::of(0.0));
    let n = r.z.len();
    let norm = r.norm();
    // Front to back: keep alpha_i and T_i in graw's slots 0 and 1 until they are read.
    let mut trans = one;
    for i in 0..n {
        let sigma = relu(r.pre_sigma(i));
        let alpha = one - (-(sigma * (r.step(i) * norm))).exp();
        graw[4 * i] = alpha;
        graw[4 * i + 1] = trans;
        trans *= (one - alpha) + T::of(EPS);
    }
    let g_rgb = [g[0], g[1], g[2]];
    let g_depth = g[3];
    let mut g_acc = g[4];
    if white {
        g_acc -= g_rgb[0] + g_rgb[1] + g_rgb[2];
    }
    if let Some(gz) = gz.as_deref_mut() {
        gz.fill(zero);
    }
    let mut g_norm = zero;
    // Back to front: `b` = sum over later samples m of gw_m alpha_m prod_{i<j<m} f_j.
    let mut b = zero;
    for i in (0..n).rev() {
        let (alpha, t) = (graw[4 * i], graw[4 * i + 1]);
        let w = alpha * t;
        let c = [
            sigmoid(r.raw[4 * i]),
            sigmoid(r.raw[4 * i + 1]),
            sigmoid(r.raw[4 * i + 2]),
        ];
        let gw = g[HEAD + i]
            + (g_rgb[0] * c[0] + g_rgb[1] * c[1] + g_rgb[2] * c[2])
            + g_depth * r.z[i]
            + g_acc;
        let g_alpha = t * (gw - b);
        b = gw * alpha + ((one - alpha) + T::of(EPS)) * b;

        let pre = r.pre_sigma(i);
        let sigma = relu(pre);
        let step = r.step(i);
        let dist = step * norm;
        let e = (-(sigma * dist)).exp();
        for k in 0..3 {
            graw[4 * i + k] = w * g_rgb[k] * c[k] * (one - c[k]);
        }
        graw[4 * i + 3] = if pre > zero { g_alpha * e * dist } else { zero };
        let g_dist = g_alpha * e * sigma;
        if let Some(gz) = gz.as_deref_mut() {
            gz[i] += g_depth * w;
            if i + 1 < n {
                gz[i + 1] += g_dist * norm;
                gz[i] -= g_dist * norm;
            }
        }
        g_norm += g_dist * step;
    }
    if let (Some(d), Some(gdir)) = (r.dir, gdir) {
        for k in 0..3 {
            gdir[k] = if norm > zero {
                g_norm * d[k] / norm
            } else {
                zero
            };
        }
    }
}

/// Rows of `out` (width `row` per ray) written by `f(ray, row)`, parallel over rays.
fn over_rays<U: Send>(out: &mut [U], row: usize, min: usize, f: impl Fn(usize, &mut [U]) + Sync) {
    if out.len() >= PAR_MIN {
        out.par_chunks_mut(row)
            .enumerate()
            .with_min_len(min)
            .for_each(|(r, o)| f(r, o));
    } else {
        out.chunks_mut(row).enumerate().for_each(|(r, o)| f(r, o));
    }
}

/// The forward kernel on dense inputs in the compute dtype: an (R, 5 + S) row per ray.
fn forward_typed<T: Real>(ins: &[Option<&candle_core::Tensor>], s: RenderShape) -> Result<Vec<T>> {
    let width = HEAD + s.samples;
    with_slices::<T, _>(ins, |sl| {
        let mut out = vec![T::of(0.0); s.rays * width];
        over_rays(&mut out, width, min_rays(s.samples), |r, o| {
            forward_ray(ray(sl, r, s.samples), s.white, o)
        });
        Ok(out)
    })
}

/// One ray's gradient rows: raw's (the scratch too), z's and rays_d's where wanted.
type RayGrads<'a, T> = ((&'a mut [T], Option<&'a mut [T]>), Option<&'a mut [T]>);

/// Split `v` into one row of `width` per ray, or `None` for every ray when `v` is empty.
fn rows<T>(v: &mut [T], width: usize, rays: usize) -> Vec<Option<&mut [T]>> {
    if v.is_empty() {
        (0..rays).map(|_| None).collect()
    } else {
        v.chunks_mut(width).map(Some).collect()
    }
}

/// The backward kernel: gradients of raw (R, S, 4), and where wanted z (R, S) and
/// rays_d (R, 3) (empty vectors otherwise).
fn backward_typed<T: Real>(
    ins: &[Option<&candle_core::Tensor>],
    g: &candle_core::Tensor,
    s: RenderShape,
    (want_z, want_dir): (bool, bool),
) -> Result<(Vec<T>, Vec<T>, Vec<T>)> {
    let n = s.samples;
    let mut all: Vec<Option<&candle_core::Tensor>> = ins.to_vec();
    all.push(Some(g));
    with_slices::<T, _>(&all, |sl| {
        let gs = sl[4].unwrap_or_default();
        let zero = T::of(0.0);
        let width = HEAD + n;
        // raw's gradient doubles as the per-ray scratch, so it is always computed.
        let mut graw = vec![zero; s.rays * n * 4];
        let mut gz = vec![zero; if want_z { s.rays * n } else { 0 }];
        let mut gdir = vec![
            zero;
            if want_dir && sl[2].is_some() {
                s.rays * 3
            } else {
                0
            }
        ];
        let work = graw
            .chunks_mut(n * 4)
            .zip(rows(&mut gz, n, s.rays))
            .zip(rows(&mut gdir, 3, s.rays));
        let body = |(r, ((a, b), c)): (usize, RayGrads<'_, T>)| {
            let g = &gs[r * width..(r + 1) * width];
            backward_ray(ray(sl, r, n), s.white, g, a, b, c)
        };
        if s.rays * n * 4 >= PAR_MIN {
            work.collect::<Vec<_>>()
                .into_par_iter()
                .enumerate()
                .with_min_len(min_rays(n))
                .for_each(body);
        } else {
            work.enumerate().for_each(body);
        }
        Ok((graw, gz, gdir))
    })
}

fn inputs(ins: RenderInputs<'_>) -> [Option<&Tensor>; 4] {
    [Some(ins.raw), Some(ins.z), ins.rays_d, ins.noise]
}

fn tensor<T: WithDType>(v: Vec<T>, dims: &[usize]) -> Result<Tensor> {
    Tensor::from_vec(v, dims, &Device::Cpu).op(OP)
}

impl RenderOps for Cpu {
    /// See `RenderOps::volume_render`.
    fn volume_render(
        &self,
        _name: &'static str,
        ins: RenderInputs<'_>,
        s: RenderShape,
    ) -> Result<Tensor> {
        let dims = [s.rays, HEAD + s.samples];
        by_float!(ins.raw.dtype(), |T| tensor(
            forward_typed::<T>(&inputs(ins), s)?,
            &dims
        ))
    }

    /// See `RenderOps::volume_render_backward`.
    fn volume_render_backward(
        &self,
        _name: &'static str,
        ins: RenderInputs<'_>,
        g: &Tensor,
        s: RenderShape,
        want: (bool, bool),
    ) -> Result<RenderGrads> {
        let (r, n) = (s.rays, s.samples);
        by_float!(ins.raw.dtype(), |T| {
            let (a, b, c) = backward_typed::<T>(&inputs(ins), g, s, want)?;
            Ok((
                tensor(a, &[r, n, 4])?,
                (!b.is_empty()).then(|| tensor(b, &[r, n])).transpose()?,
                (!c.is_empty()).then(|| tensor(c, &[r, 3])).transpose()?,
            ))
        })
    }
}
