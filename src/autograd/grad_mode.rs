//! Grad mode (`no_grad`, `enable_grad`, `set_grad_enabled`), per thread as in PyTorch.

use std::cell::Cell;

thread_local! {
    static ENABLED: Cell<bool> = const { Cell::new(true) };
}

pub fn is_enabled() -> bool {
    ENABLED.with(|e| e.get())
}

pub fn set_enabled(enabled: bool) {
    ENABLED.with(|e| e.set(enabled))
}

/// Sets grad mode for a scope and restores the previous mode when dropped.
pub struct GradModeGuard {
    prev: bool,
}

impl GradModeGuard {
    pub fn new(enabled: bool) -> Self {
        let prev = is_enabled();
        set_enabled(enabled);
        GradModeGuard { prev }
    }
}

impl Drop for GradModeGuard {
    fn drop(&mut self) {
        set_enabled(self.prev)
    }
}
