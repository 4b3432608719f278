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

use crate::autograd::function::record;
use crate::autograd::grad_mode;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend::cast::Convert;
use crate::backend::{self, RenderInputs, RenderShape};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::tensor::{shape_str, Tensor};

const OP: &str = "volume_render";

pub use crate::backend::render::HEAD;

/// The inputs of one render, checked and flattened to R rays.
struct Shapes {
    lead: Vec<usize>,
    rays: usize,
    samples: usize,
}

impl Shapes {
    fn render_shape(&self, white: bool) -> RenderShape {
        RenderShape {
            rays: self.rays,
            samples: self.samples,
            white,
        }
    }
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

/// `t`'s data, dense, in the compute dtype.
fn dense(t: &Tensor, cdt: DType) -> Result<candle_core::Tensor> {
    let d = t.data();
    let d = if d.dtype() != cdt.candle() {
        d.cast(cdt.candle()).op(OP)?
    } else {
        d
    };
    d.dense().op(OP)
}

/// Kernel output in the compute dtype as a tensor of `dims` in `dtype`.
fn to_tensor(d: candle_core::Tensor, dims: &[usize], dtype: DType) -> Result<Tensor> {
    let d = d.reshape(dims).op(OP)?;
    let d = if d.dtype() != dtype.candle() {
        d.cast(dtype.candle()).op(OP)?
    } else {
        d
    };
    Ok(Tensor::new(d, dtype))
}

/// The inputs of a render, dense, in the compute dtype, flattened to R rays.
struct Dense {
    raw: candle_core::Tensor,
    z: candle_core::Tensor,
    rays_d: Option<candle_core::Tensor>,
    noise: Option<candle_core::Tensor>,
}

impl Dense {
    fn new(
        s: &Shapes,
        cdt: DType,
        (raw, z): (&Tensor, &Tensor),
        (rays_d, noise): (Option<&Tensor>, Option<&Tensor>),
    ) -> Result<Dense> {
        let (r, n) = (s.rays, s.samples);
        let flat = |t: &Tensor, dims: &[usize]| dense(t, cdt)?.reshape(dims).op(OP);
        Ok(Dense {
            raw: flat(raw, &[r, n, 4])?,
            z: flat(z, &[r, n])?,
            rays_d: rays_d.map(|t| flat(t, &[r, 3])).transpose()?,
            noise: noise.map(|t| flat(t, &[r, n])).transpose()?,
        })
    }

    fn inputs(&self) -> RenderInputs<'_> {
        RenderInputs {
            raw: &self.raw,
            z: &self.z,
            rays_d: self.rays_d.as_ref(),
            noise: self.noise.as_ref(),
        }
    }
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
    let started = remat::start();
    let s = check(raw, z, rays_d, noise)?;
    let dt = raw.dtype();
    let cdt = dt.compute();
    let shape = s.render_shape(white);
    let ins = Dense::new(&s, cdt, (raw, z), (rays_d, noise))?;
    let out_dims: Vec<usize> = s.lead.iter().copied().chain([HEAD + s.samples]).collect();
    let out = backend::on(&ins.raw).volume_render(OP, ins.inputs(), shape)?;
    let out = to_tensor(out, &out_dims, dt)?;
    drop(ins);

    let has_dir = rays_d.is_some();
    let has_noise = noise.is_some();
    let mut inputs = vec![raw, z];
    inputs.extend(rays_d);
    inputs.extend(noise);
    remat::note(OP, &out, &inputs, started, move |ins| {
        let dir = has_dir.then(|| &ins[2]);
        let noise = has_noise.then(|| &ins[2 + usize::from(has_dir)]);
        volume_render(&ins[0], &ins[1], dir, noise, white)
    });
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
            let ins = Dense::new(&s, cdt, (raw, z), (dir, noise))?;
            let gd = dense(g, cdt)?;
            let want = (ctx.needs(1), has_dir && ctx.needs(2));
            let (a, b, c) = backend::on(&gd).volume_render_backward(
                OP,
                ins.inputs(),
                &gd,
                s.render_shape(white),
                want,
            )?;
            drop(ins);
            let graw = to_tensor(a, &raw.dims(), dt)?;
            let gz = b.map(|b| to_tensor(b, &z.dims(), dt)).transpose()?;
            let gdir = match (c, dir) {
                (Some(c), Some(d)) => Some(to_tensor(c, &d.dims(), dt)?),
                _ => None,
            };
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
    Ok(Tensor::new(ch.dense().op(OP)?, graw.dtype()))
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
