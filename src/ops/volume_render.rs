//! NeRF volume rendering (`raw2outputs`) as one fused op with its own backward.
//!
//! Per ray of S samples, from `raw` (S, 4), `z` (S), optional `rays_d` (3) and noise (S):
//! `c = sigmoid(raw[:, :3])`, `sigma = relu(raw[:, 3] + noise)`,
//! `dist_i = (z[i+1] - z[i]) * |rays_d|` (1e10 for the last), `alpha = 1 - exp(-sigma dist)`,
//! `T_i = prod_{j<i} (1 - alpha_j + 1e-10)`, `w = alpha T`; the output row is
//! `[sum w c (3), sum w z, sum w, w (S)]`, with `1 - acc` added to the colour on a white
//! background.
//!
//! The node saves only its inputs. The backward recomputes the ray front to back, then
//! runs back to front with one suffix sum for the transmittance terms:
//! `dL/dalpha_i = T_i (gw_i - B_i)`, `B_i = gw_{i+1} alpha_{i+1} + f_{i+1} B_{i+1}`
//! (`gw` the gradient of `w`, `f = 1 - alpha + 1e-10`), so O(S) work and no division.
//! The backward is a kernel, not gradstream ops: its results carry a node that refuses
//! a second differentiation.

use std::sync::RwLockReadGuard;

use candle_core::{Device, Layout, Storage, WithDType};
use rayon::prelude::*;

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::saved::SavedTensor;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::dense::by_float;
use crate::ops::inplace::PAR_MIN;
use crate::ops::nn::Float;
use crate::tensor::{shape_str, Tensor};

const OP: &str = "volume_render";
/// The distance given to the last sample of every ray (NeRF's "infinity").
const FAR: f64 = 1e10;
/// Added to every transmittance factor, as in NeRF.
const EPS: f64 = 1e-10;

/// The channels of an output row before the weights: rgb (3), depth, acc.
pub const HEAD: usize = 5;

/// The inputs of one render, checked and flattened to R rays.
struct Shapes {
    lead: Vec<usize>,
    rays: usize,
    samples: usize,
}

fn describe(name: &str, t: &Tensor) -> String {
    format!("{name} {} {}", t.dtype().name(), shape_str(&t.dims()))
}

fn check(
    raw: &Tensor,
    z: &Tensor,
    rays_d: Option<&Tensor>,
    noise: Option<&Tensor>,
) -> Result<Shapes> {
    let all = || {
        let mut s = vec![describe("raw", raw), describe("z_vals", z)];
        if let Some(d) = rays_d {
            s.push(describe("rays_d", d));
        }
        s.join(", ")
    };
    let rd = raw.dims();
    if rd.len() < 2 || rd[rd.len() - 1] != 4 {
        return Err(Error::shape(format!(
            "{OP}: raw must have shape (..., S, 4) (rgb and density per sample), got {}",
            all()
        )));
    }
    let lead_s = &rd[..rd.len() - 1];
    let samples = lead_s[lead_s.len() - 1];
    let lead = lead_s[..lead_s.len() - 1].to_vec();
    if z.dims() != lead_s {
        return Err(Error::shape(format!(
            "{OP}: z_vals must have shape raw.shape[:-1] = {}, got {}",
            shape_str(lead_s),
            all()
        )));
    }
    if let Some(d) = rays_d {
        let want: Vec<usize> = lead.iter().copied().chain([3]).collect();
        if d.dims() != want {
            return Err(Error::shape(format!(
                "{OP}: rays_d must have shape {} (one direction per ray), got {}",
                shape_str(&want),
                all()
            )));
        }
    }
    if let Some(n) = noise {
        if n.dims() != lead_s {
            return Err(Error::shape(format!(
                "{OP}: noise must have shape {}, got {} ({})",
                shape_str(lead_s),
                shape_str(&n.dims()),
                all()
            )));
        }
    }
    if samples == 0 {
        return Err(Error::shape(format!(
            "{OP}: every ray needs at least one sample (S > 0), got {}",
            all()
        )));
    }
    let dt = raw.dtype();
    if !dt.is_floating_point() {
        return Err(Error::dtype(format!(
            "{OP}: expected floating point inputs, got {}",
            all()
        )));
    }
    let others = [Some(z), rays_d, noise];
    if others.iter().flatten().any(|t| t.dtype() != dt) {
        return Err(Error::dtype(format!(
            "{OP}: expected every input to have raw's dtype {}, got {}{}",
            dt.name(),
            all(),
            noise
                .map(|n| format!(", noise {}", n.dtype().name()))
                .unwrap_or_default()
        )));
    }
    let rays = lead.iter().product();
    Ok(Shapes {
        lead,
        rays,
        samples,
    })
}

