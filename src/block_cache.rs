//! A cache of freed large buffers, like PyTorch's caching allocators but for the CPU.
//!
//! Why: a large allocation is a fresh mapping from the system (each large block is a mapping of
//! its own, `pages`; glibc too maps everything past its mmap threshold, at most 32 MiB, and the
//! bench sets 64 KiB for every system), so every page of every large tensor would fault in
//! again each step, zero-filled by the kernel. On the NeRF
//! step that was about 590,000 faults a step, and `y = x * 2` on 64 MiB took 7× as long on a
//! fresh buffer as on a reused one (`benches/block_cache.py`). A training step frees and
//! allocates the same sizes step after step, so freed blocks are kept and handed out again.
//!
//! A request with no cached block of its size takes the smallest cached block up to twice its
//! size, and the pages of that block past the request are handed back to the system
//! (`madvise(MADV_DONTNEED)`: the block keeps its address range, its idle tail costs no
//! memory, and a later, larger request faults those pages in afresh). Each cached block
//! records the bytes it may still hold resident. The cache keeps what it holds within the
//! high-water mark of the bytes live blocks hold (since the start or the last `empty()`):
//! before a request maps a new block or faults in pages of a cached one, the cache gives its
//! oldest blocks back to the system until live + cached resident bytes fit under that mark
//! (or under the new live total, when the request raises it). So the cache does not raise the
//! peak footprint, and it keeps, as PyTorch's allocators do, the blocks a step freed for the
//! next step: an earlier rule, which gave back as many bytes as each miss asked for, handed
//! back during the backward the blocks the next forward would ask for.
//!
//! A miss moves the pages of the blocks it gives back, and then of the oldest cached ones,
//! into its new block instead of faulting in fresh ones (`pages::Fill`); a block it takes only
//! the start of stays cached with the rest. Under a tight memory budget nearly every miss gives
//! blocks back: on the lora step at 55%, moving their pages cut the faults from about 300,000
//! to 100,000 a step.
//! Best fit matters: with exact sizes only, the releases cascaded and half the NeRF step's
//! requests missed; without handing the tail back, the cnn step's buffers, which halve and
//! double layer by layer, peaked at 217 MiB RSS against 194 MiB with no cache.
//!
//! Each large block starts with a header holding its size (`pages::HEADER`), so a free needs no
//! lookup, and the cache's lock is only ever `try_lock`ed: a request that finds it busy (another
//! thread, or a child forked while a thread held it) maps a new block or gives its block back
//! to the system, so the allocator cannot deadlock. Blocks are 64-byte aligned and serve any
//! alignment up to 64; larger alignments bypass the cache.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::pages::{self, page_size, Fill, HEADER};

/// Blocks smaller than this go straight to the system allocator (whose own bins serve them).
/// 64 KiB, the bench's mmap threshold: blocks from there to 256 KiB (attention's per-head
/// tiles, LoRA's projections) are fresh mappings too, and caching them took the LoRA step
/// from 3.00 to 2.55 s.
pub const MIN_BYTES: usize = 64 << 10;
const ALIGN: usize = 64;
/// Free blocks the cache holds at most; past it the oldest is given back.
const SLOTS: usize = 256;

static ENABLED: AtomicBool = AtomicBool::new(false);
static CACHED_BYTES: AtomicUsize = AtomicUsize::new(0);
/// Resident bytes (header included) of the large blocks in use, and their high-water mark.
static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);
static SLACK_BYTES: AtomicUsize = AtomicUsize::new(0);
static HITS: AtomicU64 = AtomicU64::new(0);
static MISSES: AtomicU64 = AtomicU64::new(0);

/// A free block: its size, its base address, and how many of its bytes (header included)
/// may still be resident.
#[derive(Clone, Copy)]
struct Block {
    size: usize,
    base: usize,
    resident: usize,
}

/// Free blocks, oldest first, and the sum of their resident bytes.
struct Free {
    blocks: [Block; SLOTS],
    len: usize,
    resident: usize,
}

static FREE: Mutex<Free> = Mutex::new(Free {
    blocks: [Block {
        size: 0,
        base: 0,
        resident: 0,
    }; SLOTS],
    len: 0,
    resident: 0,
});

