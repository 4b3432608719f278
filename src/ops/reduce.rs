//! Reductions: `sum`, `mean`, `prod`, `var`/`std`, `all`/`any`, `logsumexp`, `norm`.
//! Max/min live in `minmax`, softmax in `softmax`, the line kernels in `lines`.
//!
//! Dims arrive normalised (`ops::wrap_dims`); `None` means every dim.

pub mod lines;
pub mod minmax;
pub mod softmax;

use crate::autograd::function::{record, record_with_input_and_output};
use crate::autograd::remat;
use crate::autograd::saved::SavedTensor;
use crate::backend;
use crate::backend::cast::Convert;
use crate::backend::Compare;
use crate::dtype::{default_float, DType};
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add, compare, div, mul, mul_scalar, sub, CompareOp};
use crate::ops::convert::to_dtype;
use crate::ops::scan::{cumprod_dir, shift};
use crate::ops::shape::{expand, reshape};
use crate::ops::unary::{exp, unary, UnaryOp};
use crate::tensor::Tensor;
use candle_core::op::CmpOp;
use lines::{line_op, LineKernel};

/// Shape of a reduction's result with `keepdim`: reduced dims set to 1.
pub fn keepdim_shape(dims: &[usize], reduced: &[usize]) -> Vec<usize> {
    dims.iter()
        .enumerate()
        .map(|(i, &d)| if reduced.contains(&i) { 1 } else { d })
        .collect()
}

/// Shape of a reduction's result: reduced dims dropped, or kept as 1.
pub fn reduced_shape(dims: &[usize], reduced: &[usize], keepdim: bool) -> Vec<usize> {
    if keepdim {
        return keepdim_shape(dims, reduced);
    }
    dims.iter()
        .enumerate()
        .filter(|(i, _)| !reduced.contains(i))
        .map(|(_, &d)| d)
        .collect()
}

/// The reduced dims: `None` is every dim. A 0-d tensor accepts dim 0 / -1 and has
/// nothing to reduce.
pub fn all_dims(dims: Option<&[usize]>, rank: usize) -> Vec<usize> {
    dims.map_or_else(
        || (0..rank).collect(),
        |d| d.iter().copied().filter(|&i| i < rank).collect(),
    )
}

/// Bring a reduced gradient back to the input shape.
pub fn expand_reduced(g: &Tensor, in_dims: &[usize], reduced: &[usize]) -> Result<Tensor> {
    let kd = keepdim_shape(in_dims, reduced);
    let g = reshape(g, &kd)?;
    expand(&g, in_dims)
}

/// Number of elements a reduction over `reduced` combines.
fn reduced_count(in_dims: &[usize], reduced: &[usize]) -> usize {
    reduced.iter().map(|&i| in_dims[i]).product()
}

/// Integers and bools accumulate in int64, as in PyTorch.
fn int_to_i64(x: &Tensor) -> Result<Tensor> {
    if x.dtype().is_floating_point() || x.dtype() == DType::Int64 {
        Ok(x.clone())
    } else {
        to_dtype(x, DType::Int64)
    }
}

/// Floating point inputs only, with PyTorch's wording for the op.
fn require_float(op: &str, x: &Tensor, what: &str) -> Result<()> {
    if x.dtype().is_floating_point() {
        return Ok(());
    }
    Err(Error::dtype(format!(
        "{op}: {what} Got: {} (input shape {})",
        x.dtype().name(),
        crate::tensor::shape_str(&x.dims())
    )))
}

/// Raw sum over `reduced`, result in keepdim shape; an empty input sums to zeros.
fn sum_data(x: &candle_core::Tensor, reduced: &[usize]) -> Result<candle_core::Tensor> {
    let kd = keepdim_shape(x.dims(), reduced);
    if x.elem_count() == 0 {
        return crate::device::zeros(kd, x.dtype(), x.device()).op("sum");
    }
    if reduced.is_empty() {
        return Ok(x.clone());
    }
    if let Some(fast) = backend::on(x).block_sum(x, reduced)? {
        return Ok(fast);
    }
    let dt = x.dtype();
    if matches!(dt, candle_core::DType::F16 | candle_core::DType::BF16) {
        // Half precision accumulates in f32, as in PyTorch.
        let wide = x.cast(candle_core::DType::F32).op("sum")?;
        return sum_data(&wide, reduced)?.cast(dt).op("sum");
    }
    x.sum_keepdim(reduced.to_vec()).op("sum")
}