/// The dtype the kernel computes in: f32 and f64 as they are, half types in f32.
fn compute_dtype(dt: DType) -> DType {
    if dt == DType::Float64 {
        DType::Float64
    } else {
        DType::Float32
    }
}

/// `t`'s data, dense, in the compute dtype.
fn dense(t: &Tensor, cdt: DType) -> Result<candle_core::Tensor> {
    let d = t.data();
    let d = if d.dtype() != cdt.candle() {
        d.to_dtype(cdt.candle()).op(OP)?
    } else {
        d
    };
    d.contiguous().op(OP)
}

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

fn to_tensor<T: WithDType>(v: Vec<T>, dims: &[usize], dtype: DType) -> Result<Tensor> {
    let d = candle_core::Tensor::from_vec(v, dims, &Device::Cpu).op(OP)?;
    let d = if d.dtype() != dtype.candle() {
        d.to_dtype(dtype.candle()).op(OP)?
    } else {
        d
    };
    Ok(Tensor::new(d, dtype))
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

impl<T: Float> Ray<'_, T> {
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

fn relu<T: Float>(x: T) -> T {
    if x > T::of(0.0) {
        x
    } else {
        T::of(0.0)
    }
}

fn sigmoid<T: Float>(x: T) -> T {
    T::of(1.0) / (T::of(1.0) + (-x).exp())
}

/// Render one ray into `out` = [rgb(3), depth, acc, weights(S)].
fn forward_ray<T: Float>(r: Ray<'_, T>, white: bool, out: &mut [T]) {
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
fn backward_ray<T: Float>(
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
fn forward<T: Float>(
    ins: &[Option<&candle_core::Tensor>],
    s: &Shapes,
    white: bool,
) -> Result<Vec<T>> {
    let width = HEAD + s.samples;
    with_slices::<T, _>(ins, |sl| {
        let mut out = vec![T::of(0.0); s.rays * width];
        over_rays(&mut out, width, min_rays(s.samples), |r, o| {
            forward_ray(ray(sl, r, s.samples), white, o)
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
fn backward<T: Float>(
    ins: &[Option<&candle_core::Tensor>],
    g: &candle_core::Tensor,
    s: &Shapes,
    white: bool,
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
            backward_ray(ray(sl, r, n), white, g, a, b, c)
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

/// NeRF's volume rendering of `raw` (..., S, 4) along `z` (..., S), with optional
/// `rays_d` (..., 3) scaling the distances and `noise` (..., S) added to the density.
/// Returns one tensor (..., 5 + S): rgb (3), depth, acc, then the S weights.
pub fn volume_render(
    raw: &Tensor,
    z: &Tensor,
    rays_d: Option<&Tensor>,
    noise: Option<&Tensor>,
    white: bool,
) -> Result<Tensor> {
    let s = check(raw, z, rays_d, noise)?;
    let dt = raw.dtype();
    let cdt = compute_dtype(dt);
    let ins = [
        Some(dense(raw, cdt)?),
        Some(dense(z, cdt)?),
        rays_d.map(|t| dense(t, cdt)).transpose()?,
        noise.map(|t| dense(t, cdt)).transpose()?,
    ];
    let refs: Vec<_> = ins.iter().map(Option::as_ref).collect();
    let out_dims: Vec<usize> = s.lead.iter().copied().chain([HEAD + s.samples]).collect();
    let out = by_float!(cdt, |T| to_tensor(
        forward::<T>(&refs, &s, white)?,
        &out_dims,
        dt
    )?);
    drop(ins);

    let has_dir = rays_d.is_some();
    let has_noise = noise.is_some();
    let mut inputs = vec![raw, z];
    inputs.extend(rays_d);
    inputs.extend(noise);
    record(
        "VolumeRenderBackward",
        &out,
        &inputs,
        || inputs.iter().map(|t| SavedTensor::input(t)).collect(),
        move |ctx, g| {
            let saved = &ctx.saved;
            let (raw, z) = (&saved[0], &saved[1]);
            let dir = has_dir.then(|| &saved[2]);
            let noise = has_noise.then(|| &saved[2 + has_dir as usize]);
            let s = check(raw, z, dir, noise)?;
            let want: Vec<usize> = s.lead.iter().copied().chain([HEAD + s.samples]).collect();
            if g.dims() != want {
                return Err(Error::shape(format!(
                    "{OP} backward: expected a gradient of shape {}, got {}",
                    shape_str(&want),
                    shape_str(&g.dims())
                )));
            }
            let ins = [
                Some(dense(raw, cdt)?),
                Some(dense(z, cdt)?),
                dir.map(|t| dense(t, cdt)).transpose()?,
                noise.map(|t| dense(t, cdt)).transpose()?,
            ];
            let refs: Vec<_> = ins.iter().map(Option::as_ref).collect();
            let gd = dense(g, cdt)?;
            let (graw, gz, gdir) = by_float!(cdt, |T| {
                let want = (ctx.needs(1), has_dir && ctx.needs(2));
                let (a, b, c) = backward::<T>(&refs, &gd, &s, white, want)?;
                (
                    to_tensor(a, &raw.dims(), dt)?,
                    if want.0 {
                        Some(to_tensor(b, &z.dims(), dt)?)
                    } else {
                        None
                    },
                    if want.1 {
                        Some(to_tensor(
                            c,
                            &dir.map(|d| d.dims()).unwrap_or_default(),
                            dt,
                        )?)
                    } else {
                        None
                    },
                )
            });
            drop(ins);
            let gnoise = if has_noise && ctx.needs(2 + has_dir as usize) {
                Some(density_channel(&graw)?)
            } else {
                None
            };
            let mut grads = vec![ctx.needs(0).then_some(graw), gz];
            if has_dir {
                grads.push(gdir);
            }
            if has_noise {
                grads.push(gnoise);
            }
            if grad_mode::is_enabled() {
                // create_graph: these gradients are not functions of anything recorded.
                let mut sources = vec![g];
                sources.extend(saved.iter());
                for t in grads.iter().flatten() {
                    refuse_double_backward(t, &sources);
                }
            }
            Ok(grads)
        },
    );
    Ok(out)
}

/// The gradient of the noise: the density channel of raw's gradient.
fn density_channel(graw: &Tensor) -> Result<Tensor> {
    let d = graw.data();
    let last = d.rank() - 1;
    let ch = d.narrow(last, 3, 1).op(OP)?.squeeze(last).op(OP)?;
    Ok(Tensor::new(ch.contiguous().op(OP)?, graw.dtype()))
}

/// Give `t` a node whose backward raises: the fused backward cannot be differentiated.
fn refuse_double_backward(t: &Tensor, sources: &[&Tensor]) {
    record(
        "VolumeRenderBackwardBackward",
        t,
        sources,
        Vec::new,
        |_, _| {
            Err(Error::autograd(format!(
                "{OP}: double backward is not supported: the gradient of volume_render is a \
                 fused kernel and cannot be differentiated again (it was computed with \
                 create_graph=True; differentiate the gradstream-ops composite instead)"
            )))
        },
    );
}
