//! Large blocks as whole-page mappings of their own, and the moving of resident pages from
//! blocks the cache gives back into a new block.
//!
//! Why: a new mapping's pages fault in one at a time, each zero-filled by the kernel (about
//! 1.6 µs a page here). Under a memory budget the cache's high-water mark is tight, so almost
//! every miss gives cached blocks back to make room: on the lora step at 55% that was 1.1 GB
//! given back and 1.1 GB faulted in afresh every step, about 300,000 faults. Moving the given-back
//! pages into the new block (`mremap`, which moves page-table entries and copies nothing) takes
//! a few syscalls instead.
//!
//! A block starts with its header: its data size, then the offsets where a new kernel mapping
//! starts inside it (`cuts`). Pages moved in from other blocks stay separate mappings, and
//! kernels before 6.17 move one mapping per call, so every cut is recorded; at most
//! `MAX_CUTS`, past which the rest of the block faults in afresh. A move that fails (an old
//! kernel, or the limit on mappings) leaves its destination unmapped; it is mapped afresh and
//! the rest of the block faults in as it would have.

use std::sync::atomic::{AtomicUsize, Ordering};

/// Room before the data: the size, the number of cuts and the cuts, keeping the data
/// 64-byte aligned. 30 cuts: the lora step's blocks under a budget, made of the rests of
/// others, needed more than the 6 a 64-byte header holds (390 MB a step faulted in afresh).
pub const HEADER: usize = 256;
const WORDS: usize = HEADER / std::mem::size_of::<usize>();
const MAX_CUTS: usize = WORDS - 2;

/// Bytes of pages moved into new blocks since the start.
static MOVED_BYTES: AtomicUsize = AtomicUsize::new(0);

pub fn moved_bytes() -> usize {
    MOVED_BYTES.load(Ordering::Relaxed)
}

pub fn page_size() -> usize {
    static PAGE: AtomicUsize = AtomicUsize::new(0);
    match PAGE.load(Ordering::Relaxed) {
        0 => {
            // SAFETY: sysconf reads a constant of the system.
            let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
            let p = if p > 0 { p as usize } else { 4096 };
            PAGE.store(p, Ordering::Relaxed);
            p
        }
        p => p,
    }
}

/// The length of the mapping of a block of `size` data bytes.
fn mapping_len(size: usize) -> usize {
    (HEADER + size).next_multiple_of(page_size())
}

/// Address space for a block of `size` data bytes, no page of it resident yet; its base, or
/// null.
unsafe fn reserve(size: usize) -> *mut u8 {
    let p = libc::mmap(
        std::ptr::null_mut(),
        mapping_len(size),
        libc::PROT_READ | libc::PROT_WRITE,
        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        -1,
        0,
    );
    if p == libc::MAP_FAILED {
        std::ptr::null_mut()
    } else {
        p as *mut u8
    }
}

/// The offsets inside a block where a kernel mapping of its own starts, ascending.
#[derive(Clone, Copy)]
struct Cuts {
    at: [usize; MAX_CUTS],
    len: usize,
}

impl Cuts {
    const NONE: Cuts = Cuts {
        at: [0; MAX_CUTS],
        len: 0,
    };

    /// The cuts in the header of the block at `base`.
    unsafe fn read(base: *const u8) -> Cuts {
        let h = base as *const usize;
        let mut cuts = Cuts::NONE;
        for i in 0..h.add(1).read().min(MAX_CUTS) {
            cuts.push(h.add(2 + i).read());
        }
        cuts
    }

    fn push(&mut self, at: usize) {
        self.at[self.len] = at;
        self.len += 1;
    }

    fn as_slice(&self) -> &[usize] {
        &self.at[..self.len]
    }
}

/// Write the header of the block at `base`.
unsafe fn write_header(base: *mut u8, size: usize, cuts: &Cuts) {
    let h = base as *mut usize;
    h.write(size);
    h.add(1).write(cuts.len);
    for (i, &c) in cuts.as_slice().iter().enumerate() {
        h.add(2 + i).write(c);
    }
}

/// The data size of the block at `base`.
///
/// # Safety
/// `base` is the base of a block made here (by `map` or a `Fill`) not yet given back.
pub unsafe fn size_of(base: *const u8) -> usize {
    (base as *const usize).read()
}

/// A new block of `size` data bytes (its pages zero until written): its base, or null.
pub fn map(size: usize) -> *mut u8 {
    // SAFETY: a new mapping of at least the header's length, nobody else's.
    unsafe {
        let base = reserve(size);
        if !base.is_null() {
            write_header(base, size, &Cuts::NONE);
        }
        base
    }
}

/// Give the block at `base` back to the system.
///
/// # Safety
/// `base` is the base of a block made here that nothing reads or writes any more.
pub unsafe fn unmap(base: *mut u8) {
    // A failure (it has none for a whole mapping of ours) only leaves the pages mapped.
    libc::munmap(base as *mut libc::c_void, mapping_len(size_of(base)));
}