impl Free {
    /// A cached block of `size` bytes, or else the smallest of at most twice that.
    fn take(&mut self, size: usize) -> Option<Block> {
        let cached = &self.blocks[..self.len];
        let i = match cached.iter().rposition(|b| b.size == size) {
            Some(i) => i,
            None => {
                cached
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.size > size && b.size / 2 <= size)
                    .min_by_key(|(_, b)| b.size)?
                    .0
            }
        };
        Some(self.remove(i))
    }

    fn remove(&mut self, i: usize) -> Block {
        let b = self.blocks[i];
        self.blocks.copy_within(i + 1..self.len, i);
        self.len -= 1;
        self.resident -= b.resident;
        CACHED_BYTES.fetch_sub(b.size, Ordering::Relaxed);
        b
    }

    fn push(&mut self, block: Block) {
        if self.len == SLOTS {
            // SAFETY: cached blocks are the system's, made by `map`.
            unsafe { self.release(1, None) };
        }
        self.blocks[self.len] = block;
        self.len += 1;
        self.resident += block.resident;
        CACHED_BYTES.fetch_add(block.size, Ordering::Relaxed);
    }

    /// Give the oldest blocks back until `bytes` resident bytes are released (or none is
    /// left): their pages into `into` while it lacks any, the rest to the system. A block
    /// that `into` took only the start of keeps its rest cached when what was moved already
    /// makes up the bytes asked for.
    unsafe fn release(&mut self, bytes: usize, mut into: Option<&mut Fill>) {
        let mut released = 0;
        while released < bytes && self.len > 0 {
            released += match into.as_mut() {
                Some(fill) => self.move_oldest(fill, |moved| released + moved >= bytes),
                None => {
                    let b = self.remove(0);
                    pages::unmap(b.base as *mut u8);
                    b.resident
                }
            };
        }
    }

    /// Move the pages of the oldest blocks into `fill` until it lacks none (or the blocks
    /// run out), keeping the rest of the last one cached.
    unsafe fn lend(&mut self, fill: &mut Fill) {
        while fill.lacks() && self.len > 0 && self.move_oldest(fill, |_| true) > 0 {}
    }

    /// Move the start of the oldest block into `fill`, and keep its rest cached, as the
    /// oldest, if `keep(moved)` (and it is large enough), else give it back: the resident
    /// bytes that left the cache.
    unsafe fn move_oldest(&mut self, fill: &mut Fill, keep: impl FnOnce(usize) -> bool) -> usize {
        let b = self.remove(0);
        let rest = fill.take(b.base as *mut u8);
        // Resident pages are a prefix of the block: those past `moved` stay with the rest.
        let moved = b.resident.min(rest.moved);
        let kept = if keep(moved) {
            rest.keep(MIN_BYTES)
        } else {
            rest.give_back();
            None
        };
        match kept {
            Some((base, size)) => {
                self.push_oldest(Block {
                    size,
                    base: base as usize,
                    resident: b.resident - moved,
                });
                moved
            }
            None => b.resident,
        }
    }

    /// Cache `block` as the oldest, the first to be given back (there is room: one was
    /// just taken).
    fn push_oldest(&mut self, block: Block) {
        self.blocks.copy_within(..self.len, 1);
        self.blocks[0] = block;
        self.len += 1;
        self.resident += block.resident;
        CACHED_BYTES.fetch_add(block.size, Ordering::Relaxed);
    }

    /// Give the oldest blocks back until live + cached resident bytes fit under the
    /// high-water mark, once `live` bytes are live.
    unsafe fn fit(&mut self, live: usize, into: Option<&mut Fill>) {
        let room = HIGH_WATER.load(Ordering::Relaxed).saturating_sub(live);
        self.release(self.resident.saturating_sub(room), into);
    }
}

/// Hand the whole pages of `[start, end)` back to the system; their contents read as zeros
/// when next touched.
///
/// # Safety
/// The range lies inside one block made by `map` that nothing else reads.
unsafe fn discard(start: usize, end: usize) {
    let page = page_size();
    let (from, to) = (start.next_multiple_of(page), end / page * page);
    if to > from {
        // A failure (it has none for a private mapping) only leaves the pages resident.
        libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_DONTNEED);
    }
}

