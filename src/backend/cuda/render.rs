//! The fused NeRF volume renderer on CUDA (`kernels/render.cu`): one warp per ray, forward
//! and its O(S) backward, the same outputs as the CPU kernel (`backend/cpu/render.rs`),
//! for the compute dtypes it takes (f32, f64).

use crate::backend::cast::Convert;
use candle_core::{DType, Tensor};

use super::launch::{addr, launch, Arg, Grid, Kernel};
use super::{dtype_suffix, intern, ptx, Cuda};
use crate::backend::render::{RenderGrads, RenderInputs, RenderOps, RenderShape, HEAD};
use crate::error::{CandleContext, Error, Result};

/// Four warps, so four rays, per block.
const THREADS: u32 = 128;

/// The inputs, dense and checked against the shape: the kernels index them directly.
struct Inputs {
    raw: Tensor,
    z: Tensor,
    dir: Option<Tensor>,
    noise: Option<Tensor>,
    suffix: &'static str,
}

fn dense(name: &'static str, what: &str, t: &Tensor, dtype: DType, n: usize) -> Result<Tensor> {
    if t.dtype() != dtype || t.elem_count() != n {
        return Err(Error::shape(format!(
            "{name}: expected {what} of {n} {dtype:?} elements, got {:?} {:?}",
            t.dims(),
            t.dtype()
        )));
    }
    t.dense().op(name)
}

fn inputs(name: &'static str, ins: RenderInputs<'_>, s: RenderShape) -> Result<Inputs> {
    let dtype = ins.raw.dtype();
    if !matches!(dtype, DType::F32 | DType::F64) {
        return Err(Error::dtype(format!(
            "{name}: expected float32 or float64 inputs, got {dtype:?}"
        )));
    }
    let (r, n) = (s.rays, s.samples);
    Ok(Inputs {
        raw: dense(name, "raw", ins.raw, dtype, r * n * 4)?,
        z: dense(name, "z", ins.z, dtype, r * n)?,
        dir: ins
            .rays_d
            .map(|d| dense(name, "rays_d", d, dtype, r * 3))
            .transpose()?,
        noise: ins
            .noise
            .map(|v| dense(name, "noise", v, dtype, r * n))
            .transpose()?,
        suffix: dtype_suffix(dtype),
    })
}

fn kernel(name: &str, suffix: &str) -> Kernel {
    Kernel {
        module: &ptx::RENDER,
        name: intern(format!("gs_{name}_{suffix}")),
    }
}

/// One warp per ray.
fn grid(s: RenderShape) -> Grid {
    Grid::elementwise(s.rays * 32, THREADS)
}

impl RenderOps for Cuda {
    /// See `RenderOps::volume_render`.
    fn volume_render(
        &self,
        name: &'static str,
        ins: RenderInputs<'_>,
        s: RenderShape,
    ) -> Result<Tensor> {
        let i = inputs(name, ins, s)?;
        let out = crate::device::zeros((s.rays, HEAD + s.samples), i.raw.dtype(), i.raw.device())
            .op(name)?;
        if s.rays == 0 {
            return Ok(out);
        }
        let (raw, z, o) = (addr(&i.raw)?, addr(&i.z)?, addr(&out)?);
        let dir = i.dir.as_ref().map(addr).transpose()?;
        let noise = i.noise.as_ref().map(addr).transpose()?;
        let args = [
            Arg::I64(s.rays as i64),
            Arg::I64(s.samples as i64),
            Arg::Ptr(raw.addr),
            Arg::Ptr(z.addr),
            Arg::Ptr(dir.as_ref().map_or(0, |a| a.addr)),
            Arg::Ptr(noise.as_ref().map_or(0, |a| a.addr)),
            Arg::I32(i32::from(s.white)),
            Arg::Ptr(o.addr),
        ];
        launch(
            i.raw.device(),
            kernel("volume_render", i.suffix),
            grid(s),
            &args,
        )?;
        drop(o);
        Ok(out)
    }

