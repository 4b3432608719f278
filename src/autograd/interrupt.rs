//! Ctrl-C during backward, seen without the GIL.
//!
//! A process-wide SIGINT handler, installed at the first backward, sets a flag and then
//! calls the handler it replaced (Python's), so the interpreter records the signal as
//! usual. The engine reads the flag between nodes; only when it is set does it attach
//! and let Python run its handler (`KeyboardInterrupt`).
//!
//! Where the handler cannot be ours (SIGINT is not handled by a function, another handler
//! was installed over ours with `signal.signal`, or the platform is not Unix), the engine
//! checks with Python between every node, as it did before the flag existed.

use std::sync::atomic::{AtomicBool, Ordering};

static SIGINT_SEEN: AtomicBool = AtomicBool::new(false);

/// How this backward notices Ctrl-C.
#[derive(Clone, Copy)]
pub enum Watch {
    /// Our handler is in place: read the flag.
    Flag,
    /// Ask Python between every node.
    EveryNode,
}

impl Watch {
    /// Whether to ask Python now. Clears the flag, since Python is about to be asked.
    pub fn pending(self) -> bool {
        match self {
            Watch::Flag => {
                SIGINT_SEEN.load(Ordering::Relaxed) && SIGINT_SEEN.swap(false, Ordering::Relaxed)
            }
            Watch::EveryNode => true,
        }
    }
}

/// Install the handler once, and say how this backward can see Ctrl-C.
#[cfg(unix)]
pub fn watch() -> Watch {
    use std::sync::OnceLock;
    static OURS: OnceLock<Option<libc::sighandler_t>> = OnceLock::new();
    let ours = *OURS.get_or_init(unix::install);
    match ours {
        Some(h) if unix::current() == Some(h) => Watch::Flag,
        _ => Watch::EveryNode,
    }
}

#[cfg(not(unix))]
pub fn watch() -> Watch {
    Watch::EveryNode
}

#[cfg(unix)]
mod unix {
    use std::mem::MaybeUninit;
    use std::ptr;

    use super::SIGINT_SEEN;

    fn action() -> Option<libc::sigaction> {
        let mut old = MaybeUninit::<libc::sigaction>::zeroed();
        // SAFETY: a null new action only reads the current one into `old`.
        let rc = unsafe { libc::sigaction(libc::SIGINT, ptr::null(), old.as_mut_ptr()) };
        // SAFETY: sigaction filled it (and it was zeroed before).
        (rc == 0).then(|| unsafe { old.assume_init() })
    }

    /// The handler SIGINT runs now, when it is a function.
    pub fn current() -> Option<libc::sighandler_t> {
        action()
            .map(|a| a.sa_sigaction)
            .filter(|&h| h != libc::SIG_DFL && h != libc::SIG_IGN)
    }

    /// Put our handler in front of the current one; `None` (nothing installed) unless
    /// SIGINT is handled by a function: over SIG_DFL or SIG_IGN the chain would swallow
    /// Ctrl-C, which must still kill or be ignored.
    pub fn install() -> Option<libc::sighandler_t> {
        let previous = action()?;
        current()?;
        signal_hook::flag::register(libc::SIGINT, &SIGINT_SEEN).ok()?;
        // signal-hook installs with SA_RESTART. Python's handler has none: a blocking read
        // (`input()`, a lock, `wait`) must return EINTR so Python runs its handler at once.
        // Keep signal-hook's handler and mask, with the flags Python chose.
        let mut ours = action()?;
        ours.sa_flags = libc::SA_SIGINFO | (previous.sa_flags & libc::SA_ONSTACK);
        // SAFETY: re-installs the handler that is already there, with other flags.
        let rc = unsafe { libc::sigaction(libc::SIGINT, &ours, ptr::null_mut()) };
        (rc == 0).then_some(ours.sa_sigaction)
    }
}
