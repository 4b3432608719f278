//! Exact byte accounting of tensor storage.
//!
//! Every candle buffer that a gradstream `Tensor` wraps is registered here by its data
//! pointer. The counting global allocator sees the moment that buffer is really freed
//! (the last candle reference dropped), so `memory_allocated()` is exactly the bytes of
//! live tensor storage: views add nothing, and a buffer shared by several tensors counts once.
//!
//! Cost. Every deallocation in the extension passes through `CountingAllocator::dealloc`.
//! Its fast path is one hash and one relaxed load of a counting filter (`FILTER`): a slot
//! is non-zero only while a registered buffer hashes to it, so frees of everything else
//! (shapes, `Arc`s, strings, candle temporaries) never touch a lock. A free that passes
//! the filter locks one of `SHARDS` registry shards, not a global lock.
//!
//! History. `record_history(true, n)` keeps the last `n` events (alloc, free, category
//! change, phase change) with the phase and op running, for `gradstream.memory.snapshot()`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use candle_core::{CpuStorage, Storage};
use parking_lot::Mutex;

/// What a buffer is used for; a buffer with several roles is counted under the first
/// of: parameter, optimizer state, gradient, activation, other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    Parameter = 0,
    OptimizerState = 1,
    Gradient = 2,
    Activation = 3,
    Other = 4,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::Parameter,
        Category::OptimizerState,
        Category::Gradient,
        Category::Activation,
        Category::Other,
    ];
    pub fn name(self) -> &'static str {
        match self {
            Category::Parameter => "parameter",
            Category::OptimizerState => "optimizer_state",
            Category::Gradient => "gradient",
            Category::Activation => "activation",
            Category::Other => "other",
        }
    }
}

/// Roles that can be added to a buffer; `Other` is what remains when none is held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Parameter = 0,
    OptimizerState = 1,
    Gradient = 2,
    Activation = 3,
}

/// The phase and op running when something happened (empty strings when unknown).
#[derive(Clone, Debug, Default)]
pub struct Label {
    pub phase: Arc<str>,
    pub op: Arc<str>,
}

struct Entry {
    bytes: usize,
    /// gradstream tensors wrapping this buffer.
    refs: usize,
    roles: [u32; 4],
    category: Category,
    /// The first category other than `Other` this buffer took (what it was for).
    lifetime: Category,
    /// What was running when it was registered (only while history is recorded).
    label: Option<Label>,
}

impl Entry {
    fn derive_category(&self) -> Category {
        self.roles
            .iter()
            .position(|&n| n > 0)
            .map(|i| Category::ALL[i])
            .unwrap_or(Category::Other)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Alloc,
    Free,
    /// A live buffer moved from `previous` to `category`.
    Category,
    /// A phase began (`label.phase`; empty: the phase ended).
    Phase,
}

impl EventKind {
    pub fn name(self) -> &'static str {
        match self {
            EventKind::Alloc => "alloc",
            EventKind::Free => "free",
            EventKind::Category => "category",
            EventKind::Phase => "phase",
        }
    }
}

/// One entry of the recorded history.
#[derive(Clone, Debug)]
pub struct Event {
    pub kind: EventKind,
    pub addr: usize,
    pub size: usize,
    /// Alloc: `Other`; Free: the category at the free; Category: the new category.
    pub category: Category,
    /// Free: the buffer's lifetime category; Category: the category it left.
    pub previous: Category,
    pub time_us: u64,
    pub label: Label,
}

struct History {
    enabled: bool,
    /// Whether events are kept ("all"), or only live buffers' labels ("state").
    trace: bool,
    max_entries: usize,
    events: VecDeque<Event>,
    /// Bytes by category just before the first kept event (events dropped from the front
    /// of the ring are folded in), so the history replays to exact totals.
    baseline: [i64; 5],
}

// ---- counters ----

static CURRENT: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);
static LIVE_PEAK: AtomicI64 = AtomicI64::new(0);
static NUM_ALLOCS: AtomicU64 = AtomicU64::new(0);
static NUM_FREES: AtomicU64 = AtomicU64::new(0);
static BYTES_ALLOCATED: AtomicU64 = AtomicU64::new(0);
static BYTES_FREED: AtomicU64 = AtomicU64::new(0);
static BY_CATEGORY: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];
static PEAK_BY_CATEGORY: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];
static RECORDING: AtomicBool = AtomicBool::new(false);

// ---- the registry: sharded map + counting filter ----

