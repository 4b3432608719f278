//! An advanced-indexing plan: which elements of a source an indexing result holds.
//!
//! The result's dims are the source's remaining (non-indexed) dims with the broadcast
//! index shape inserted at `bpos`; `coords` give, for every index position, the
//! coordinate along each indexed dim. The same plan reads (`take`) and writes (`put`),
//! which is what makes each the other's backward. The coordinates live on the source's
//! device: building a plan from index tensors reads nothing back.

use crate::backend::cast::Convert;
use crate::backend::Compare;
use candle_core::op::CmpOp;
use candle_core::{DType as CDType, Device};

use crate::backend;
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::tensor::{shape_str, Tensor};

#[derive(Debug)]
pub struct IndexPlan {
    /// Source dims indexed by index arrays, ascending.
    pub adv_dims: Vec<usize>,
    /// `coords[j][b]`: the coordinate along `adv_dims[j]` of index position `b`; int64,
    /// `(adv_dims.len(), count)`, dense, on the source's device.
    pub coords: candle_core::Tensor,
    /// The broadcast shape of the index arrays.
    pub bshape: Vec<usize>,
    /// Where the broadcast dims go among the remaining source dims.
    pub bpos: usize,
    /// The source shape.
    pub src_dims: Vec<usize>,
}

/// An integer index array, as int64 on the source's device.
#[derive(Clone, Debug)]
pub struct IndexArray {
    pub dims: Vec<usize>,
    pub values: candle_core::Tensor,
}

impl IndexArray {
    /// The values of an integer tensor (any layout), moved to `device`.
    pub fn from_tensor(op: &str, t: &Tensor, device: &Device) -> Result<IndexArray> {
        if !matches!(t.dtype(), DType::Int64 | DType::Int32) {
            return Err(Error::index(format!(
                "{op}: tensors used as indices must be long, int, byte or bool tensors (got {})",
                t.dtype().name()
            )));
        }
        let values = crate::ops::convert::cast_data(&t.data(), t.dtype(), DType::Int64)?;
        let values = crate::device::to_device(&values, device).op("index")?;
        Ok(IndexArray {
            dims: t.dims(),
            values,
        })
    }

    /// Coordinates found on the host (a mask's true elements), moved to `device`.
    pub fn from_coords(coords: Vec<usize>, device: &Device) -> Result<IndexArray> {
        let n = coords.len();
        let v: Vec<i64> = coords.into_iter().map(|c| c as i64).collect();
        Ok(IndexArray {
            dims: vec![n],
            values: crate::device::from_vec(v, n, device).op("index")?,
        })
    }

    /// The values broadcast to `bshape`, flat and dense.
    fn broadcast_values(&self, bshape: &[usize]) -> Result<candle_core::Tensor> {
        self.values
            .broadcast_as(bshape)
            .and_then(|v| v.flatten_all())
            .and_then(|v| v.dense())
            .op("index")
    }
}

/// Every value of `v` as a coordinate along a dim of `size`: negatives count from the end
/// when `wrap`; the first value out of range is the error `oob(value)`.
fn checked(
    v: &candle_core::Tensor,
    size: usize,
    wrap: bool,
    oob: &dyn Fn(i64) -> Error,
) -> Result<candle_core::Tensor> {
    let s = size as i64;
    let lo = if wrap { -s } else { 0 };
    if let Some(bad) = backend::on(v).find_out_of_bounds("index", v, lo, s, None)? {
        return Err(oob(bad));
    }
    if !wrap || v.elem_count() == 0 {
        return Ok(v.clone());
    }
    let negative = v.cmp_scalar(CmpOp::Lt, 0.0).op("index")?;
    let wrapped = v.affine(1.0, s as f64).op("index")?;
    negative.select(&wrapped, v).op("index")
}

/// One `(k, count)` int64 tensor from `k` coordinate rows of `count` each.
fn stack_rows(
    rows: Vec<candle_core::Tensor>,
    count: usize,
    device: &Device,
) -> Result<candle_core::Tensor> {
    if rows.is_empty() {
        return crate::device::zeros((0, count), CDType::I64, device).op("index");
    }
    let rows = rows
        .iter()
        .map(|r| r.unsqueeze(0))
        .collect::<candle_core::Result<Vec<_>>>()
        .op("index")?;
    crate::ops::shape::join(&rows, 0)
}

impl IndexPlan {
    /// How many index positions (the product of `bshape`).
    pub fn count(&self) -> usize {
        self.bshape.iter().product()
    }

