//! Convolution: `conv1d`/`conv2d` and their transposes, as PyTorch shapes and checks
//! them. 1-d is 2-d with H = 1 (a reshape here, no second kernel); unbatched inputs get a
//! batch dim of 1 for the kernel.
//!
//! Three recorded ops carry the whole family, each differentiable through the others:
//! - `conv2d`: `y = conv(x, w) + b`. Saves the input and the weight only (and each only
//!   when the other operand needs a gradient); nothing for the bias.
//! - `conv2d_input_grad`: `dx = conv_transpose(g, w)`, the forward of `conv_transpose2d`.
//! - `conv2d_weight_grad`: `dw = sum_n g_n · im2col(x_n)^T`.
//!
//! For `u` the gradient of `<T(g, w), u>`: `d/dg = conv(u, w)`, `d/dw = WG(g, u)`; for
//! `v` that of `<WG(g, x), v>`: `d/dg = conv(x, v)`, `d/dx = T(g, v)`. So double backward
//! (`create_graph=True`) needs no other kernel.

use crate::autograd::function::record;
use crate::autograd::remat;
use crate::autograd::saved::{crossed_grads, save_crossed};
use crate::backend;
use crate::backend::conv::ConvGeometry;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::ops::binary::add;
use crate::ops::nn::{compute_data, finish};
use crate::ops::reduce::sum;
use crate::ops::shape::reshape;
use crate::tensor::{shape_str, Tensor};

/// The stride, padding, dilation and groups of a convolution as the caller gave them,
/// one value per spatial dim (1 or 2 of them).
#[derive(Clone, Debug)]
pub struct ConvArgs {
    pub stride: Vec<i64>,
    pub padding: Vec<i64>,
    pub dilation: Vec<i64>,
    pub groups: i64,
}

/// PyTorch's name of a dtype in its scalar-type messages.
fn scalar_name(d: DType) -> &'static str {
    match d {
        DType::Float32 => "Float",
        DType::Float64 => "Double",
        DType::Float16 => "Half",
        DType::BFloat16 => "BFloat16",
        DType::Int64 => "Long",
        DType::Int32 => "Int",
        DType::UInt8 => "Byte",
        DType::Bool => "Bool",
    }
}

/// `(a x b)` or `(a)`: PyTorch's way of printing a per-channel size.
fn per_channel(v: &[i64]) -> String {
    let s: Vec<String> = v.iter().map(|e| e.to_string()).collect();
    format!("({})", s.join(" x "))
}

fn rt(msg: String) -> Error {
    Error::runtime(msg)
}

/// The checks every convolution shares: ranks, argument lengths and signs, groups, dtypes.
/// Returns the input with a batch dim (and whether it was added).
fn check_common(
    op: &str,
    x: &Tensor,
    w: &Tensor,
    spatial: usize,
    a: &ConvArgs,
) -> Result<(Tensor, bool)> {
    let xr = x.rank();
    if xr != spatial + 1 && xr != spatial + 2 {
        return Err(rt(format!(
            "Expected {}D (unbatched) or {}D (batched) input to {op}, but got input of size: {}",
            spatial + 1,
            spatial + 2,
            shape_str(&x.dims())
        )));
    }
    if w.rank() != spatial + 2 {
        return Err(rt(format!(
            "{op}: expected weight to be {}-dimensional, but got weight of size {}",
            spatial + 2,
            shape_str(&w.dims())
        )));
    }
    for (name, v) in [
        ("stride", &a.stride),
        ("padding", &a.padding),
        ("dilation", &a.dilation),
    ] {
        if v.len() != spatial {
            return Err(rt(format!(
                "expected {name} to be a single integer value or a list of {spatial} values to \
                 match the convolution dimensions, but got {name}={}",
                shape_str(v)
            )));
        }
    }
    if a.stride.iter().any(|&s| s <= 0) {
        return Err(rt("non-positive stride is not supported".into()));
    }
    if a.padding.iter().any(|&p| p < 0) {
        return Err(rt("negative padding is not supported".into()));
    }
    if a.dilation.iter().any(|&d| d <= 0) {
        return Err(rt(format!(
            "dilation should be greater than zero, but got {}",
            shape_str(&a.dilation)
        )));
    }
    if a.groups <= 0 {
        return Err(rt("non-positive groups is not supported".into()));
    }
    let wd = w.dims();
    if wd[0] % a.groups as usize != 0 {
        return Err(rt(format!(
            "Given groups={}, expected weight to be divisible by {} at dimension 0, but got \
             weight of size [{}] instead",
            a.groups,
            a.groups,
            shape_str(&wd)
        )));
    }
    if x.dtype() != w.dtype() {
        return Err(rt(format!(
            "expected scalar type {} but found {} ({op}: input {} is {}, weight {} is {})",
            scalar_name(x.dtype()),
            scalar_name(w.dtype()),
            shape_str(&x.dims()),
            x.dtype().name(),
            shape_str(&wd),
            w.dtype().name()
        )));
    }
    if xr == spatial + 1 {
        let mut d = vec![1];
        d.extend(x.dims());
        Ok((reshape(x, &d)?, true))
    } else {
        Ok((x.clone(), false))
    }
}