const SHARD_BITS: u32 = 5;
const SHARDS: usize = 1 << SHARD_BITS;
const FILTER_BITS: u32 = 14;
const FILTER_LEN: usize = 1 << FILTER_BITS;

/// `FILTER[slot(addr)]`: how many registered buffers hash to this slot. Zero means the
/// address is certainly not registered, so the free needs no lock.
static FILTER: [AtomicU32; FILTER_LEN] = [const { AtomicU32::new(0) }; FILTER_LEN];

#[inline]
fn mix(addr: usize) -> u64 {
    ((addr as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn shard_of(addr: usize) -> usize {
    (mix(addr) >> (64 - SHARD_BITS)) as usize
}

#[inline]
fn slot_of(addr: usize) -> usize {
    ((mix(addr) >> 32) as usize) & (FILTER_LEN - 1)
}

/// Addresses are already well spread by `mix`; SipHash would only cost time.
#[derive(Default)]
struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0 << 8 | b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_usize(&mut self, n: usize) {
        self.0 = mix(n);
    }
}

type Shard = Mutex<HashMap<usize, Entry, BuildHasherDefault<AddrHasher>>>;

fn shards() -> &'static [Shard; SHARDS] {
    static S: OnceLock<[Shard; SHARDS]> = OnceLock::new();
    S.get_or_init(|| std::array::from_fn(|_| Mutex::new(HashMap::default())))
}

fn shard(addr: usize) -> &'static Shard {
    &shards()[shard_of(addr)]
}

/// How the accounting runs; read once from `GRADSTREAM_MEMORY_ACCOUNTING`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Normal: filter, then the shard lock.
    On = 1,
    /// For measurement only: nothing is registered, every counter stays 0.
    Off = 2,
    /// For measurement only: every free takes the shard lock (no filter).
    Locked = 3,
}

static MODE: AtomicU8 = AtomicU8::new(0);

pub fn mode() -> Mode {
    match MODE.load(Ordering::Relaxed) {
        1 => Mode::On,
        2 => Mode::Off,
        3 => Mode::Locked,
        _ => {
            let m = match std::env::var("GRADSTREAM_MEMORY_ACCOUNTING").as_deref() {
                Ok("0") | Ok("off") => Mode::Off,
                Ok("locked") => Mode::Locked,
                _ => Mode::On,
            };
            MODE.store(m as u8, Ordering::Relaxed);
            m
        }
    }
}

fn history() -> &'static Mutex<History> {
    static H: OnceLock<Mutex<History>> = OnceLock::new();
    H.get_or_init(|| {
        Mutex::new(History {
            enabled: false,
            trace: false,
            max_entries: usize::MAX,
            events: VecDeque::new(),
            baseline: [0; 5],
        })
    })
}

fn context() -> &'static Mutex<Label> {
    static C: OnceLock<Mutex<Label>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(Label::default()))
}

/// Microseconds since the Unix epoch, from a monotonic clock.
fn now_us() -> u64 {
    static E: OnceLock<(Instant, u64)> = OnceLock::new();
    let (t0, unix0) = E.get_or_init(|| {
        let unix = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros() as u64)
            .unwrap_or(0);
        (Instant::now(), unix)
    });
    unix0 + t0.elapsed().as_micros() as u64
}

thread_local! {
    // Set while this thread is inside the registry: the registry's own (de)allocations are
    // not tensor storage, and looking them up could re-enter a shard lock.
    static IN_REGISTRY: Cell<bool> = const { Cell::new(false) };
}

fn guarded<R>(f: impl FnOnce() -> R) -> R {
    let prev = IN_REGISTRY.with(|g| g.replace(true));
    let r = f();
    IN_REGISTRY.with(|g| g.set(prev));
    r
}

/// What is running now, as recorded on events: the explicit phase, or "backward" while
/// the engine has named the node it runs.
fn current_label() -> Label {
    let c = context().lock();
    let phase = if c.phase.is_empty() && !c.op.is_empty() {
        Arc::from("backward")
    } else {
        c.phase.clone()
    };
    Label {
        phase,
        op: c.op.clone(),
    }
}

fn category_delta(e: &Event) -> [(Category, i64); 2] {
    match e.kind {
        EventKind::Alloc => [(e.category, e.size as i64), (Category::Other, 0)],
        EventKind::Free => [(e.category, -(e.size as i64)), (Category::Other, 0)],
        EventKind::Category => [(e.category, e.size as i64), (e.previous, -(e.size as i64))],
        EventKind::Phase => [(Category::Other, 0), (Category::Other, 0)],
    }
}