    /// See `RenderOps::volume_render_backward`.
    fn volume_render_backward(
        &self,
        name: &'static str,
        ins: RenderInputs<'_>,
        g: &Tensor,
        s: RenderShape,
        (want_z, want_dir): (bool, bool),
    ) -> Result<RenderGrads> {
        let i = inputs(name, ins, s)?;
        let (dtype, device) = (i.raw.dtype(), i.raw.device().clone());
        let g = dense(name, "the gradient", g, dtype, s.rays * (HEAD + s.samples))?;
        let zeros = |dims: &[usize]| crate::device::zeros(dims, dtype, &device).op(name);
        let graw = zeros(&[s.rays, s.samples, 4])?;
        let gz = want_z.then(|| zeros(&[s.rays, s.samples])).transpose()?;
        let gdir = (want_dir && i.dir.is_some())
            .then(|| zeros(&[s.rays, 3]))
            .transpose()?;
        if s.rays > 0 {
            let (raw, z, ga, gg) = (addr(&i.raw)?, addr(&i.z)?, addr(&graw)?, addr(&g)?);
            let dir = i.dir.as_ref().map(addr).transpose()?;
            let noise = i.noise.as_ref().map(addr).transpose()?;
            let gza = gz.as_ref().map(addr).transpose()?;
            let gda = gdir.as_ref().map(addr).transpose()?;
            let ptr =
                |a: &Option<super::launch::Addr<'_>>| Arg::Ptr(a.as_ref().map_or(0, |a| a.addr));
            let args = [
                Arg::I64(s.rays as i64),
                Arg::I64(s.samples as i64),
                Arg::Ptr(raw.addr),
                Arg::Ptr(z.addr),
                ptr(&dir),
                ptr(&noise),
                Arg::I32(i32::from(s.white)),
                Arg::Ptr(gg.addr),
                Arg::Ptr(ga.addr),
                ptr(&gza),
                ptr(&gda),
            ];
            launch(
                &device,
                kernel("volume_render_backward", i.suffix),
                grid(s),
                &args,
            )?;
        }
        Ok((graw, gz, gdir))
    }
}

#[cfg(all(test, feature = "cuda-emulator"))]
mod tests {
    use candle_core::{DType, Tensor};

    use super::super::testing::{close, tensor, uniform};
    use super::Cuda;
    use crate::backend::cpu::Cpu;
    use crate::backend::{RenderInputs, RenderOps, RenderShape};

    /// z: increasing sample depths per ray.
    fn depths(rays: usize, samples: usize, seed: u64, dtype: DType) -> Tensor {
        let steps = uniform(rays * samples, seed, 0.01, 0.3);
        let mut v = Vec::with_capacity(rays * samples);
        for r in 0..rays {
            let mut z = 2.0;
            for s in 0..samples {
                v.push(z);
                z += steps[r * samples + s];
            }
        }
        Tensor::from_vec(v, (rays, samples), &candle_core::Device::Cpu)
            .and_then(|t| t.to_dtype(dtype))
            .unwrap()
    }

