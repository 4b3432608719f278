//! candle's comparisons with a scalar and its `where_cond`, as drop-ins that go through the
//! tensor's backend ([`super::ElementwiseOps::compare`], [`super::ElementwiseOps::select`]).
//! candle's own are disallowed outside the kernels and the candle fallbacks (`clippy.toml`):
//! its CUDA build compares and selects no int32 and makes no empty tensor.

use candle_core::op::CmpOp;
use candle_core::Tensor;

pub trait Compare {
    /// `self op v` per element, as 0/1 bytes (u8); `v` is taken in `self`'s dtype.
    fn cmp_scalar(&self, op: CmpOp, v: f64) -> candle_core::Result<Tensor>;
    /// `self ? on_true : on_false` per element (candle's `where_cond`): `self` holds 0/1
    /// bytes (u8), all three have one shape.
    fn select(&self, on_true: &Tensor, on_false: &Tensor) -> candle_core::Result<Tensor>;
}

fn msg(e: crate::error::Error) -> candle_core::Error {
    candle_core::Error::Msg(e.to_string())
}

impl Compare for Tensor {
    fn cmp_scalar(&self, op: CmpOp, v: f64) -> candle_core::Result<Tensor> {
        let s = crate::device::full((), v, self.dtype(), self.device())
            .map_err(msg)?
            .broadcast_as(self.shape())?;
        super::on(self)
            .compare("compare", op, self, &s)
            .map_err(msg)
    }

    fn select(&self, on_true: &Tensor, on_false: &Tensor) -> candle_core::Result<Tensor> {
        super::on(self)
            .select("where", self, on_true, on_false)
            .map_err(msg)
    }
}
