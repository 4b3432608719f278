//! Matrix products: `matmul` (`@`), `mm`, `bmm`, `addmm`, `dot`, `outer`.
//!
//! One kernel, `batched_mm`, multiplies operands of rank >= 2 with identical batch
//! dims and records the node; the public ops check shapes (naming both) and reshape.
//! Backward rules are products of gradstream ops, so double backward works.

use crate::autocast;
use crate::autograd::function::record;
use crate::autograd::remat;
use crate::autograd::saved::{crossed_grads, save_crossed};
use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::ops::binary::{add, mul, mul_scalar};
use crate::ops::convert::cast_data;
use crate::ops::shape::{expand, reshape, transpose, unsqueeze};
use crate::ops::{broadcast_shape, broadcasts_to, promote, result_dtype};
use crate::tensor::{shape_str, Tensor};

/// Same dtype for both operands, and one gemm supports (PyTorch refuses bool).
fn check_dtypes(op: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::dtype(format!(
            "{op}: expected both operands to have the same dtype, but got {} and {} \
             (shapes {} and {})",
            a.dtype().name(),
            b.dtype().name(),
            shape_str(&a.dims()),
            shape_str(&b.dims())
        )));
    }
    refuse_bool(op, a, b)
}

/// Bool operands have no product. The batched products (`bmm`, a batched `matmul`) check this
/// before a dtype mismatch, the 2-D ones after it, as PyTorch's kernels do.
fn refuse_bool(op: &str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() == DType::Bool {
        return Err(Error::NotImplemented(format!(
            "{op}: not implemented for 'Bool' (dtypes {} and {}, shapes {} and {})",
            a.dtype().name(),
            b.dtype().name(),
            shape_str(&a.dims()),
            shape_str(&b.dims())
        )));
    }
    Ok(())
}

/// The product of two same-batch operands, any dtype but bool, through the device's GEMM.
fn product_data(
    a: &candle_core::Tensor,
    b: &candle_core::Tensor,
    dtype: DType,
) -> Result<candle_core::Tensor> {
    let r = a.rank();
    let mut out_dims = a.dims().to_vec();
    out_dims[r - 1] = b.dims()[r - 1];
    crate::headroom::ensure("matmul", &out_dims, dtype.size_in_bytes())?;
    if a.dims()[r - 1] == 0 {
        // An empty sum: zeros (gemm would leave the output uninitialised).
        let mut dims = a.dims().to_vec();
        dims[r - 1] = b.dims()[r - 1];
        return crate::device::zeros(dims, dtype.candle(), a.device()).op("matmul");
    }
    let gemm = backend::on(a);
    if dtype == DType::BFloat16 && a.device().is_cpu() {
        // The CPU gemm has no bfloat16 kernel: multiply in float32, round once.
        let fa = cast_data(a, dtype, DType::Float32)?;
        let fb = cast_data(b, dtype, DType::Float32)?;
        return cast_data(&gemm.matmul(&fa, &fb)?, DType::Float32, dtype);
    }
    if dtype.is_floating_point() {
        return gemm.matmul(a, b);
    }
    // gemm has no integer kernels: multiply in float64 (exact below 2^53) and cast back.
    let fa = cast_data(a, dtype, DType::Float64)?;
    let fb = cast_data(b, dtype, DType::Float64)?;
    cast_data(&gemm.matmul(&fa, &fb)?, DType::Float64, dtype)
}

/// A matrix (or batch of them) stored column-major: a transposed view of a dense one.
fn is_col_major(t: &candle_core::Tensor) -> bool {
    let (dims, stride) = (t.dims(), t.stride());
    let r = dims.len();
    r >= 2
        && dims[r - 1] > 1
        && dims[r - 2] > 1
        && stride[r - 2] == 1
        && stride[r - 1] == dims[r - 2]
}

