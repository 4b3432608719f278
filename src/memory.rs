//! Exact byte accounting of tensor storage, per device.
//!
//! Every candle buffer that a gradstream `Tensor` wraps is registered here by its address
//! (`backend::buffer_of`: a host pointer, or a device pointer) and counted on its device's
//! slot. For host buffers the counting global allocator sees the moment a buffer is really
//! freed (the last candle reference dropped), so `memory_allocated()` is exactly the bytes
//! of live tensor storage: views add nothing, and a buffer shared by several tensors counts
//! once. A device buffer's free is not the host allocator's to see: it is counted when the
//! last gradstream tensor wrapping it goes.
//!
//! Cost. Every deallocation in the extension passes through `CountingAllocator::dealloc`.
//! Its fast path is one hash and one relaxed load of a counting filter (`FILTER`): a slot
//! is non-zero only while a registered buffer hashes to it, so frees of everything else
//! (shapes, `Arc`s, strings, candle temporaries) never touch a lock. Tensor events (a
//! buffer registered, a role changed, a buffer freed) take the registry's one lock, which
//! also guards every counter: two atomic operations per event, where separate atomic
//! counters cost a dozen (measured: `benches/memory_overhead.py`).
//!
//! History. `record_history(true, n)` keeps the last `n` events (alloc, free, category
//! change, phase change) with the phase and op running, for `gradstream.memory.snapshot()`.

use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::block_cache;
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
    /// The device slot it is counted on (`slot`).
    device: Slot,
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
    /// The device slot of the buffer (`HOST` for phase events).
    pub device: Slot,
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
    /// By device slot.
    baseline: Vec<[i64; 5]>,
}

// ---- the registry: one lock over the buffers and the counters, and a counting filter ----

#[derive(Default)]
struct Counters {
    current: i64,
    peak: i64,
    live: i64,
    live_peak: i64,
    num_allocs: u64,
    num_frees: u64,
    bytes_allocated: u64,
    bytes_freed: u64,
    by_category: [i64; 5],
    peak_by_category: [i64; 5],
}

impl Counters {
    fn add(&mut self, category: Category, bytes: i64) {
        let c = &mut self.by_category[category as usize];
        *c += bytes;
        let p = &mut self.peak_by_category[category as usize];
        *p = (*p).max(*c);
    }
}

/// Where a buffer is counted: `HOST` (0) for host memory, `1 + n` for `cuda:n`.
pub type Slot = u8;
pub const HOST: Slot = 0;

/// The slot of a device.
pub fn slot(device: &candle_core::Device) -> Slot {
    match device.location() {
        candle_core::DeviceLocation::Cpu => HOST,
        candle_core::DeviceLocation::Cuda { gpu_id } => 1 + gpu_id.min(254) as Slot,
        candle_core::DeviceLocation::Metal { gpu_id } => 1 + gpu_id.min(254) as Slot,
    }
}

struct Registry {
    buffers: HashMap<usize, Entry, BuildHasherDefault<AddrHasher>>,
    /// Counters by device slot.
    counters: Vec<Counters>,
    /// The cap on a device's bytes (`set_per_process_memory_fraction`), by slot; 0: none.
    limits: Vec<u64>,
}

impl Registry {
    fn counters(&mut self, slot: Slot) -> &mut Counters {
        let i = slot as usize;
        if self.counters.len() <= i {
            self.counters.resize_with(i + 1, Counters::default);
        }
        &mut self.counters[i]
    }
}

static RECORDING: AtomicBool = AtomicBool::new(false);

const FILTER_BITS: u32 = 14;
const FILTER_LEN: usize = 1 << FILTER_BITS;

/// `FILTER[slot(addr)]`: how many registered buffers hash to this slot. Zero means the
/// address is certainly not registered, so the free needs no lock. Written only under
/// the registry lock (plain load + store), read by every free.
static FILTER: [AtomicU32; FILTER_LEN] = [const { AtomicU32::new(0) }; FILTER_LEN];

#[inline]
fn mix(addr: usize) -> u64 {
    ((addr as u64) >> 4).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[inline]
fn slot_of(addr: usize) -> usize {
    ((mix(addr) >> 32) as usize) & (FILTER_LEN - 1)
}

fn filter_add(addr: usize, delta: i32) {
    let f = &FILTER[slot_of(addr)];
    f.store(
        (f.load(Ordering::Relaxed) as i64 + delta as i64) as u32,
        Ordering::Release,
    );
}

/// Addresses are spread by `mix`; SipHash would only cost time.
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

fn registry() -> &'static Mutex<Registry> {
    static R: OnceLock<Mutex<Registry>> = OnceLock::new();
    R.get_or_init(|| {
        Mutex::new(Registry {
            buffers: HashMap::default(),
            counters: vec![Counters::default()],
            limits: Vec::new(),
        })
    })
}

