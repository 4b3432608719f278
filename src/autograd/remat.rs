//! Rematerialisation: under a memory budget, each recorded op's output gets a `Cell` that
//! knows how to compute it again: the op's forward as a closure over its inputs' cells
//! (or, for leaves, the inputs themselves). A saved activation held through a cell can be
//! evicted (its buffer dropped, see `budget`) and is recomputed, recursively through
//! evicted inputs, when the backward unpacks it.
//!
//! Cells hold data only while a node saved them; otherwise a cell is a recipe and a weak
//! handle on the op's output, so a graph of cells costs no activation memory of its own.
//!
//! A view (a reshape, a transpose, a split piece) gets a cell too, whose recipe is the view
//! of its input's cell: the saved view holds its base's buffer, so the budget evicts a
//! buffer with every cell that holds it (see `budget`). While a view is saved, its root
//! (the nearest cell with a buffer of its own) keeps a recomputed buffer, so the views of
//! one buffer (attention's q, k and v, split from one projection) recompute it once.
//!
//! A recompute that rebuilds an input which other recorded ops also read (the q, k, v
//! projection that three adds read, each saved by attention) keeps it as *scratch* until
//! the running backward node ends, so the next of those recomputes finds it instead of
//! rebuilding it again; scratch is the budget's first victim (see `budget`).

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Instant;

use parking_lot::Mutex;

use crate::autograd::budget;
use crate::autograd::grad_mode::GradModeGuard;
use crate::error::{Error, Result};
use crate::memory::{self, Role};
use crate::tensor::{shape_str, Tensor, TensorImpl};

/// How far `score` follows chains of evicted inputs.
const MAX_DEPTH: usize = 32;

/// An op's forward, run again on its (rematerialised) inputs in no-grad mode.
pub type Forward = Box<dyn Fn(&[Tensor]) -> Result<Tensor> + Send + Sync>;

/// Where a recompute takes an input from.
enum Source {
    /// The output of another recorded op.
    Cell(Arc<Cell>),
    /// A leaf (a parameter, the step's input), kept with its version at record time: a
    /// recompute after it changed in place would compute something else.
    Fixed { t: Tensor, version: u64 },
}

impl Source {
    fn value(&self, name: &str) -> Result<Tensor> {
        match self {
            Source::Cell(c) => c.value(),
            Source::Fixed { t, version } if t.version() != *version => {
                Err(Error::autograd(format!(
                    "memory budget: cannot recompute {name}: its input [{} {}] was modified by \
                     an inplace operation since the forward (version {}, expected {version}); \
                     an optimizer stepping inside backward updated a parameter that a later \
                     recompute still needs",
                    t.dtype().name(),
                    shape_str(&t.dims()),
                    t.version(),
                )))
            }
            Source::Fixed { t, .. } => Ok(t.clone()),
        }
    }

    /// What making this input available would cost: nothing when it is materialised, else
    /// its recompute, with that of its own evicted inputs (up to `depth` levels).
    fn rebuild_cost(&self, depth: usize) -> f64 {
        match self {
            Source::Cell(c) if depth > 0 && c.is_evicted() => c.projected_cost(depth - 1),
            _ => 0.0,
        }
    }
}

struct State {
    /// The buffer, held while a node saved it (or a view of it) and it is not evicted.
    data: Option<Tensor>,
    /// Saved views of this cell's buffer.
    pins: usize,
    /// The op's output as the caller holds it: used while alive, never kept alive.
    out: Weak<TensorImpl>,
    /// The sequence numbers of the nodes whose saved tensors read this cell, one per
    /// saved tensor: the budget's guess of when the backward uses it next.
    savers: Vec<u64>,
    /// Seconds the forward took (measured again at each recompute).
    cost: f64,
    /// The budget clock at the last use, for the staleness term of the score.
    last_use: u64,
    /// `data` is a recomputed input kept only until the running backward node ends.
    scratch: bool,
}

impl State {
    /// A node saved this cell, or a saved view of its buffer.
    fn is_saved(&self) -> bool {
        !self.savers.is_empty() || self.pins > 0
    }

    /// Neither data nor the op's output is alive: using it means recomputing it.
    fn is_evicted(&self) -> bool {
        self.data.is_none() && self.out.strong_count() == 0
    }

