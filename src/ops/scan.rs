//! Scans: `cumsum` and `cumprod` along any dim, with O(n) kernels parallel over the
//! independent lines (`reduce::lines`); never candle's n×n `cumsum`.
//!
//! Backward rules are scans too, so they are O(n) and differentiate again:
//! - cumsum: the reverse cumsum of the gradient.
//! - cumprod: `dx[i] = (x[0]···x[i-1]) * r[i]` with `r[i] = g[i] + x[i+1] * r[i+1]`,
//!   a linear recurrence run back to front. No division, so zeros in `x` are exact.
//! - the linear recurrence `h[i] = a[i] h[i-1] + b[i]` is its own adjoint, reversed.

use crate::autograd::function::{record, record_with_input_and_output};
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::mul;
use crate::ops::convert::to_dtype;
use crate::ops::reduce::lines::{line_op, line_op2, LineKernel};
use crate::ops::shape::reshape;
use crate::tensor::{shape_str, Tensor};

/// Integer and bool inputs scan in int64, as in PyTorch.
fn scan_input(x: &Tensor) -> Result<Tensor> {
    if x.dtype().is_floating_point() || x.dtype() == DType::Int64 {
        Ok(x.clone())
    } else {
        to_dtype(x, DType::Int64)
    }
}

/// Run `f` on `x` seen as 1-D when it is 0-d (a line of one), else as is.
fn lift_0d(x: &Tensor, f: impl Fn(&Tensor) -> Result<Tensor>) -> Result<Tensor> {
    if x.rank() == 0 {
        reshape(&f(&reshape(x, &[1])?)?, &[])
    } else {
        f(x)
    }
}

/// `cumsum(x, dim)`, `dim` normalised.
pub fn cumsum(x: &Tensor, dim: usize) -> Result<Tensor> {
    lift_0d(&scan_input(x)?, |x| cumsum_dir(x, dim, false))
}

/// `cumprod(x, dim)`, `dim` normalised.
pub fn cumprod(x: &Tensor, dim: usize) -> Result<Tensor> {
    lift_0d(&scan_input(x)?, |x| cumprod_dir(x, dim, false))
}

/// Running sum along `dim` (rank >= 1), front to back or (`reverse`) back to front.
pub fn cumsum_dir(x: &Tensor, dim: usize, reverse: bool) -> Result<Tensor> {
    let started = remat::start();
    let k = LineKernel::Scan {
        prod: false,
        reverse,
    };
    let out = Tensor::new(line_op(&x.data(), dim, k)?, x.dtype());
    remat::note("cumsum", &out, &[x], started, move |ins| {
        cumsum_dir(&ins[0], dim, reverse)
    });
    record("CumsumBackward0", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(cumsum_dir(g, dim, !reverse)?)])
    });
    Ok(out)
}

/// Running product along `dim` (rank >= 1), front to back or (`reverse`) back to front.
pub fn cumprod_dir(x: &Tensor, dim: usize, reverse: bool) -> Result<Tensor> {
    let started = remat::start();
    let k = LineKernel::Scan {
        prod: true,
        reverse,
    };
    let out = Tensor::new(line_op(&x.data(), dim, k)?, x.dtype());
    remat::note("cumprod", &out, &[x], started, move |ins| {
        cumprod_dir(&ins[0], dim, reverse)
    });
    record_with_input_and_output("CumprodBackward0", &out, x, move |x, y, g| {
        // Toward the scan's direction: `before[i]` is the product of the elements
        // scanned before i; `r` gathers the gradients of the outputs after i.
        let step = if reverse { -1 } else { 1 };
        let before = shift(y, dim, step, true)?;
        let r = linear_scan(&shift(x, dim, -step, false)?, g, dim, !reverse)?;
        mul(&before, &r)
    });
    Ok(out)
}

/// `h[i] = a[i] * h[i-1] + b[i]` along `dim` with `h[-1] = 0` (or from the back when
/// `reverse`); `a` and `b` have one shape and one floating dtype.
pub fn linear_scan(a: &Tensor, b: &Tensor, dim: usize, reverse: bool) -> Result<Tensor> {
    let started = remat::start();
    if a.dims() != b.dims() || a.dtype() != b.dtype() {
        return Err(Error::shape(format!(
            "linear_scan: a and b must match, got {} {} and {} {}",
            a.dtype().name(),
            shape_str(&a.dims()),
            b.dtype().name(),
            shape_str(&b.dims())
        )));
    }
    let k = LineKernel::LinearScan { reverse };
    let out = Tensor::new(line_op2(&a.data(), &b.data(), dim, k)?, b.dtype());
    let need_a = a.requires_grad();
    remat::note("linear_scan", &out, &[a, b], started, move |ins| {
        linear_scan(&ins[0], &ins[1], dim, reverse)
    });
    record(
        "LinearScanBackward",
        &out,
        &[a, b],
        || {
            let mut v = vec![SavedTensor::input(a)];
            if need_a {
                v.push(SavedTensor::output(&out));
            }
            v
        },
        move |ctx, g| {
            let a = &ctx.saved[0];
            let step = if reverse { -1 } else { 1 };
            // The adjoint: lam[i] = g[i] + a[i+1] * lam[i+1], run the other way.
            let lam = linear_scan(&shift(a, dim, -step, false)?, g, dim, !reverse)?;
            let ga = if ctx.needs(0) {
                Some(mul(&lam, &shift(&ctx.saved[1], dim, step, false)?)?)
            } else {
                None
            };
            Ok(vec![ga, ctx.needs(1).then_some(lam)])
        },
    );
    Ok(out)
}

/// Move every element one place along `dim`: `step = 1` gives `out[i] = x[i-1]`,
/// `step = -1` gives `out[i] = x[i+1]`; the vacated end is 1 (`fill_one`) or 0.
pub fn shift(x: &Tensor, dim: usize, step: i64, fill_one: bool) -> Result<Tensor> {
    let started = remat::start();
    let d = x.data();
    let n = d.dims()[dim];
    let data = if n == 0 {
        d.clone()
    } else {
        let mut end = d.dims().to_vec();
        end[dim] = 1;
        let end = crate::device::full(end, f64::from(u8::from(fill_one)), d.dtype(), d.device())?;
        if n == 1 {
            end
        } else if step > 0 {
            let kept = d.narrow(dim, 0, n - 1).op("shift")?;
            crate::ops::shape::join(&[end, kept], dim)?
        } else {
            let kept = d.narrow(dim, 1, n - 1).op("shift")?;
            crate::ops::shape::join(&[kept, end], dim)?
        }
    };
    let out = Tensor::new(data, x.dtype());
    remat::note("shift", &out, &[x], started, move |ins| {
        shift(&ins[0], dim, step, fill_one)
    });
    record("ShiftBackward", &out, &[x], Vec::new, move |_, g| {
        Ok(vec![Some(shift(g, dim, -step, false)?)])
    });
    Ok(out)
}