fn push_event(h: &mut History, e: Event) {
    if h.events.len() >= h.max_entries {
        match h.events.pop_front() {
            Some(old) => {
                for (c, d) in category_delta(&old) {
                    h.baseline[c as usize] += d;
                }
            }
            None => return, // max_entries == 0
        }
    }
    h.events.push_back(e);
}

fn record_event(
    kind: EventKind,
    addr: usize,
    size: usize,
    category: Category,
    previous: Category,
    label: Option<Label>,
) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    let label = label.unwrap_or_else(current_label);
    let mut h = history().lock();
    if !h.enabled || !h.trace {
        return;
    }
    push_event(
        &mut h,
        Event {
            kind,
            addr,
            size,
            category,
            previous,
            time_us: now_us(),
            label,
        },
    );
}

fn add_category_bytes(category: Category, bytes: i64) {
    let now = BY_CATEGORY[category as usize].fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK_BY_CATEGORY[category as usize].fetch_max(now, Ordering::Relaxed);
}

/// The registry key and byte size of a candle tensor's buffer; `None` for empty buffers
/// and for buffers that are not in host memory.
pub fn storage_key(t: &candle_core::Tensor) -> Option<(usize, usize)> {
    let (storage, _) = t.storage_and_layout();
    let (ptr, bytes) = match &*storage {
        Storage::Cpu(cpu) => cpu_ptr_bytes(cpu),
        _ => return None,
    };
    (bytes > 0).then_some((ptr, bytes))
}

fn cpu_ptr_bytes(s: &CpuStorage) -> (usize, usize) {
    // The allocation's size is the capacity, which is what the allocator frees.
    fn pb<T>(v: &Vec<T>) -> (usize, usize) {
        (v.as_ptr() as usize, v.capacity() * std::mem::size_of::<T>())
    }
    match s {
        CpuStorage::U8(v) => pb(v),
        CpuStorage::U32(v) => pb(v),
        CpuStorage::I16(v) => pb(v),
        CpuStorage::I32(v) => pb(v),
        CpuStorage::I64(v) => pb(v),
        CpuStorage::BF16(v) => pb(v),
        CpuStorage::F16(v) => pb(v),
        CpuStorage::F32(v) => pb(v),
        CpuStorage::F64(v) => pb(v),
        CpuStorage::F8E4M3(v) => pb(v),
        CpuStorage::F6E2M3(v)
        | CpuStorage::F6E3M2(v)
        | CpuStorage::F4(v)
        | CpuStorage::F8E8M0(v) => pb(v),
    }
}

/// The registry key of a candle tensor's buffer.
pub fn buffer_key(t: &candle_core::Tensor) -> Option<usize> {
    storage_key(t).map(|(k, _)| k)
}

/// A gradstream tensor now wraps this buffer.
pub fn register(key: usize, bytes: usize) {
    if mode() == Mode::Off {
        return;
    }
    let recording = RECORDING.load(Ordering::Relaxed);
    let label = recording.then(current_label);
    guarded(|| {
        let mut reg = shard(key).lock();
        if let Some(e) = reg.get_mut(&key) {
            e.refs += 1;
            return;
        }
        reg.insert(
            key,
            Entry {
                bytes,
                refs: 1,
                roles: [0; 4],
                category: Category::Other,
                lifetime: Category::Other,
                label: label.clone(),
            },
        );
        FILTER[slot_of(key)].fetch_add(1, Ordering::Release);
        NUM_ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES_ALLOCATED.fetch_add(bytes as u64, Ordering::Relaxed);
        let live = LIVE.fetch_add(1, Ordering::Relaxed) + 1;
        LIVE_PEAK.fetch_max(live, Ordering::Relaxed);
        add_category_bytes(Category::Other, bytes as i64);
        let now = CURRENT.fetch_add(bytes as i64, Ordering::Relaxed) + bytes as i64;
        PEAK.fetch_max(now, Ordering::Relaxed);
        if recording {
            record_event(
                EventKind::Alloc,
                key,
                bytes,
                Category::Other,
                Category::Other,
                label,
            );
        }
    })
}

/// A gradstream tensor wrapping this buffer was dropped. The bytes stay counted until
/// the allocator frees the buffer.
pub fn unregister(key: usize) {
    guarded(|| {
        if let Some(e) = shard(key).lock().get_mut(&key) {
            e.refs = e.refs.saturating_sub(1);
        }
    })
}

