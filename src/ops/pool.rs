//! Pooling over the last one or two dims of `(N, C, *)` or unbatched `(C, *)` input:
//! max pooling (whose backward keeps one byte per output: the argmax's position within
//! its window), average pooling and adaptive average pooling (whose backward keeps
//! nothing but shapes). The kernels work on planes `(P, H, W)`; a 1-d op is a 2-d one
//! with `H = 1`.

use crate::backend::cast::Convert;
use std::sync::Arc;

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::pool::{Taps, Window, WindowAxis};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::nn::{compute_data, compute_dtype, finish};
use crate::tensor::{shape_str, Tensor};

/// A pooling op's input seen as planes: its leading dims, and (H, W) (H = 1 for 1-d).
pub(crate) struct Planes {
    pub lead: Vec<usize>,
    pub hw: [usize; 2],
    pub spatial: usize,
}

impl Planes {
    /// Check `x`'s rank (`spatial + 1` or `+ 2` dims) and that only the batch may be empty.
    pub(crate) fn of(op: &str, x: &Tensor, spatial: usize) -> Result<Planes> {
        let dims = x.dims();
        let r = dims.len();
        let batched = r == spatial + 2;
        if r != spatial + 1 && !batched {
            return Err(Error::runtime(format!(
                "{op}: expected {}D or {}D (batch mode) input, but got input of shape {}",
                spatial + 1,
                spatial + 2,
                shape_str(&dims)
            )));
        }
        let first = usize::from(batched);
        if dims[first..].contains(&0) {
            return Err(Error::runtime(format!(
                "{op}: expected input to have non-zero size for non-batch dimensions, but got \
                 input of shape {}",
                shape_str(&dims)
            )));
        }
        let hw = if spatial == 1 {
            [1, dims[r - 1]]
        } else {
            [dims[r - 2], dims[r - 1]]
        };
        Ok(Planes {
            lead: dims[..r - spatial].to_vec(),
            hw,
            spatial,
        })
    }

    /// Batched `x` (`spatial + 2` dims, already checked), any size.
    pub(crate) fn of_batched(x: &Tensor, spatial: usize) -> Planes {
        let dims = x.dims();
        let r = dims.len();
        let hw = if spatial == 1 {
            [1, dims[r - 1]]
        } else {
            [dims[r - 2], dims[r - 1]]
        };
        Planes {
            lead: dims[..r - spatial].to_vec(),
            hw,
            spatial,
        }
    }

    pub(crate) fn count(&self) -> usize {
        self.lead.iter().product()
    }

    /// The output's dims for an (OH, OW) result.
    pub(crate) fn dims(&self, out: [usize; 2]) -> Vec<usize> {
        let mut d = self.lead.clone();
        d.extend_from_slice(&out[2 - self.spatial..]);
        d
    }

    /// `x`'s data in its compute dtype, as contiguous planes (P, H, W).
    pub(crate) fn data(&self, op: &'static str, x: &Tensor) -> Result<candle_core::Tensor> {
        let (d, _) = compute_data(op, x)?;
        d.dense()
            .and_then(|d| d.reshape((self.count(), self.hw[0], self.hw[1])))
            .op(op)
    }
}

/// A pooling window's options along (H, W); 1-d ops use `kernel[0] = stride[0] = 1`.
#[derive(Clone, Copy, Debug)]
pub struct PoolArgs {
    pub kernel: [i64; 2],
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    pub ceil_mode: bool,
}

/// PyTorch's `pooling_output_shape`.
fn output_size(input: i64, k: i64, pad: i64, stride: i64, dil: i64, ceil: bool) -> i64 {
    let num = input + 2 * pad - dil * (k - 1) - 1 + if ceil { stride - 1 } else { 0 };
    let mut out = num.div_euclid(stride) + 1;
    if ceil && (out - 1) * stride >= input + pad {
        out -= 1;
    }
    out
}

/// Check the options as PyTorch does and give the window over `planes`.
fn window(op: &str, x: &Tensor, p: &Planes, a: &PoolArgs) -> Result<Window> {
    let dims = || shape_str(&x.dims());
    let limits = [
        (
            &a.kernel,
            1,
            "kernel_size must be greater than zero, but got",
        ),
        (&a.stride, 1, "stride should not be zero, but got"),
        (&a.padding, 0, "pad must be non-negative, but got pad:"),
        (
            &a.dilation,
            1,
            "dilation should be greater than zero, but got",
        ),
    ];
    for (v, least, what) in limits {
        if v.iter().any(|&x| x < least) {
            return Err(Error::runtime(format!(
                "{op}: {what} {:?} (input shape {})",
                &v[2 - p.spatial..],
                dims()
            )));
        }
    }
    for i in 0..2 {
        if a.padding[i] > a.kernel[i] / 2 {
            return Err(Error::runtime(format!(
                "{op}: pad should be smaller than or equal to half of kernel size, but got \
                 pad={}, kernel_size={} (input shape {})",
                a.padding[i],
                a.kernel[i],
                dims()
            )));
        }
    }
    let axis = |i: usize| {
        output_size(
            p.hw[i] as i64,
            a.kernel[i],
            a.padding[i],
            a.stride[i],
            a.dilation[i],
            a.ceil_mode,
        )
    };
    let (oh, ow) = (axis(0), axis(1));
    if oh < 1 || ow < 1 {
        let out = p.dims([oh.max(0) as usize, ow.max(0) as usize]);
        return Err(Error::runtime(format!(
            "{op}: Given input size: {}. Calculated output size: {}. Output size is too small",
            shape_str(&x.dims()),
            shape_str(&out)
        )));
    }
    let mk = |i: usize, o: i64| WindowAxis {
        input: p.hw[i],
        output: o as usize,
        kernel: a.kernel[i] as usize,
        stride: a.stride[i] as usize,
        padding: a.padding[i] as usize,
        dilation: a.dilation[i] as usize,
        adaptive: false,
    };
    Ok(Window {
        h: mk(0, oh),
        w: mk(1, ow),
    })
}

