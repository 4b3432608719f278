//! DLPack: `Tensor.__dlpack__` / `__dlpack_device__` export a tensor's buffer without a
//! copy (NumPy, PyTorch, JAX then read and write gradstream's memory); `from_dlpack`
//! imports, and copies: a candle `CpuStorage` is a `Vec` that owns its allocation, so it
//! cannot adopt memory another library allocated and will free.
//!
//! The DLPack ABI (dlpack.h v1.1) is four `#[repr(C)]` structs, defined here rather than
//! taken from `dlpark`: its 0.10 release (the one on pyo3 0.30) needs Rust 1.88 (ours is
//! 1.85), its candle glue is for candle 0.11 (ours is 0.9.2), and an export must keep the
//! gradstream tensor alive (so the memory accounting stays exact), which its owners
//! do not do.

use std::ffi::{c_char, c_void, CStr};

use candle_core::{CpuStorage, Storage};
use pyo3::exceptions::{PyBufferError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::bindings::tensor::PyTensor;
use crate::bindings::{add_functions, Obj};
use crate::dtype::DType;
use crate::error::CandleContext;
use crate::tensor::Tensor;

const CPU: i32 = 1;
const CUDA_HOST: i32 = 3;

const INT: u8 = 0;
const UINT: u8 = 1;
const FLOAT: u8 = 2;
const BFLOAT: u8 = 4;
const BOOL: u8 = 6;

/// `flags` bit of a versioned tensor: the producer made a copy for this export.
const IS_COPIED: u64 = 2;

const DLTENSOR: &CStr = c"dltensor";
const USED_DLTENSOR: &CStr = c"used_dltensor";
const DLTENSOR_VERSIONED: &CStr = c"dltensor_versioned";
const USED_DLTENSOR_VERSIONED: &CStr = c"used_dltensor_versioned";

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDevice {
    device_type: i32,
    device_id: i32,
}

#[repr(C)]
#[derive(Clone, Copy)]
struct DLDataType {
    code: u8,
    bits: u8,
    lanes: u16,
}

#[repr(C)]
struct DLTensor {
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
struct DLManagedTensor {
    dl_tensor: DLTensor,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensor)>,
}

#[repr(C)]
struct DLPackVersion {
    major: u32,
    minor: u32,
}

#[repr(C)]
struct DLManagedTensorVersioned {
    version: DLPackVersion,
    manager_ctx: *mut c_void,
    deleter: Option<unsafe extern "C" fn(*mut DLManagedTensorVersioned)>,
    flags: u64,
    dl_tensor: DLTensor,
}

/// What an exported capsule owns: the managed tensor (first, so a pointer to it is a
/// pointer to the whole), the shape and strides it points to, and a view of the
/// gradstream tensor that keeps the buffer alive and counted.
#[repr(C)]
struct Export<M> {
    managed: M,
    shape: Vec<i64>,
    strides: Vec<i64>,
    _owner: Tensor,
}

unsafe extern "C" fn delete_export(m: *mut DLManagedTensor) {
    if !m.is_null() {
        drop(Box::from_raw(m.cast::<Export<DLManagedTensor>>()));
    }
}

unsafe extern "C" fn delete_export_versioned(m: *mut DLManagedTensorVersioned) {
    if !m.is_null() {
        drop(Box::from_raw(m.cast::<Export<DLManagedTensorVersioned>>()));
    }
}

/// A capsule nobody consumed still owns its tensor (the protocol: a consumer renames it).
unsafe extern "C" fn capsule_destructor(cap: *mut pyo3::ffi::PyObject) {
    if pyo3::ffi::PyCapsule_IsValid(cap, DLTENSOR.as_ptr()) == 1 {
        let m = pyo3::ffi::PyCapsule_GetPointer(cap, DLTENSOR.as_ptr());
        delete_export(m.cast());
    } else if pyo3::ffi::PyCapsule_IsValid(cap, DLTENSOR_VERSIONED.as_ptr()) == 1 {
        let m = pyo3::ffi::PyCapsule_GetPointer(cap, DLTENSOR_VERSIONED.as_ptr());
        delete_export_versioned(m.cast());
    }
    // PyCapsule_GetPointer sets an error only for a capsule of another name, excluded above.
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

fn from_dl_dtype(d: DLDataType) -> PyResult<DType> {
    Ok(match (d.code, d.bits, d.lanes) {
        (BOOL, 8, 1) => DType::Bool,
        (UINT, 8, 1) => DType::UInt8,
        (INT, 32, 1) => DType::Int32,
        (INT, 64, 1) => DType::Int64,
        (FLOAT, 16, 1) => DType::Float16,
        (BFLOAT, 16, 1) => DType::BFloat16,
        (FLOAT, 32, 1) => DType::Float32,
        (FLOAT, 64, 1) => DType::Float64,
        (code, bits, lanes) => {
            return Err(PyBufferError::new_err(format!(
                "from_dlpack: unsupported DLPack dtype (code {code}, bits {bits}, lanes \
                 {lanes}); gradstream has bool, uint8, int32, int64, float16, bfloat16, \
                 float32 and float64"
            )))
        }
    })
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

/// The fields of a DLTensor describing `t`'s memory in place (its strided layout as is).
fn describe(t: &Tensor) -> PyResult<(DLTensor, Vec<i64>, Vec<i64>)> {
    let data = t.data();
    let (storage, layout) = data.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return Err(PyBufferError::new_err(format!(
            "__dlpack__: only CPU tensors can be exported, got a tensor on {:?}",
            data.device().location()
        )));
    };
    let itemsize = t.dtype().size_in_bytes();
    let mut shape: Vec<i64> = layout.dims().iter().map(|&d| d as i64).collect();
    let mut strides: Vec<i64> = layout.stride().iter().map(|&s| s as i64).collect();
    let dl = DLTensor {
        data: buffer_ptr(cpu),
        device: DLDevice {
            device_type: CPU,
            device_id: 0,
        },
        ndim: shape.len() as i32,
        dtype: dl_dtype(t.dtype()),
        shape: shape.as_mut_ptr(),
        strides: strides.as_mut_ptr(),
        byte_offset: (layout.start_offset() * itemsize) as u64,
    };
    Ok((dl, shape, strides))
}

/// A capsule owning `export` (its pointer handed to the consumer).
fn capsule<M>(py: Python<'_>, export: Box<Export<M>>, name: &'static CStr) -> PyResult<Py<PyAny>> {
    let ptr = Box::into_raw(export);
    // SAFETY: `ptr` is a live Box the capsule now owns; `capsule_destructor` frees it
    // unless a consumer renamed the capsule (and took ownership) first.
    unsafe {
        let cap = pyo3::ffi::PyCapsule_New(ptr.cast(), name.as_ptr(), Some(capsule_destructor));
        if cap.is_null() {
            drop(Box::from_raw(ptr));
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, cap).unbind())
    }
}

/// A DLPack capsule over `t`'s memory: a versioned one (DLPack 1.x) when the consumer
/// accepts it, else the legacy `dltensor`.
pub fn export(py: Python<'_>, t: &Tensor, versioned: bool, copy: bool) -> PyResult<Py<PyAny>> {
    let owner = if copy {
        crate::ops::convert::clone(t)?
    } else {
        t.detach()
    };
    let (dl, shape, strides) = describe(&owner)?;
    if versioned {
        let managed = DLManagedTensorVersioned {
            version: DLPackVersion { major: 1, minor: 1 },
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export_versioned),
            flags: if copy { IS_COPIED } else { 0 },
            dl_tensor: dl,
        };
        let mut e = Box::new(Export {
            managed,
            shape,
            strides,
            _owner: owner,
        });
        e.managed.manager_ctx = (&raw mut *e).cast();
        capsule(py, e, DLTENSOR_VERSIONED)
    } else {
        let managed = DLManagedTensor {
            dl_tensor: dl,
            manager_ctx: std::ptr::null_mut(),
            deleter: Some(delete_export),
        };
        let mut e = Box::new(Export {
            managed,
            shape,
            strides,
            _owner: owner,
        });
        e.managed.manager_ctx = (&raw mut *e).cast();
        capsule(py, e, DLTENSOR)
    }
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
    candle_core::Tensor::from_vec(v, dims, &candle_core::Device::Cpu)
}