/// `sum` over `dims` (normalised; `None` = all). Integers and bools sum to int64.
pub fn sum(x: &Tensor, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    let started = remat::start();
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let x = int_to_i64(x)?;
    let data = sum_data(&x.data(), &reduced)?
        .reshape(reduced_shape(&in_dims, &reduced, keepdim))
        .op("sum")?;
    let out = Tensor::new(data, x.dtype());
    let kept = dims.map(<[usize]>::to_vec);
    remat::note("sum", &out, &[&x], started, move |ins| {
        sum(&ins[0], kept.as_deref(), keepdim)
    });
    record("SumBackward1", &out, &[&x], Vec::new, move |_, g| {
        Ok(vec![Some(expand_reduced(g, &in_dims, &reduced)?)])
    });
    Ok(out)
}

/// `mean` over `dims`; floating point only, as in PyTorch. Empty reductions give NaN.
/// `mean`'s dtype rule, checked before its dims (as PyTorch orders its checks).
pub fn check_mean(x: &Tensor) -> Result<()> {
    require_float(
        "mean()",
        x,
        "could not infer output dtype. Input dtype must be either a floating point or complex dtype.",
    )
}

pub fn mean(x: &Tensor, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    check_mean(x)?;
    let in_dims = x.dims();
    let n = reduced_count(&in_dims, &all_dims(dims, in_dims.len()));
    let s = sum(x, dims, keepdim)?;
    mul_scalar(&s, 1.0 / n as f64)
}

/// `prod` of every element (`dim = None`, a 0-d result) or along one dim.
/// Integers and bools multiply in int64.
pub fn prod(x: &Tensor, dim: Option<usize>, keepdim: bool) -> Result<Tensor> {
    let x = int_to_i64(x)?;
    match dim {
        Some(d) if x.rank() > 0 => prod_dim(&x, d, keepdim),
        _ => {
            let r = prod_dim(&reshape(&x, &[x.numel()])?, 0, false)?;
            if keepdim && x.rank() > 0 {
                reshape(&r, &vec![1; x.rank()])
            } else {
                Ok(r)
            }
        }
    }
}

/// The product of each line along `dim` but one element: exclusive prefix times exclusive
/// suffix products. Exact with zeros (no division), O(n) memory.
pub fn prod_of_others(x: &Tensor, dim: usize) -> Result<Tensor> {
    let before = shift(&cumprod_dir(x, dim, false)?, dim, 1, true)?;
    let after = shift(&cumprod_dir(x, dim, true)?, dim, -1, true)?;
    mul(&before, &after)
}

fn prod_dim(x: &Tensor, dim: usize, keepdim: bool) -> Result<Tensor> {
    let started = remat::start();
    let in_dims = x.dims();
    let kd = keepdim_shape(&in_dims, &[dim]);
    let data = line_op(&x.data(), dim, LineKernel::Prod)?
        .reshape(reduced_shape(&in_dims, &[dim], keepdim))
        .op("prod")?;
    let out = Tensor::new(data, x.dtype());
    remat::note("prod", &out, &[x], started, move |ins| {
        prod_dim(&ins[0], dim, keepdim)
    });
    record(
        "ProdBackward1",
        &out,
        &[x],
        || vec![SavedTensor::input(x)],
        move |ctx, g| {
            let g = reshape(g, &kd)?;
            Ok(vec![Some(mul(&g, &prod_of_others(&ctx.saved[0], dim)?)?)])
        },
    );
    Ok(out)
}

