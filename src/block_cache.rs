//! A cache of freed large buffers, like PyTorch's caching allocators but for the CPU.
//!
//! Why: a large allocation is a fresh mapping from the system (glibc maps everything past its
//! mmap threshold, at most 32 MiB, and the bench sets 64 KiB for every system), so every page
//! of every large tensor faults in again each step, zero-filled by the kernel. On the NeRF
//! step that was about 590,000 faults a step, and `y = x * 2` on 64 MiB took 7× as long on a
//! fresh buffer as on a reused one (`benches/block_cache.py`). A training step frees and
//! allocates the same sizes step after step, so freed blocks are kept and handed out again.
//!
//! A request with no cached block of its size takes the smallest cached block up to twice its
//! size (the rest of that block stays idle until it is freed: "slack"); failing that, cached
//! blocks (oldest first) are given back to the system until as many bytes as requested are
//! released, before the new block is mapped. So bytes held (live + cached + slack) only grow
//! when the cache is empty, but the slack itself can raise the peak footprint above the
//! cache-less one: on the cnn bench, whose buffers halve and double layer by layer, RSS peaks
//! at 217 MiB with the cache against 194 MiB without it (mlp and nerf: within 1%). Best fit
//! matters all the same: with exact sizes only, the releases cascaded and half the NeRF step's
//! requests missed.
//!
//! Each large block starts with a 64-byte header holding its size, so a free needs no lookup,
//! and the cache's lock is only ever `try_lock`ed: a request that finds it busy (another
//! thread, or a child forked while a thread held it) goes straight to the system allocator,
//! so the allocator cannot deadlock. Blocks are 64-byte aligned and serve any alignment up
//! to 64; larger alignments bypass the cache.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

/// Blocks smaller than this go straight to the system allocator (whose own bins serve them).
pub const MIN_BYTES: usize = 256 << 10;
const ALIGN: usize = 64;
/// Room before the data for the block's size; keeps the data `ALIGN`-aligned.
const HEADER: usize = ALIGN;
/// Free blocks the cache holds at most; past it the oldest is given back.
const SLOTS: usize = 256;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
static SLACK_BYTES: AtomicUsize = AtomicUsize::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);

/// Free blocks, oldest first: `(size, base address)`.
struct Free {
    blocks: [(usize, usize); SLOTS],
    len: usize,
}

static FREE: Mutex<Free> = Mutex::new(Free {
    blocks: [(0, 0); SLOTS],
    len: 0,
});

impl Free {
    /// The base of a cached block of `size` bytes, or else of the smallest of at most twice
    /// that, with its size.
    fn take(&mut self, size: usize) -> Option<(usize, usize)> {
        let cached = &self.blocks[..self.len];
        let i = match cached.iter().rposition(|b| b.0 == size) {
            Some(i) => i,
            None => {
                cached
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.0 > size && b.0 / 2 <= size)
                    .min_by_key(|(_, b)| b.0)?
                    .0
            }
        };
        Some(self.remove(i))
    }

    fn remove(&mut self, i: usize) -> (usize, usize) {
        let b = self.blocks[i];
        self.blocks.copy_within(i + 1..self.len, i);
        self.len -= 1;
        CACHED_BYTES.fetch_sub(b.0, Ordering::Relaxed);
        b
    }

    fn push(&mut self, size: usize, base: usize) {
        if self.len == SLOTS {
            // SAFETY: cached blocks are the system's, made by `map`.
            unsafe { self.release(1) };
        }
        self.blocks[self.len] = (size, base);
        self.len += 1;
        CACHED_BYTES.fetch_add(size, Ordering::Relaxed);
    }

    /// Give the oldest blocks back to the system until `bytes` are released (or none is left).
    unsafe fn release(&mut self, bytes: usize) {
        let mut released = 0;
        while released < bytes && self.len > 0 {
            let (size, base) = self.remove(0);
            unmap(base, size);
            released += size;
        }
    }
}

fn block_layout(size: usize) -> Layout {
    // SAFETY: ALIGN is a power of two, and `size` came from a valid `Layout` whose size,
    // rounded up to its alignment (at most ALIGN), fits `isize` with room for the header.
    unsafe { Layout::from_size_align_unchecked(size + HEADER, ALIGN) }
}