/// How the accounting runs; read once from `GRADSTREAM_MEMORY_ACCOUNTING`.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    /// Normal: filter, then the registry lock.
    On = 1,
    /// For measurement only: nothing is registered, every counter stays 0.
    Off = 2,
    /// For measurement only: every free takes the registry lock (no filter).
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

/// Switch the accounting mode at run time, for overhead measurements only: buffers
/// allocated while `Off` are never counted, so the figures are wrong afterwards.
pub fn set_mode(m: Mode) {
    mode();
    MODE.store(m as u8, Ordering::Relaxed);
}

fn history() -> &'static Mutex<History> {
    static H: OnceLock<Mutex<History>> = OnceLock::new();
    H.get_or_init(|| {
        Mutex::new(History {
            enabled: false,
            trace: false,
            max_entries: usize::MAX,
            events: VecDeque::new(),
            baseline: Vec::new(),
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
    // not tensor storage, and looking them up would re-enter the registry lock.
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
                    let slot = old.device as usize;
                    if h.baseline.len() <= slot {
                        h.baseline.resize(slot + 1, [0; 5]);
                    }
                    h.baseline[slot][c as usize] += d;
                }
            }
            None => return, // max_entries == 0
        }
    }
    h.events.push_back(e);
}

fn record_event(
    kind: EventKind,
    (addr, size, device): (usize, usize, Slot),
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
            device,
            category,
            previous,
            time_us: now_us(),
            label,
        },
    );
}

/// The registry key, byte size and device slot of a candle tensor's buffer; `None` for
/// empty buffers and for devices without accounting.
pub fn storage_key(t: &candle_core::Tensor) -> Option<crate::backend::Buffer> {
    crate::backend::buffer_of(t)
}

/// Live bytes `register` keeps new buffers of the budget's device within, by evicting saved
/// activations (`autograd::budget`); 0: none.
static BUDGET: AtomicU64 = AtomicU64::new(0);
/// The device slot the budget bounds.
static BUDGET_SLOT: AtomicU8 = AtomicU8::new(HOST);

pub fn budget() -> Option<u64> {
    match BUDGET.load(Ordering::Relaxed) {
        0 => None,
        b => Some(b),
    }
}

/// A budget still to be set, as a fraction of the peak when the first backward pass ends
/// (`python -m gradstream.alias --memory-budget 60%`), and the device it bounds.
static FIRST_STEP_FRACTION: parking_lot::Mutex<Option<(f64, Slot)>> = parking_lot::Mutex::new(None);

/// Set the budget of device `slot` to `fraction` of its exact peak when the next backward
/// pass ends (the first step of a training loop, run unconstrained); `None` cancels.
pub fn set_budget_fraction(fraction: Option<f64>, slot: Slot) {
    *FIRST_STEP_FRACTION.lock() = fraction.map(|f| (f, slot));
}

/// A backward pass ended: set the budget a fraction waited for.
pub fn backward_ended() {
    let Some((fraction, slot)) = FIRST_STEP_FRACTION.lock().take() else {
        return;
    };
    let peak = max_memory_allocated(slot).max(0) as f64;
    set_budget(Some((peak * fraction) as u64), slot);
}

/// The device slot the budget bounds.
pub fn budget_slot() -> Slot {
    BUDGET_SLOT.load(Ordering::Relaxed)
}

/// Set (or, with `None`, clear) the memory budget of device `slot`; returns the previous one.
pub fn set_budget(bytes: Option<u64>, slot: Slot) -> Option<u64> {
    BUDGET_SLOT.store(slot, Ordering::Relaxed);
    match BUDGET.swap(bytes.map_or(0, |b| b.max(1)), Ordering::Relaxed) {
        0 => None,
        b => Some(b),
    }
}

/// The phase in which the budget evicts saved activations: their frees carry it.
pub const EVICT: &str = "evict";

/// Under a budget, make room for a new buffer of the budget's device before it is counted.
fn fit_budget(key: usize, bytes: usize, budget: u64, slot: Slot) {
    let over = guarded(|| {
        let mut reg = registry().lock();
        !reg.buffers.contains_key(&key) && reg.counters(slot).current + bytes as i64 > budget as i64
    });
    if over {
        crate::autograd::budget::make_room(bytes, budget);
    }
}

