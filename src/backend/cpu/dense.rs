//! The elements of a dense CPU tensor as a slice, and a `Vec` back as a tensor: what the
//! hand-written kernels (nn, masks, volume rendering) read and write.

use candle_core::{CpuStorage, Device, Storage, WithDType};

use crate::error::{CandleContext, Error, Result};

/// Run `f` on the elements of `t` (made contiguous first).
pub fn with_slice<T: WithDType, R>(
    t: &candle_core::Tensor,
    f: impl FnOnce(&[T]) -> R,
) -> Result<R> {
    let t = t.contiguous().op("kernel")?;
    let (a, b) = t
        .layout()
        .contiguous_offsets()
        .ok_or_else(|| Error::shape("kernel: expected a contiguous tensor"))?;
    with_storage(&t, |v: &[T]| f(&v[a..b]))
}

/// Run `f` on the whole storage under `t`, uncopied: the caller finds its elements through
/// `t`'s layout.
pub fn with_storage<T: WithDType, R>(
    t: &candle_core::Tensor,
    f: impl FnOnce(&[T]) -> R,
) -> Result<R> {
    let (s, _) = t.storage_and_layout();
    let Storage::Cpu(c) = &*s else {
        return Err(Error::NotImplemented(
            "kernel: only CPU tensors are supported".into(),
        ));
    };
    Ok(f(c.as_slice::<T>().op("kernel")?))
}

/// `v` as a CPU tensor of shape `dims`.
pub fn from_vec<T: WithDType>(v: Vec<T>, dims: &[usize]) -> Result<candle_core::Tensor> {
    candle_core::Tensor::from_vec(v, dims, &Device::Cpu).op("kernel")
}

/// Run `$body` with `$T` the Rust float type of an f32/f64 candle dtype.
macro_rules! by_float {
    ($cdt:expr, |$T:ident| $body:expr) => {
        match $cdt {
            candle_core::DType::F64 => {
                type $T = f64;
                $body
            }
            _ => {
                type $T = f32;
                $body
            }
        }
    };
}
pub(crate) use by_float;

/// The address and size of a CPU buffer: the allocation's capacity, which is what the
/// allocator frees.
pub fn buffer(s: &CpuStorage) -> (usize, usize) {
    fn pb<T>(v: &Vec<T>) -> (usize, usize) {
        (v.as_ptr() as usize, v.capacity() * std::mem::size_of::<T>())
    }
    match s {
        CpuStorage::U8(v) => pb(v),
        CpuStorage::U32(v) => pb(v),
        CpuStorage::I16(v) => pb(v),
        CpuStorage::I32(v) => pb(v),
        CpuStorage::I64(v) => pb(v),
        CpuStorage::BF16(v) => pb(v),
        CpuStorage::F16(v) => pb(v),
        CpuStorage::F32(v) => pb(v),
        CpuStorage::F64(v) => pb(v),
        CpuStorage::F8E4M3(v) => pb(v),
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => pb(v),
    }
}
