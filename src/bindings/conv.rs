//! Python surface of convolution: `nn.functional.conv1d/conv2d` and their transposes wrap
//! these two (the Python layer turns ints into per-dim lists and resolves string padding).

use pyo3::prelude::*;

use crate::bindings::add_functions;
use crate::bindings::convert::{extract_tensor, opt_tensor};
use crate::bindings::Obj;
use crate::ops::conv::{self, ConvArgs};
use crate::tensor::Tensor;

fn op_name(transposed: bool, spatial: usize) -> &'static str {
    match (transposed, spatial) {
        (false, 1) => "conv1d",
        (false, _) => "conv2d",
        (true, 1) => "conv_transpose1d",
        (true, _) => "conv_transpose2d",
    }
}

fn operands(
    op: &str,
    input: &Obj<'_>,
    weight: &Obj<'_>,
    bias: Option<&Obj<'_>>,
) -> PyResult<(Tensor, Tensor, Option<Tensor>)> {
    Ok((
        extract_tensor(op, "input", input)?,
        extract_tensor(op, "weight", weight)?,
        opt_tensor(op, "bias", bias)?,
    ))
}

/// A `spatial`-d convolution (1 or 2) of `input` with `weight` (+ `bias`): stride,
/// padding and dilation have one value per spatial dim.
#[pyfunction]
#[pyo3(signature = (input, weight, bias, spatial, stride, padding, dilation, groups))]
#[allow(clippy::too_many_arguments)]
fn _conv(
    input: &Obj<'_>,
    weight: &Obj<'_>,
    bias: Option<&Obj<'_>>,
    spatial: usize,
    stride: Vec<i64>,
    padding: Vec<i64>,
    dilation: Vec<i64>,
    groups: i64,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("conv", || {
        let op = op_name(false, spatial);
        let (x, w, b) = operands(op, input, weight, bias)?;
        let args = ConvArgs {
            stride,
            padding,
            dilation,
            groups,
        };
        Ok(conv::conv(&x, &w, b.as_ref(), spatial.clamp(1, 2), &args)?)
    })
}

/// A `spatial`-d transposed convolution (1 or 2); `output_padding` adds to one side of
/// each output dim.
#[pyfunction]
#[pyo3(signature = (input, weight, bias, spatial, stride, padding, output_padding, groups, dilation))]
#[allow(clippy::too_many_arguments)]
fn _conv_transpose(
    input: &Obj<'_>,
    weight: &Obj<'_>,
    bias: Option<&Obj<'_>>,
    spatial: usize,
    stride: Vec<i64>,
    padding: Vec<i64>,
    output_padding: Vec<i64>,
    groups: i64,
    dilation: Vec<i64>,
) -> PyResult<Tensor> {
    crate::bindings::op::guarded("conv_transpose", || {
        let op = op_name(true, spatial);
        let (x, w, b) = operands(op, input, weight, bias)?;
        let args = ConvArgs {
            stride,
            padding,
            dilation,
            groups,
        };
        Ok(conv::conv_transpose(
            &x,
            &w,
            b.as_ref(),
            spatial.clamp(1, 2),
            &args,
            &output_padding,
        )?)
    })
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m, _conv, _conv_transpose }
    Ok(())
}