/// Under a budget, a large buffer is about to be allocated: evict for it now, so the
/// process's footprint stays within the budget. Evicting only when the buffer is registered,
/// after the op has made it, let the footprint pass the budget by that buffer's size (12 MiB
/// on the lora step) while the count stayed within it. Best effort: it evicts only on a
/// thread outside the accounting and outside rayon's workers, and never raises; `register`
/// still enforces the budget on the count.
pub fn before_large_alloc(bytes: usize) {
    let Some(b) = budget().filter(|_| budget_slot() == HOST) else {
        return;
    };
    if IN_REGISTRY.try_with(|g| g.get()).unwrap_or(true)
        || rayon::current_thread_index().is_some()
        || mode() == Mode::Off
    {
        return;
    }
    if memory_allocated(HOST) + bytes as i64 > b as i64 {
        crate::autograd::budget::make_room_early(bytes, b);
    }
}

/// A gradstream tensor now wraps this buffer.
pub fn register(buffer: &crate::backend::Buffer) {
    let (key, bytes, device) = (buffer.addr, buffer.bytes, buffer.device);
    if mode() == Mode::Off {
        return;
    }
    if let Some(b) = budget().filter(|_| budget_slot() == device) {
        fit_budget(key, bytes, b, device);
    }
    let recording = RECORDING.load(Ordering::Relaxed);
    let label = recording.then(current_label);
    guarded(|| {
        let mut reg = registry().lock();
        if let Some(e) = reg.buffers.get_mut(&key) {
            e.refs += 1;
            return;
        }
        reg.buffers.insert(
            key,
            Entry {
                bytes,
                device,
                refs: 1,
                roles: [0; 4],
                category: Category::Other,
                lifetime: Category::Other,
                label: label.clone(),
            },
        );
        filter_add(key, 1);
        let limit = reg.limits.get(device as usize).copied().unwrap_or(0);
        let c = reg.counters(device);
        if limit > 0 && c.current + bytes as i64 > limit as i64 {
            crate::autograd::budget::fail(over_limit(bytes, c.current, limit, device));
        }
        c.num_allocs += 1;
        c.bytes_allocated += bytes as u64;
        c.live += 1;
        c.live_peak = c.live_peak.max(c.live);
        c.current += bytes as i64;
        c.peak = c.peak.max(c.current);
        c.add(Category::Other, bytes as i64);
        if recording {
            record_event(
                EventKind::Alloc,
                (key, bytes, device),
                Category::Other,
                Category::Other,
                label,
            );
        }
    })
}

/// Cap the bytes of device `slot` (`set_per_process_memory_fraction`); 0 removes the cap.
pub fn set_limit(slot: Slot, bytes: u64) {
    guarded(|| {
        let mut reg = registry().lock();
        let i = slot as usize;
        if reg.limits.len() <= i {
            reg.limits.resize(i + 1, 0);
        }
        reg.limits[i] = bytes;
    })
}

/// PyTorch's out-of-memory message, for a buffer that passed a device's cap.
fn over_limit(bytes: usize, held: i64, limit: u64, slot: Slot) -> String {
    let mib = |b: f64| b / (1024.0 * 1024.0);
    format!(
        "CUDA out of memory. Tried to allocate {:.2} MiB on device {} with {:.2} MiB \
         allocated by gradstream's tensors, above this process's cap of {:.2} MiB \
         (set_per_process_memory_fraction)",
        mib(bytes as f64),
        slot.saturating_sub(1),
        mib(held as f64),
        mib(limit as f64)
    )
}

/// A gradstream tensor wrapping this buffer was dropped. A host buffer's bytes stay
/// counted until the allocator frees it; a device buffer goes with its last tensor.
pub fn unregister(key: usize) {
    let gone = guarded(|| match registry().lock().buffers.get_mut(&key) {
        Some(e) => {
            e.refs = e.refs.saturating_sub(1);
            e.refs == 0 && e.device != HOST
        }
        None => false,
    });
    if gone {
        on_free(key);
    }
}

/// Whether exactly one gradstream tensor wraps this buffer.
pub fn is_unique(key: usize) -> bool {
    if mode() == Mode::Off {
        return false;
    }
    guarded(|| {
        registry()
            .lock()
            .buffers
            .get(&key)
            .is_some_and(|e| e.refs == 1)
    })
}

