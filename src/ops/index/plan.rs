//! An advanced-indexing plan: which elements of a source an indexing result holds.
//!
//! The result's dims are the source's remaining (non-indexed) dims with the broadcast
//! index shape inserted at `bpos`; `coords` give, for every index position, the
//! coordinate along each indexed dim. The same plan reads (`take`) and writes (`put`),
//! which is what makes each the other's backward.

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::tensor::{shape_str, Tensor};

#[derive(Debug)]
pub struct IndexPlan {
    /// Source dims indexed by index arrays, ascending.
    pub adv_dims: Vec<usize>,
    /// `coords[j][b]`: the coordinate along `adv_dims[j]` of index position `b`.
    pub coords: Vec<Vec<usize>>,
    /// The broadcast shape of the index arrays.
    pub bshape: Vec<usize>,
    /// Where the broadcast dims go among the remaining source dims.
    pub bpos: usize,
    /// The source shape.
    pub src_dims: Vec<usize>,
}

/// An integer index array read out of a tensor or a list: shape and values.
#[derive(Clone, Debug)]
pub struct IndexArray {
    pub dims: Vec<usize>,
    pub values: Vec<i64>,
}

impl IndexArray {
    /// The values of an integer tensor (any layout).
    pub fn from_tensor(op: &str, t: &Tensor) -> Result<IndexArray> {
        if !matches!(t.dtype(), DType::Int64 | DType::Int32) {
            return Err(Error::index(format!(
                "{op}: tensors used as indices must be long, int, byte or bool tensors (got {})",
                t.dtype().name()
            )));
        }
        let values = t.to_vec::<i64>("index")?;
        Ok(IndexArray {
            dims: t.dims(),
            values,
        })
    }

    pub fn from_coords(coords: Vec<usize>) -> IndexArray {
        IndexArray {
            dims: vec![coords.len()],
            values: coords.into_iter().map(|c| c as i64).collect(),
        }
    }

    /// The value at broadcast position `b` of `bshape` (this array right-aligned in it).
    fn broadcast_values(&self, bshape: &[usize]) -> Vec<i64> {
        let n: usize = bshape.iter().product();
        if self.dims == bshape {
            return self.values.clone();
        }
        // Row-major strides of this array within bshape, 0 where it broadcasts.
        let lead = bshape.len() - self.dims.len();
        let mut strides = vec![0usize; bshape.len()];
        let mut s = 1;
        for i in (0..self.dims.len()).rev() {
            strides[lead + i] = if self.dims[i] == 1 { 0 } else { s };
            s *= self.dims[i];
        }
        let mut out = Vec::with_capacity(n);
        let mut idx = vec![0usize; bshape.len()];
        let mut off = 0usize;
        for _ in 0..n {
            out.push(self.values[off]);
            for d in (0..bshape.len()).rev() {
                idx[d] += 1;
                off += strides[d];
                if idx[d] < bshape[d] {
                    break;
                }
                off -= strides[d] * bshape[d];
                idx[d] = 0;
            }
        }
        out
    }
}

/// A coordinate from an index value: negatives count from the end when `wrap`.
fn checked(v: i64, size: usize, wrap: bool, oob: &dyn Fn(i64) -> Error) -> Result<usize> {
    let s = size as i64;
    let w = if wrap && v < 0 { v + s } else { v };
    if w < 0 || w >= s {
        return Err(oob(v));
    }
    Ok(w as usize)
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
    pub fn advanced(src_dims: &[usize], adv: &[(usize, IndexArray)]) -> Result<IndexPlan> {
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
        let mut coords = Vec::with_capacity(adv.len());
        for (d, a) in adv {
            let size = src_dims[*d];
            let oob = |v: i64| {
                Error::index(format!(
                    "index {v} is out of bounds for dimension {d} with size {size}"
                ))
            };
            coords.push(
                a.broadcast_values(&bshape)
                    .into_iter()
                    .map(|v| checked(v, size, true, &oob))
                    .collect::<Result<Vec<_>>>()?,
            );
        }
        let dims: Vec<usize> = adv.iter().map(|(d, _)| *d).collect();
        let adjacent = dims.windows(2).all(|w| w[1] == w[0] + 1);
        Ok(IndexPlan {
            bpos: if adjacent { dims[0] } else { 0 },
            adv_dims: dims,
            coords,
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
        let size = src_dims[dim];
        let coords = index
            .values
            .iter()
            .map(|&v| checked(v, size, false, oob))
            .collect::<Result<Vec<_>>>()?;
        Ok(IndexPlan {
            adv_dims: vec![dim],
            coords: vec![coords],
            bshape: vec![index.values.len()],
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
        let n = index.values.len();
        let mut coords = vec![Vec::with_capacity(n); rank];
        let mut idx = vec![0usize; rank];
        for &v in &index.values {
            for d in 0..rank {
                coords[d].push(if d == dim {
                    checked(v, src_dims[dim], false, oob)?
                } else {
                    idx[d]
                });
            }
            for d in (0..rank).rev() {
                idx[d] += 1;
                if idx[d] < index.dims[d] {
                    break;
                }
                idx[d] = 0;
            }
        }
        Ok(IndexPlan {
            adv_dims: (0..rank).collect(),
            coords,
            bshape: index.dims.clone(),
            bpos: 0,
            src_dims: src_dims.to_vec(),
        })
    }

    /// Every true element of a bool mask shaped like the source, as a 1-d result.
    pub fn mask(src_dims: &[usize], mask: &candle_core::Tensor) -> Result<IndexPlan> {
        let (count, coords) = super::nonzero_coords(mask)?;
        Ok(IndexPlan {
            adv_dims: (0..src_dims.len()).collect(),
            coords,
            bshape: vec![count],
            bpos: 0,
            src_dims: src_dims.to_vec(),
        })
    }
}
