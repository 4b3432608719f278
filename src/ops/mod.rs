//! Ops: for each, its forward, what it saves, and its backward, side by side.
//!
//! Backward rules are written with these same ops, so they record a graph only when
//! the engine runs with `create_graph=True` (grad mode on); otherwise nothing is recorded.

pub mod attention;
pub mod batch_norm;
pub mod binary;
pub mod conv;
pub mod convert;
pub mod creation;
pub mod decomposition;
pub mod index;
pub mod inplace;
pub mod interpolate;
pub mod linalg;
pub mod memory_format;
pub mod nn;
pub mod pool;
pub mod reduce;
pub mod scan;
pub mod shape;
pub mod sort;
pub mod threshold;
pub mod unary;
pub mod volume_render;

use candle_core::Device;

use crate::dtype::{result_type, DType, PromotionOperand};
use crate::error::{Error, Result};
use crate::tensor::{shape_str, Tensor};

pub use crate::scalar::Scalar;

/// A tensor or a Python number, as ops accept them.
#[derive(Clone)]
pub enum Operand {
    Tensor(Tensor),
    Scalar(Scalar),
}

impl From<&Tensor> for Operand {
    fn from(t: &Tensor) -> Self {
        Operand::Tensor(t.clone())
    }
}

impl From<f64> for Operand {
    fn from(v: f64) -> Self {
        Operand::Scalar(Scalar::Float(v))
    }
}

impl Operand {
    /// The shape it broadcasts as: a number is 0-d.
    pub fn dims(&self) -> Vec<usize> {
        match self {
            Operand::Tensor(t) => t.dims(),
            Operand::Scalar(_) => Vec::new(),
        }
    }

    fn promotion(&self) -> PromotionOperand {
        match self {
            Operand::Tensor(t) if t.rank() == 0 => PromotionOperand::ZeroDim(t.dtype()),
            Operand::Tensor(t) => PromotionOperand::Dim(t.dtype()),
            Operand::Scalar(s) => PromotionOperand::Scalar(s.category()),
        }
    }
}

/// PyTorch's result type of several operands.
pub fn result_dtype(operands: &[Operand]) -> DType {
    let p: Vec<_> = operands.iter().map(Operand::promotion).collect();
    result_type(&p)
}

/// The device an op's operands meet on: that of the first tensor that is not a 0-d CPU
/// tensor (those, like Python numbers, join tensors on any device, as in PyTorch), else
/// that of the first tensor, else the host. Two tensors on different devices otherwise are
/// PyTorch's error, naming both.
pub fn common_device(op: &str, operands: &[Operand]) -> Result<Device> {
    let mut found: Option<Device> = None;
    let mut first: Option<Device> = None;
    for o in operands {
        let Operand::Tensor(t) = o else { continue };
        let d = t.device();
        if t.rank() == 0 && d.is_cpu() {
            first.get_or_insert(d);
            continue;
        }
        match &found {
            None => found = Some(d),
            Some(f) if !crate::device::same(f, &d) => {
                return Err(crate::device::mismatch(op, f, &d));
            }
            Some(_) => {}
        }
    }
    Ok(found.or(first).unwrap_or_else(crate::device::host))
}

/// Bring operands to one dtype and device: tensors are cast (a recorded op), 0-d CPU
/// tensors moved to the others' device, numbers made 0-d tensors there.
pub fn promote(op: &str, operands: &[Operand], dtype: DType) -> Result<Vec<Tensor>> {
    promote_on(operands, dtype, &common_device(op, operands)?)
}

/// Bring operands to `dtype` on `device` (the [`common_device`] of the op's operands).
pub fn promote_on(operands: &[Operand], dtype: DType, device: &Device) -> Result<Vec<Tensor>> {
    operands
        .iter()
        .map(|o| match o {
            Operand::Tensor(t) => convert::to_dtype(&convert::to_device(t, device)?, dtype),
            Operand::Scalar(s) => creation::scalar_tensor(*s, dtype, device),
        })
        .collect()
}

/// The broadcast shape of two shapes, with PyTorch's message when they do not fit.
pub fn broadcast_shape(op: &str, a: &[usize], b: &[usize]) -> Result<Vec<usize>> {
    let n = a.len().max(b.len());
    let mut out = vec![0; n];
    for i in 0..n {
        let da = if i + a.len() >= n {
            a[i + a.len() - n]
        } else {
            1
        };
        let db = if i + b.len() >= n {
            b[i + b.len() - n]
        } else {
            1
        };
        out[i] = if da == db || db == 1 {
            da
        } else if da == 1 {
            db
        } else {
            return Err(Error::shape(format!(
                "{op}: The size of tensor a ({da}) must match the size of tensor b ({db}) at \
                 non-singleton dimension {i} (shapes {} and {})",
                shape_str(a),
                shape_str(b)
            )));
        };
    }
    Ok(out)
}