/// How many gradstream tensors wrap this buffer (0 when untracked).
pub fn refs(key: usize) -> usize {
    if mode() == Mode::Off {
        return 0;
    }
    guarded(|| registry().lock().buffers.get(&key).map_or(0, |e| e.refs))
}

/// Whether a tensor holding this buffer has the role (e.g. a parameter's).
pub fn has_role(key: usize, role: Role) -> bool {
    guarded(|| {
        registry()
            .lock()
            .buffers
            .get(&key)
            .is_some_and(|e| e.roles[role as usize] > 0)
    })
}

fn change_role(key: usize, role: Role, delta: i32) {
    guarded(|| {
        let mut reg = registry().lock();
        let reg = &mut *reg;
        let Some(e) = reg.buffers.get_mut(&key) else {
            return;
        };
        let slot = &mut e.roles[role as usize];
        *slot = (*slot as i64 + delta as i64).max(0) as u32;
        let new = e.derive_category();
        if new == e.category {
            return;
        }
        let old = e.category;
        let (bytes, device) = (e.bytes, e.device);
        e.category = new;
        if e.lifetime == Category::Other {
            e.lifetime = new;
        }
        let c = reg.counters(device);
        c.add(old, -(bytes as i64));
        c.add(new, bytes as i64);
        record_event(EventKind::Category, (key, bytes, device), new, old, None);
    })
}

pub fn add_role(key: usize, role: Role) {
    change_role(key, role, 1)
}

pub fn remove_role(key: usize, role: Role) {
    change_role(key, role, -1)
}

/// The phase a checkpoint's backward runs its recompute in: buffers allocated there are
/// labelled `recompute:<op>` by `label_output`, and plotted as their own band.
pub const RECOMPUTE: &str = "recompute";

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
            let recompute = &*c.phase == RECOMPUTE;
            Label {
                phase: if c.phase.is_empty() {
                    Arc::from("forward")
                } else {
                    c.phase.clone()
                },
                op: if recompute {
                    Arc::from(format!("{RECOMPUTE}:{name}"))
                } else {
                    Arc::from(name)
                },
            }
        };
        // A buffer allocated by a recompute carries the backward node that runs it
        // (`CheckpointBackward`); the forward op that made it is the better name.
        let relabel = |l: &Label| {
            l.op.is_empty()
                || (&*l.phase == RECOMPUTE && !l.op.starts_with(&format!("{RECOMPUTE}:")))
        };
        {
            let mut reg = registry().lock();
            match reg.buffers.get_mut(&key).and_then(|e| e.label.as_mut()) {
                Some(l) if relabel(l) => *l = label.clone(),
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
            if relabel(&e.label) {
                e.label = label;
            }
        }
    })
}

fn on_free(addr: usize) {
    guarded(|| {
        let mut reg = registry().lock();
        let Some(e) = reg.buffers.remove(&addr) else {
            return;
        };
        filter_add(addr, -1);
        let c = reg.counters(e.device);
        c.live -= 1;
        c.num_frees += 1;
        c.bytes_freed += e.bytes as u64;
        c.current -= e.bytes as i64;
        c.by_category[e.category as usize] -= e.bytes as i64;
        let at = (addr, e.bytes, e.device);
        record_event(EventKind::Free, at, e.category, e.lifetime, None);
    })
}

/// Whether a free of `ptr` must be looked up: it may be a registered buffer, and this
/// thread is not inside the registry already.
#[inline]
fn watched(ptr: *mut u8) -> bool {
    let maybe = MODE.load(Ordering::Relaxed) == Mode::Locked as u8
        || FILTER[slot_of(ptr as usize)].load(Ordering::Acquire) > 0;
    maybe && !IN_REGISTRY.try_with(|g| g.get()).unwrap_or(true)
}

/// The extension's global allocator: the system allocator behind the cache of large freed
/// blocks (`block_cache`), watching frees of registered buffers.
pub struct CountingAllocator;

unsafe impl GlobalAlloc for CountingAllocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        block_cache::alloc(layout, false)
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        block_cache::alloc(layout, true)
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        if watched(ptr) {
            on_free(ptr as usize);
        }
        block_cache::dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A registered buffer that is resized is no longer the buffer that was registered.
        if watched(ptr) {
            on_free(ptr as usize);
        }
        block_cache::realloc(ptr, layout, new_size)
    }
}

fn read<R>(slot: Slot, f: impl FnOnce(&Counters) -> R) -> R {
    guarded(|| f(registry().lock().counters(slot)))
}

/// Bytes of tensor storage alive now on the device of `slot`.
pub fn memory_allocated(slot: Slot) -> i64 {
    read(slot, |c| c.current)
}

