//! The memory budget: before a large buffer is allocated (`memory::before_large_alloc`) and
//! before a new tensor buffer is counted (`memory::register`), if it would take the live
//! bytes past the budget, saved activations are evicted, lowest DTR score first (Kirisame
//! et al., ICLR 2021), until it fits. The score of a buffer is
//! cost / (bytes × staleness): cost is the measured time of the ops of the cells holding it
//! plus that of the evicted inputs their recompute would rebuild first (DTR's evicted
//! neighbourhood, ancestors only, followed up to `remat::MAX_DEPTH` levels); staleness is
//! the budget clock's ticks since the buffer was last used.
//! Evicted activations are recomputed from their recipe (`remat`) when the backward needs
//! them. The unit of eviction is a buffer: the cells holding it (an activation and its
//! saved views) drop it together, and only when nothing else holds it: never parameters,
//! gradients, optimizer state, or tensors the user (or anything else) holds.
//!
//! Scratch (a recomputed input kept for the rest of the backward node, see `remat`) goes
//! first, whatever its score: it is kept only while there is room for it.
//!
//! When even evicting every candidate leaves too little room, the op's result is counted
//! anyway and an `OutOfMemoryError` is raised at the next boundary back to Python (the op's
//! result, the end of the backward node).

use std::cell::Cell as LocalCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use parking_lot::{Mutex, MutexGuard};

use crate::autograd::remat::{self, Cell};
use crate::error::{Error, Result};
use crate::memory::{self, Category};

static CLOCK: AtomicU64 = AtomicU64::new(0);

/// The budget's logical clock: one tick per use of a cell.
pub fn tick() -> u64 {
    CLOCK.fetch_add(1, Ordering::Relaxed) + 1
}

pub fn is_active() -> bool {
    memory::budget().is_some()
}

/// Cells holding data: the eviction candidates (pruned lazily).
fn pool() -> &'static Mutex<Vec<Weak<Cell>>> {
    static P: Mutex<Vec<Weak<Cell>>> = Mutex::new(Vec::new());
    &P
}

pub fn track(c: &Arc<Cell>) {
    pool().lock().push(Arc::downgrade(c));
}

/// What the budget did since the last `reset_stats`.
#[derive(Clone, Copy, Default, Debug)]
pub struct Stats {
    pub evictions: u64,
    pub evicted_bytes: u64,
    pub recomputations: u64,
    pub recomputed_bytes: u64,
    pub recompute_seconds: f64,
}

static STATS: Mutex<Stats> = Mutex::new(Stats {
    evictions: 0,
    evicted_bytes: 0,
    recomputations: 0,
    recomputed_bytes: 0,
    recompute_seconds: 0.0,
});

pub fn stats() -> Stats {
    *STATS.lock()
}

pub fn reset_stats() {
    *STATS.lock() = Stats::default();
}

pub fn count_recompute(bytes: usize, seconds: f64) {
    let mut s = STATS.lock();
    s.recomputations += 1;
    s.recomputed_bytes += bytes as u64;
    s.recompute_seconds += seconds;
}

thread_local! {
    static EVICTING: LocalCell<bool> = const { LocalCell::new(false) };
}

/// The error waiting to be raised, from a buffer that did not fit.
static PENDING: Mutex<Option<String>> = Mutex::new(None);

/// `Err(OutOfMemoryError)` if a buffer did not fit the budget since the last check.
pub fn check() -> Result<()> {
    match PENDING.lock().take() {
        Some(m) => Err(Error::OutOfMemory(m)),
        None => Ok(()),
    }
}

/// A new buffer of `bytes` is about to be counted and would pass `budget`: evict until it
/// fits, or leave an `OutOfMemoryError` to be raised.
pub fn make_room(bytes: usize, budget: u64) {
    if evicting(|| evict_until_fits(bytes, budget, pool().lock())) == Some(false) {
        *PENDING.lock() = Some(message(bytes, budget));
    }
}

/// A buffer of `bytes` is about to be allocated and would pass `budget`: evict what can be
/// evicted now, and nothing else (the allocator calls this, so the thread may be adding to
/// the candidates: then it does nothing).
pub fn make_room_early(bytes: usize, budget: u64) {
    evicting(|| {
        pool()
            .try_lock()
            .map(|p| evict_until_fits(bytes, budget, p))
    });
}

