//! Whether a tensor of a user-given size can be had, asked before it is made.
//!
//! Rust aborts the process when an allocation fails, and that cannot be caught, so a size
//! from user input (`zeros(10**11)`, `x.repeat(10**6, 10**6)`) is checked first and refused
//! with `OutOfMemoryError`, which leaves the interpreter running, as PyTorch's
//! allocator raises instead of dying.

use crate::error::{Error, Result};

/// Requests from this size on are probed; smaller ones are left to the allocator.
const PROBE_FROM: usize = 256 << 20;

/// `Ok` when a tensor of `dims` with `elem_size`-byte elements can be allocated now (on the
/// host; a GPU's own allocator reports its failures as errors already); otherwise
/// `OutOfMemoryError` naming `op` and the bytes asked for.
pub fn ensure(op: &str, dims: &[usize], elem_size: usize) -> Result<()> {
    let bytes = dims
        .iter()
        .try_fold(elem_size, |acc, &d| acc.checked_mul(d))
        .filter(|&b| b <= isize::MAX as usize)
        .ok_or_else(|| {
            Error::OutOfMemory(format!(
                "{op}: a tensor of shape {dims:?} is larger than any memory can hold"
            ))
        })?;
    if bytes < PROBE_FROM || can_map(bytes) {
        return Ok(());
    }
    Err(Error::OutOfMemory(format!(
        "{op}: not enough memory: you tried to allocate {bytes} bytes ({:.2} GiB)",
        bytes as f64 / (1u64 << 30) as f64
    )))
}

/// Whether the system grants `bytes` of fresh memory now. Past RAM and swap together, or
/// past this process's cgroup limit, never (a tensor is written whole, so overcommit would
/// only defer the failure to the OOM killer). Otherwise a private writable mapping of that
/// size is made and given back at once with no page touched: under Linux's default
/// (heuristic) overcommit the system refuses it here as it would refuse the tensor.
fn can_map(bytes: usize) -> bool {
    let bytes_u64 = bytes as u64;
    if cgroup_limit().is_some_and(|limit| bytes_u64 > limit)
        || ram_and_swap().is_some_and(|total| bytes_u64 > total)
    {
        return false;
    }
    // SAFETY: a new anonymous mapping nobody else knows, unmapped before returning.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            bytes,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return false;
        }
        libc::munmap(p, bytes);
    }
    true
}

/// The machine's RAM and swap, in bytes.
fn ram_and_swap() -> Option<u64> {
    // SAFETY: sysinfo writes the struct it is given, nothing else.
    let info = unsafe {
        let mut info: libc::sysinfo = std::mem::zeroed();
        if libc::sysinfo(&mut info) != 0 {
            return None;
        }
        info
    };
    let unit = u64::from(info.mem_unit.max(1));
    Some(
        (info.totalram as u64)
            .saturating_add(info.totalswap as u64)
            .saturating_mul(unit),
    )
}

/// The memory limit of this process's cgroup (v2), if it has one.
fn cgroup_limit() -> Option<u64> {
    static LIMIT: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *LIMIT.get_or_init(|| {
        std::fs::read_to_string("/sys/fs/cgroup/memory.max")
            .ok()?
            .trim()
            .parse()
            .ok()
    })
}
