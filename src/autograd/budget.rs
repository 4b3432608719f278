//! The memory budget: before a large buffer is allocated (`memory::before_large_alloc`) and
//! before a new tensor buffer is counted (`memory::register`), if it would take the live
//! bytes past the budget, saved activations are evicted, lowest DTR score first (Kirisame
//! et al., ICLR 2021), until it fits. The score of a buffer is
//! cost / (bytes × distance): cost is the measured time of the ops of the cells holding it
//! plus that of the evicted inputs their recompute would rebuild first (DTR's evicted
//! neighbourhood, ancestors only, followed up to `remat::MAX_DEPTH` levels). In the forward
//! the distance is DTR's staleness, the budget clock's ticks since the buffer was last
//! used. In the backward the engine knows what comes next (nodes run in decreasing
//! sequence order, and each saved cell knows the node that saved it), so the distance is
//! how far off the next read is (see `score`).
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
use crate::tensor::Tensor;

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

/// Saved tensors the budget could not make evictable, by the op that made them: bytes and
/// count since the last `reset_stats` (an output written in place, an op without a recipe,
/// a tensor an op made for its backward alone).
static KEPT: Mutex<std::collections::BTreeMap<String, (u64, u64)>> =
    Mutex::new(std::collections::BTreeMap::new());

/// A node saved `t`, which has no recipe: it stays until the node runs.
pub fn note_kept(t: &Tensor) {
    let name = t.grad_fn().map_or_else(
        || "saved for backward only (mask, indices)".to_string(),
        |n| n.name().to_string(),
    );
    let bytes = memory::storage_key(&t.data()).map_or(0, |b| b.bytes) as u64;
    let mut kept = KEPT.lock();
    let e = kept.entry(name).or_default();
    e.0 += bytes;
    e.1 += 1;
}

