//! Matrix products.

use crate::autograd::function::record;
use crate::autograd::saved::SavedTensor;
use crate::error::{CandleContext, Error, Result};
use crate::ops::shape::{expand, reshape, transpose, unsqueeze};
use crate::ops::{broadcast_shape, promote, result_dtype};
use crate::tensor::{shape_str, Tensor};

/// `a @ b` for operands of rank >= 2 with identical batch dims.
fn bmm_same_batch(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let ad = a.data();
    let bd = b.data();
    // gemm takes row- or column-major operands; other layouts are made dense first.
    let dense = |t: candle_core::Tensor| -> Result<candle_core::Tensor> {
        let l = t.layout();
        let r = l.dims().len();
        let s = l.stride();
        let inner_ok = s[r - 1] == 1 || s[r - 2] == 1;
        let batch_ok = (0..r - 2).all(|i| l.dims()[i] <= 1 || s[i] != 0);
        if inner_ok && batch_ok {
            Ok(t)
        } else {
            crate::ops::convert::dense_copy(&t)
        }
    };
    let out = dense(ad)?.matmul(&dense(bd)?).op("matmul")?;
    let out = Tensor::new(out, a.dtype());
    let (na, nb) = (a.requires_grad(), b.requires_grad());
    record(
        "MmBackward0",
        &out,
        &[a, b],
        || {
            let mut v = Vec::new();
            if nb {
                v.push(SavedTensor::input(a));
            }
            if na {
                v.push(SavedTensor::input(b));
            }
            v
        },
        move |ctx, g| {
            let mut it = ctx.saved.iter();
            let sa = if nb { it.next() } else { None };
            let sb = if na { it.next() } else { None };
            let r = g.rank();
            let ga = match sb {
                Some(b) if ctx.needs(0) => Some(bmm_same_batch(g, &transpose(b, r - 2, r - 1)?)?),
                _ => None,
            };
            let gb = match sa {
                Some(a) if ctx.needs(1) => Some(bmm_same_batch(&transpose(a, r - 2, r - 1)?, g)?),
                _ => None,
            };
            Ok(vec![ga, gb])
        },
    );
    Ok(out)
}

/// `matmul` with PyTorch's rules for 1-D, 2-D, batched and broadcast operands.
pub fn matmul(a: &Tensor, b: &Tensor) -> Result<Tensor> {
    let (ra, rb) = (a.rank(), b.rank());
    if ra == 0 || rb == 0 {
        return Err(Error::shape(format!(
            "matmul: both arguments to matmul need to be at least 1D, but they are {ra}D and {rb}D"
        )));
    }
    let dtype = result_dtype(&[a.into(), b.into()]);
    if a.dtype() != b.dtype() {
        return Err(Error::dtype(format!(
            "matmul: expected both operands to have the same dtype, but got {} and {}",
            a.dtype().name(),
            b.dtype().name()
        )));
    }
    let ts = promote(&[a.into(), b.into()], dtype)?;
    let (a, b) = (&ts[0], &ts[1]);
    let a2 = if ra == 1 { unsqueeze(a, 0)? } else { a.clone() };
    let b2 = if rb == 1 { unsqueeze(b, 1)? } else { b.clone() };
    let (ad, bd) = (a2.dims(), b2.dims());
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
    let batch = broadcast_shape("matmul", &ad[..ad.len() - 2], &bd[..bd.len() - 2])?;
    if ad.len() > 2 && bd[..bd.len() - 2].iter().all(|&d| d == 1) {
        // (..., n, k) @ (k, m): fold the batch into rows, one 2-D product, no copy of b.
        let rows: usize = ad[..ad.len() - 2].iter().product::<usize>() * n;
        let flat = bmm_same_batch(&reshape(&a2, &[rows, k1])?, &reshape(&b2, &[k2, m])?)?;
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
    let out = bmm_same_batch(&full(&a2, n, k1)?, &full(&b2, k2, m)?)?;
    let mut out_dims = batch.clone();
    if ra > 1 {
        out_dims.push(n);
    }
    if rb > 1 {
        out_dims.push(m);
    }
    reshape(&out, &out_dims)
}
