//! Exact byte accounting of tensor storage.
//!
//! Every candle buffer that a gradstream `Tensor` wraps is registered here by its data
//! pointer. The counting global allocator sees the moment that buffer is really freed
//! (the last candle reference dropped), so `memory_allocated()` is exactly the bytes of
//! live tensor storage: views add nothing, and a buffer shared by several tensors counts once.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::Instant;

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

struct Entry {
    bytes: usize,
    /// gradstream tensors wrapping this buffer.
    refs: usize,
    roles: [u32; 4],
    category: Category,
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

/// One allocation or free, for the recorded history.
#[derive(Clone, Debug)]
pub struct Event {
    pub alloc: bool,
    pub addr: usize,
    pub size: usize,
    pub category: Category,
    pub time_us: u64,
    pub context: String,
}

struct History {
    enabled: bool,
    max_entries: usize,
    events: Vec<Event>,
}

static REGISTERED: AtomicUsize = AtomicUsize::new(0);
static CURRENT: AtomicI64 = AtomicI64::new(0);
static PEAK: AtomicI64 = AtomicI64::new(0);
static NUM_ALLOCS: AtomicU64 = AtomicU64::new(0);
static NUM_FREES: AtomicU64 = AtomicU64::new(0);
static BY_CATEGORY: [AtomicI64; 5] = [const { AtomicI64::new(0) }; 5];
static RECORDING: AtomicBool = AtomicBool::new(false);

fn registry() -> &'static Mutex<HashMap<usize, Entry>> {
    static R: OnceLock<Mutex<HashMap<usize, Entry>>> = OnceLock::new();
    R.get_or_init(|| Mutex::new(HashMap::new()))
}

fn history() -> &'static Mutex<History> {
    static H: OnceLock<Mutex<History>> = OnceLock::new();
    H.get_or_init(|| {
        Mutex::new(History {
            enabled: false,
            max_entries: usize::MAX,
            events: Vec::new(),
        })
    })
}

fn context() -> &'static Mutex<String> {
    static C: OnceLock<Mutex<String>> = OnceLock::new();
    C.get_or_init(|| Mutex::new(String::new()))
}

fn epoch() -> Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    *E.get_or_init(Instant::now)
}

thread_local! {
    // Set while this thread is inside the registry: the registry's own (de)allocations are
    // not tensor storage, and looking them up would re-enter the lock.
    static IN_REGISTRY: Cell<bool> = const { Cell::new(false) };
}

fn guarded<R>(f: impl FnOnce() -> R) -> R {
    IN_REGISTRY.with(|g| g.set(true));
    let r = f();
    IN_REGISTRY.with(|g| g.set(false));
    r
}

fn record_event(alloc: bool, addr: usize, size: usize, category: Category) {
    if !RECORDING.load(Ordering::Relaxed) {
        return;
    }
    let mut h = history().lock();
    if !h.enabled || h.events.len() >= h.max_entries {
        return;
    }
    let ctx = context().lock().clone();
    h.events.push(Event {
        alloc,
        addr,
        size,
        category,
        time_us: epoch().elapsed().as_micros() as u64,
        context: ctx,
    });
}

fn add_bytes(category: Category, bytes: i64) {
    BY_CATEGORY[category as usize].fetch_add(bytes, Ordering::Relaxed);
    let now = CURRENT.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

/// The registry key and byte size of a candle tensor's buffer; `None` for empty buffers.
pub fn storage_key(t: &candle_core::Tensor) -> Option<(usize, usize)> {
    let (storage, _) = t.storage_and_layout();
    let (ptr, bytes) = match &*storage {
        Storage::Cpu(cpu) => cpu_ptr_bytes(cpu),
        _ => return None,
    };
    (bytes > 0).then_some((ptr, bytes))
}

fn cpu_ptr_bytes(s: &CpuStorage) -> (usize, usize) {
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
    guarded(|| {
        let mut reg = registry().lock();
        match reg.get_mut(&key) {
            Some(e) => e.refs += 1,
            None => {
                reg.insert(
                    key,
                    Entry {
                        bytes,
                        refs: 1,
                        roles: [0; 4],
                        category: Category::Other,
                    },
                );
                REGISTERED.fetch_add(1, Ordering::Relaxed);
                NUM_ALLOCS.fetch_add(1, Ordering::Relaxed);
                add_bytes(Category::Other, bytes as i64);
                record_event(true, key, bytes, Category::Other);
            }
        }
    })
}

/// A gradstream tensor wrapping this buffer was dropped. The bytes stay counted until
/// the allocator frees the buffer.
pub fn unregister(key: usize) {
    guarded(|| {
        if let Some(e) = registry().lock().get_mut(&key) {
            e.refs = e.refs.saturating_sub(1);
        }
    })
}

/// Whether exactly one gradstream tensor wraps this buffer.
pub fn is_unique(key: usize) -> bool {
    guarded(|| registry().lock().get(&key).is_some_and(|e| e.refs == 1))
}

fn change_role(key: usize, role: Role, delta: i32) {
    guarded(|| {
        let mut reg = registry().lock();
        if let Some(e) = reg.get_mut(&key) {
            let slot = &mut e.roles[role as usize];
            *slot = (*slot as i64 + delta as i64).max(0) as u32;
            let new = e.derive_category();
            if new != e.category {
                BY_CATEGORY[e.category as usize].fetch_sub(e.bytes as i64, Ordering::Relaxed);
                BY_CATEGORY[new as usize].fetch_add(e.bytes as i64, Ordering::Relaxed);
                e.category = new;
            }
        }
    })
}

pub fn add_role(key: usize, role: Role) {
    change_role(key, role, 1)
}

pub fn remove_role(key: usize, role: Role) {
    change_role(key, role, -1)
}

fn on_free(addr: usize) {
    guarded(|| {
        let removed = registry().lock().remove(&addr);
        if let Some(e) = removed {
            REGISTERED.fetch_sub(1, Ordering::Relaxed);
            NUM_FREES.fetch_add(1, Ordering::Relaxed);
            BY_CATEGORY[e.category as usize].fetch_sub(e.bytes as i64, Ordering::Relaxed);
            CURRENT.fetch_sub(e.bytes as i64, Ordering::Relaxed);
            record_event(false, addr, e.bytes, e.category);
        }
    })
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
        if REGISTERED.load(Ordering::Relaxed) > 0 && !IN_REGISTRY.with(|g| g.get()) {
            on_free(ptr as usize);
        }
        System.dealloc(ptr, layout)
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if REGISTERED.load(Ordering::Relaxed) > 0 && !IN_REGISTRY.with(|g| g.get()) {
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

/// The label attached to recorded events: the op, backward node or optimizer step running.
pub fn set_context(label: &str) {
    if RECORDING.load(Ordering::Relaxed) {
        guarded(|| {
            let mut c = context().lock();
            c.clear();
            c.push_str(label);
        })
    }
}

pub fn record_history(enabled: bool, max_entries: usize) {
    guarded(|| {
        let mut h = history().lock();
        h.enabled = enabled;
        h.max_entries = max_entries;
        if enabled {
            h.events.clear();
            epoch();
        }
        RECORDING.store(enabled, Ordering::Relaxed);
    })
}

pub fn history_events() -> Vec<Event> {
    guarded(|| history().lock().events.clone())
}

/// Live registered buffers as (address, bytes, category), for a snapshot's segments.
pub fn live_blocks() -> Vec<(usize, usize, Category)> {
    guarded(|| {
        registry()
            .lock()
            .iter()
            .map(|(&a, e)| (a, e.bytes, e.category))
            .collect()
    })
}