    /// Inside a backward at `at`: how many nodes run before the next saver reads it.
    fn next_read(&self, at: budget::Position) -> Option<u64> {
        self.savers.iter().filter_map(|&s| at.distance(s)).min()
    }
}

/// What the budget scores a cell by (see `Cell::usage`).
pub struct Usage {
    pub cost: f64,
    pub last_use: u64,
    /// Inside a backward pass: how many nodes run before the next one that reads the cell
    /// (`None`: none will).
    pub next_use: Option<u64>,
}

/// One recorded op's output under a budget: its recipe and, while saved, its data.
pub struct Cell {
    pub name: &'static str,
    /// Cells are numbered as they are made: the budget breaks ties between equal scores by
    /// it.
    pub id: u64,
    /// The bytes of the buffer its output lives in (a view's: its base's).
    pub bytes: usize,
    /// The output's version when the op made it: what the recipe makes. Written in place
    /// since (`relu_`), the output holds something else, and the recipe is recomputed.
    version: u64,
    /// For a view: the cell whose buffer it shares.
    root: Option<Arc<Cell>>,
    /// A view (of a cell's or a leaf's buffer): remaking it allocates nothing.
    view: bool,
    forward: Forward,
    /// The autocast dtype the op ran under: a recompute runs under it too.
    autocast: crate::autocast::Region,
    inputs: Vec<Source>,
    /// How many recorded ops read this output (their cells hold this one as a source).
    readers: std::sync::atomic::AtomicUsize,
    state: Mutex<State>,
}