/// What is left of a block that gave its first pages to a [`Fill`].
pub struct Rest {
    base: *mut u8,
    len: usize,
    /// Bytes moved out of the block's start.
    pub moved: usize,
    cuts: Cuts,
}

impl Rest {
    /// Keep the rest as a block of its own: its base and data size, or `None` (given back)
    /// when it holds fewer than `min_size` data bytes.
    pub fn keep(self, min_size: usize) -> Option<(*mut u8, usize)> {
        if self.len < HEADER + min_size {
            self.give_back();
            return None;
        }
        // Its data size maps to exactly its length: `len` is whole pages.
        let size = self.len - HEADER;
        // SAFETY: the rest is the Rest's own (`Fill::take` took the donor whole).
        unsafe { write_header(self.base, size, &self.cuts) };
        Some((self.base, size))
    }

    /// Give the rest back to the system.
    pub fn give_back(self) {
        if self.len > 0 {
            // SAFETY: as in `keep`.
            unsafe { libc::munmap(self.base as *mut libc::c_void, self.len) };
        }
    }
}

/// A new block being filled with the pages of blocks given back, from its start.
pub struct Fill {
    base: *mut u8,
    size: usize,
    len: usize,
    /// Bytes from the start that hold moved pages.
    filled: usize,
    cuts: Cuts,
    /// A move failed: the rest faults in afresh.
    stopped: bool,
}

impl Fill {
    /// Address space for a block of `size` data bytes, or `None`.
    pub fn new(size: usize) -> Option<Fill> {
        // SAFETY: a new mapping.
        let base = unsafe { reserve(size) };
        (!base.is_null()).then(|| Fill {
            base,
            size,
            len: mapping_len(size),
            filled: 0,
            cuts: Cuts::NONE,
            stopped: false,
        })
    }

    /// Move the first pages of the block at `donor` into this one, as many as it still
    /// lacks; the donor's rest, which is the caller's to keep or give back.
    ///
    /// # Safety
    /// `donor` is the base of a block made here that nothing uses any more: it is the
    /// fill's, and then the rest's.
    pub unsafe fn take(&mut self, donor: *mut u8) -> Rest {
        let donor_len = mapping_len(size_of(donor));
        let cuts = Cuts::read(donor);
        // The donor's pieces, one kernel mapping each: from its start, cut by cut, to its end.
        let bounds = std::iter::once(0)
            .chain(cuts.as_slice().iter().copied())
            .chain(std::iter::once(donor_len));
        let mut given = 0; // bytes of the donor moved, from its start
        let mut start = 0;
        for end in bounds.skip(1) {
            let n = (end - start).min(self.len - self.filled);
            if n == 0 || !self.room_for_piece(n) || !self.move_in(donor.add(start), n) {
                break;
            }
            given = start + n;
            start = end;
        }
        let mut rest = Rest {
            base: donor.add(given),
            len: donor_len - given,
            moved: given,
            cuts: Cuts::NONE,
        };
        for &c in cuts.as_slice().iter().filter(|&&c| c > given) {
            rest.cuts.push(c - given);
        }
        rest
    }

    /// Whether it still lacks pages that a move could bring.
    pub fn lacks(&self) -> bool {
        self.filled < self.len && self.room_for_piece(page_size().min(self.len - self.filled))
    }

    /// Whether a piece of `n` bytes can be recorded: its own cut, and one for the fresh
    /// pages after it when it does not fill the block.
    fn room_for_piece(&self, n: usize) -> bool {
        let needed = usize::from(self.filled > 0) + usize::from(self.filled + n < self.len);
        !self.stopped && self.cuts.len + needed <= MAX_CUTS
    }

    #[cfg(target_os = "linux")]
    unsafe fn move_in(&mut self, from: *mut u8, n: usize) -> bool {
        let to = self.base.add(self.filled);
        let moved = libc::mremap(
            from as *mut libc::c_void,
            n,
            n,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            to as *mut libc::c_void,
        );
        if moved == libc::MAP_FAILED {
            // The kernel may have unmapped the destination before it refused: map it afresh.
            libc::mmap(
                to as *mut libc::c_void,
                n,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
                -1,
                0,
            );
            self.stopped = true;
            return false;
        }
        if self.filled > 0 {
            self.cuts.push(self.filled);
        }
        self.filled += n;
        MOVED_BYTES.fetch_add(n, Ordering::Relaxed);
        true
    }

    #[cfg(not(target_os = "linux"))]
    unsafe fn move_in(&mut self, _from: *mut u8, _n: usize) -> bool {
        false
    }

