//! The DLPack ABI (dlpack.h v1.1) and the layout logic behind `bindings/dlpack.rs`: what an
//! exported tensor's memory looks like to a consumer (CPU or CUDA memory, in place), and
//! the copy of another library's memory into a new tensor. An import copies: a candle
//! storage owns its allocation (a `Vec`, a `CudaSlice`), so it cannot adopt memory another
//! library allocated and will free.
//!
//! The four `#[repr(C)]` structs are defined here rather than taken from `dlpark`: its 0.10
//! release (the one on pyo3 0.30) needs Rust 1.88 (ours is 1.85), its candle glue is for
//! candle 0.11 (ours is 0.9.2), and an export must keep the gradstream tensor alive (so the
//! memory accounting stays exact), which its owners do not do.

use std::ffi::{c_void, CStr};

use candle_core::{CpuStorage, Storage};

use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::tensor::Tensor;

pub const CPU: i32 = 1;
pub const CUDA: i32 = 2;
const CUDA_HOST: i32 = 3;

const INT: u8 = 0;
const UINT: u8 = 1;
const FLOAT: u8 = 2;
const BFLOAT: u8 = 4;
const BOOL: u8 = 6;

/// `flags` bit of a versioned tensor: the producer made a copy for this export.
const IS_COPIED: u64 = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
pub struct DLTensor {
    data: *mut c_void,
    device: DLDevice,
    ndim: i32,
    dtype: DLDataType,
    shape: *mut i64,
    /// Null means compact row-major.
    strides: *mut i64,
    byte_offset: u64,
}

#[repr(C)]
pub struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
pub struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
pub struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// The two managed-tensor layouts (legacy and versioned), each with its capsule names.
pub trait Managed: Sized + 'static {
    /// The capsule's name, and its name once a consumer took the tensor.
    const NAME: &'static CStr;
    const USED: &'static CStr;
    fn new(dl: DLTensor, copied: bool) -> Self;
    fn set_ctx(&mut self, ctx: *mut c_void);
    fn tensor(&self) -> &DLTensor;
    fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)>;
    /// The DLPack version (major, minor) the producer wrote.
    fn version(&self) -> (u32, u32);
}

/// The accessors of [`Managed`] over the fields both layouts name alike.
macro_rules! managed_fields {
    () => {
        fn set_ctx(&mut self, ctx: *mut c_void) {
            self.manager_ctx = ctx;
        }
        fn tensor(&self) -> &DLTensor {
            &self.dl_tensor
        }
        fn deleter(&self) -> Option<unsafe extern "C" fn(*mut Self)> {
            self.deleter
        }
    };
}

impl Managed for DLManagedTensor {
    const NAME: &'static CStr = c"dltensor";
    const USED: &'static CStr = c"used_dltensor";
    fn new(dl_tensor: DLTensor, _copied: bool) -> Self {
        DLManagedTensor {
            dl_tensor,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export::<Self>),
        }
    }
    managed_fields!();
    fn version(&self) -> (u32, u32) {
        (0, 0)
    }
}

impl Managed for DLManagedTensorVersioned {
    const NAME: &'static CStr = c"dltensor_versioned";
    const USED: &'static CStr = c"used_dltensor_versioned";
    fn new(dl_tensor: DLTensor, copied: bool) -> Self {
        DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 1 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export::<Self>),
            flags: if copied { IS_COPIED } else { 0 },
            dl_tensor,
        }
    }
    managed_fields!();
    fn version(&self) -> (u32, u32) {
        (self.version.major, self.version.minor)
    }
}

/// What an export owns: the managed tensor (first, so a pointer to it is a pointer to the
/// whole), the shape and strides it points to, and a view of the gradstream tensor that
/// keeps the buffer alive and counted.
#[repr(C)]
pub struct Export<M> {
    managed: M,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Tensor,
}

/// The deleter of an export: frees the whole `Export` its managed tensor begins.
///
/// # Safety
/// `m` is null or the `managed` field of a live, boxed `Export<M>`.
pub unsafe extern "C" fn delete_export<M>(m: *mut M) {
    if !m.is_null() {
        drop(Box::from_raw(m.cast::<Export<M>>()));
    }
}