/// `a @ b` for operands of rank >= 2 with identical batch dims; records `name`.
fn batched_mm(name: &'static str, a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let started = remat::start();
    let out = Tensor::new(product_data(&a.data(), &b.data(), a.dtype())?, a.dtype());
    remat::note(name, &out, &[a, b], started, move |ins| {
        let (a, b) = (&ins[0], &ins[1]);
        Ok(Tensor::new(
            product_data(&a.data(), &b.data(), a.dtype())?,
            a.dtype(),
        ))
    });
    let (na, nb) = (a.requires_grad(), b.requires_grad());
    let (a_col_major, b_col_major) = (is_col_major(&a.data()), is_col_major(&b.data()));
    record(
        name,
        &out,
        &[a, b],
        || save_crossed(a, b, na, nb),
        move |ctx, g| {
            let r = g.rank();
            let t = |x: &Tensor| transpose(x, r - 2, r - 1);
            // Each gradient comes out in its operand's layout: for `x @ w.t()` the weight's
            // gradient is produced transposed, so the transpose's backward hands the leaf a
            // dense buffer it can keep instead of copying (PyTorch's mm_mat2_backward).
            let [ga, gb] = crossed_grads(
                ctx,
                na,
                nb,
                |b| match a_col_major {
                    true => t(&batched_mm(name, b, &t(g)?)?),
                    false => batched_mm(name, g, &t(b)?),
                },
                |a| match b_col_major {
                    true => t(&batched_mm(name, &t(g)?, a)?),
                    false => batched_mm(name, &t(a)?, g),
                },
            )?;
            Ok(vec![ga, gb])
        },
    );
    Ok(out)
}

/// `matmul` with PyTorch's rules for 1-D, 2-D, batched and broadcast operands.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = (&autocast::lower(a)?, &autocast::lower(b)?);
    let (ra, rb) = (a.rank(), b.rank());
    if ra == 0 || rb == 0 {
        return Err(Error::shape(format!(
            "matmul: both arguments to matmul need to be at least 1D, but they are {ra}D and {rb}D"
        )));
    }
    // Shapes first, then dtypes, as PyTorch checks them.
    let (mut ad, mut bd) = (a.dims(), b.dims());
    if ra == 1 {
        ad.insert(0, 1);
    }
    if rb == 1 {
        bd.push(1);
    }
    let (n, k1) = (ad[ad.len() - 2], ad[ad.len() - 1]);
    let (k2, m) = (bd[bd.len() - 2], bd[bd.len() - 1]);
    if k1 != k2 {
        return Err(Error::shape(format!(
            "matmul: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{}; shapes {} and {})",
            n,
            k1,
            k2,
            m,
            shape_str(&a.dims()),
            shape_str(&b.dims())
        )));
    }
    let batch =
        broadcast_shape("matmul", &ad[..ad.len() - 2], &bd[..bd.len() - 2]).map_err(|e| {
            Error::shape(format!(
                "{e}: the batch dims of shapes {} and {} do not broadcast",
                shape_str(&a.dims()),
                shape_str(&b.dims())
            ))
        })?;
    if ra > 2 || rb > 2 {
        refuse_bool("matmul", a, b)?;
    }
    check_dtypes("matmul", a, b)?;
    let dtype = result_dtype(&[a.into(), b.into()]);
    let ts = promote("matmul", &[a.into(), b.into()], dtype)?;
    let (a, b) = (&ts[0], &ts[1]);
    let a2 = if ra == 1 { unsqueeze(a, 0)? } else { a.clone() };
    let b2 = if rb == 1 { unsqueeze(b, 1)? } else { b.clone() };
    if ra == 2 && rb == 2 {
        return batched_mm("MmBackward0", a, b);
    }
    if ad.len() > 2 && bd[..bd.len() - 2].iter().all(|&d| d == 1) {
        // (..., n, k) @ (k, m): fold the batch into rows, one 2-D product, no copy of b.
        let rows: usize = ad[..ad.len() - 2].iter().product::<usize>() * n;
        let flat = batched_mm(
            "MmBackward0",
            &reshape(&a2, &[rows, k1])?,
            &reshape(&b2, &[k2, m])?,
        )?;
        let mut out_dims = batch.clone();
        out_dims.push(n);
        if rb > 1 {
            out_dims.push(m);
        }
        return reshape(&flat, &out_dims);
    }
    let full = |t: &Tensor, r: usize, c: usize| -> Result<Tensor> {
        let mut d = batch.clone();
        d.extend([r, c]);
        let rank = t.rank();
        if rank < d.len() {
            let mut padded = vec![1; d.len() - rank];
            padded.extend(t.dims());
            expand(&reshape(t, &padded)?, &d)
        } else {
            expand(t, &d)
        }
    };
    let out = batched_mm("BmmBackward0", &full(&a2, n, k1)?, &full(&b2, k2, m)?)?;
    let mut out_dims = batch.clone();
    if ra > 1 {
        out_dims.push(n);
    }
    if rb > 1 {
        out_dims.push(m);
    }
    reshape(&out, &out_dims)
}

