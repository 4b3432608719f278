//! `interpolate` over the last one or two dims: nearest, nearest-exact and (bi)linear
//! resampling, each a separable linear map (`ops::pool::resample`) whose taps follow
//! PyTorch's index and weight rules; the backward is the adjoint map and saves nothing.

use std::sync::Arc;

use crate::backend::pool::Taps;
use crate::error::{Error, Result};
use crate::ops::nn::compute_dtype;
use crate::ops::pool::{resample, Planes};
use crate::tensor::{shape_str, Tensor};

/// How output positions read the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Nearest,
    NearestExact,
    /// `linear` (1-d) and `bilinear` (2-d).
    Linear,
}

/// PyTorch's `compute_scales_value` in float: `1 / scale` when a scale is given, else
/// `input / output`.
fn scale_f32(scale: Option<f64>, n: usize, out: usize) -> f32 {
    match scale {
        Some(s) if s > 0.0 => (1.0 / s) as f32,
        _ => n as f32 / out as f32,
    }
}

fn nearest_taps(n: usize, out: usize, scale: Option<f64>, exact: bool) -> Taps {
    let mut t = Taps::new(n);
    let s = scale_f32(scale, n, out);
    for o in 0..out {
        let src = if exact {
            (((o as f64 + 0.5) * s as f64) as f32).floor() as usize
        } else if out == n {
            o
        } else if out == 2 * n {
            o >> 1
        } else {
            (o as f32 * s).floor() as usize
        };
        t.push(src.min(n - 1), &[1.0]);
    }
    t
}

/// PyTorch's `area_pixel_compute_scale` and `area_pixel_compute_source_index`.
fn linear_taps(n: usize, out: usize, scale: Option<f64>, align_corners: bool) -> Taps {
    let mut t = Taps::new(n);
    let s = if align_corners {
        if out > 1 {
            (n as f64 - 1.0) / (out as f64 - 1.0)
        } else {
            0.0
        }
    } else {
        match scale {
            Some(v) if v > 0.0 => 1.0 / v,
            _ => n as f64 / out as f64,
        }
    };
    for o in 0..out {
        let src = if align_corners {
            s * o as f64
        } else {
            (s * (o as f64 + 0.5) - 0.5).max(0.0)
        };
        let i0 = (src as usize).min(n - 1);
        let l1 = src - i0 as f64;
        if i0 + 1 < n {
            t.push(i0, &[1.0 - l1, l1]);
        } else {
            t.push(i0, &[1.0]);
        }
    }
    t
}

/// `interpolate` of `x` (`(N, C, L)` for `spatial = 1`, `(N, C, H, W)` for 2) to `size`
/// (H, W; H = 1 for 1-d), with the scale factors PyTorch passes to its kernels.
pub fn interpolate(
    op: &'static str,
    x: &Tensor,
    spatial: usize,
    size: [usize; 2],
    scales: [Option<f64>; 2],
    mode: Mode,
    align_corners: bool,
) -> Result<Tensor> {
    let dims = x.dims();
    if dims.len() != spatial + 2 {
        return Err(Error::runtime(format!(
            "{op}: expected {}D input, but got input of shape {}",
            spatial + 2,
            shape_str(&dims)
        )));
    }
    compute_dtype(op, x)?;
    let p = Planes::of_batched(x, spatial);
    if p.hw.contains(&0) || size.contains(&0) {
        return Err(Error::runtime(format!(
            "{op}: Input and output sizes should be greater than 0, but got input of shape {} \
             and output size {:?}",
            shape_str(&dims),
            &size[2 - spatial..]
        )));
    }
    let taps = |i: usize| match mode {
        Mode::Nearest => nearest_taps(p.hw[i], size[i], scales[i], false),
        Mode::NearestExact => nearest_taps(p.hw[i], size[i], scales[i], true),
        Mode::Linear => linear_taps(p.hw[i], size[i], scales[i], align_corners),
    };
    let (rows, cols) = (taps(0), taps(1));
    resample(op, x, Arc::new(rows), Arc::new(cols), p.dims(size), false)
}
