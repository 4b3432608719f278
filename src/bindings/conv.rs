//! Python surface of convolution: `nn.functional.conv1d/conv2d` and their transposes wrap
//! these two (the Python layer turns ints into per-dim lists and resolves string padding).

use pyo3::prelude::*;

use crate::bindings::op::functions;
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

functions! { mod functions;
    /// A `spatial`-d convolution (1 or 2) of `input` with `weight` (+ `bias`): stride,
    /// padding and dilation have one value per spatial dim.
    fn _conv[op_name(false, spatial)](input: Tensor, weight: Tensor, bias: Option<Tensor>,
        spatial: usize, stride: Vec<i64>, padding: Vec<i64>, dilation: Vec<i64>,
        groups: i64) -> Tensor {
        let args = ConvArgs { stride, padding, dilation, groups };
        Ok(conv::conv(&input, &weight, bias.as_ref(), spatial.clamp(1, 2), &args)?)
    }
    /// A `spatial`-d transposed convolution (1 or 2); `output_padding` adds to one side of
    /// each output dim.
    fn _conv_transpose[op_name(true, spatial)](input: Tensor, weight: Tensor, bias: Option<Tensor>,
        spatial: usize, stride: Vec<i64>, padding: Vec<i64>, output_padding: Vec<i64>, groups: i64,
        dilation: Vec<i64>) -> Tensor {
        let args = ConvArgs { stride, padding, dilation, groups };
        let spatial = spatial.clamp(1, 2);
        Ok(conv::conv_transpose(&input, &weight, bias.as_ref(), spatial, &args, &output_padding)?)
    }
}