fn require_rank(op: &str, what: &str, t: &Tensor, rank: usize, kind: &str) -> Result<()> {
    if t.rank() != rank {
        return Err(Error::shape(format!(
            "{op}: {what} must be a {kind}, but got a tensor of shape {}",
            shape_str(&t.dims())
        )));
    }
    Ok(())
}

/// Two matrices of one dtype that can be multiplied, `a` (n, k) and `b` (k, m), each named as
/// the op's signature names it.
fn check_matrices(op: &str, (an, a): (&str, &Tensor), (bn, b): (&str, &Tensor)) -> Result<()> {
    require_rank(op, an, a, 2, "matrix")?;
    require_rank(op, bn, b, 2, "matrix")?;
    let (ad, bd) = (a.dims(), b.dims());
    if ad[1] != bd[0] {
        return Err(Error::shape(format!(
            "{op}: mat1 and mat2 shapes cannot be multiplied ({}x{} and {}x{})",
            ad[0], ad[1], bd[0], bd[1]
        )));
    }
    check_dtypes(op, a, b)
}

/// `mm(a, b)`: (n, k) @ (k, m), no broadcasting.
pub fn mm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = (&autocast::lower(a)?, &autocast::lower(b)?);
    check_matrices("mm", ("self", a), ("mat2", b))?;
    batched_mm("MmBackward0", a, b)
}

/// `bmm(a, b)`: (B, n, k) @ (B, k, m), no broadcasting.
pub fn bmm(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (a, b) = (&autocast::lower(a)?, &autocast::lower(b)?);
    require_rank("bmm", "batch1", a, 3, "3D tensor")?;
    require_rank("bmm", "batch2", b, 3, "3D tensor")?;
    let (ad, bd) = (a.dims(), b.dims());
    if ad[0] != bd[0] || ad[2] != bd[1] {
        return Err(Error::shape(format!(
            "bmm: Expected size for first two dimensions of batch2 tensor to be: [{}, {}] but \
             got: [{}, {}] (shapes {} and {})",
            ad[0],
            ad[2],
            bd[0],
            bd[1],
            shape_str(&ad),
            shape_str(&bd)
        )));
    }
    refuse_bool("bmm", a, b)?;
    check_dtypes("bmm", a, b)?;
    batched_mm("BmmBackward0", a, b)
}

/// `dot(a, b)`: the inner product of two 1-D tensors of equal length.
pub fn dot(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    if a.rank() != 1 || b.rank() != 1 {
        return Err(Error::shape(format!(
            "dot: 1D tensors expected, but got {}D and {}D tensors (shapes {} and {})",
            a.rank(),
            b.rank(),
            shape_str(&a.dims()),
            shape_str(&b.dims())
        )));
    }
    check_dtypes("dot", a, b)?;
    let (n, m) = (a.numel(), b.numel());
    if n != m {
        return Err(Error::shape(format!(
            "dot: inconsistent tensor size, expected tensor [{n}] and src [{m}] to have the same \
             number of elements, but got {n} and {m} elements respectively"
        )));
    }
    let started = remat::start();
    let out = dot_product(a, b)?;
    remat::note("dot", &out, &[a, b], started, |ins| {
        dot_product(&ins[0], &ins[1])
    });
    let (na, nb) = (a.requires_grad(), b.requires_grad());
    record(
        "DotBackward0",
        &out,
        &[a, b],
        || save_crossed(a, b, na, nb),
        move |ctx, g| {
            let [ga, gb] = crossed_grads(ctx, na, nb, |b| mul(g, b), |a| mul(g, a))?;
            Ok(vec![ga, gb])
        },
    );
    Ok(out)
}