fn check_bias(op: &str, x: &Tensor, w: &Tensor, b: Option<&Tensor>, c: usize) -> Result<()> {
    let Some(b) = b else { return Ok(()) };
    if b.dims() != [c] {
        return Err(rt(format!(
            "Given weight of size {}, expected bias to be 1-dimensional with {c} elements, but \
             got bias of size {} instead",
            shape_str(&w.dims()),
            shape_str(&b.dims())
        )));
    }
    if b.dtype() != x.dtype() {
        return Err(rt(format!(
            "Input type ({}) and bias type ({}) should be the same ({op}: bias {})",
            scalar_name(x.dtype()).to_lowercase(),
            scalar_name(b.dtype()).to_lowercase(),
            shape_str(&b.dims())
        )));
    }
    Ok(())
}

/// A 1-d tensor's dims with H = 1 inserted before the last: (N, C, L) -> (N, C, 1, L).
fn as_2d(t: &Tensor) -> Result<Tensor> {
    let mut d = t.dims();
    let last = d.pop().unwrap_or(1);
    d.extend([1, last]);
    reshape(t, &d)
}

/// `x` and `w` as 4-d (a 1-d convolution's with a height of 1), and the output's spatial
/// sizes `out` as (height, width).
fn as_4d(x: Tensor, w: &Tensor, out: &[usize]) -> Result<(Tensor, Tensor, (usize, usize))> {
    Ok(match out {
        [ow] => (as_2d(&x)?, as_2d(w)?, (1, *ow)),
        _ => (x, w.clone(), (out[0], out[1])),
    })
}

/// The kernels' geometry of a convolution by the 4-d weight `w4` from an input
/// `[n, c_in, h, w]` to an output of `(oh, ow)`.
fn geometry(
    a: &ConvArgs,
    w4: &Tensor,
    input: [usize; 4],
    (oh, ow): (usize, usize),
) -> ConvGeometry {
    let wd = w4.dims();
    ConvGeometry {
        n: input[0],
        c_in: input[1],
        h: input[2],
        w: input[3],
        c_out: wd[0],
        kh: wd[2],
        kw: wd[3],
        stride: pair(&a.stride, 1),
        padding: pair(&a.padding, 0),
        dilation: pair(&a.dilation, 1),
        groups: a.groups as usize,
        oh,
        ow,
    }
}

/// Two values per spatial dim for the kernels: 1-d gets `fill` for H.
fn pair(v: &[i64], fill: usize) -> (usize, usize) {
    match v {
        [a] => (fill, *a as usize),
        [a, b] => (*a as usize, *b as usize),
        _ => (fill, fill),
    }
}

/// Undo `as_2d` and the added batch dim on a result.
fn restore(y: Tensor, spatial: usize, unbatched: bool) -> Result<Tensor> {
    let mut d = y.dims();
    if spatial == 1 {
        d.remove(2);
    }
    if unbatched {
        d.remove(0);
    }
    if d == y.dims() {
        Ok(y)
    } else {
        reshape(&y, &d)
    }
}

