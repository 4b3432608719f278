//! relu/threshold with a 1-bit mask of the elements that passed: bit `i % 8` of byte
//! `i / 8`, a uint8 tensor of `ceil(n / 8)` bytes. The default computes the output with
//! candle's compare and select and packs no mask (the op then saves a float tensor).

use crate::backend::cast::Convert;
use candle_core::Tensor;

use super::inplace::write_all;
use super::no_fallback;
use crate::error::{CandleContext, Result};

pub trait MaskOps {
    /// Whether `threshold` packs the mask it is asked for (the op then saves it instead of
    /// a float tensor).
    fn packs_masks(&self) -> bool {
        false
    }

    /// `x if x > th else value` (NaN passes) and, when asked and the device packs masks,
    /// the mask of the elements that passed.
    #[allow(clippy::disallowed_methods)] // candle's op: the fallback
    fn threshold(
        &self,
        name: &'static str,
        x: &Tensor,
        th: f64,
        value: f64,
        _want_mask: bool,
    ) -> Result<(Tensor, Option<Tensor>)> {
        let out = (|| {
            let value = Tensor::full(value, x.shape(), x.device())?.cast(x.dtype())?;
            x.le(th)?.where_cond(&value, x)
        })()
        .op(name)?;
        Ok((out, None))
    }

    /// `threshold` written over the contiguous `x`'s own buffer, no mask: a recompute's
    /// input that nothing else holds, so the recompute needs no second buffer.
    fn threshold_in_place(
        &self,
        name: &'static str,
        x: &Tensor,
        th: f64,
        value: f64,
    ) -> Result<()> {
        let (out, _) = self.threshold(name, x, th, value, false)?;
        write_all(name, x, &out)
    }

    /// `select_by_mask` written over the contiguous `g`'s own buffer: the incoming
    /// gradient, which nothing else holds, so the backward needs no second buffer.
    fn select_by_mask_in_place(&self, name: &'static str, g: &Tensor, mask: &Tensor) -> Result<()> {
        let out = self.select_by_mask(name, g, mask)?;
        write_all(name, g, &out)
    }

    no_fallback! {
        /// `g` where the mask's bit is set, else 0; `g` dense, of the masked input's shape.
        fn select_by_mask(&self, name: &'static str, g: &Tensor, mask: &Tensor)
            -> Result<Tensor> = name, g;
        /// The mask as 0/1 bytes of shape `dims`.
        fn unpack_mask(&self, name: &'static str, mask: &Tensor, dims: &[usize])
            -> Result<Tensor> = name, mask;
    }
}