/// Whether exactly one gradstream tensor wraps this buffer.
pub fn is_unique(key: usize) -> bool {
    if mode() == Mode::Off {
        return false;
    }
    guarded(|| shard(key).lock().get(&key).is_some_and(|e| e.refs == 1))
}

fn change_role(key: usize, role: Role, delta: i32) {
    guarded(|| {
        let mut reg = shard(key).lock();
        let Some(e) = reg.get_mut(&key) else { return };
        let slot = &mut e.roles[role as usize];
        *slot = (*slot as i64 + delta as i64).max(0) as u32;
        let new = e.derive_category();
        if new == e.category {
            return;
        }
        let old = e.category;
        BY_CATEGORY[old as usize].fetch_sub(e.bytes as i64, Ordering::Relaxed);
        add_category_bytes(new, e.bytes as i64);
        e.category = new;
        if e.lifetime == Category::Other {
            e.lifetime = new;
        }
        record_event(EventKind::Category, key, e.bytes, new, old, None);
    })
}

pub fn add_role(key: usize, role: Role) {
    change_role(key, role, 1)
}

pub fn remove_role(key: usize, role: Role) {
    change_role(key, role, -1)
}

/// A forward op recorded its node: label the output's buffer with the node's name if it
/// was just allocated (not a view of an input).
pub fn label_output(out: Option<usize>, inputs: &[Option<usize>], name: &str) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    let Some(key) = out else { return };
    if inputs.contains(&Some(key)) {
        return;
    }
    guarded(|| {
        let label = {
            let c = context().lock();
            Label {
                phase: if c.phase.is_empty() {
                    Arc::from("forward")
                } else {
                    c.phase.clone()
                },
                op: Arc::from(name),
            }
        };
        {
            let mut reg = shard(key).lock();
            match reg.get_mut(&key).and_then(|e| e.label.as_mut()) {
                Some(l) if l.op.is_empty() => *l = label.clone(),
                _ => return,
            }
        }
        let mut h = history().lock();
        let found = h
            .events
            .iter_mut()
            .rev()
            .take(64)
            .find(|e| e.addr == key && e.kind == EventKind::Alloc);
        if let Some(e) = found {
            if e.label.op.is_empty() {
                e.label = label;
            }
        }
    })
}

fn on_free(addr: usize) {
    guarded(|| {
        let removed = shard(addr).lock().remove(&addr);
        if let Some(e) = removed {
            FILTER[slot_of(addr)].fetch_sub(1, Ordering::Relaxed);
            LIVE.fetch_sub(1, Ordering::Relaxed);
            NUM_FREES.fetch_add(1, Ordering::Relaxed);
            BYTES_FREED.fetch_add(e.bytes as u64, Ordering::Relaxed);
            BY_CATEGORY[e.category as usize].fetch_sub(e.bytes as i64, Ordering::Relaxed);
            CURRENT.fetch_sub(e.bytes as i64, Ordering::Relaxed);
            record_event(EventKind::Free, addr, e.bytes, e.category, e.lifetime, None);
        }
    })
}

/// Whether a free of `ptr` must be looked up: it may be a registered buffer, and this
/// thread is not inside the registry already.
#[inline]
fn watched(ptr: *mut u8) -> bool {
    let addr = ptr as usize;
    let maybe = match MODE.load(Ordering::Relaxed) {
        3 => LIVE.load(Ordering::Relaxed) > 0,
        _ => FILTER[slot_of(addr)].load(Ordering::Acquire) > 0,
    };
    maybe && !IN_REGISTRY.try_with(|g| g.get()).unwrap_or(true)
}

/// The extension's global allocator: the system allocator, watching frees of registered buffers.
pub struct CountingAllocator;

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        System.alloc(layout)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        System.alloc_zeroed(layout)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if watched(ptr) {
            on_free(ptr as usize);
        }
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A registered buffer that is resized is no longer the buffer that was registered.
        if watched(ptr) {
            on_free(ptr as usize);
        }
        System.realloc(ptr, layout, new_size)
    }
}

pub fn memory_allocated() -> i64 {
    CURRENT.load(Ordering::Relaxed)
}

pub fn max_memory_allocated() -> i64 {
    PEAK.load(Ordering::Relaxed)
}

pub fn reset_peak_memory_stats() {
    PEAK.store(CURRENT.load(Ordering::Relaxed), Ordering::Relaxed);
    LIVE_PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    for c in Category::ALL {
        PEAK_BY_CATEGORY[c as usize].store(
            BY_CATEGORY[c as usize].load(Ordering::Relaxed),
            Ordering::Relaxed,
        );
    }
}

