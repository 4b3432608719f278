//! Scans: `cumsum`, `cumprod` as `gradstream.X` functions and `Tensor.X` methods.

use pyo3::prelude::*;

use crate::bindings::convert::{int_dim, with_dtype};
use crate::bindings::op::tensor_ops;
use crate::ops::scan;
use crate::tensor::Tensor;

tensor_ops! { mod functions;
    /// Running sum along `dim`: an O(n) scan, parallel over the independent lines; integers
    /// and bools accumulate in int64.
    both fn cumsum(x: Tensor, dim: Object; dtype: Option<DType> = None) -> Tensor {
        let d = int_dim("cumsum", &x, dim)?;
        Ok(scan::cumsum(&with_dtype(&x, dtype)?, d)?)
    }
    /// Running product along `dim`: an O(n) scan; its gradient is exact with zeros.
    both fn cumprod(x: Tensor, dim: Object; dtype: Option<DType> = None) -> Tensor {
        let d = int_dim("cumprod", &x, dim)?;
        Ok(scan::cumprod(&with_dtype(&x, dtype)?, d)?)
    }
}
