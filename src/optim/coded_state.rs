//! A parameter's optimizer state kept in fewer bits (`state_dtype`): which buffers are
//! signed, the coded buffers themselves, and their state-dict form.

use crate::backend::coded::{decode_block, rank1_scale, CodedState, Coding, StateFormat};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::ops;
use crate::tensor::{shape_str, Tensor};

/// Whether state buffer `name` can go negative (a first moment, a momentum) or not (a
/// second moment): the unsigned code spends its sign bit on precision.
pub fn is_signed(name: &str) -> bool {
    !matches!(
        name,
        "exp_avg_sq" | "max_exp_avg_sq" | "square_avg" | "exp_inf" | "sum" | "acc_delta"
    )
}

/// One coded state buffer: its codes and scales, counted as optimizer state.
pub struct Coded {
    pub coding: Coding,
    pub block: usize,
    pub codes: Tensor,
    pub scales: Vec<Tensor>,
}

/// A state tensor of `len` elements, zero, counted as optimizer state.
fn state_zeros(len: usize, dtype: DType, like: &Tensor) -> Result<Tensor> {
    let t = ops::creation::zeros(&[len], dtype, &like.device())?;
    t.set_role(Role::OptimizerState, true);
    Ok(t)
}

impl Coded {
    /// The zero state of buffer `name` of parameter `p` in `format`.
    pub fn zeros(format: StateFormat, name: &str, p: &Tensor, block: usize) -> Result<Coded> {
        let coding = format
            .coding(is_signed(name), &p.dims())
            .ok_or_else(|| Error::value("a dense state is not coded".to_string()))?;
        let n = p.numel();
        let codes = state_zeros(coding.code_bytes(n), DType::UInt8, p)?;
        let scales = coding
            .scale_lens(n, block)
            .into_iter()
            .map(|len| state_zeros(len, DType::Float32, p))
            .collect::<Result<_>>()?;
        Ok(Coded {
            coding,
            block,
            codes,
            scales,
        })
    }

    /// The buffer as the kernels take it.
    pub fn view(&self) -> (Coding, usize, candle_core::Tensor, Vec<candle_core::Tensor>) {
        (
            self.coding,
            self.block,
            self.codes.data(),
            self.scales.iter().map(|s| s.data()).collect(),
        )
    }

    /// The buffer's values as float32, shaped like `p` (read through the host: for
    /// inspection and tests, not the step).
    pub fn decode(&self, p: &Tensor) -> Result<Tensor> {
        let host = |t: &Tensor| -> Result<Vec<f32>> {
            t.data()
                .flatten_all()
                .and_then(|d| d.to_vec1::<f32>())
                .map_err(|e| Error::value(format!("optimizer state: {e}")))
        };
        let codes = self
            .codes
            .data()
            .flatten_all()
            .and_then(|d| d.to_vec1::<u8>())
            .map_err(|e| Error::value(format!("optimizer state: {e}")))?;
        let scales: Vec<Vec<f32>> = self.scales.iter().map(host).collect::<Result<_>>()?;
        let n = p.numel();
        let mut out = vec![0f32; n];
        let (coding, block) = (self.coding, self.block);
        for (b, chunk) in out.chunks_mut(block).enumerate() {
            let at = b * block;
            let codes = &codes[coding.code_bytes(at)..];
            match coding {
                Coding::BFloat16 => decode_block(coding, codes, chunk, |_| 1.0),
                Coding::Int4Rank1 { cols, .. } => decode_block(coding, codes, chunk, |i| {
                    rank1_scale(scales[0][(at + i) / cols], scales[1][(at + i) % cols])
                }),
                _ => decode_block(coding, codes, chunk, |_| scales[0][b]),
            }
        }
        ops::creation::from_vec(out, &p.dims(), DType::Float32, &p.device())
    }

    pub fn bump_version(&self) {
        self.codes.bump_version();
        self.scales.iter().for_each(|s| s.bump_version());
    }

    /// The state-dict entries: the codes under the buffer's name, each scale under
    /// `{name}_{suffix}`.
    pub fn entries(&self, name: &str) -> Vec<(String, Tensor)> {
        let mut v = vec![(name.to_string(), self.codes.detach())];
        for (suffix, s) in self.coding.scale_suffixes().iter().zip(&self.scales) {
            v.push((format!("{name}_{suffix}"), s.detach()));
        }
        v
    }

    /// Adopt a saved coded buffer (load_state_dict): copies of its codes and scales, checked
    /// against the sizes `format` and `block` give for parameter `p`.
    pub fn adopt(
        format: StateFormat,
        block: usize,
        name: &str,
        p: &Tensor,
        codes: &Tensor,
        scales: &[Tensor],
    ) -> Result<Coded> {
        let zero = Coded::zeros(format, name, p, block)?;
        let want = |t: &Tensor, like: &Tensor, what: &str| -> Result<Tensor> {
            if t.dtype() != like.dtype() || t.dims() != like.dims() {
                return Err(Error::value(format!(
                    "load_state_dict: {what} of '{name}' ({} state, block size {block}, \
                     parameter of shape {}) should be {} of shape {}, got {} of shape {}",
                    format.name(),
                    shape_str(&p.dims()),
                    like.dtype().name(),
                    shape_str(&like.dims()),
                    t.dtype().name(),
                    shape_str(&t.dims())
                )));
            }
            let c = ops::convert::clone(&ops::convert::to_device(&t.detach(), &p.device())?)?;
            let c = ops::convert::contiguous(&c)?.detach();
            c.set_role(Role::OptimizerState, true);
            Ok(c)
        };
        if scales.len() != zero.scales.len() {
            return Err(Error::value(format!(
                "load_state_dict: '{name}' needs {} scale tensors, got {}",
                zero.scales.len(),
                scales.len()
            )));
        }
        Ok(Coded {
            coding: zero.coding,
            block,
            codes: want(codes, &zero.codes, "the codes")?,
            scales: scales
                .iter()
                .zip(&zero.scales)
                .map(|(s, z)| want(s, z, "a scale"))
                .collect::<Result<_>>()?,
        })
    }
}

/// The kernels' form of several coded buffers, borrowed from their views.
pub fn kernel_states(
    views: &[(Coding, usize, candle_core::Tensor, Vec<candle_core::Tensor>)],
) -> Vec<CodedState<'_>> {
    views
        .iter()
        .map(|(coding, block, codes, scales)| CodedState {
            coding: *coding,
            block: *block,
            codes,
            scales,
        })
        .collect()
}