    /// The shape of the indexing result.
    pub fn out_dims(&self) -> Vec<usize> {
        let rest: Vec<usize> = (0..self.src_dims.len())
            .filter(|d| !self.adv_dims.contains(d))
            .map(|d| self.src_dims[d])
            .collect();
        let p = self.bpos.min(rest.len());
        let mut out = rest[..p].to_vec();
        out.extend_from_slice(&self.bshape);
        out.extend_from_slice(&rest[p..]);
        out
    }

    /// Advanced indexing (`x[..., idx, ...]`): index arrays at ascending `dims` of a source
    /// of `src_dims`, broadcast together, negatives wrapped, bounds checked. As in PyTorch
    /// the broadcast dims replace the indexed ones when those are adjacent, else go first.
    pub fn advanced(
        src_dims: &[usize],
        adv: &[(usize, IndexArray)],
        device: &Device,
    ) -> Result<IndexPlan> {
        let mut bshape: Vec<usize> = Vec::new();
        for (_, a) in adv {
            bshape = crate::ops::broadcast_shape("index", &bshape, &a.dims).map_err(|_| {
                Error::index(format!(
                    "shape mismatch: indexing tensors could not be broadcast together with shapes {}",
                    adv.iter()
                        .map(|(_, a)| shape_str(&a.dims))
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
        }
        let mut rows = Vec::with_capacity(adv.len());
        for (d, a) in adv {
            let size = src_dims[*d];
            let oob = |v: i64| {
                Error::index(format!(
                    "index {v} is out of bounds for dimension {d} with size {size}"
                ))
            };
            rows.push(checked(&a.broadcast_values(&bshape)?, size, true, &oob)?);
        }
        let dims: Vec<usize> = adv.iter().map(|(d, _)| *d).collect();
        let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
        let count = bshape.iter().product();
        Ok(IndexPlan {
            bpos: if adjacent { dims[0] } else { 0 },
            adv_dims: dims,
            coords: stack_rows(rows, count, device)?,
            bshape,
            src_dims: src_dims.to_vec(),
        })
    }

    /// One index array along `dim`, the result keeping the dim's place (`index_select`).
    pub fn along(
        src_dims: &[usize],
        dim: usize,
        index: &IndexArray,
        oob: &dyn Fn(i64) -> Error,
    ) -> Result<IndexPlan> {
        let n: usize = index.dims.iter().product();
        let flat = index.values.flatten_all().op("index")?;
        let coords = checked(&flat, src_dims[dim], false, oob)?;
        Ok(IndexPlan {
            adv_dims: vec![dim],
            coords: coords.reshape((1, n)).op("index")?,
            bshape: vec![n],
            bpos: dim,
            src_dims: src_dims.to_vec(),
        })
    }

    /// `gather`/`scatter`: an index of the source's rank; element `i` of the result is the
    /// source at `i` with coordinate `dim` replaced by `index[i]`.
    pub fn gather(
        src_dims: &[usize],
        dim: usize,
        index: &IndexArray,
        oob: &dyn Fn(i64) -> Error,
    ) -> Result<IndexPlan> {
        let rank = src_dims.len();
        let idims = &index.dims;
        let n: usize = idims.iter().product();
        let device = index.values.device();
        let rows = (0..rank)
            .map(|d| {
                if d == dim {
                    let flat = index.values.flatten_all().op("gather")?;
                    return checked(&flat, src_dims[dim], false, oob);
                }
                // The position along `d`, for every element of the index.
                let mut shape = vec![1; rank];
                shape[d] = idims[d];
                candle_core::Tensor::arange(0i64, idims[d] as i64, device)
                    .and_then(|a| a.reshape(shape))
                    .and_then(|a| a.broadcast_as(idims.as_slice()))
                    .and_then(|a| a.flatten_all())
                    .and_then(|a| a.dense())
                    .op("gather")
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(IndexPlan {
            adv_dims: (0..rank).collect(),
            coords: stack_rows(rows, n, device)?,
            bshape: idims.clone(),
            bpos: 0,
            src_dims: src_dims.to_vec(),
        })
    }

    /// Every true element of a bool mask shaped like the source, as a 1-d result. The
    /// number of true elements sizes the result, so the mask is read on the host.
    pub fn mask(src_dims: &[usize], mask: &candle_core::Tensor) -> Result<IndexPlan> {
        let (count, coords) = super::nonzero_coords(mask)?;
        let device = mask.device();
        let rows = coords
            .into_iter()
            .map(|c| IndexArray::from_coords(c, device).map(|a| a.values))
            .collect::<Result<Vec<_>>>()?;
        Ok(IndexPlan {
            adv_dims: (0..src_dims.len()).collect(),
            coords: stack_rows(rows, count, device)?,
            bshape: vec![count],
            bpos: 0,
            src_dims: src_dims.to_vec(),
        })
    }
}