    // Forward and backward of the emulated kernel against the CPU kernel: ray counts and
    // sample counts around the warp's 32 and the block's 4 rays, with and without
    // directions, noise (negative densities hit the relu) and a white background.
    #[test]
    fn render_matches_the_cpu_kernel() {
        for dtype in [DType::F32, DType::F64] {
            let (rtol, atol) = match dtype {
                DType::F32 => (2e-4, 2e-5),
                _ => (1e-10, 1e-12),
            };
            for (case, &(rays, samples)) in [(1, 1), (3, 5), (5, 31), (7, 32), (6, 33), (9, 100)]
                .iter()
                .enumerate()
            {
                let seed = 10 * case as u64;
                let raw = tensor(&[rays, samples, 4], seed, -2.0, 2.0, dtype);
                let z = depths(rays, samples, seed + 1, dtype);
                let dir = tensor(&[rays, 3], seed + 2, -1.5, 1.5, dtype);
                let noise = tensor(&[rays, samples], seed + 3, -1.0, 1.0, dtype);
                let g = tensor(&[rays, 5 + samples], seed + 4, -1.0, 1.0, dtype);
                for (with_dir, with_noise, white) in [
                    (false, false, false),
                    (true, false, true),
                    (false, true, true),
                    (true, true, false),
                ] {
                    let ins = RenderInputs {
                        raw: &raw,
                        z: &z,
                        rays_d: with_dir.then_some(&dir),
                        noise: with_noise.then_some(&noise),
                    };
                    let s = RenderShape {
                        rays,
                        samples,
                        white,
                    };
                    let what = format!(
                        "{dtype:?} {rays}x{samples} dir {with_dir} noise {with_noise} white {white}"
                    );
                    let a = Cuda.volume_render("t", ins, s).unwrap();
                    let b = Cpu.volume_render("t", ins, s).unwrap();
                    close(&format!("forward {what}"), &a, &b, rtol, atol);
                    for want in [(true, true), (false, false), (true, false), (false, true)] {
                        let (ga, za, da) =
                            Cuda.volume_render_backward("t", ins, &g, s, want).unwrap();
                        let (gb, zb, db) =
                            Cpu.volume_render_backward("t", ins, &g, s, want).unwrap();
                        close(&format!("graw {what}"), &ga, &gb, rtol, atol);
                        assert_eq!(za.is_some(), zb.is_some(), "{what}: gz wanted");
                        assert_eq!(da.is_some(), db.is_some(), "{what}: gdir wanted");
                        if let (Some(a), Some(b)) = (za, zb) {
                            close(&format!("gz {what}"), &a, &b, rtol, atol);
                        }
                        if let (Some(a), Some(b)) = (da, db) {
                            close(&format!("gdir {what}"), &a, &b, rtol, atol);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn no_rays_and_zero_directions() {
        let dtype = DType::F32;
        let raw = tensor(&[0, 4, 4], 1, -1.0, 1.0, dtype);
        let z = depths(0, 4, 2, dtype);
        let ins = RenderInputs {
            raw: &raw,
            z: &z,
            rays_d: None,
            noise: None,
        };
        let s = RenderShape {
            rays: 0,
            samples: 4,
            white: true,
        };
        assert_eq!(Cuda.volume_render("t", ins, s).unwrap().dims(), &[0, 9]);
        let g = tensor(&[0, 9], 3, -1.0, 1.0, dtype);
        let (a, b, _) = Cuda
            .volume_render_backward("t", ins, &g, s, (true, true))
            .unwrap();
        assert_eq!(a.dims(), &[0, 4, 4]);
        assert_eq!(b.unwrap().dims(), &[0, 4]);

        // A zero direction: no distance, and a zero gradient for it (not NaN).
        let raw = tensor(&[2, 3, 4], 4, -1.0, 1.0, dtype);
        let z = depths(2, 3, 5, dtype);
        let dir = Tensor::zeros((2, 3), dtype, &candle_core::Device::Cpu).unwrap();
        let g = tensor(&[2, 8], 6, -1.0, 1.0, dtype);
        let ins = RenderInputs {
            raw: &raw,
            z: &z,
            rays_d: Some(&dir),
            noise: None,
        };
        let s = RenderShape {
            rays: 2,
            samples: 3,
            white: false,
        };
        let (_, _, da) = Cuda
            .volume_render_backward("t", ins, &g, s, (true, true))
            .unwrap();
        let (_, _, db) = Cpu
            .volume_render_backward("t", ins, &g, s, (true, true))
            .unwrap();
        close("zero direction", &da.unwrap(), &db.unwrap(), 0.0, 0.0);
    }

    #[test]
    fn half_inputs_are_refused() {
        let raw = tensor(&[1, 2, 4], 1, -1.0, 1.0, DType::F16);
        let z = tensor(&[1, 2], 1, 0.0, 1.0, DType::F16);
        let ins = RenderInputs {
            raw: &raw,
            z: &z,
            rays_d: None,
            noise: None,
        };
        let s = RenderShape {
            rays: 1,
            samples: 2,
            white: false,
        };
        assert!(Cuda.volume_render("t", ins, s).is_err());
    }
}