/// `var` with Bessel's `correction` (1 = unbiased); divides by `max(0, N - correction)`.
/// `var`'s and `std`'s dtype rule, checked before their dims.
pub fn check_var(x: &Tensor) -> Result<()> {
    if !x.dtype().is_floating_point() {
        return Err(Error::dtype(format!(
            "var: std and var only support floating point and complex dtypes, got {}",
            x.dtype().name()
        )));
    }
    Ok(())
}

pub fn var(x: &Tensor, dims: Option<&[usize]>, correction: f64, keepdim: bool) -> Result<Tensor> {
    check_var(x)?;
    let in_dims = x.dims();
    let n = reduced_count(&in_dims, &all_dims(dims, in_dims.len())) as f64;
    let mu = mean(x, dims, true)?;
    let d = sub(x, &mu)?;
    let ss = sum(&mul(&d, &d)?, dims, keepdim)?;
    mul_scalar(&ss, 1.0 / (n - correction).max(0.0))
}

/// `std`: the square root of `var`, whose backward is zero where the deviation is (PyTorch's
/// `std_backward`; the root's own derivative is infinite there).
pub fn std(x: &Tensor, dims: Option<&[usize]>, correction: f64, keepdim: bool) -> Result<Tensor> {
    let started = remat::start();
    let v = var(x, dims, correction, keepdim)?;
    let out = {
        let _plain = crate::autograd::grad_mode::GradModeGuard::new(false);
        unary(UnaryOp::Sqrt, &v)?
    };
    let kept = dims.map(<[usize]>::to_vec);
    remat::note("std", &out, &[x], started, move |ins| {
        std(&ins[0], kept.as_deref(), correction, keepdim)
    });
    record(
        "StdBackward0",
        &out,
        &[&v],
        || vec![SavedTensor::output(&out)],
        |ctx, g| {
            let s = &ctx.saved[0];
            let d = div(g, &mul_scalar(s, 2.0)?)?;
            let zero = compare(CompareOp::Eq, &s.into(), &0.0.into())?;
            Ok(vec![Some(crate::ops::binary::where_(
                &zero,
                &0.0.into(),
                &(&d).into(),
            )?)])
        },
    );
    Ok(out)
}

/// `any` (`all`): whether some (every) element is non-zero. Bool result (uint8 for uint8).
pub fn any_all(x: &Tensor, dims: Option<&[usize]>, keepdim: bool, all: bool) -> Result<Tensor> {
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let d = x.data();
    // any: count of non-zeros > 0; all: count of zeros == 0 (true for an empty reduction).
    let hits = d
        .cmp_scalar(if all { CmpOp::Eq } else { CmpOp::Ne }, 0.0)
        .op("any")?
        .cast(candle_core::DType::I64)
        .op("any")?;
    let count = sum_data(&hits, &reduced)?;
    let r = count
        .cmp_scalar(if all { CmpOp::Eq } else { CmpOp::Gt }, 0.0)
        .op("any")?
        .reshape(reduced_shape(&in_dims, &reduced, keepdim))
        .op("any")?;
    let dt = if x.dtype() == DType::UInt8 {
        DType::UInt8
    } else {
        DType::Bool
    };
    Ok(Tensor::new(r, dt))
}

/// `count_nonzero` over `dims`: int64.
pub fn count_nonzero(x: &Tensor, dims: Option<&[usize]>) -> Result<Tensor> {
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let hits = x
        .data()
        .cmp_scalar(CmpOp::Ne, 0.0)
        .op("count_nonzero")?
        .cast(candle_core::DType::I64)
        .op("count_nonzero")?;
    let r = sum_data(&hits, &reduced)?
        .reshape(reduced_shape(&in_dims, &reduced, false))
        .op("count_nonzero")?;
    Ok(Tensor::new(r, DType::Int64))
}

/// Largest (smallest) value over several dims, raw, in keepdim shape.
pub(crate) fn extreme_data(
    x: &candle_core::Tensor,
    reduced: &[usize],
    max: bool,
) -> Result<candle_core::Tensor> {
    let mut d = x.clone();
    for &i in reduced {
        d = line_op(&d, i, LineKernel::Extreme { max })?;
    }
    Ok(d)
}