    /// The block, its header written: its base. A `zeroed` block has its moved pages zeroed
    /// (the fresh ones are zero already).
    pub fn finish(mut self, zeroed: bool) -> *mut u8 {
        if self.filled > 0 && self.filled < self.len {
            self.cuts.push(self.filled);
        }
        // SAFETY: the block's mapping is the fill's own, `len` bytes from `base`.
        unsafe {
            if zeroed {
                let moved_data = self.filled.saturating_sub(HEADER).min(self.size);
                std::ptr::write_bytes(self.base.add(HEADER), 0, moved_data);
            }
            write_header(self.base, self.size, &self.cuts);
        }
        self.base
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;

    /// A block of `pages` whole pages, its data bytes set to `byte`.
    unsafe fn block(pages: usize, byte: u8) -> *mut u8 {
        let size = pages * page_size() - HEADER;
        let base = map(size);
        assert!(!base.is_null());
        std::ptr::write_bytes(base.add(HEADER), byte, size);
        base
    }

    unsafe fn cuts(base: *const u8) -> Vec<usize> {
        Cuts::read(base).as_slice().to_vec()
    }

    #[test]
    fn moved_pages_keep_their_contents_and_a_gathered_block_moves_piece_by_piece() {
        let p = page_size();
        unsafe {
            let (a, b) = (block(2, 1), block(3, 2));
            let mut fill = Fill::new(8 * p - HEADER).unwrap();
            assert_eq!(fill.take(a).moved, 2 * p);
            assert_eq!(fill.take(b).moved, 3 * p);
            assert!(fill.lacks());
            let c = fill.finish(false);
            assert_eq!(size_of(c), 8 * p - HEADER);
            assert_eq!(cuts(c), vec![2 * p, 5 * p]);
            let byte = |base: *mut u8, page: usize| *base.add(page * p + HEADER);
            assert_eq!(
                (byte(c, 0), byte(c, 1), byte(c, 2), byte(c, 4)),
                (1, 1, 2, 2)
            );
            assert_eq!(byte(c, 5), 0); // faulted in afresh
            *c.add(7 * p + 9) = 3;

            // The gathered block gives its three pieces to a smaller one, which keeps the
            // contents, and is zeroed when asked.
            let mut fill = Fill::new(6 * p - HEADER).unwrap();
            let rest = fill.take(c);
            assert_eq!(rest.moved, 6 * p);
            let (rest_base, rest_size) = rest.keep(0).unwrap();
            assert_eq!(rest_size, 2 * p - HEADER);
            assert_eq!(*rest_base.add(p + 9), 3);
            let d = fill.finish(false);
            assert_eq!(cuts(d), vec![2 * p, 5 * p]);
            assert_eq!((byte(d, 1), byte(d, 3)), (1, 2));
            unmap(rest_base);
            let mut fill = Fill::new(6 * p - HEADER).unwrap();
            fill.take(d);
            let e = fill.finish(true);
            let data = std::slice::from_raw_parts(e.add(HEADER), 6 * p - HEADER);
            assert!(data.iter().all(|&x| x == 0));
            unmap(e);
        }
    }

    #[test]
    fn past_the_last_cut_a_block_faults_in_afresh() {
        let p = page_size();
        unsafe {
            let n = MAX_CUTS + 4;
            let mut fill = Fill::new(n * p - HEADER).unwrap();
            let mut given = 0;
            for i in 0..n {
                let rest = fill.take(block(1, i as u8 + 1));
                given += usize::from(rest.moved > 0);
                rest.give_back();
            }
            // Each one-page piece past the first needs its cut, and the fresh rest one more.
            assert_eq!(given, MAX_CUTS);
            assert!(!fill.lacks());
            let b = fill.finish(false);
            assert_eq!(cuts(b).len(), MAX_CUTS);
            for i in 0..n {
                let want = if i < MAX_CUTS { i as u8 + 1 } else { 0 };
                assert_eq!(*b.add(i * p + HEADER), want, "page {i}");
            }
            unmap(b);
        }
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn a_move_the_kernel_refuses_leaves_the_new_block_whole() {
        let p = page_size();
        unsafe {
            // A sealed donor (Linux 6.10 on): mremap refuses to move it. Its pages stay
            // mapped for the rest of the process; without mseal there is nothing to test.
            let donor = block(3, 4);
            if libc::syscall(libc::SYS_mseal, donor, 3 * p, 0) != 0 {
                return;
            }
            let mut fill = Fill::new(4 * p - HEADER).unwrap();
            let rest = fill.take(donor);
            assert_eq!(rest.moved, 0);
            assert!(!fill.lacks());
            rest.give_back();
            let b = fill.finish(true);
            let data = std::slice::from_raw_parts_mut(b.add(HEADER), 4 * p - HEADER);
            assert!(data.iter().all(|&x| x == 0));
            data.fill(9); // every page mapped and writable
            assert_eq!(cuts(b), Vec::<usize>::new());
            assert_eq!(*donor.add(HEADER), 4);
            unmap(b);
        }
    }
}