fn dl_dtype(dt: DType) -> DLDataType {
    let (code, bits) = match dt {
        DType::Bool => (BOOL, 8),
        DType::UInt8 => (UINT, 8),
        DType::Int32 => (INT, 32),
        DType::Int64 => (INT, 64),
        DType::Float16 => (FLOAT, 16),
        DType::BFloat16 => (BFLOAT, 16),
        DType::Float32 => (FLOAT, 32),
        DType::Float64 => (FLOAT, 64),
    };
    DLDataType {
        code,
        bits,
        lanes: 1,
    }
}

fn from_dl_dtype(d: DLDataType) -> Result<DType> {
    DType::ALL
        .into_iter()
        .find(|&dt| {
            let e = dl_dtype(dt);
            (e.code, e.bits, e.lanes) == (d.code, d.bits, d.lanes)
        })
        .ok_or_else(|| {
            Error::Buffer(format!(
                "from_dlpack: unsupported DLPack dtype (code {}, bits {}, lanes {}); gradstream \
                 has bool, uint8, int32, int64, float16, bfloat16, float32 and float64",
                d.code, d.bits, d.lanes
            ))
        })
}

/// DLPack's device of a candle device.
pub fn dl_device(device: &candle_core::Device) -> Result<(i32, i32)> {
    match device.location() {
        candle_core::DeviceLocation::Cpu => Ok((CPU, 0)),
        candle_core::DeviceLocation::Cuda { gpu_id } => Ok((CUDA, gpu_id as i32)),
        other => Err(Error::Buffer(format!(
            "__dlpack__: gradstream exports CPU and CUDA tensors, not {other:?}"
        ))),
    }
}

/// The address of a buffer's first element: a host pointer, or a CUDA device pointer.
fn storage_ptr(s: &Storage) -> Result<*mut c_void> {
    match s {
        Storage::Cpu(cpu) => Ok(buffer_ptr(cpu)),
        #[cfg(feature = "cuda")]
        Storage::Cuda(c) => Ok(crate::backend::cuda::device_ptr(c)? as *mut c_void),
        #[allow(unreachable_patterns)]
        _ => Err(Error::Buffer(
            "__dlpack__: gradstream exports CPU and CUDA tensors only".into(),
        )),
    }
}

/// The address of `t`'s first element: its buffer's, plus its offset.
pub fn data_ptr(t: &candle_core::Tensor) -> Result<usize> {
    let (s, l) = t.storage_and_layout();
    let base = storage_ptr(&s)? as usize;
    Ok(base + l.start_offset() * t.dtype().size_in_bytes())
}

/// The address of a CPU buffer's first element.
fn buffer_ptr(s: &CpuStorage) -> *mut c_void {
    let p: *const c_void = match s {
        CpuStorage::U8(v) => v.as_ptr().cast(),
        CpuStorage::U32(v) => v.as_ptr().cast(),
        CpuStorage::I16(v) => v.as_ptr().cast(),
        CpuStorage::I32(v) => v.as_ptr().cast(),
        CpuStorage::I64(v) => v.as_ptr().cast(),
        CpuStorage::BF16(v) => v.as_ptr().cast(),
        CpuStorage::F16(v) => v.as_ptr().cast(),
        CpuStorage::F32(v) => v.as_ptr().cast(),
        CpuStorage::F64(v) => v.as_ptr().cast(),
        CpuStorage::F8E4M3(v) => v.as_ptr().cast(),
        CpuStorage::F6E2M3(v) | CpuStorage::F6E3M2(v) | CpuStorage::F4(v) => v.as_ptr().cast(),
        CpuStorage::F8E8M0(v) => v.as_ptr().cast(),
    };
    p.cast_mut()
}