/// `logsumexp` over `dims`, shifted by the max for stability. Integers promote to float.
pub fn logsumexp(x: &Tensor, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    let started = remat::start();
    let x = if x.dtype().is_floating_point() {
        x.clone()
    } else {
        to_dtype(x, default_float())?
    };
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let kd = keepdim_shape(&in_dims, &reduced);
    let d = x.data();
    let op = "logsumexp";
    let out_dims = reduced_shape(&in_dims, &reduced, keepdim);
    let data = if d.elem_count() == 0 {
        // the log of an empty sum (candle's CUDA ops make no empty tensor)
        crate::device::full(out_dims, f64::NEG_INFINITY, d.dtype(), d.device())?
    } else {
        let m = if reduced.is_empty() {
            crate::device::zeros(kd.clone(), d.dtype(), d.device()).op(op)?
        } else {
            // An infinite max (all -inf, or a +inf) shifts by 0 instead of making NaN.
            let m = extreme_data(&d, &reduced, true)?;
            let finite = m
                .abs()
                .op(op)?
                .cmp_scalar(CmpOp::Lt, f64::INFINITY)
                .op(op)?;
            let zeros = crate::device::zeros(m.shape(), m.dtype(), m.device()).op(op)?;
            finite.select(&m, &zeros).op(op)?
        };
        let e = d.broadcast_sub(&m).op(op)?.exp().op(op)?;
        sum_data(&e, &reduced)?
            .log()
            .op(op)?
            .add(&m)
            .op(op)?
            .reshape(out_dims)
            .op(op)?
    };
    let out = Tensor::new(data, x.dtype());
    let kept = dims.map(<[usize]>::to_vec);
    remat::note("logsumexp", &out, &[&x], started, move |ins| {
        logsumexp(&ins[0], kept.as_deref(), keepdim)
    });
    record(
        "LogsumexpBackward0",
        &out,
        &[&x],
        || vec![SavedTensor::input(&x), SavedTensor::output(&out)],
        move |ctx, g| {
            let (x, y) = (&ctx.saved[0], &ctx.saved[1]);
            let p = exp(&sub(x, &reshape(y, &kd)?)?)?;
            Ok(vec![Some(mul(&reshape(g, &kd)?, &p)?)])
        },
    );
    Ok(out)
}

/// Sign of `x` as a float tensor: -1, 0 or 1 (0 at 0, so norm gradients vanish there).
fn sign(x: &Tensor) -> Result<Tensor> {
    let dt = x.dtype();
    let pos = to_dtype(&compare(CompareOp::Gt, &x.into(), &0.0.into())?, dt)?;
    let neg = to_dtype(&compare(CompareOp::Lt, &x.into(), &0.0.into())?, dt)?;
    sub(&pos, &neg)
}

/// `|x|^e` for a constant `e`, with its own backward `e * sign(x) * |x|^(e-1)`.
fn abs_pow(x: &Tensor, e: f64) -> Result<Tensor> {
    let started = remat::start();
    let data = x.data().abs().op("pow")?.powf(e).op("pow")?;
    let out = Tensor::new(data, x.dtype());
    remat::note("pow", &out, &[x], started, move |ins| abs_pow(&ins[0], e));
    record(
        "PowBackward0",
        &out,
        &[x],
        || vec![SavedTensor::input(x)],
        move |ctx, g| {
            let x = &ctx.saved[0];
            let d = mul_scalar(&mul(&sign(x)?, &abs_pow(x, e - 1.0)?)?, e)?;
            Ok(vec![Some(mul(g, &d)?)])
        },
    );
    Ok(out)
}