/// `f()`, unless this thread is evicting already (evicting frees and allocates buffers).
fn evicting<R>(f: impl FnOnce() -> R) -> Option<R> {
    if EVICTING.with(|e| e.replace(true)) {
        return None;
    }
    let r = f();
    EVICTING.with(|e| e.set(false));
    Some(r)
}

/// Evict the candidates in `pool`, lowest score first, until `bytes` more fit `budget`;
/// whether they do.
fn evict_until_fits(bytes: usize, budget: u64, mut pool: MutexGuard<'_, Vec<Weak<Cell>>>) -> bool {
    let fits = || memory::memory_allocated() + bytes as i64 <= budget as i64;
    pool.retain(|w| w.upgrade().is_some_and(|c| c.holds_data()));
    pool.sort_by_key(|w| w.as_ptr() as usize);
    pool.dedup_by_key(|w| w.as_ptr() as usize);
    let candidates: Vec<Arc<Cell>> = pool.iter().filter_map(Weak::upgrade).collect();
    drop(pool);
    let now = tick();
    let mut groups: HashMap<usize, Vec<Arc<Cell>>> = HashMap::new();
    for c in candidates {
        if let Some(k) = c.held_key() {
            groups.entry(k).or_default().push(c);
        }
    }
    // DTR's score over a buffer's cells: their recompute cost over the buffer's bytes
    // times the staleness of its most recent use. Lowest goes first.
    let mut scored: Vec<(f64, usize, Vec<Arc<Cell>>)> = groups
        .into_iter()
        .filter(|(k, cells)| remat::evictable(*k, cells.len()))
        .filter_map(|(_, cells)| {
            let mut cost = 0.0;
            let mut last = 0;
            for c in &cells {
                let (c, l) = c.cost_and_last_use()?;
                cost += c;
                last = last.max(l);
            }
            let bytes = cells.iter().map(|c| c.bytes).max().unwrap_or(0);
            if cells.iter().all(|c| c.is_scratch()) {
                return Some((0.0, bytes, cells)); // kept only in case there is room
            }
            let stale = now.saturating_sub(last) + 1;
            Some((
                (cost + 1e-9) / (bytes.max(1) as f64 * stale as f64),
                bytes,
                cells,
            ))
        })
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0));
    let recording = memory::is_recording();
    for (_, bytes, cells) in scored {
        if fits() {
            break;
        }
        let prev = recording.then(|| memory::set_phase(memory::EVICT));
        cells.iter().for_each(|c| c.evict());
        if let Some(p) = prev {
            memory::set_phase(&p);
        }
        let mut s = STATS.lock();
        s.evictions += 1;
        s.evicted_bytes += bytes as u64;
    }
    fits()
}

fn message(bytes: usize, budget: u64) -> String {
    let held = memory::memory_allocated().max(0) as u64;
    let by = memory::bytes_by_category();
    let of = |c: Category| by.iter().find(|(k, _)| *k == c).map_or(0, |(_, b)| *b);
    format!(
        "memory budget of {} exceeded: a new tensor of {} does not fit beside the {} that \
         cannot be evicted now (parameters {}, optimizer state {}, gradients {}, saved \
         activations {}, other {}); this step needs a budget of at least {} ({} bytes)",
        fmt_bytes(budget),
        fmt_bytes(bytes as u64),
        fmt_bytes(held),
        fmt_bytes(of(Category::Parameter).max(0) as u64),
        fmt_bytes(of(Category::OptimizerState).max(0) as u64),
        fmt_bytes(of(Category::Gradient).max(0) as u64),
        fmt_bytes(of(Category::Activation).max(0) as u64),
        fmt_bytes(of(Category::Other).max(0) as u64),
        fmt_bytes(held + bytes as u64),
        held + bytes as u64,
    )
}

fn fmt_bytes(n: u64) -> String {
    const MIB: f64 = 1024.0 * 1024.0;
    if n >= 1 << 20 {
        format!("{:.2} MiB", n as f64 / MIB)
    } else {
        format!("{n} bytes")
    }
}