/// An export of `t`'s memory in place (its strided layout as is), or of a copy.
pub fn export<M: Managed>(t: &Tensor, copy: bool) -> Result<Box<Export<M>>> {
    let owner = if copy {
        crate::ops::convert::clone(t)?
    } else {
        t.detach()
    };
    let data = owner.data();
    let (device_type, device_id) = dl_device(data.device())?;
    if device_type == CUDA {
        // The consumer reads on a stream of its own: what gradstream queued must be done.
        crate::device::cuda::synchronize(device_id as usize)?;
    }
    let (storage, layout) = data.storage_and_layout();
    let ptr = storage_ptr(&storage)?;
    let mut shape: Vec<i64> = layout.dims().iter().map(|&d| d as i64).collect();
    let mut strides: Vec<i64> = layout.stride().iter().map(|&s| s as i64).collect();
    let dl = DLTensor {
        data: ptr,
        device: DLDevice {
            device_type,
            device_id,
        },
        ndim: shape.len() as i32,
        dtype: dl_dtype(owner.dtype()),
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: (layout.start_offset() * owner.dtype().size_in_bytes()) as u64,
    };
    drop(storage);
    let mut e = Box::new(Export {
        managed: M::new(dl, copy),
        shape,
        strides,
        _owner: owner,
    });
    let ctx = (&raw mut *e).cast();
    e.managed.set_ctx(ctx);
    Ok(e)
}

/// Whether strides describe compact row-major memory (size-1 dims may have any stride).
fn is_compact(dims: &[usize], strides: &[i64]) -> bool {
    let mut expect = 1i64;
    for (&d, &s) in dims.iter().zip(strides).rev() {
        if d != 1 && s != expect {
            return false;
        }
        expect *= d as i64;
    }
    true
}

/// A CPU tensor of `numel` elements of `T` that `fill` writes as raw bytes.
///
/// # Safety
/// `fill` must write all `numel * size_of::<T>()` bytes (every `T` here is plain data).
unsafe fn filled<T: candle_core::WithDType>(
    numel: usize,
    dims: &[usize],
    fill: impl FnOnce(*mut u8),
) -> candle_core::Result<candle_core::Tensor> {
    let mut v: Vec<T> = Vec::with_capacity(numel);
    fill(v.as_mut_ptr().cast());
    v.set_len(numel);
    crate::device::from_vec(v, dims, &candle_core::Device::Cpu)
}

/// Copy the elements a DLTensor describes into a new contiguous tensor.
///
/// # Safety
/// `dl` must describe live, readable memory (the producer's promise under DLPack).
pub unsafe fn copy_in(dl: &DLTensor) -> Result<Tensor> {
    if dl.device.device_type == CUDA {
        return copy_in_cuda(dl);
    }
    if dl.device.device_type != CPU && dl.device.device_type != CUDA_HOST {
        return Err(Error::Buffer(format!(
            "from_dlpack: gradstream reads CPU and CUDA memory only, got DLPack device type {} \
             (id {})",
            dl.device.device_type, dl.device.device_id
        )));
    }
    let dtype = from_dl_dtype(dl.dtype)?;
    let ndim = usize::try_from(dl.ndim)
        .map_err(|_| Error::Value(format!("from_dlpack: ndim {} < 0", dl.ndim)))?;
    if ndim > 0 && dl.shape.is_null() {
        return Err(Error::Buffer(format!(
            "from_dlpack: a {ndim}-d DLPack tensor without a shape"
        )));
    }
    let shape: &[i64] = if ndim == 0 {
        &[]
    } else {
        std::slice::from_raw_parts(dl.shape, ndim)
    };
    let dims = shape
        .iter()
        .map(|&d| usize::try_from(d))
        .collect::<std::result::Result<Vec<usize>, _>>()
        .map_err(|_| Error::Value(format!("from_dlpack: negative size in {shape:?}")))?;
    let numel: usize = dims.iter().product();
    let strides: Vec<i64> = if dl.strides.is_null() || ndim == 0 {
        let mut s = vec![1i64; ndim];
        for i in (0..ndim.saturating_sub(1)).rev() {
            s[i] = s[i + 1] * shape[i + 1];
        }
        s
    } else {
        std::slice::from_raw_parts(dl.strides, ndim).to_vec()
    };
    if numel > 0 && dl.data.is_null() {
        return Err(Error::Buffer(format!(
            "from_dlpack: a DLPack tensor of shape {dims:?} without data"
        )));
    }
    let itemsize = dtype.size_in_bytes();
    let base = dl
        .data
        .cast::<u8>()
        .cast_const()
        .wrapping_add(dl.byte_offset as usize);
    let fill = |dst: *mut u8| {
        if numel == 0 {
            return;
        }
        if is_compact(&dims, &strides) {
            std::ptr::copy_nonoverlapping(base, dst, numel * itemsize);
            return;
        }
        let mut index = vec![0usize; ndim];
        for k in 0..numel {
            let off: i64 = index
                .iter()
                .zip(&strides)
                .map(|(&i, &s)| i as i64 * s)
                .sum();
            let src = base.offset(off as isize * itemsize as isize);
            std::ptr::copy_nonoverlapping(src, dst.add(k * itemsize), itemsize);
            for d in (0..ndim).rev() {
                index[d] += 1;
                if index[d] < dims[d] {
                    break;
                }
                index[d] = 0;
            }
        }
    };
    let storage = match dtype {
        DType::Bool | DType::UInt8 => filled::<u8>(numel, &dims, fill),
        DType::Int32 => filled::<i32>(numel, &dims, fill),
        DType::Int64 => filled::<i64>(numel, &dims, fill),
        DType::Float16 => filled::<half::f16>(numel, &dims, fill),
        DType::BFloat16 => filled::<half::bf16>(numel, &dims, fill),
        DType::Float32 => filled::<f32>(numel, &dims, fill),
        DType::Float64 => filled::<f64>(numel, &dims, fill),
    }
    .op("from_dlpack")?;
    Ok(Tensor::new(storage, dtype))
}