pub fn max_memory_allocated(slot: Slot) -> i64 {
    read(slot, |c| c.peak)
}

pub fn reset_peak_memory_stats(slot: Slot) {
    guarded(|| {
        let mut reg = registry().lock();
        let c = reg.counters(slot);
        c.peak = c.current;
        c.live_peak = c.live;
        c.peak_by_category = c.by_category;
    })
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

pub fn stats(slot: Slot) -> Stats {
    read(slot, |c| Stats {
        num_allocs: c.num_allocs,
        num_frees: c.num_frees,
        bytes_allocated: c.bytes_allocated,
        bytes_freed: c.bytes_freed,
        live: c.live,
        live_peak: c.live_peak,
    })
}

pub fn num_allocs(slot: Slot) -> u64 {
    read(slot, |c| c.num_allocs)
}

pub fn num_frees(slot: Slot) -> u64 {
    read(slot, |c| c.num_frees)
}

pub fn bytes_by_category(slot: Slot) -> [(Category, i64); 5] {
    read(slot, |c| {
        Category::ALL.map(|k| (k, c.by_category[k as usize]))
    })
}

pub fn peak_bytes_by_category(slot: Slot) -> [(Category, i64); 5] {
    read(slot, |c| {
        Category::ALL.map(|k| (k, c.peak_by_category[k as usize]))
    })
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
                (0, 0, HOST),
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
        // Registry before history, the order every tensor event takes them in; holding
        // the registry keeps events out until the baseline and the flag agree.
        let reg = registry().lock();
        let mut h = history().lock();
        if enabled {
            h.events.clear();
            h.baseline = reg.counters.iter().map(|c| c.by_category).collect();
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

/// The recorded events of a device (and the phase changes), and its bytes by category just
/// before the first of them.
pub fn history_events(slot: Slot) -> (Vec<Event>, [i64; 5]) {
    guarded(|| {
        let h = history().lock();
        let events = h
            .events
            .iter()
            .filter(|e| e.device == slot || e.kind == EventKind::Phase);
        let base = h.baseline.get(slot as usize).copied().unwrap_or([0; 5]);
        (events.cloned().collect(), base)
    })
}

/// A live registered buffer, for a snapshot's segments.
pub struct Block {
    pub addr: usize,
    pub bytes: usize,
    pub device: Slot,
    pub category: Category,
    pub lifetime: Category,
    pub label: Option<Label>,
}

/// The live buffers of a device.
pub fn live_blocks(slot: Slot) -> Vec<Block> {
    guarded(|| {
        let mut out: Vec<Block> = registry()
            .lock()
            .buffers
            .iter()
            .filter(|(_, e)| e.device == slot)
            .map(|(&addr, e)| Block {
                addr,
                bytes: e.bytes,
                device: e.device,
                category: e.category,
                lifetime: e.lifetime,
                label: e.label.clone(),
            })
            .collect();
        out.sort_by_key(|b| b.addr);
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_spreads_addresses() {
        // Page-aligned (+16) addresses, as large mallocs return, must not pile into one slot.
        let mut slots = std::collections::HashSet::new();
        for i in 0..1000usize {
            slots.insert(slot_of(0x7f00_0000_0010 + i * 4096));
        }
        assert!(slots.len() > 900);
    }
}

#[cfg(test)]
mod timing {
    use super::*;

    #[test]
    #[ignore]
    fn time_register_free() {
        let n = 1_000_000usize;
        let keys: Vec<usize> = (0..64).map(|i| 0x7f00_0000_0010 + i * 4096).collect();
        let buffer = |addr| crate::backend::Buffer {
            addr,
            bytes: 64,
            device: HOST,
        };
        let t0 = Instant::now();
        for i in 0..n {
            let k = keys[i % 64];
            register(&buffer(k));
            unregister(k);
            on_free(k);
        }
        let per = t0.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("register+unregister+free: {per:.1} ns");
        let t0 = Instant::now();
        for i in 0..n {
            let k = keys[i % 64];
            std::hint::black_box(watched(k as *mut u8));
        }
        let per = t0.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("watched (miss): {per:.1} ns");
        register(&buffer(keys[0]));
        let t0 = Instant::now();
        for _ in 0..n {
            add_role(keys[0], Role::Activation);
            remove_role(keys[0], Role::Activation);
        }
        let per = t0.elapsed().as_nanos() as f64 / n as f64;
        eprintln!("add+remove role: {per:.1} ns");
    }
}
