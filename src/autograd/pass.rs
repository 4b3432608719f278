//! Which backward pass is running: each outermost backward on a thread gets a new
//! process-wide number. A backward started from inside another (a hook, a checkpointed
//! region recomputed) belongs to the outer pass. The in-backward optimizer records the
//! pass a parameter was stepped in, so after a pass that raised it can say which
//! parameters it stepped.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};

static PASSES: AtomicU64 = AtomicU64::new(0);

thread_local! {
    /// The pass this thread runs or ran last (0: none yet).
    static LATEST: Cell<u64> = const { Cell::new(0) };
    static DEPTH: Cell<usize> = const { Cell::new(0) };
}

/// The pass this thread is running, or the last one it ran.
pub fn latest() -> u64 {
    LATEST.with(Cell::get)
}

/// Held for the duration of one backward; the outermost one starts a new pass.
pub struct PassGuard;

impl PassGuard {
    pub fn enter() -> Self {
        if DEPTH.with(|d| d.replace(d.get() + 1)) == 0 {
            let n = PASSES.fetch_add(1, Ordering::Relaxed) + 1;
            LATEST.with(|l| l.set(n));
        }
        PassGuard
    }
}

impl Drop for PassGuard {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}