/// `norm` / `linalg.vector_norm` of order `p` (`inf`, `-inf`, 0, or any other number)
/// over `dims`. The gradient at a zero norm is 0, never NaN.
pub fn norm(x: &Tensor, p: f64, dims: Option<&[usize]>, keepdim: bool) -> Result<Tensor> {
    let started = remat::start();
    require_float(
        "linalg.vector_norm",
        x,
        "Expected a floating point or complex tensor as input.",
    )?;
    let in_dims = x.dims();
    let reduced = all_dims(dims, in_dims.len());
    let out_dims = reduced_shape(&in_dims, &reduced, keepdim);
    let kd = keepdim_shape(&in_dims, &reduced);
    let op = "linalg.vector_norm";
    let d = x.data();
    if p.is_infinite() && d.elem_count() == 0 && reduced.iter().any(|&i| in_dims[i] == 0) {
        return Err(Error::Runtime(format!(
            "{op} cannot compute the inf norm on an empty dimension because the operation \
             does not have an identity (ord={p}, input shape {})",
            crate::tensor::shape_str(&in_dims)
        )));
    }
    let abs = || d.abs().op(op);
    let data = if d.elem_count() == 0 {
        // an empty sum's norm (candle's CUDA ops make no empty tensor)
        crate::device::zeros(kd.clone(), d.dtype(), d.device()).op(op)?
    } else if p.is_infinite() {
        extreme_data(&abs()?, &reduced, p > 0.0)?
    } else if p == 0.0 {
        sum_data(
            &d.cmp_scalar(CmpOp::Ne, 0.0)
                .op(op)?
                .cast(d.dtype())
                .op(op)?,
            &reduced,
        )?
    } else if p == 1.0 {
        sum_data(&abs()?, &reduced)?
    } else if p == 2.0 {
        sum_data(&d.sqr().op(op)?, &reduced)?.sqrt().op(op)?
    } else {
        sum_data(&abs()?.powf(p).op(op)?, &reduced)?
            .powf(1.0 / p)
            .op(op)?
    };
    let out = Tensor::new(data.reshape(out_dims).op(op)?, x.dtype());
    let kept = dims.map(<[usize]>::to_vec);
    remat::note("linalg.vector_norm", &out, &[x], started, move |ins| {
        norm(&ins[0], p, kept.as_deref(), keepdim)
    });
    record_with_input_and_output("LinalgVectorNormBackward0", &out, x, move |x, y, g| {
        let g = reshape(g, &kd)?;
        let y = reshape(y, &kd)?;
        let dt = x.dtype();
        let gx = if p == 0.0 {
            mul_scalar(&mul(&g, x)?, 0.0)?
        } else if p == 1.0 {
            mul(&g, &sign(x)?)?
        } else if p.is_infinite() {
            // Ties share the gradient evenly, as in PyTorch.
            let ax = unary(UnaryOp::Abs, x)?;
            let hit = to_dtype(&compare(CompareOp::Eq, &(&ax).into(), &(&y).into())?, dt)?;
            let count = sum(&hit, Some(&reduced), true)?;
            mul(&div(&g, &count)?, &mul(&hit, &sign(x)?)?)?
        } else {
            // g * sign(x) |x|^(p-1) / y^(p-1), and 0 where x == 0 or y == 0 (PyTorch's
            // choice; |x|^(p-1) is infinite there for p < 1).
            let y_zero = to_dtype(&compare(CompareOp::Eq, &(&y).into(), &0.0.into())?, dt)?;
            let safe_y = add(&y, &y_zero)?;
            let scale = if p == 2.0 {
                div(x, &safe_y)?
            } else {
                let x_zero = to_dtype(&compare(CompareOp::Eq, &x.into(), &0.0.into())?, dt)?;
                let y_nonzero = to_dtype(&compare(CompareOp::Ne, &(&y).into(), &0.0.into())?, dt)?;
                let num = mul(&sign(x)?, &abs_pow(&add(x, &x_zero)?, p - 1.0)?)?;
                mul(&div(&num, &abs_pow(&safe_y, p - 1.0)?)?, &y_nonzero)?
            };
            mul(&g, &scale)?
        };
        Ok(gx)
    });
    Ok(out)
}