/// Copy a compact CUDA DLTensor into a new tensor on the same device (a device-to-device
/// copy on gradstream's stream, after the device has finished the producer's work).
///
/// # Safety
/// `dl` must describe live device memory (the producer's promise under DLPack).
#[cfg(feature = "cuda")]
unsafe fn copy_in_cuda(dl: &DLTensor) -> Result<Tensor> {
    use candle_core::cuda_backend::cudarc::driver::result;

    let dtype = from_dl_dtype(dl.dtype)?;
    let ndim = usize::try_from(dl.ndim)
        .map_err(|_| Error::Value(format!("from_dlpack: ndim {} < 0", dl.ndim)))?;
    let shape: &[i64] = if ndim == 0 || dl.shape.is_null() {
        &[]
    } else {
        std::slice::from_raw_parts(dl.shape, ndim)
    };
    let dims: Vec<usize> = shape.iter().map(|&d| d.max(0) as usize).collect();
    if !dl.strides.is_null() && ndim > 0 {
        let strides = std::slice::from_raw_parts(dl.strides, ndim);
        if !is_compact(&dims, strides) {
            return Err(Error::Buffer(
                "from_dlpack: a strided CUDA tensor cannot be imported; pass a contiguous one"
                    .into(),
            ));
        }
    }
    let ordinal = usize::try_from(dl.device.device_id)
        .map_err(|_| Error::Value("from_dlpack: negative CUDA device id".into()))?;
    let device = crate::device::cuda::device(ordinal)?;
    // The producer's queued writes finish before the copy reads.
    crate::device::cuda::synchronize(ordinal)?;
    let out = crate::device::zeros(dims.as_slice(), dtype.candle(), &device).op("from_dlpack")?;
    let bytes = out.elem_count() * dtype.size_in_bytes();
    if bytes > 0 {
        let dst = crate::backend::cuda::launch::addr(&out)?;
        let src = (dl.data as u64) + dl.byte_offset;
        let candle_core::Device::Cuda(c) = &device else {
            unreachable!("a CUDA ordinal names a CUDA device")
        };
        let stream = c.cuda_stream();
        result::memcpy_dtod_async(dst.addr, src, bytes, stream.cu_stream())
            .map_err(|e| Error::runtime(format!("from_dlpack: CUDA copy: {e}")))?;
        stream
            .synchronize()
            .map_err(|e| Error::runtime(format!("from_dlpack: CUDA copy: {e}")))?;
    }
    Ok(Tensor::new(out, dtype))
}

#[cfg(not(feature = "cuda"))]
unsafe fn copy_in_cuda(dl: &DLTensor) -> Result<Tensor> {
    Err(Error::Buffer(format!(
        "from_dlpack: a CUDA tensor (device {}), but gradstream was built without CUDA",
        dl.device.device_id
    )))
}