/// A new block of `size` data bytes from the system: its data pointer, or null.
unsafe fn map(size: usize, zeroed: bool) -> *mut u8 {
    let base = if zeroed {
        System.alloc_zeroed(block_layout(size))
    } else {
        System.alloc(block_layout(size))
    };
    if base.is_null() {
        return base;
    }
    (base as *mut usize).write(size);
    base.add(HEADER)
}

unsafe fn unmap(base: usize, size: usize) {
    System.dealloc(base as *mut u8, block_layout(size))
}

/// Blocks of this layout have a header, cache on or off, so any of them can be freed into
/// the cache.
fn large(layout: Layout) -> bool {
    layout.size() >= MIN_BYTES && layout.align() <= ALIGN
}

/// Turn the cache on or off; turning it off gives every cached block back.
pub fn set_enabled(on: bool) {
    ENABLED.store(on, Ordering::Relaxed);
    if !on {
        empty();
    }
}

pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// Give every cached block back to the system (`gradstream.memory.empty_cache()`).
pub fn empty() {
    let mut free = FREE.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: every cached block was made by `map`.
    unsafe { free.release(usize::MAX) };
}

/// Bytes of freed blocks the cache holds now.
pub fn cached_bytes() -> usize {
    CACHED_BYTES.load(Ordering::Relaxed)
}

/// Bytes of blocks in use beyond what their requests asked for (served from a larger block).
pub fn slack_bytes() -> usize {
    SLACK_BYTES.load(Ordering::Relaxed)
}

/// Requests the cache served, and requests it could not (each since the start).
pub fn hits_and_misses() -> (u64, u64) {
    (HITS.load(Ordering::Relaxed), MISSES.load(Ordering::Relaxed))
}

/// A block for `layout`, from the cache when it holds one that fits.
///
/// # Safety
/// As `GlobalAlloc::alloc`.
pub unsafe fn alloc(layout: Layout, zeroed: bool) -> *mut u8 {
    if !large(layout) {
        return if zeroed {
            System.alloc_zeroed(layout)
        } else {
            System.alloc(layout)
        };
    }
    let size = layout.size();
    if size > isize::MAX as usize - 2 * ALIGN {
        return std::ptr::null_mut(); // no room for the header: as the system would refuse it
    }
    if ENABLED.load(Ordering::Relaxed) {
        if let Ok(mut free) = FREE.try_lock() {
            if let Some((block, base)) = free.take(size) {
                drop(free);
                HITS.fetch_add(1, Ordering::Relaxed);
                SLACK_BYTES.fetch_add(block - size, Ordering::Relaxed);
                let data = (base as *mut u8).add(HEADER);
                if zeroed {
                    std::ptr::write_bytes(data, 0, size);
                }
                return data;
            }
            free.release(size);
        }
        MISSES.fetch_add(1, Ordering::Relaxed);
    }
    map(size, zeroed)
}

/// Keep a freed block for reuse (the oldest cached one goes back to the system when full).
///
/// # Safety
/// As `GlobalAlloc::dealloc`: `ptr` came from [`alloc`] with this `layout`.
pub unsafe fn dealloc(ptr: *mut u8, layout: Layout) {
    if !large(layout) {
        return System.dealloc(ptr, layout);
    }
    let base = ptr.sub(HEADER);
    let block = (base as *const usize).read();
    SLACK_BYTES.fetch_sub(block - layout.size(), Ordering::Relaxed);
    if ENABLED.load(Ordering::Relaxed) {
        if let Ok(mut free) = FREE.try_lock() {
            free.push(block, base as usize);
            return;
        }
    }
    unmap(base as usize, block)
}

/// A resized block: through the cache when either size is large, else the system's `realloc`.
///
/// # Safety
/// As `GlobalAlloc::realloc`.
pub unsafe fn realloc(ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
    let new_layout = Layout::from_size_align_unchecked(new_size, layout.align());
    if !large(layout) && !large(new_layout) {
        return System.realloc(ptr, layout, new_size);
    }
    let new = alloc(new_layout, false);
    if !new.is_null() {
        std::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
        dealloc(ptr, layout);
    }
    new
}
