//! Python surface of the fused nn functionals (`gradstream.nn.functional` wraps these)
//! and the in-place random fills of `gradstream.nn.init`.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::bindings::add_functions;
use crate::bindings::convert::{extract_tensor, opt_tensor};
use crate::bindings::random::pick_generator;
use crate::bindings::Obj;

use crate::ops::nn;
use crate::random;
use crate::tensor::Tensor;

/// `layer_norm` over the last `k` dims.
#[pyfunction]
#[pyo3(signature = (x, k, weight=None, bias=None, eps=1e-5))]
fn _nn_layer_norm(
    x: &Obj<'_>,
    k: usize,
    weight: Option<&Obj<'_>>,
    bias: Option<&Obj<'_>>,
    eps: f64,
) -> PyResult<Tensor> {
    let x = extract_tensor("layer_norm", "input", x)?;
    let w = opt_tensor("layer_norm", "weight", weight)?;
    let b = opt_tensor("layer_norm", "bias", bias)?;
    Ok(nn::layer_norm(&x, k, w.as_ref(), b.as_ref(), eps)?)
}

/// `x[i, target[i]]` for `x` of shape [N, C] (0 at `ignore_index`).
#[pyfunction]
fn _nn_gather_rows(x: &Obj<'_>, target: &Obj<'_>, ignore_index: i64) -> PyResult<Tensor> {
    let x = extract_tensor("nll_loss", "input", x)?;
    let t = extract_tensor("nll_loss", "target", target)?;
    Ok(nn::gather_rows(&x, &t, ignore_index)?)
}

/// Move the class dim (1) of `[N, C, d...]` last and flatten to `[N*d..., C]`.
#[pyfunction]
fn _nn_class_last(x: &Obj<'_>) -> PyResult<Tensor> {
    let x = extract_tensor("cross_entropy", "input", x)?;
    if x.rank() < 2 {
        return Err(PyValueError::new_err(format!(
            "cross_entropy: expected input with at least 2 dims, got shape {:?}",
            x.dims()
        )));
    }
    Ok(nn::move_class_dim_last(&x)?)
}

/// Rows of `weight` at `idx` (shape `idx.shape + [D]`).
#[pyfunction]
#[pyo3(signature = (weight, idx, padding_idx=None))]
fn _nn_embedding(weight: &Obj<'_>, idx: &Obj<'_>, padding_idx: Option<i64>) -> PyResult<Tensor> {
    let w = extract_tensor("embedding", "weight", weight)?;
    let i = extract_tensor("embedding", "input", idx)?;
    Ok(nn::embedding(&w, &i, padding_idx, None)?)
}

/// Inverted dropout with the global generator (`manual_seed` makes masks repeatable).
#[pyfunction]
fn _nn_dropout(x: &Obj<'_>, p: f64) -> PyResult<Tensor> {
    let x = extract_tensor("dropout", "input", x)?;
    let g = random::default_generator();
    Ok(nn::dropout(&x, p, |n| random::keep_mask(n, p, g))?)
}

/// Fill `t` in place with draws from `generator` (the global one if None): U(a, b) for
/// `"uniform"`, N(a, b^2) for `"normal"` (`nn.init.uniform_` / `normal_`).
#[pyfunction]
#[pyo3(signature = (t, distribution, a, b, generator=None))]
fn _nn_random_(
    t: &Obj<'_>,
    distribution: &str,
    a: f64,
    b: f64,
    generator: Option<&Obj<'_>>,
) -> PyResult<()> {
    let op = if distribution == "normal" {
        "normal_"
    } else {
        "uniform_"
    };
    let g = pick_generator(op, generator)?;
    let t = extract_tensor(op, "tensor", t)?;
    match distribution {
        "uniform" => Ok(random::uniform_(&t, a, b, &g)?),
        "normal" => Ok(random::normal_(&t, a, b, &g)?),
        other => Err(PyValueError::new_err(format!(
            "_nn_random_: unknown distribution '{other}'"
        ))),
    }
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions! { m,
        _nn_layer_norm, _nn_gather_rows, _nn_class_last, _nn_embedding, _nn_dropout, _nn_random_
    }
    Ok(())
}