thread_local! {
    /// Cells whose recomputed data is scratch, dropped when the running backward node ends.
    static SCRATCH: std::cell::RefCell<Vec<Arc<Cell>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// An op is starting: under a budget, the moment, so that its recipe's cost is the time the
/// op took (inner ops with recipes of their own included; a composite's intermediates get
/// their own cells with their own times).
pub fn start() -> Option<Instant> {
    budget::is_active().then(Instant::now)
}

/// The seconds an op that began at `started` took, when under a budget it records a node on
/// `inputs`; `None`: it leaves no recipe.
fn recorded_cost(started: Option<Instant>, inputs: &[&Tensor]) -> Option<f64> {
    let started = started?;
    let recorded = budget::is_active() && crate::autograd::function::should_record(inputs);
    recorded.then(|| started.elapsed().as_secs_f64())
}

/// Give `out`, just computed by op `name` from `inputs` since `started` (see `start`), a
/// cell with `forward` as its recipe, when a budget is set and the op records a node. An
/// input that is neither a leaf nor a cell's output (an op without a recipe made it)
/// leaves `out` without one.
pub fn note(
    name: &'static str,
    out: &Tensor,
    inputs: &[&Tensor],
    started: Option<Instant>,
    forward: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) {
    let Some(cost) = recorded_cost(started, inputs) else {
        return;
    };
    let Some(bytes) = own_bytes(out, inputs) else {
        return;
    };
    attach(
        name,
        out,
        inputs,
        Box::new(forward),
        bytes,
        cost,
        None,
        false,
    );
}

/// `note` for an op with several outputs (`max(dim)`'s values and indices, `sort`): each
/// output gets a cell whose recipe runs the op and takes its own output.
pub fn note_outputs(
    name: &'static str,
    outs: &[&Tensor],
    inputs: &[&Tensor],
    started: Option<Instant>,
    forward: impl Fn(&[Tensor]) -> Result<Vec<Tensor>> + Send + Sync + 'static,
) {
    let Some(cost) = recorded_cost(started, inputs) else {
        return;
    };
    let forward = Arc::new(forward);
    for (i, out) in outs.iter().enumerate() {
        let Some(bytes) = own_bytes(out, inputs) else {
            continue;
        };
        let f = forward.clone();
        let pick: Forward = Box::new(move |ins: &[Tensor]| {
            f(ins)?
                .into_iter()
                .nth(i)
                .ok_or_else(|| Error::Runtime(format!("memory budget: {name} gave no output {i}")))
        });
        attach(name, out, inputs, pick, bytes, cost, None, false);
    }
}

/// `note` for a write into `dst`'s buffer (`copy_`, `x[i] = v`, every in-place op that
/// records): `dst` gets a new cell, `forward` remaking its value as written from `inputs`,
/// the first of which may be `dst`'s value before the write (a detached alias that carries
/// the old cell). The old cell no longer holds `dst` (its version moved) and remakes the
/// value before the write when the new one needs it.
pub fn note_write(
    name: &'static str,
    dst: &Tensor,
    inputs: &[&Tensor],
    started: Option<Instant>,
    forward: impl Fn(&[Tensor]) -> Result<Tensor> + Send + Sync + 'static,
) {
    let Some(cost) = recorded_cost(started, inputs) else {
        return;
    };
    let Some(buffer) = memory::storage_key(&dst.data()) else {
        return;
    };
    if dst.remat_cell().is_some_and(|c| c.root.is_some() || c.view) {
        return; // a write through a view: its base's cell cannot see it
    }
    attach(
        name,
        dst,
        inputs,
        Box::new(forward),
        buffer.bytes,
        cost,
        None,
        false,
    );
}

/// The bytes of `out`'s buffer, when it has one of its own (not an input's, written in
/// place).
fn own_bytes(out: &Tensor, inputs: &[&Tensor]) -> Option<usize> {
    let buffer = memory::storage_key(&out.data())?;
    let in_place = inputs.iter().any(|t| t.storage_key() == Some(buffer.addr));
    (!in_place).then_some(buffer.bytes)
}

/// `note` for a view op: `out` shares `x`'s buffer, and `view` makes it again from `x`.
pub fn note_view(
    name: &'static str,
    out: &Tensor,
    x: &Tensor,
    view: impl Fn(&Tensor) -> Result<Tensor> + Send + Sync + 'static,
) {
    if !budget::is_active() || !crate::autograd::function::should_record(&[x]) {
        return;
    }
    if Arc::ptr_eq(&out.0, &x.0) {
        return; // the input itself (a reshape to its own shape)
    }
    let Some(memory_buffer) = memory::storage_key(&out.data()) else {
        return;
    };
    let (key, bytes) = (memory_buffer.addr, memory_buffer.bytes);
    // A reshape may copy: then the result has a buffer of its own and no root.
    let shares = x.storage_key() == Some(key);
    let root = shares
        .then(|| x.remat_cell().map(|c| c.root.clone().unwrap_or(c)))
        .flatten();
    let forward: Forward = Box::new(move |ins: &[Tensor]| view(&ins[0]));
    // Remaking a view costs nothing that matters beside the ops that make buffers.
    attach(name, out, &[x], forward, bytes, 0.0, root, shares);
}

#[allow(clippy::too_many_arguments)]
fn attach(
    name: &'static str,
    out: &Tensor,
    inputs: &[&Tensor],
    forward: Forward,
    bytes: usize,
    cost: f64,
    root: Option<Arc<Cell>>,
    view: bool,
) {
    let mut sources = Vec::with_capacity(inputs.len());
    for t in inputs {
        let source = match t.remat_cell() {
            Some(c) if c.holds(t) => Source::Cell(c),
            // Written since its op made it (through a view of it): its recipe remakes the
            // value before the write, not the one this op read.
            Some(_) => return,
            None if t.is_leaf() => Source::Fixed {
                t: (*t).clone(),
                version: t.version(),
            },
            None => return,
        };
        sources.push(source);
    }
    for s in &sources {
        if let Source::Cell(c) = s {
            c.readers.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let cell = Arc::new(Cell {
        name,
        id: NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        bytes,
        version: out.version(),
        root,
        view,
        forward,
        autocast: crate::autocast::region(),
        inputs: sources,
        readers: std::sync::atomic::AtomicUsize::new(0),
        state: Mutex::new(State {
            data: None,
            pins: 0,
            out: out.downgrade(),
            savers: Vec::new(),
            cost,
            last_use: budget::tick(),
            scratch: false,
        }),
    });
    out.set_remat_cell(Some(cell));
}

impl Cell {
    /// Whether `t`, this cell's output, still holds what the recipe makes (it was not
    /// written in place since).
    pub fn holds(&self, t: &Tensor) -> bool {
        t.version() == self.version
    }

    /// The node about to be made saves this cell's output `t`: keep an alias of it (`t` is
    /// alive, so this costs no bytes even if the cell was evicted before). Returns the
    /// node's sequence number, for `release`.
    pub fn save(self: &Arc<Cell>, t: &Tensor) -> u64 {
        let saver = crate::autograd::node::next_sequence_nr();
        if let Some(root) = &self.root {
            root.state.lock().pins += 1;
        }
        let alias = t.detach();
        let mut st = self.state.lock();
        st.savers.push(saver);
        st.last_use = budget::tick();
        st.scratch = false;
        if st.data.is_none() {
            alias.set_role(Role::Activation, true);
            st.data = Some(alias);
            drop(st);
            budget::track(self);
        }
        saver
    }

    /// Node `saver` released its saved tensor: the last release drops the data.
    pub fn release(&self, saver: u64) {
        if let Some(root) = &self.root {
            root.unpin();
        }
        let data = {
            let mut st = self.state.lock();
            if let Some(i) = st.savers.iter().position(|&s| s == saver) {
                st.savers.swap_remove(i);
            }
            if st.is_saved() {
                return;
            }
            st.data.take()
        };
        if let Some(d) = data {
            d.set_role(Role::Activation, false);
        }
    }

    /// A saved view of this buffer was released.
    fn unpin(&self) {
        let data = {
            let mut st = self.state.lock();
            st.pins = st.pins.saturating_sub(1);
            if st.is_saved() {
                return;
            }
            st.data.take()
        };
        if let Some(d) = data {
            d.set_role(Role::Activation, false);
        }
    }

    /// Neither saved data nor the op's output is alive: using it means recomputing it.
    pub fn is_evicted(&self) -> bool {
        self.state.try_lock().is_some_and(|st| st.is_evicted())
    }

    /// The output, recomputed if it was evicted (or freed, for cells no node saved).
    pub fn value(self: &Arc<Cell>) -> Result<Tensor> {
        {
            let mut st = self.state.lock();
            st.last_use = budget::tick();
            if let Some(d) = st.data.as_ref().filter(|d| self.holds(d)) {
                return Ok(d.clone());
            }
            if let Some(o) = st.out.upgrade().map(Tensor).filter(|o| self.holds(o)) {
                return Ok(o);
            }
        }
        let inputs = self
            .inputs
            .iter()
            .map(|s| s.value(self.name))
            .collect::<Result<Vec<_>>>()?;
        let t0 = Instant::now();
        let out = {
            let _no_grad = GradModeGuard::new(false);
            let _phase = RecomputePhase::enter();
            let outer = crate::autocast::set_region(self.autocast);
            let out = (self.forward)(&inputs);
            crate::autocast::set_region(outer);
            out?
        };
        drop(inputs);
        let (keep, scratch) = {
            let mut st = self.state.lock();
            let seconds = t0.elapsed().as_secs_f64();
            if !budget::probing() {
                st.cost = seconds;
            }
            if !self.view {
                budget::count_recompute(self.bytes, seconds);
            }
            let saved = st.is_saved();
            // An input that other ops read too: their recomputes may need it next.
            let scratch = !saved && !self.view && self.readers() > 1;
            if saved || scratch {
                out.set_role(Role::Activation, true);
                st.data = Some(out.clone());
                st.scratch = scratch;
            }
            (saved || scratch, scratch)
        };
        if keep {
            budget::track(self);
        }
        if scratch {
            SCRATCH.with(|s| s.borrow_mut().push(self.clone()));
        }
        Ok(out)
    }

    /// The registry key of the buffer its data holds, if it holds data no one else holds
    /// a handle on (a node unpacking it does while it runs).
    pub fn held_key(&self) -> Option<usize> {
        let st = self.state.try_lock()?;
        let d = st.data.as_ref()?;
        if Arc::strong_count(&d.0) != 1 {
            return None;
        }
        d.storage_key()
    }

    /// Drop the data (the budget checked that only cells hold its buffer).
    pub fn evict(&self) {
        let d = self.state.try_lock().and_then(|mut st| st.data.take());
        if let Some(d) = d {
            d.set_role(Role::Activation, false);
        }
    }

    /// What the budget's score needs: recompute cost (with that of evicted inputs, which a
    /// recompute would also pay), the clock at the last use, and, inside a backward pass
    /// at `at`, how soon a node reads it; `None` when the cell is busy.
    pub fn usage(&self, at: Option<budget::Position>) -> Option<Usage> {
        let (cost, last_use, next_use) = {
            let st = self.state.try_lock()?;
            let next = at.and_then(|at| st.next_read(at));
            (st.cost, st.last_use, next)
        };
        let inputs: f64 = self.inputs.iter().map(|s| s.rebuild_cost(MAX_DEPTH)).sum();
        Some(Usage {
            cost: cost + inputs,
            last_use,
            next_use,
        })
    }

    /// Its own recompute time plus that of the evicted inputs a recompute would rebuild
    /// first (DTR's evicted neighbourhood, followed along the inputs): evicting the one
    /// materialised link of a long evicted chain is priced as the whole chain.
    fn projected_cost(&self, depth: usize) -> f64 {
        let own = self.state.try_lock().map_or(0.0, |st| st.cost);
        own + self
            .inputs
            .iter()
            .map(|s| s.rebuild_cost(depth))
            .sum::<f64>()
    }

    /// How many recorded ops read this output (the count only grows: a reader that is gone
    /// still counts, which at worst keeps a scratch buffer that no one reads again).
    fn readers(&self) -> usize {
        self.readers.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Its data is scratch: a recomputed input kept for the running backward node only.
    pub fn is_scratch(&self) -> bool {
        self.state
            .try_lock()
            .is_some_and(|st| st.scratch && st.data.is_some())
    }

    /// It holds data, or a node will read it (it may be evicted).
    pub fn in_use(&self) -> bool {
        self.state
            .try_lock()
            .is_none_or(|st| st.data.is_some() || st.is_saved())
    }

    /// Inside a backward at `at`, when this cell is evicted and a node reads it `d` nodes
    /// from now: its recompute reads its materialised ancestors then, so their next use is
    /// at most `d`. Records the soonest such use of each ancestor (by address) in `reads`.
    pub fn note_recompute_reads(&self, at: budget::Position, reads: &mut HashMap<usize, u64>) {
        let d = {
            let Some(st) = self.state.try_lock() else {
                return;
            };
            match st.next_read(at).filter(|_| st.is_evicted()) {
                Some(d) => d,
                None => return,
            }
        };
        let mut stack: Vec<(&Cell, usize)> = vec![(self, MAX_DEPTH)];
        while let Some((cell, depth)) = stack.pop() {
            for s in &cell.inputs {
                let Source::Cell(c) = s else { continue };
                let key = Arc::as_ptr(c) as usize;
                if reads.get(&key).is_some_and(|&e| e <= d) {
                    continue;
                }
                reads.insert(key, d);
                if depth > 0 && c.is_evicted() {
                    stack.push((c, depth - 1));
                }
            }
        }
    }
}

/// Whether `t`, an input a recompute was handed, is a transient of that recompute: made by
/// it and held by nothing else (no cell kept it, no caller holds it, no view shares its
/// buffer), so the op may overwrite it in place instead of taking a second buffer.
pub fn is_transient(t: &Tensor) -> bool {
    Arc::strong_count(&t.0) == 1
        && t.grad_fn().is_none()
        && t.storage_key().is_some_and(|k| memory::refs(k) == 1)
        && t.data().is_contiguous()
}

/// A backward node ended: drop the scratch its recomputes kept (the engine calls this
/// after every node, and when a pass ends, failed or not).
pub fn drop_scratch() {
    let cells = SCRATCH.with(|s| std::mem::take(&mut *s.borrow_mut()));
    for c in cells {
        let data = {
            let mut st = c.state.lock();
            if !st.scratch {
                continue;
            }
            st.scratch = false;
            if st.is_saved() {
                continue; // saved since: a node's to release
            }
            st.data.take()
        };
        if let Some(d) = data {
            d.set_role(Role::Activation, false);
        }
    }
}

/// Whether the buffer `key`, held by `holders` cells and nothing else, may be evicted:
/// it is not a parameter's, gradient's or optimizer state's buffer.
pub fn evictable(key: usize, holders: usize) -> bool {
    memory::refs(key) == holders
        && ![Role::Parameter, Role::Gradient, Role::OptimizerState]
            .iter()
            .any(|&r| memory::has_role(key, r))
}

/// Buffers allocated while recomputing are labelled `recompute:<op>` in the history.
struct RecomputePhase(Option<String>);

impl RecomputePhase {
    fn enter() -> Self {
        RecomputePhase(memory::is_recording().then(|| memory::set_phase(memory::RECOMPUTE)))
    }
}

impl Drop for RecomputePhase {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            memory::set_phase(&p);
        }
    }
}