/// A new block of `size` data bytes from the system: its data pointer, or null.
unsafe fn map(size: usize) -> *mut u8 {
    let base = pages::map(size);
    if base.is_null() {
        return base;
    }
    base.add(HEADER)
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
    unsafe { free.release(usize::MAX, None) };
    HIGH_WATER.store(LIVE_BYTES.load(Ordering::Relaxed), Ordering::Relaxed);
}

/// Bytes of freed blocks the cache holds now.
pub fn cached_bytes() -> usize {
    CACHED_BYTES.load(Ordering::Relaxed)
}

/// Bytes of blocks in use beyond what their requests asked for (served from a larger block).
pub fn slack_bytes() -> usize {
    SLACK_BYTES.load(Ordering::Relaxed)
}

/// Resident bytes of the large blocks in use, those the cached blocks may hold, and the
/// high-water mark the cache keeps their sum under. The second is 0 while another thread
/// holds the cache.
pub fn resident_bytes() -> (usize, usize, usize) {
    let cached = FREE.try_lock().map_or(0, |free| free.resident);
    (
        LIVE_BYTES.load(Ordering::Relaxed),
        cached,
        HIGH_WATER.load(Ordering::Relaxed),
    )
}

/// The bytes a block of `block` bytes holds resident while it serves `size` (its tail past
/// them is handed back when it is served).
fn resident(size: usize, block: usize) -> usize {
    HEADER + size.next_multiple_of(page_size()).min(block)
}

/// Count `bytes` more live, raising the high-water mark with them; the new live total.
fn add_live(bytes: usize) -> usize {
    let live = LIVE_BYTES.fetch_add(bytes, Ordering::Relaxed) + bytes;
    HIGH_WATER.fetch_max(live, Ordering::Relaxed);
    live
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
    if size > isize::MAX as usize - HEADER - page_size() {
        return std::ptr::null_mut(); // no room for the header: as the system would refuse it
    }
    crate::memory::before_large_alloc(size);
    let enabled = ENABLED.load(Ordering::Relaxed);
    let mut free = if enabled { FREE.try_lock().ok() } else { None };
    if let Some(f) = free.as_mut() {
        if let Some(b) = f.take(size) {
            // Counted live before the fit, so the pages it will fault in past what the block
            // holds are made room for.
            f.fit(add_live(resident(size, b.size)), None);
            drop(free);
            HITS.fetch_add(1, Ordering::Relaxed);
            SLACK_BYTES.fetch_add(b.size - size, Ordering::Relaxed);
            let data = (b.base as *mut u8).add(HEADER);
            discard(data as usize + size, data as usize + b.size);
            if zeroed {
                std::ptr::write_bytes(data, 0, size);
            }
            return data;
        }
    }
    // A new block: counted live first, so the cache makes room for it under the mark (when
    // it is not busy), and uncounted again if the system refuses it. The pages the cache gives
    // back to make that room are moved into it rather than faulted in afresh.
    let live = add_live(HEADER + size);
    if enabled {
        MISSES.fetch_add(1, Ordering::Relaxed);
    }
    let data = match free {
        Some(mut f) => {
            let mut fill = Fill::new(size);
            f.fit(live, fill.as_mut());
            if let Some(fill) = fill.as_mut() {
                f.lend(fill);
            }
            drop(f);
            match fill {
                Some(fill) => fill.finish(zeroed).add(HEADER),
                None => map(size), // with the room the fit made
            }
        }
        None => map(size),
    };
    if data.is_null() {
        LIVE_BYTES.fetch_sub(HEADER + size, Ordering::Relaxed);
    }
    data
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
    let resident = resident(layout.size(), block);
    LIVE_BYTES.fetch_sub(resident, Ordering::Relaxed);
    if ENABLED.load(Ordering::Relaxed) {
        if let Ok(mut free) = FREE.try_lock() {
            free.push(Block {
                size: block,
                base: base as usize,
                resident,
            });
            return;
        }
    }
    pages::unmap(base)
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