fn planes_tensor(data: candle_core::Tensor, dims: &[usize], dtype: DType) -> Result<Tensor> {
    finish(data.reshape(dims).op("pool")?, dtype)
}

/// `max_pool1d` (`spatial = 1`) or `max_pool2d`: the maxima, and PyTorch's flat int64
/// indices (into H * W, or L) when `return_indices`.
pub fn max_pool(
    op: &'static str,
    x: &Tensor,
    spatial: usize,
    a: &PoolArgs,
    return_indices: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let p = Planes::of(op, x, spatial)?;
    let w = window(op, x, &p, a)?;
    max_pool_over(op, x, &p, w, return_indices)
}

/// `adaptive_max_pool1d` (`spatial = 1`) or `adaptive_max_pool2d` to `out` (H, W).
pub fn adaptive_max_pool(
    op: &'static str,
    x: &Tensor,
    spatial: usize,
    out: [usize; 2],
    return_indices: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let p = Planes::of(op, x, spatial)?;
    let w = Window {
        h: WindowAxis::adaptive(p.hw[0], out[0]),
        w: WindowAxis::adaptive(p.hw[1], out[1]),
    };
    max_pool_over(op, x, &p, w, return_indices)
}

fn max_pool_over(
    op: &'static str,
    x: &Tensor,
    p: &Planes,
    w: Window,
    return_indices: bool,
) -> Result<(Tensor, Option<Tensor>)> {
    let started = remat::start();
    let xd = p.data(op, x)?;
    let (out, argmax) = backend::on(&xd).max_pool(op, &xd, w)?;
    let out_dims = p.dims([w.h.output, w.w.output]);
    let indices = if return_indices {
        let idx = backend::on(&argmax).max_pool_indices(op, &argmax, w)?;
        Some(Tensor::new(
            idx.reshape(out_dims.as_slice()).op(op)?,
            DType::Int64,
        ))
    } else {
        None
    };
    let out = planes_tensor(out, &out_dims, x.dtype())?;
    let arg_dtype = if argmax.dtype() == candle_core::DType::U8 {
        DType::UInt8
    } else {
        DType::Int32
    };
    let argmax = Tensor::new(argmax, arg_dtype);
    let (spatial, dtype) = (p.spatial, x.dtype());
    remat::note(op, &out, &[x], started, move |ins| {
        let xd = Planes::of(op, &ins[0], spatial)?.data(op, &ins[0])?;
        let (out, _) = backend::on(&xd).max_pool(op, &xd, w)?;
        planes_tensor(out, &out_dims, dtype)
    });
    let in_dims = x.dims();
    record(
        "MaxPoolBackward0",
        &out,
        &[x],
        || vec![SavedTensor::internal(&argmax)],
        move |ctx, g| {
            let gx = max_pool_scatter(g, &ctx.saved[0], w, &in_dims)?;
            Ok(vec![Some(gx)])
        },
    );
    Ok((out, indices))
}

/// Max pooling's backward: `g` added at each window's maximum, in the input's shape.
fn max_pool_scatter(g: &Tensor, argmax: &Tensor, w: Window, in_dims: &[usize]) -> Result<Tensor> {
    let op = "max_pool_backward";
    let (gd, _) = compute_data(op, g)?;
    let gd = gd.dense().op(op)?;
    let data = backend::on(&gd).max_pool_scatter(op, &gd, &argmax.data(), w)?;
    let out = planes_tensor(data, in_dims, g.dtype())?;
    let out_dims = g.dims();
    record(
        "MaxPoolBackwardBackward0",
        &out,
        &[g],
        || vec![SavedTensor::internal(argmax)],
        move |ctx, gg| {
            let op = "max_pool_double_backward";
            let (d, _) = compute_data(op, gg)?;
            let d = d.dense().op(op)?;
            let data = backend::on(&d).max_pool_gather(op, &d, &ctx.saved[0].data(), w)?;
            Ok(vec![Some(planes_tensor(data, &out_dims, gg.dtype())?)])
        },
    );
    Ok(out)
}