/// `conv1d` (`spatial == 1`) or `conv2d` (`spatial == 2`) with explicit padding.
pub fn conv(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    spatial: usize,
    a: &ConvArgs,
) -> Result<Tensor> {
    let (x, w) = (&crate::autocast::lower(x)?, &crate::autocast::lower(w)?);
    let b = b.map(crate::autocast::lower).transpose()?;
    let b = b.as_ref();
    let op = if spatial == 1 { "conv1d" } else { "conv2d" };
    let (xb, unbatched) = check_common(op, x, w, spatial, a)?;
    let (xd, wd) = (xb.dims(), w.dims());
    let groups = a.groups as usize;
    if xd[1] != wd[1] * groups {
        return Err(rt(format!(
            "Given groups={groups}, weight of size {}, expected input{} to have {} channels, but \
             got {} channels instead",
            shape_str(&wd),
            shape_str(&xd),
            wd[1] * groups,
            xd[1]
        )));
    }
    check_bias(op, x, w, b, wd[0])?;
    let sp = &xd[2..];
    let padded: Vec<i64> = (0..spatial)
        .map(|i| sp[i] as i64 + 2 * a.padding[i])
        .collect();
    let kernel: Vec<i64> = (0..spatial)
        .map(|i| a.dilation[i] * (wd[2 + i] as i64 - 1) + 1)
        .collect();
    if padded.iter().zip(&kernel).any(|(p, k)| p < k) {
        return Err(rt(format!(
            "Calculated padded input size per channel: {}. Kernel size: {}. Kernel size can't be \
             greater than actual input size",
            per_channel(&padded),
            per_channel(&kernel)
        )));
    }
    let out: Vec<usize> = (0..spatial)
        .map(|i| ((padded[i] - kernel[i]) / a.stride[i] + 1) as usize)
        .collect();
    let (x4, w4, (oh, ow)) = as_4d(xb, w, &out)?;
    let d4 = x4.dims();
    let geo = geometry(a, &w4, [d4[0], d4[1], d4[2], d4[3]], (oh, ow));
    restore(conv2d(&x4, &w4, b, geo)?, spatial, unbatched)
}

/// `conv_transpose1d`/`conv_transpose2d`: the input gradient of the convolution whose
/// output has the input's shape.
pub fn conv_transpose(
    x: &Tensor,
    w: &Tensor,
    b: Option<&Tensor>,
    spatial: usize,
    a: &ConvArgs,
    output_padding: &[i64],
) -> Result<Tensor> {
    let (x, w) = (&crate::autocast::lower(x)?, &crate::autocast::lower(w)?);
    let b = b.map(crate::autocast::lower).transpose()?;
    let b = b.as_ref();
    let op = if spatial == 1 {
        "conv_transpose1d"
    } else {
        "conv_transpose2d"
    };
    let (xb, unbatched) = check_common(op, x, w, spatial, a)?;
    if output_padding.len() != spatial {
        return Err(rt(format!(
            "expected output_padding to be a single integer value or a list of {spatial} values \
             to match the convolution dimensions, but got output_padding={}",
            shape_str(output_padding)
        )));
    }
    let (xd, wd) = (xb.dims(), w.dims());
    let groups = a.groups as usize;
    if xd[1] != wd[0] {
        return Err(rt(format!(
            "Given transposed=1, weight of size {}, expected input{} to have {} channels, but got \
             {} channels instead",
            shape_str(&wd),
            shape_str(&xd),
            wd[0],
            xd[1]
        )));
    }
    check_bias(op, x, w, b, wd[1] * groups)?;
    let bad = (0..spatial).any(|i| {
        let o = output_padding[i];
        o < 0 || (o >= a.stride[i] && o >= a.dilation[i])
    });
    if bad {
        let names = if spatial == 1 {
            vec![""]
        } else {
            vec!["_height", "_width"]
        };
        let part = |what: &str, v: &[i64]| {
            (0..spatial)
                .map(|i| format!("{what}{}: {}", names[i], v[i]))
                .collect::<Vec<_>>()
                .join(" ")
        };
        return Err(rt(format!(
            "output padding must be smaller than either stride or dilation, but got {} {} {}",
            part("output_padding", output_padding),
            part("stride", &a.stride),
            part("dilation", &a.dilation)
        )));
    }
    let sp = &xd[2..];
    let out: Vec<i64> = (0..spatial)
        .map(|i| {
            (sp[i] as i64 - 1) * a.stride[i] - 2 * a.padding[i]
                + a.dilation[i] * (wd[2 + i] as i64 - 1)
                + output_padding[i]
                + 1
        })
        .collect();
    if out.iter().any(|&o| o <= 0) {
        let sizes: Vec<i64> = sp.iter().map(|&s| s as i64).collect();
        return Err(rt(format!(
            "Given input size per channel: {}. Calculated output size per channel: {}. Output \
             size is too small",
            per_channel(&sizes),
            per_channel(&out)
        )));
    }
    let out: Vec<usize> = out.iter().map(|&o| o as usize).collect();
    let (x4, w4, (h, wo)) = as_4d(xb, w, &out)?;
    let d4 = x4.dims();
    let geo = geometry(
        a,
        &w4,
        [d4[0], w4.dims()[1] * groups, h, wo],
        (d4[2], d4[3]),
    );
    let mut y = conv2d_input_grad(&x4, &w4, geo)?;
    if let Some(b) = b {
        y = add(&y, &reshape(b, &[geo.c_in, 1, 1])?)?;
    }
    restore(y, spatial, unbatched)
}