/// Counters in the style of `torch.cuda.memory_stats()`.
pub struct Stats {
    pub num_allocs: u64,
    pub num_frees: u64,
    pub bytes_allocated: u64,
    pub bytes_freed: u64,
    pub live: i64,
    pub live_peak: i64,
}

pub fn stats() -> Stats {
    Stats {
        num_allocs: NUM_ALLOCS.load(Ordering::Relaxed),
        num_frees: NUM_FREES.load(Ordering::Relaxed),
        bytes_allocated: BYTES_ALLOCATED.load(Ordering::Relaxed),
        bytes_freed: BYTES_FREED.load(Ordering::Relaxed),
        live: LIVE.load(Ordering::Relaxed),
        live_peak: LIVE_PEAK.load(Ordering::Relaxed),
    }
}

pub fn num_allocs() -> u64 {
    NUM_ALLOCS.load(Ordering::Relaxed)
}

pub fn num_frees() -> u64 {
    NUM_FREES.load(Ordering::Relaxed)
}

pub fn bytes_by_category() -> [(Category, i64); 5] {
    Category::ALL.map(|c| (c, BY_CATEGORY[c as usize].load(Ordering::Relaxed)))
}

pub fn peak_bytes_by_category() -> [(Category, i64); 5] {
    Category::ALL.map(|c| (c, PEAK_BY_CATEGORY[c as usize].load(Ordering::Relaxed)))
}

/// The label attached to recorded events: the backward node (set by the engine) or the
/// step running. Costs one relaxed load when history is off.
pub fn set_context(label: &str) {
    if RECORDING.load(Ordering::Relaxed) {
        guarded(|| {
            let mut c = context().lock();
            if &*c.op != label {
                c.op = Arc::from(label);
            }
        })
    }
}

/// Set the phase (e.g. "forward", "backward", "optimizer"); returns the previous one so
/// a scope can restore it. Recorded as a phase event.
pub fn set_phase(phase: &str) -> String {
    guarded(|| {
        let prev = {
            let mut c = context().lock();
            let prev = c.phase.to_string();
            c.phase = Arc::from(phase);
            prev
        };
        if RECORDING.load(Ordering::Relaxed) {
            let label = Label {
                phase: Arc::from(phase),
                op: Arc::from(""),
            };
            record_event(
                EventKind::Phase,
                0,
                0,
                Category::Other,
                Category::Other,
                Some(label),
            );
        }
        prev
    })
}

/// Start (`enabled`) or stop recording. Starting clears the history; `trace` false keeps
/// only the labels of live buffers (PyTorch's `"state"`). Keeps the last `max_entries`.
pub fn record_history(enabled: bool, trace: bool, max_entries: usize) {
    guarded(|| {
        let mut h = history().lock();
        if enabled {
            h.events.clear();
            h.baseline = bytes_by_category().map(|(_, b)| b);
            now_us();
        }
        h.enabled = enabled;
        h.trace = trace;
        h.max_entries = max_entries;
        RECORDING.store(enabled, Ordering::Relaxed);
    })
}

pub fn is_recording() -> bool {
    RECORDING.load(Ordering::Relaxed)
}

/// The recorded events and the bytes by category just before the first of them.
pub fn history_events() -> (Vec<Event>, [i64; 5]) {
    guarded(|| {
        let h = history().lock();
        (h.events.iter().cloned().collect(), h.baseline)
    })
}

/// A live registered buffer, for a snapshot's segments.
pub struct Block {
    pub addr: usize,
    pub bytes: usize,
    pub category: Category,
    pub lifetime: Category,
    pub label: Option<Label>,
}

pub fn live_blocks() -> Vec<Block> {
    guarded(|| {
        let mut out = Vec::new();
        for s in shards() {
            out.extend(s.lock().iter().map(|(&addr, e)| Block {
                addr,
                bytes: e.bytes,
                category: e.category,
                lifetime: e.lifetime,
                label: e.label.clone(),
            }));
        }
        out.sort_by_key(|b| b.addr);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_and_shards_spread_addresses() {
        // Page-aligned (+16) addresses, as large mallocs return, must not pile into one slot.
        let mut slots = std::collections::HashSet::new();
        let mut shard_set = std::collections::HashSet::new();
        for i in 0..1000usize {
            let a = 0x7f00_0000_0010 + i * 4096;
            slots.insert(slot_of(a));
            shard_set.insert(shard_of(a));
        }
        assert!(slots.len() > 900);
        assert_eq!(shard_set.len(), SHARDS);
    }
}
