//! Launches on the CPU emulator of the CUDA execution model (`kernels/emulator.h`): the
//! same kernel source, compiled by the host compiler with `GS_EMULATE`, run on host memory.
//! It runs the launch to its end before returning.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};

use super::launch::{Arg, Grid, Kernel};
use crate::error::{Error, Result};

unsafe extern "C" {
    fn gs_emu_launch(
        name: *const c_char,
        gx: c_uint,
        gy: c_uint,
        gz: c_uint,
        bx: c_uint,
        by: c_uint,
        bz: c_uint,
        shared_bytes: c_uint,
        params: *mut *mut c_void,
    ) -> c_int;
    fn gs_emu_last_error() -> *const c_char;
}

/// Run `kernel` on the emulator, over host memory.
pub fn launch(kernel: Kernel, grid: Grid, args: &[Arg]) -> Result<()> {
    let name = CString::new(kernel.name).map_err(|e| Error::runtime(e.to_string()))?;
    // One slot per parameter, holding its value; the emulator reads each through a pointer,
    // as cuLaunchKernel does.
    let mut values: Vec<Arg> = args.to_vec();
    let mut params: Vec<*mut c_void> = values
        .iter_mut()
        .map(|a| match a {
            Arg::Ptr(v) => v as *mut u64 as *mut c_void,
            Arg::I32(v) => v as *mut i32 as *mut c_void,
            Arg::U32(v) => v as *mut u32 as *mut c_void,
            Arg::I64(v) => v as *mut i64 as *mut c_void,
            Arg::F32(v) => v as *mut f32 as *mut c_void,
            Arg::F64(v) => v as *mut f64 as *mut c_void,
        })
        .collect();
    let (b, t) = (grid.blocks, grid.threads);
    // Every pointer argument addresses host memory that its `Addr` keeps alive.
    let rc = unsafe {
        gs_emu_launch(
            name.as_ptr(),
            b.0,
            b.1,
            b.2,
            t.0,
            t.1,
            t.2,
            grid.shared,
            params.as_mut_ptr(),
        )
    };
    if rc != 0 {
        let why = unsafe { CStr::from_ptr(gs_emu_last_error()) };
        return Err(Error::runtime(format!(
            "{} (emulated): {}",
            kernel.name,
            why.to_string_lossy()
        )));
    }
    Ok(())
}