fn dot_product(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let n = a.numel();
    let row = a.data().reshape((1, n)).op("dot")?;
    let col = b.data().reshape((n, 1)).op("dot")?;
    let data = product_data(&row, &col, a.dtype())?.reshape(()).op("dot")?;
    Ok(Tensor::new(data, a.dtype()))
}

/// `outer(a, b)`: `a[:, None] * b[None, :]`, as PyTorch computes it (grad_fn `MulBackward0`).
pub fn outer(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    for (what, t) in [("self", a), ("vec2", b)] {
        if t.rank() != 1 {
            return Err(Error::shape(format!(
                "outer: Expected 1-D argument {what}, but got {}-D (shapes {} and {})",
                t.rank(),
                shape_str(&a.dims()),
                shape_str(&b.dims())
            )));
        }
    }
    mul(&unsqueeze(a, 1)?, b)
}

/// `addmm(input, m1, m2, beta, alpha)`: `beta * input + alpha * (m1 @ m2)`, with `input`
/// broadcast to the product's shape. With `beta == 0` the input is ignored (NaN too).
pub fn addmm(input: &Tensor, m1: &Tensor, m2: &Tensor, beta: f64, alpha: f64) -> Result<Tensor> {
    let (input, m1, m2) = (
        &autocast::lower(input)?,
        &autocast::lower(m1)?,
        &autocast::lower(m2)?,
    );
    check_matrices("addmm", ("mat1", m1), ("mat2", m2))?;
    check_dtypes("addmm", input, m1)?;
    let (d1, d2) = (m1.dims(), m2.dims());
    let out_dims = [d1[0], d2[1]];
    if !broadcasts_to(&input.dims(), &out_dims) {
        return Err(Error::shape(format!(
            "addmm: the input of shape {} cannot be broadcast to the product's shape {} \
             (mat1 {}, mat2 {})",
            shape_str(&input.dims()),
            shape_str(&out_dims),
            shape_str(&d1),
            shape_str(&d2)
        )));
    }
    let prod = mm(m1, m2)?;
    let prod = if alpha == 1.0 {
        prod
    } else {
        mul_scalar(&prod, alpha)?
    };
    if beta == 0.0 {
        // PyTorch ignores the input entirely (NaNs too); keep it out of the graph as well.
        return Ok(prod);
    }
    let scaled = if beta == 1.0 {
        input.clone()
    } else {
        mul_scalar(input, beta)?
    };
    // Broadcasting of `input` is undone by add's own backward.
    add(&scaled, &prod)
}

/// `linear(x, w, b)`: `x @ w.T + b`. The bias is added into the product's fresh buffer, so
/// a layer allocates one output instead of two (the product is saved by no one).
pub fn linear(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    let started = remat::start();
    let out = linear_product(x, w, b)?;
    let mut inputs = vec![x, w];
    inputs.extend(b);
    remat::note("linear", &out, &inputs, started, |ins| {
        linear_product(&ins[0], &ins[1], ins.get(2))
    });
    Ok(out)
}

fn linear_product(x: &Tensor, w: &Tensor, b: Option<&Tensor>) -> Result<Tensor> {
    // `matmul` casts x and w.T under autocast: casting the transposed view of a parameter
    // lets the product save the parameter itself instead of its copy (see `autocast`).
    let b = b.map(autocast::lower).transpose()?;
    let b = b.as_ref();
    let wt = if w.rank() == 2 {
        transpose(w, 0, 1)?
    } else {
        w.clone()
    };
    let y = matmul(x, &wt)?;
    let Some(b) = b else { return Ok(y) };
    let dims = y.dims();
    let fits = b.dtype() == y.dtype() && (b.rank() == 0 || dims.ends_with(&b.dims()));
    if !fits || !y.data().is_contiguous() {
        return add(&y, b);
    }
    crate::ops::inplace::update_data("linear", &y, b, crate::ops::inplace::Update::Add)?;
    let out = Tensor::new(y.data(), y.dtype());
    let b_dims = b.dims();
    record("AddBackward0", &out, &[&y, b], Vec::new, move |ctx, g| {
        let gy = ctx.needs(0).then(|| g.clone());
        let gb = if ctx.needs(1) {
            Some(crate::ops::sum_to(g, &b_dims)?)
        } else {
            None
        };
        Ok(vec![gy, gb])
    });
    Ok(out)
}