/// Copy the elements a DLTensor describes into a new contiguous tensor.
///
/// # Safety
/// `dl` must describe live, readable memory (the producer's promise under DLPack).
unsafe fn copy_in(dl: &DLTensor) -> PyResult<Tensor> {
    if dl.device.device_type != CPU && dl.device.device_type != CUDA_HOST {
        return Err(PyBufferError::new_err(format!(
            "from_dlpack: gradstream reads CPU memory only, got DLPack device type {} (id {})",
            dl.device.device_type, dl.device.device_id
        )));
    }
    let dtype = from_dl_dtype(dl.dtype)?;
    let ndim = usize::try_from(dl.ndim)
        .map_err(|_| PyValueError::new_err(format!("from_dlpack: ndim {} < 0", dl.ndim)))?;
    if ndim > 0 && dl.shape.is_null() {
        return Err(PyBufferError::new_err(format!(
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
        .collect::<Result<Vec<usize>, _>>()
        .map_err(|_| PyValueError::new_err(format!("from_dlpack: negative size in {shape:?}")))?;
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
        return Err(PyBufferError::new_err(format!(
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

/// Take the managed tensor out of a capsule (renaming it, as the protocol asks), copy it,
/// and hand it back to its producer's deleter.
fn import_capsule(cap: &Obj<'_>) -> PyResult<Tensor> {
    let ptr = cap.as_ptr();
    // SAFETY: the name checks make sure the pointer is of the kind the name says; the
    // producer keeps the memory alive until its deleter runs, which happens after the copy.
    unsafe {
        if pyo3::ffi::PyCapsule_IsValid(ptr, DLTENSOR_VERSIONED.as_ptr()) == 1 {
            let m = pyo3::ffi::PyCapsule_GetPointer(ptr, DLTENSOR_VERSIONED.as_ptr())
                .cast::<DLManagedTensorVersioned>();
            if m.is_null() {
                return Err(PyErr::fetch(cap.py()));
            }
            if (*m).version.major > 1 {
                return Err(PyBufferError::new_err(format!(
                    "from_dlpack: DLPack version {}.{} is newer than gradstream reads (1.x)",
                    (*m).version.major,
                    (*m).version.minor
                )));
            }
            pyo3::ffi::PyCapsule_SetName(ptr, USED_DLTENSOR_VERSIONED.as_ptr());
            let out = copy_in(&(*m).dl_tensor);
            if let Some(del) = (*m).deleter {
                del(m);
            }
            out
        } else if pyo3::ffi::PyCapsule_IsValid(ptr, DLTENSOR.as_ptr()) == 1 {
            let m =
                pyo3::ffi::PyCapsule_GetPointer(ptr, DLTENSOR.as_ptr()).cast::<DLManagedTensor>();
            if m.is_null() {
                return Err(PyErr::fetch(cap.py()));
            }
            pyo3::ffi::PyCapsule_SetName(ptr, USED_DLTENSOR.as_ptr());
            let out = copy_in(&(*m).dl_tensor);
            if let Some(del) = (*m).deleter {
                del(m);
            }
            out
        } else {
            let name = pyo3::ffi::PyCapsule_GetName(ptr);
            pyo3::ffi::PyErr_Clear();
            let name = if name.is_null() {
                "None".to_string()
            } else {
                CStr::from_ptr(name as *const c_char)
                    .to_string_lossy()
                    .into_owned()
            };
            Err(PyValueError::new_err(format!(
                "from_dlpack: expected a capsule named 'dltensor' or 'dltensor_versioned' \
                 that was not consumed yet, got one named '{name}'"
            )))
        }
    }
}

/// `from_dlpack(ext_tensor)`: a tensor holding a copy of an object's data, taken through
/// DLPack (`__dlpack__`, or a DLPack capsule). The result is a leaf that does not
/// require grad, as in PyTorch; unlike PyTorch, it does not share the producer's memory.
#[pyfunction]
fn from_dlpack(ext_tensor: &Obj<'_>) -> PyResult<Tensor> {
    let py = ext_tensor.py();
    if let Ok(t) = ext_tensor.cast::<PyTensor>() {
        return Ok(t.get().t.detach());
    }
    let cap = if ext_tensor.hasattr("__dlpack__")? {
        let kwargs = pyo3::types::PyDict::new(py);
        kwargs.set_item("max_version", (1, 1))?;
        match ext_tensor.call_method("__dlpack__", (), Some(&kwargs)) {
            Ok(c) => c,
            Err(e) if e.is_instance_of::<PyTypeError>(py) => {
                ext_tensor.call_method0("__dlpack__")?
            }
            Err(e) => return Err(e),
        }
    } else if ext_tensor.is_instance_of::<pyo3::types::PyCapsule>() {
        ext_tensor.clone()
    } else {
        return Err(PyTypeError::new_err(format!(
            "from_dlpack: expected an object with __dlpack__ or a DLPack capsule, got {}",
            ext_tensor.get_type().name()?
        )));
    };
    import_capsule(&cap)
}

#[pymethods]
impl PyTensor {
    /// `__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)`: a DLPack
    /// capsule over this tensor's memory, shared without a copy (strided views included).
    /// Raises BufferError for a tensor that requires grad, as PyTorch does.
    #[pyo3(signature = (*, stream=None, max_version=None, dl_device=None, copy=None))]
    fn __dlpack__(
        &self,
        py: Python<'_>,
        stream: Option<&Obj<'_>>,
        max_version: Option<(u32, u32)>,
        dl_device: Option<(i32, i32)>,
        copy: Option<bool>,
    ) -> PyResult<Py<PyAny>> {
        if self.t.requires_grad() {
            return Err(PyBufferError::new_err(
                "Can't export tensors that require gradient, use tensor.detach()",
            ));
        }
        if let Some(s) = stream {
            if !s.is_none() && s.extract::<i64>().ok() != Some(-1) {
                return Err(PyValueError::new_err(format!(
                    "__dlpack__: stream must be None or -1 for a CPU tensor, got {s}"
                )));
            }
        }
        if let Some((ty, id)) = dl_device {
            if ty != CPU {
                return Err(PyBufferError::new_err(format!(
                    "__dlpack__: gradstream exports CPU tensors only, dl_device=({ty}, {id}) asked"
                )));
            }
        }
        let versioned = max_version.is_some_and(|(major, _)| major >= 1);
        export(py, &self.t, versioned, copy == Some(true))
    }

    /// `__dlpack_device__()`: `(device_type, device_id)` as DLPack numbers them (CPU: `(1, 0)`).
    fn __dlpack_device__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        if !self.t.data().device().is_cpu() {
            return Err(PyBufferError::new_err(
                "__dlpack_device__: gradstream exports CPU tensors only",
            ));
        }
        PyTuple::new(py, [CPU, 0])
    }
}

/// `utils.dlpack.to_dlpack(tensor)`: the legacy capsule, as `torch.utils.dlpack.to_dlpack`
/// (which, unlike `__dlpack__`, exports a tensor that requires grad: its data only).
#[pyfunction]
fn to_dlpack(py: Python<'_>, tensor: &Obj<'_>) -> PyResult<Py<PyAny>> {
    let t = crate::bindings::convert::extract_tensor("to_dlpack", "tensor", tensor)?;
    export(py, &t, false, false)
}

pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    add_functions!(m, from_dlpack, to_dlpack);
    Ok(())
}