/// The data of `t` in the compute dtype shared by a convolution's operands.
fn data(op: &str, t: &Tensor) -> Result<candle_core::Tensor> {
    Ok(compute_data(op, t)?.0)
}

/// The recorded forward on 4-d operands whose shapes `geo` describes (already checked).
pub fn conv2d(x: &Tensor, w: &Tensor, b: Option<&Tensor>, geo: ConvGeometry) -> Result<Tensor> {
    product(Product::Forward, x, w, b, geo)
}

/// `dx = conv_transpose(g, w)` for `g` of shape `geo.output_dims()`, recorded.
pub fn conv2d_input_grad(g: &Tensor, w: &Tensor, geo: ConvGeometry) -> Result<Tensor> {
    product(Product::InputGrad, g, w, None, geo)
}

/// `dw = sum_n g_n · im2col(x_n)^T`, of shape `geo.weight_dims()`, recorded.
pub fn conv2d_weight_grad(g: &Tensor, x: &Tensor, geo: ConvGeometry) -> Result<Tensor> {
    product(Product::WeightGrad, g, x, None, geo)
}

/// The three recorded products of the module comment.
#[derive(Clone, Copy)]
enum Product {
    Forward,
    InputGrad,
    WeightGrad,
}

/// `p(a, b)` (+ `bias` for the forward), recorded. Each operand's gradient is another
/// product of the upstream gradient and the other operand, so each operand is saved only
/// if the other needs a gradient.
fn product(
    p: Product,
    a: &Tensor,
    b: &Tensor,
    bias: Option<&Tensor>,
    geo: ConvGeometry,
) -> Result<Tensor> {
    let started = remat::start();
    let (op, node) = match p {
        Product::Forward => ("conv2d", "ConvolutionBackward0"),
        Product::InputGrad => ("conv_transpose2d", "ConvolutionBackward0"),
        Product::WeightGrad => ("conv2d_weight_grad", "ConvolutionWeightBackward0"),
    };
    let (ad, bd) = (data(op, a)?, data(op, b)?);
    let y = match p {
        Product::Forward => {
            let biasd = bias.map(|t| data(op, t)).transpose()?;
            backend::on(&ad).conv2d(op, &ad, &bd, biasd.as_ref(), &geo)?
        }
        Product::InputGrad => backend::on(&ad).conv2d_input_grad(op, &ad, &bd, &geo)?,
        Product::WeightGrad => backend::on(&ad).conv2d_weight_grad(op, &ad, &bd, &geo)?,
    };
    let out = finish(y, a.dtype())?;
    let mut inputs = vec![a, b];
    inputs.extend(bias);
    remat::note(op, &out, &inputs, started, move |ins| {
        product(p, &ins[0], &ins[1], ins.get(2), geo)
    });
    let (na, nb) = (a.requires_grad(), b.requires_grad());
    record(
        node,
        &out,
        &inputs,
        || save_crossed(a, b, na, nb),
        move |ctx, g| {
            let [ga, gb] = crossed_grads(
                ctx,
                na,
                nb,
                |b| match p {
                    Product::Forward => conv2d_input_grad(g, b, geo),
                    Product::InputGrad => conv2d(g, b, None, geo),
                    Product::WeightGrad => conv2d(b, g, None, geo),
                },
                |a| match p {
                    Product::Forward => conv2d_weight_grad(g, a, geo),
                    Product::InputGrad => conv2d_weight_grad(a, g, geo),
                    Product::WeightGrad => conv2d_input_grad(a, g, geo),
                },
            )?;
            let mut grads = vec![ga, gb];
            if ctx.needs.len() > 2 {
                grads.push(match ctx.needs(2) {
                    true => Some(sum(g, Some(&[0, 2, 3]), false)?),
                    false => None,
                });
            }
            Ok(grads)
        },
    );
    Ok(out)
}