/// The separable linear map `rows` x `cols` over the planes of `x` (average pools,
/// interpolation), in shape `out_dims`; its backward is the adjoint map and saves nothing.
pub(crate) fn resample(
    op: &'static str,
    x: &Tensor,
    rows: Arc<Taps>,
    cols: Arc<Taps>,
    out_dims: Vec<usize>,
    adjoint: bool,
) -> Result<Tensor> {
    let started = remat::start();
    let (xd, _) = compute_data(op, x)?;
    let (pi, po) = if adjoint {
        ((rows.output(), cols.output()), (rows.input, cols.input))
    } else {
        ((rows.input, cols.input), (rows.output(), cols.output()))
    };
    let planes = x.numel().checked_div(pi.0 * pi.1).unwrap_or(0);
    let xd = xd
        .dense()
        .and_then(|d| d.reshape((planes, pi.0, pi.1)))
        .op(op)?;
    let data = if planes == 0 || po.0 * po.1 == 0 || pi.0 * pi.1 == 0 {
        crate::device::zeros((planes, po.0, po.1), xd.dtype(), xd.device()).op(op)?
    } else if adjoint {
        backend::on(&xd).resample_adjoint(op, &xd, &rows, &cols)?
    } else {
        backend::on(&xd).resample(op, &xd, &rows, &cols)?
    };
    let out = planes_tensor(data, &out_dims, x.dtype())?;
    let (r, c, d) = (rows.clone(), cols.clone(), out_dims.clone());
    remat::note(op, &out, &[x], started, move |ins| {
        resample(op, &ins[0], r.clone(), c.clone(), d.clone(), adjoint)
    });
    let in_dims = x.dims();
    let name = if adjoint {
        "ResampleBackwardBackward0"
    } else {
        "ResampleBackward0"
    };
    record(name, &out, &[x], Vec::new, move |_ctx, g| {
        let gx = resample(op, g, rows.clone(), cols.clone(), in_dims.clone(), !adjoint)?;
        Ok(vec![Some(gx)])
    });
    Ok(out)
}

/// Average pooling's options besides the window.
#[derive(Clone, Copy, Debug)]
pub struct AvgArgs {
    pub count_include_pad: bool,
    pub divisor_override: Option<i64>,
}

/// The taps of one axis of an average pool: PyTorch's window clipping and divisor.
fn avg_taps(w: &WindowAxis, count_include_pad: bool, divisor: Option<f64>) -> Taps {
    let mut t = Taps::new(w.input);
    let (n, k, p) = (w.input as isize, w.kernel as isize, w.padding as isize);
    for o in 0..w.output {
        let start = w.start(o);
        let end = (start + k).min(n + p);
        let pool = (end - start) as f64;
        let (s, e) = (start.max(0), end.min(n));
        if s >= e {
            t.push(0, &[]);
            continue;
        }
        let d = divisor.unwrap_or(if count_include_pad {
            pool
        } else {
            (e - s) as f64
        });
        t.push(s as usize, &vec![1.0 / d; (e - s) as usize]);
    }
    t
}

/// `avg_pool1d` (`spatial = 1`) or `avg_pool2d`.
pub fn avg_pool(
    op: &'static str,
    x: &Tensor,
    spatial: usize,
    a: &PoolArgs,
    avg: AvgArgs,
) -> Result<Tensor> {
    let p = Planes::of(op, x, spatial)?;
    compute_dtype(op, x)?;
    if avg.divisor_override == Some(0) {
        return Err(Error::runtime(format!(
            "{op}: divisor must be not zero (input shape {})",
            shape_str(&x.dims())
        )));
    }
    let w = window(op, x, &p, a)?;
    let rows = avg_taps(
        &w.h,
        avg.count_include_pad,
        avg.divisor_override.map(|d| d as f64),
    );
    let cols = avg_taps(
        &w.w,
        avg.count_include_pad,
        avg.divisor_override.map(|_| 1.0),
    );
    let out_dims = p.dims([w.h.output, w.w.output]);
    resample(op, x, Arc::new(rows), Arc::new(cols), out_dims, false)
}

/// PyTorch's adaptive windows: output `o` of `out` averages input `floor(o * n / out)`
/// to `ceil((o + 1) * n / out)`.
fn adaptive_taps(n: usize, out: usize) -> Taps {
    let mut t = Taps::new(n);
    for o in 0..out {
        let s = o * n / out;
        let e = ((o + 1) * n).div_ceil(out);
        t.push(s, &vec![1.0 / (e - s) as f64; e - s]);
    }
    t
}

/// `adaptive_avg_pool1d` (`spatial = 1`) or `adaptive_avg_pool2d` to `out` (H, W).
pub fn adaptive_avg_pool(
    op: &'static str,
    x: &Tensor,
    spatial: usize,
    out: [usize; 2],
) -> Result<Tensor> {
    let p = Planes::of(op, x, spatial)?;
    compute_dtype(op, x)?;
    let rows = adaptive_taps(p.hw[0], out[0]);
    let cols = adaptive_taps(p.hw[1], out[1]);
    resample(op, x, Arc::new(rows), Arc::new(cols), p.dims(out), false)
}
