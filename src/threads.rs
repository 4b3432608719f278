//! The kernels' thread pool: its size (`set_num_threads`), and a forked child's.
//!
//! The CPU kernels run on rayon's global pool, whose size is fixed when it starts (at the
//! first parallel kernel, or at `set_num_threads` before one).
//!
//! `fork` copies only the calling thread: in the child, rayon's global pool still lists its
//! workers, but they do not exist, and the first parallel kernel would wait for them
//! forever (a DataLoader worker, forked as PyTorch forks them on Linux, hung so). The
//! child's forking thread is made worker 0 of a new one-thread pool instead
//! (`use_current_thread`), so its kernels run inline, as PyTorch's DataLoader workers run
//! with one intra-op thread.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Once;

use crate::error::{Error, Result};

/// Register the child handler with `pthread_atfork`, once per process.
pub fn install_handler() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: registers a handler with no prepare or parent part; the handler is a plain
        // function that lives as long as the program.
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
}

extern "C" fn in_child() {
    // A thread already in a pool (a child's child: the one-thread pool made in its parent,
    // whose only worker is this thread) keeps it; that pool still works.
    if rayon::current_thread_index().is_some() {
        return;
    }
    if let Ok(pool) = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .use_current_thread()
        .build()
    {
        // The pool lives as long as the process: this thread is its worker from now on.
        std::mem::forget(pool);
    }
}

/// `set_num_threads(n)`: the size of the pool, when it has not started yet. Once it has,
/// rayon cannot resize it: the size it has is kept and `Ok(false)` says so (the caller
/// warns), where PyTorch would resize its pool.
pub fn set_num_threads(n: i64) -> Result<bool> {
    if n <= 0 {
        return Err(Error::runtime("set_num_threads expects a positive integer"));
    }
    let n = n as usize;
    // Asking the size first would start the pool at its default size.
    let started = rayon::ThreadPoolBuilder::new()
        .num_threads(n)
        .build_global()
        .is_ok();
    if started {
        THREADS.store(n, Ordering::Relaxed);
    }
    Ok(started || get_num_threads() == n)
}

/// The size `set_num_threads` gave the pool (0: not set).
static THREADS: AtomicUsize = AtomicUsize::new(0);

/// `get_num_threads()`: the threads the kernels run on, without starting the pool (a later
/// `set_num_threads` still sizes it).
pub fn get_num_threads() -> usize {
    if rayon::current_thread_index().is_some() {
        // a worker, or a forked child's thread: its pool's size
        return rayon::current_num_threads();
    }
    match THREADS.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}

/// The size rayon gives its pool when nothing sets it: RAYON_NUM_THREADS, else the CPUs
/// this process may run on.
fn default_threads() -> usize {
    std::env::var("RAYON_NUM_THREADS")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0)
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

static INTEROP_THREADS: AtomicUsize = AtomicUsize::new(0);

/// `set_num_interop_threads(n)`: recorded only; gradstream runs no inter-op pool (each op
/// runs on the calling thread, its kernels on the pool).
pub fn set_num_interop_threads(n: i64) -> Result<()> {
    if n <= 0 {
        return Err(Error::runtime(
            "set_num_interop_threads expects a positive integer",
        ));
    }
    INTEROP_THREADS.store(n as usize, Ordering::Relaxed);
    Ok(())
}

/// `get_num_interop_threads()`: as set, else the CPUs (PyTorch's default too).
pub fn get_num_interop_threads() -> usize {
    match INTEROP_THREADS.load(Ordering::Relaxed) {
        0 => default_threads(),
        n => n,
    }
}
