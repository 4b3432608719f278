//! Launching gradstream's own kernels: on a CUDA device through cudarc, or, for a CPU
//! tensor under the emulator (`cuda-emulator`), through the CPU emulation of the same
//! kernel source. The host code of a kernel (its arguments, its grid) is written once
//! against [`launch`] and [`addr`], so the tests run it with the kernel, without a GPU.
//!
//! Arguments are passed as cuLaunchKernel passes them, one value per kernel parameter: an
//! [`Arg`] must have exactly the type of its parameter (`Ptr` for any `T*`, `I64` for
//! `long long`/`int64_t`, `F32` for `float`...).

use candle_core::{Device, Storage};

use crate::error::{Error, Result};

/// One kernel argument.
#[derive(Clone, Copy, Debug)]
pub enum Arg {
    /// An address: a device pointer, or under the emulator a host pointer.
    Ptr(u64),
    I32(i32),
    U32(u32),
    I64(i64),
    F32(f32),
    F64(f64),
}

/// A kernel of a module (a `.cu` file): its PTX and its exported name.
#[derive(Clone, Copy, Debug)]
pub struct Kernel {
    /// The module's name and PTX (empty in a build without `cuda`).
    pub module: &'static super::ptx::Module,
    pub name: &'static str,
}

/// Blocks, threads per block and dynamic shared bytes of a launch.
#[derive(Clone, Copy, Debug)]
pub struct Grid {
    pub blocks: (u32, u32, u32),
    pub threads: (u32, u32, u32),
    pub shared: u32,
}

impl Grid {
    /// A one-dimensional grid of `threads`-thread blocks covering `n` elements with a
    /// grid-stride loop, capped so a launch never asks for more blocks than keep a device busy.
    pub fn elementwise(n: usize, threads: u32) -> Grid {
        let blocks = n.div_ceil(threads as usize).clamp(1, 65535) as u32;
        Grid {
            blocks: (blocks, 1, 1),
            threads: (threads, 1, 1),
            shared: 0,
        }
    }

    /// One block of `threads` per row, `rows` of them (in x up to 2^31 - 1).
    pub fn rows(rows: usize, threads: u32, shared: u32) -> Grid {
        Grid {
            blocks: (rows.clamp(1, i32::MAX as usize) as u32, 1, 1),
            threads: (threads, 1, 1),
            shared,
        }
    }
}

/// The address of a tensor's first element (its layout's start): the device pointer of a
/// CUDA tensor, or the host pointer of a CPU one under the emulator. The storage is kept
/// read-locked while the address is held, so nothing frees or moves it during a launch;
/// kernels write through it as candle's own kernels write through a storage they read.
pub struct Addr<'a> {
    pub addr: u64,
    _guard: std::sync::RwLockReadGuard<'a, Storage>,
}

/// The address of `t`'s first element (see [`Addr`]).
pub fn addr(t: &candle_core::Tensor) -> Result<Addr<'_>> {
    let (guard, layout) = t.storage_and_layout();
    let elem = t.dtype().size_in_bytes() as u64;
    let offset = layout.start_offset() as u64 * elem;
    let base = match &*guard {
        Storage::Cpu(s) => crate::backend::cpu::dense::buffer(s).0 as u64,
        #[cfg(feature = "cuda")]
        Storage::Cuda(s) => super::device_ptr(s)?,
        #[allow(unreachable_patterns)]
        _ => {
            return Err(Error::runtime(
                "kernel launch: a tensor on an unsupported device",
            ))
        }
    };
    Ok(Addr {
        addr: base + offset,
        _guard: guard,
    })
}

/// The addresses of several operands' first elements, with one read guard per buffer: a
/// second read guard on one lock can deadlock behind a writer, and operands of one buffer
/// (`x * x`, `where(c, x, x.t())`) differ only in their start.
pub fn addrs<'a>(ts: &[&'a candle_core::Tensor]) -> Result<(Vec<Addr<'a>>, Vec<u64>)> {
    let ids: Vec<usize> = ts
        .iter()
        .map(|t| crate::backend::buffer::buffer_id(t))
        .collect();
    let mut guards: Vec<(usize, Addr<'a>)> = Vec::new();
    let mut out = Vec::with_capacity(ts.len());
    for (i, t) in ts.iter().enumerate() {
        let elem = t.dtype().size_in_bytes() as u64;
        let start = t.layout().start_offset() as u64 * elem;
        match guards.iter().find(|(j, _)| ids[*j] == ids[i]) {
            Some((j, g)) => out.push(g.addr - ts[*j].layout().start_offset() as u64 * elem + start),
            None => {
                let g = addr(t)?;
                out.push(g.addr);
                guards.push((i, g));
            }
        }
    }
    Ok((guards.into_iter().map(|(_, g)| g).collect(), out))
}

/// The layout of `t` as a kernel walks it: an int64 table `[dims..., strides...]` (in
/// elements) on `t`'s device, and the rank. A kernel finds element `i` (row-major) at
/// `gs::strided_offset(i, rank, table)` from `addr(t)`. A dense tensor needs none: pass
/// its address and index it directly.
pub fn layout_table(t: &candle_core::Tensor) -> Result<(candle_core::Tensor, i32)> {
    let l = t.layout();
    let v: Vec<i64> = l
        .dims()
        .iter()
        .chain(l.stride())
        .map(|&d| d as i64)
        .collect();
    // A 0-d tensor gets one (unused) entry: candle makes no empty device buffers.
    let v = if v.is_empty() { vec![0] } else { v };
    let n = v.len();
    let table = crate::device::from_vec(v, n, t.device()).map_err(|e| Error::Candle {
        op: "layout",
        source: e,
    })?;
    Ok((table, l.dims().len() as i32))
}

/// Launch `kernel` on `grid` with `args`, on `device` (a CUDA device, or the CPU for the
/// emulator). Queued on the device's stream: it returns before the kernel has run.
pub fn launch(device: &Device, kernel: Kernel, grid: Grid, args: &[Arg]) -> Result<()> {
    if grid.blocks.0 == 0 || grid.threads.0 == 0 {
        return Ok(());
    }
    match device {
        #[cfg(feature = "cuda")]
        Device::Cuda(d) => super::real::launch(d, kernel, grid, args),
        #[cfg(feature = "cuda-emulator")]
        Device::Cpu => super::emulator::launch(kernel, grid, args),
        _ => Err(Error::NotImplemented(format!(
            "{}: gradstream's CUDA kernels do not run on device '{}'",
            kernel.name,
            crate::device::name(device)
        ))),
    }
}