/// Whether `from` broadcasts to exactly `to` (`expand`'s rule): no more dims, and each of its
/// dims, aligned from the right, is 1 or equal.
pub fn broadcasts_to(from: &[usize], to: &[usize]) -> bool {
    from.len() <= to.len()
        && from
            .iter()
            .rev()
            .zip(to.iter().rev())
            .all(|(&a, &b)| a == b || a == 1)
}

/// Sum `grad` down to `shape`: the backward of broadcasting.
pub fn sum_to(grad: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let gd = grad.dims();
    if gd == shape {
        return Ok(grad.clone());
    }
    let lead = gd.len() - shape.len();
    let mut dims: Vec<usize> = (0..lead).collect();
    for (i, &s) in shape.iter().enumerate() {
        if s == 1 && gd[lead + i] != 1 {
            dims.push(lead + i);
        }
    }
    let summed = reduce::sum(grad, Some(&dims), true)?;
    shape::reshape(&summed, shape)
}

/// Normalise a possibly negative dim, with PyTorch's IndexError message.
pub fn wrap_dim(op: &str, dim: i64, rank: usize) -> Result<usize> {
    let r = rank.max(1) as i64;
    if dim < -r || dim >= r {
        return Err(Error::index(format!(
            "{op}: Dimension out of range (expected to be in range of [{}, {}], but got {dim})",
            -r,
            r - 1
        )));
    }
    Ok(if dim < 0 {
        (dim + r) as usize
    } else {
        dim as usize
    })
}

/// Non-negative sizes, with PyTorch's message for negative ones.
pub fn to_dims(op: &str, size: &[i64]) -> Result<Vec<usize>> {
    size.iter()
        .map(|&d| {
            if d < 0 {
                Err(Error::shape(format!(
                    "{op}: Trying to create tensor with negative dimension {d}: {size:?}"
                )))
            } else {
                Ok(d as usize)
            }
        })
        .collect()
}

/// A dim as an op takes it: an `i64` as the user wrote it (negative counts from the end)
/// or a `usize` a Rust caller computed. The op wraps and range-checks it itself, as ATen's
/// ops do, so a bad dim from any caller gets PyTorch's IndexError, never a panic.
pub trait Dim: Copy + std::fmt::Debug {
    fn wrap(self, op: &str, rank: usize) -> Result<usize>;
}

impl Dim for i64 {
    fn wrap(self, op: &str, rank: usize) -> Result<usize> {
        wrap_dim(op, self, rank)
    }
}

/// Integer literals default to `i32`: `transpose(x, 0, 1)` needs no suffix.
impl Dim for i32 {
    fn wrap(self, op: &str, rank: usize) -> Result<usize> {
        wrap_dim(op, self.into(), rank)
    }
}

impl Dim for usize {
    fn wrap(self, op: &str, rank: usize) -> Result<usize> {
        wrap_dim(op, i64::try_from(self).unwrap_or(i64::MAX), rank)
    }
}

/// PyTorch's error for an op that needs a real dim of a 0-d tensor (`unbind`, `roll`).
pub fn no_dims(op: &str, dim: usize) -> Error {
    Error::index(format!(
        "{op}: Dimension specified as {dim} but tensor has no dimensions"
    ))
}

/// PyTorch's error for an op that splits along a dim of a 0-d tensor (`split`, `chunk`).
pub fn needs_1d(op: &str) -> Error {
    Error::shape(format!("{op} expects at least a 1-dimensional tensor"))
}

/// Normalise a list of dims. Rejects repeats.
pub fn wrap_dims<D: Dim>(op: &str, dims: &[D], rank: usize) -> Result<Vec<usize>> {
    let mut out = Vec::with_capacity(dims.len());
    for &d in dims {
        let w = d.wrap(op, rank)?;
        if out.contains(&w) {
            return Err(Error::shape(format!(
                "{op}: dim {w} appears multiple times in the list of dims"
            )));
        }
        out.push(w);
    }
    Ok(out)
}

/// Error unless the dtype is floating point (ops such as exp on integers promote instead).
pub fn require_float(op: &str, t: &Tensor) -> Result<()> {
    if !t.dtype().is_floating_point() {
        return Err(Error::dtype(format!(
            "{op}: expected a floating point tensor, got {}",
            t.dtype().name()
        )));
    }
    Ok(())
}