/// What `note_kept` counted: (op, bytes, tensors), most bytes first.
pub fn kept() -> Vec<(String, u64, u64)> {
    let mut v: Vec<_> = KEPT
        .lock()
        .iter()
        .map(|(k, &(b, n))| (k.clone(), b, n))
        .collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

pub fn stats() -> Stats {
    *STATS.lock()
}

pub fn reset_stats() {
    *STATS.lock() = Stats::default();
    KEPT.lock().clear();
}

pub fn count_recompute(bytes: usize, seconds: f64) {
    let mut s = STATS.lock();
    s.recomputations += 1;
    s.recomputed_bytes += bytes as u64;
    s.recompute_seconds += seconds;
}

thread_local! {
    static EVICTING: LocalCell<bool> = const { LocalCell::new(false) };
    /// Where the backward pass running on this thread is.
    static POSITION: LocalCell<Option<Position>> = const { LocalCell::new(None) };
}

/// Where a backward pass is: the sequence number of the node it runs, and the first one
/// made after the pass began. Nodes run in decreasing sequence order, so a saved tensor's
/// next use is its saver's distance below the running node.
#[derive(Clone, Copy, Debug)]
pub struct Position {
    node: u64,
    start: u64,
    probe: bool,
}

impl Position {
    /// How many nodes run before node `saver`: `None` when it ran already or never runs.
    pub fn distance(self, saver: u64) -> Option<u64> {
        if saver >= self.start {
            Some(1) // made inside this pass (a checkpoint's forward): its backward is next
        } else if saver <= self.node {
            Some(self.node - saver + 1)
        } else {
            None
        }
    }
}

/// A backward pass began on this thread: until the guard drops, the budget scores by next
/// use (see `evict_until_fits`). A `probe` (the engine's dry run before a pass with
/// effects) leaves the cells' measured costs as they were, so that the real pass scores,
/// and evicts, as the probe did.
pub fn enter_pass(probe: bool) -> PassGuard {
    let start = crate::autograd::node::next_sequence_nr();
    let at = Position {
        node: start,
        start,
        probe,
    };
    PassGuard(POSITION.with(|p| p.replace(Some(at))))
}

/// Whether this thread runs a probe (see `enter_pass`).
pub fn probing() -> bool {
    POSITION.with(|p| p.get().is_some_and(|at| at.probe))
}

/// The pass is about to run node `sequence_nr` (a leaf's sink, numbered last, leaves the
/// position where it was).
pub fn at_node(sequence_nr: u64) {
    POSITION.with(|p| {
        if let Some(at) = p.get().filter(|at| sequence_nr < at.start) {
            p.set(Some(Position {
                node: sequence_nr,
                ..at
            }));
        }
    });
}

pub struct PassGuard(Option<Position>);

impl Drop for PassGuard {
    fn drop(&mut self) {
        POSITION.with(|p| p.set(self.0));
    }
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

/// Leave an `OutOfMemoryError` with `message` to be raised at the next boundary (a device's
/// memory cap was passed).
pub fn fail(message: String) {
    *PENDING.lock() = Some(message);
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
    let fits = || memory::memory_allocated(memory::budget_slot()) + bytes as i64 <= budget as i64;
    pool.retain(|w| w.upgrade().is_some_and(|c| c.in_use()));
    pool.sort_by_key(|w| w.as_ptr() as usize);
    pool.dedup_by_key(|w| w.as_ptr() as usize);
    let cells: Vec<Arc<Cell>> = pool.iter().filter_map(Weak::upgrade).collect();
    drop(pool);
    let now = tick();
    let at = POSITION.with(LocalCell::get);
    // Inside a backward, an evicted cell that a node reads is recomputed from its
    // materialised ancestors when that node runs: they are read then at the latest.
    let mut reads: HashMap<usize, u64> = HashMap::new();
    if let Some(at) = at {
        for c in &cells {
            c.note_recompute_reads(at, &mut reads);
        }
    }
    let mut groups: HashMap<usize, Vec<Arc<Cell>>> = HashMap::new();
    for c in cells {
        if let Some(k) = c.held_key() {
            groups.entry(k).or_default().push(c);
        }
    }
    // Ties go to the oldest cell first: an order that the probe and the real pass share,
    // unlike the maps' or the buffers' addresses.
    let mut scored: Vec<(f64, u64, usize, Vec<Arc<Cell>>)> = groups
        .into_iter()
        .filter(|(k, cells)| remat::evictable(*k, cells.len()))
        .filter_map(|(_, cells)| {
            let bytes = cells.iter().map(|c| c.bytes).max().unwrap_or(0);
            let score = score(&cells, bytes, now, at, &reads)?;
            let oldest = cells.iter().map(|c| c.id).min().unwrap_or(0);
            Some((score, oldest, bytes, cells))
        })
        .collect();
    scored.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let recording = memory::is_recording();
    for (_, _, bytes, cells) in scored {
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

/// DTR's score of a buffer held by `cells`: their recompute cost over its bytes times how
/// long it would stay evicted. Lowest goes first; `None` when a cell is busy.
///
/// In the forward that is DTR's staleness, the clock ticks since the last use (the
/// backward reads the most recent first). In the backward it is the square root of the
/// nodes still to run before one reads it, itself or through the recompute of an evicted
/// descendant: the root, because the distance in nodes is a rough guide to time (a
/// recompute can run a long chain at one node), and the full distance let far chains be
/// evicted that cost more to remake than they freed (nerf at 50%: 30% more recomputed).
fn score(
    cells: &[Arc<Cell>],
    bytes: usize,
    now: u64,
    at: Option<Position>,
    reads: &HashMap<usize, u64>,
) -> Option<f64> {
    if cells.iter().all(|c| c.is_scratch()) {
        return Some(0.0); // kept only in case there is room
    }
    let mut cost = 0.0;
    let mut last = 0;
    let mut next: Option<u64> = None;
    for c in cells {
        let u = c.usage(at)?;
        cost += u.cost;
        last = last.max(u.last_use);
        let read = reads.get(&(Arc::as_ptr(c) as usize)).copied();
        next = next.into_iter().chain(u.next_use).chain(read).min();
    }
    let distance = match (at, next) {
        (None, _) => (now.saturating_sub(last) + 1) as f64,
        (Some(_), Some(d)) => (d as f64).sqrt(),
        (Some(_), None) => return Some(0.0), // no node reads it again
    };
    Some((cost + 1e-9) / (bytes.max(1) as f64 * distance))
}

fn message(bytes: usize, budget: u64) -> String {
    let held = memory::memory_allocated(memory::budget_slot()).max(0) as u64;
    let by = memory::bytes_by_category(memory::budget_slot());
    let of = |c: Category| by.iter().find(|(k, _)| *k == c).map_or(0, |(_, b)| *b);
    let kept = kept();
    let kept = if kept.is_empty() {
        String::new()
    } else {
        let top: Vec<String> = kept
            .iter()
            .take(3)
            .map(|(op, b, n)| format!("{op}: {} in {n}", fmt_bytes(*b)))
            .collect();
        format!(
            "; saved tensors without a recipe, which no budget can evict: {}",
            top.join(", ")
        )
    };
    format!(
        "memory budget of {} exceeded: a new tensor of {} does not fit beside the {} that \
         cannot be evicted now (parameters {}, optimizer state {}, gradients {}, saved \
         activations {}, other {}); this step needs a budget of at least {} ({} bytes){kept}",
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

#[cfg(test)]
mod tests {
    use super::Position;

    #[test]
    fn distance_counts_the_nodes_down_to_the_saver() {
        let at = Position {
            node: 100,
            start: 120,
            probe: false,
        };
        assert_eq!(at.distance(100), Some(1)); // the running node
        assert_eq!(at.distance(90), Some(11));
        assert_eq!(at.distance(0), Some(101));
        assert_eq!(at.distance(110), None); // ran already, or never runs
        assert_eq!(at.distance(119), None);
        assert_eq!(at.distance(120), Some(1)); // made inside the pass
        assert_eq!(at.distance(500), Some(1));
    }
}
