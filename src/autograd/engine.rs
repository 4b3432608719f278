//! Backward: run the graph from the roots, latest-created node first, freeing as it goes.
//!
//! 1. Discover the nodes reachable from the roots; with `inputs`, keep only those that
//!    lead to one of them (path pruning).
//! 2. Count, for each node, the gradients it will receive.
//! 3. Pop ready nodes from a max-heap on sequence number. A node's pending gradients (one
//!    per output) live in its state from their first contribution until the node runs.
//!    The node is told which of its edges lead to a wanted gradient and computes only
//!    those; its saved tensors are released right after (unless `retain_graph`).
//!    Between nodes, a flag set by the SIGINT handler is checked, without the GIL.
//! 4. A leaf's sink runs as soon as its gradient is final: hooks, `.grad`, consumers.
//! 5. When a node, a hook or a consumer fails (or Ctrl-C stops it), the nodes that have
//!    not run release their saved tensors as if they had (unless `retain_graph`), so a
//!    failed pass leaves behind no more than a finished one.
//! 6. Under a memory budget, when a leaf's gradient has effects beyond `.grad` (an
//!    in-backward optimizer's step, a gradient consumer), the pass is first probed: run
//!    to the end with the graph retained and no effects (see `probe`). An
//!    `OutOfMemoryError` is then raised before any parameter was stepped.

use std::collections::{BinaryHeap, HashMap};
use std::sync::Arc;

use crate::autograd::accumulate::GradConsumer;
use crate::autograd::grad_mode::GradModeGuard;
use crate::autograd::grad_sum::add_grads;
use crate::autograd::interrupt;
use crate::autograd::node::{node_key, Edge, Node, Run};
use crate::autograd::pass::PassGuard;
use crate::error::{Error, Result};
use crate::memory;
use crate::ops;
use crate::tensor::{shape_str, Tensor};

pub struct BackwardOptions<'a> {
    pub retain_graph: bool,
    pub create_graph: bool,
    /// `autograd.grad`: return the inputs' gradients instead of accumulating into `.grad`.
    pub accumulate: bool,
    pub inputs: Option<&'a [Tensor]>,
    pub grad_consumer: Option<GradConsumer<'a>>,
    /// Asks Python whether Ctrl-C was pressed (`Err(..)` to stop). Called between nodes
    /// only once the SIGINT flag is set, or every node where the flag cannot be used.
    pub check_interrupt: &'a (dyn Fn() -> Result<()> + Sync),
}

/// What the engine knows about one node during one backward.
struct NodeState {
    node: Arc<dyn Node>,
    /// A gradient is wanted for one of its outputs: every node, unless `inputs` is given.
    is_target: bool,
    /// It is a target or leads to one, so it runs.
    needed: bool,
    /// Gradients still to come from needed nodes; it is ready at zero.
    dependencies: usize,
    /// Each output's gradient, from its first contribution until the node runs.
    pending: Vec<Option<Tensor>>,
    /// `autograd.grad`: (output, index in `inputs`) of each input whose gradient this is.
    captures: Vec<(usize, usize)>,
    /// Pushed on the ready queue (a node runs once).
    scheduled: bool,
}

impl NodeState {
    fn new(node: Arc<dyn Node>) -> Self {
        let outputs = node.num_outputs();
        NodeState {
            node,
            is_target: false,
            needed: false,
            dependencies: 0,
            pending: vec![None; outputs],
            captures: Vec::new(),
            scheduled: false,
        }
    }

    /// A contribution to output `input_nr`'s gradient: the first is moved in, later ones
    /// are summed.
    fn add(&mut self, input_nr: usize, grad: Tensor, create_graph: bool) -> Result<()> {
        let name = self.node.name();
        let slot = self.pending.get_mut(input_nr).ok_or_else(|| {
            Error::autograd(format!(
                "internal: a gradient for output {input_nr} of {name}"
            ))
        })?;
        *slot = Some(match slot.take() {
            None => grad,
            Some(acc) => add_grads(acc, &grad, create_graph)?,
        });
        Ok(())
    }

    /// The node is about to run: its pending gradients leave the state (moved on, never
    /// copied), through the hooks of each output, into `.grad` of an output that retains
    /// it, and into `results` where `autograd.grad` asked for them.
    fn receive(
        &mut self,
        opts: &BackwardOptions,
        results: &mut [Option<Tensor>],
        probe: bool,
    ) -> Result<Vec<Option<Tensor>>> {
        let base = self.node.base();
        let mut grads = Vec::with_capacity(self.pending.len());
        for (output, pending) in self.pending.iter_mut().enumerate() {
            let Some(g) = pending.take() else {
                grads.push(None);
                continue;
            };
            if probe {
                grads.push(Some(g));
                continue;
            }
            let g = base.run_pre_hooks(output, g)?;
            if let Some(t) = base.retained(output) {
                let sum = match t.take_grad() {
                    None => g.clone(),
                    Some(old) => add_grads(old, &g, opts.create_graph)?,
                };
                t.set_grad(Some(sum))?;
            }
            for &(_, i) in self.captures.iter().filter(|(o, _)| *o == output) {
                if !opts.accumulate {
                    results[i] = Some(g.clone());
                }
            }
            grads.push(Some(g));
        }
        Ok(grads)
    }
}

/// The nodes of one backward, keyed by node address, and their discovery order.
struct Graph {
    states: HashMap<usize, NodeState>,
    /// Post-order: every node after the nodes its edges lead to.
    order: Vec<usize>,
}

impl Graph {
    fn discover(roots: &[Edge]) -> Graph {
        let mut states: HashMap<usize, NodeState> = HashMap::new();
        let mut order = Vec::new();
        let mut stack: Vec<(Arc<dyn Node>, bool)> =
            roots.iter().map(|e| (e.node.clone(), false)).collect();
        while let Some((n, expanded)) = stack.pop() {
            let k = node_key(&n);
            if expanded {
                order.push(k);
                continue;
            }
            if states.contains_key(&k) {
                continue;
            }
            states.insert(k, NodeState::new(n.clone()));
            stack.push((n.clone(), true));
            for e in n.base().edges.iter().flatten() {
                if !states.contains_key(&e.key()) {
                    stack.push((e.node.clone(), false));
                }
            }
        }
        Graph { states, order }
    }

    /// The nodes whose gradient is wanted (all, without `inputs`), and which input each
    /// captured gradient answers.
    fn mark_targets(&mut self, inputs: Option<&[Tensor]>) -> Result<()> {
        let Some(inputs) = inputs else {
            self.states.values_mut().for_each(|s| s.is_target = true);
            return Ok(());
        };
        for (i, input) in inputs.iter().enumerate() {
            let edge = input.gradient_edge().ok_or_else(|| {
                Error::autograd(format!(
                    "One of the differentiated Tensors (input {i}) does not require grad"
                ))
            })?;
            // An input that no root leads to is kept too: its sink stays alive (and its
            // address unused) for the duration.
            let state = self
                .states
                .entry(edge.key())
                .or_insert_with(|| NodeState::new(edge.node.clone()));
            state.is_target = true;
            state.captures.push((edge.input_nr, i));
        }
        Ok(())
    }

    /// Path pruning: a node runs when it is a target or one of its edges leads to a node
    /// that runs; then each running node counts the gradients it will receive.
    fn count_dependencies(&mut self) {
        for &k in &self.order {
            let node = self.states[&k].node.clone();
            let leads = node.base().edges.iter().flatten().any(|e| self.needed(e));
            let s = self.states.get_mut(&k).expect("discovered");
            s.needed = s.is_target || leads;
        }
        for &k in &self.order {
            if !self.states[&k].needed {
                continue;
            }
            let node = self.states[&k].node.clone();
            for e in node.base().edges.iter().flatten() {
                if let Some(s) = self.states.get_mut(&e.key()).filter(|s| s.needed) {
                    s.dependencies += 1;
                }
            }
        }
    }

    fn needed(&self, e: &Edge) -> bool {
        self.states.get(&e.key()).is_some_and(|s| s.needed)
    }

    /// After a failure: what the nodes that would have run saved is dropped, as running
    /// them would have (releasing twice is harmless); pending gradients go with the graph.
    fn release_unrun(&self) {
        for s in self.states.values().filter(|s| s.needed) {
            s.node.release_saved();
        }
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ready(u64, usize);

/// The ready queue: latest-created first.
#[derive(Default)]
struct ReadyQueue(BinaryHeap<Ready>);

impl ReadyQueue {
    /// Queue a node whose gradients are all in, once.
    fn push_if_ready(&mut self, key: usize, s: &mut NodeState) {
        if s.dependencies == 0 && !s.scheduled {
            s.scheduled = true;
            self.0.push(Ready(s.node.base().sequence_nr, key));
        }
    }
}

fn validate_root(i: usize, root: &Tensor, grad: Option<&Tensor>) -> Result<Tensor> {
    if !root.requires_grad() {
        return Err(Error::autograd(format!(
            "element {i} of tensors does not require grad and does not have a grad_fn"
        )));
    }
    match grad {
        None => {
            if root.numel() != 1 {
                return Err(Error::autograd(format!(
                    "grad can be implicitly created only for scalar outputs (got a tensor of shape {})",
                    shape_str(&root.dims())
                )));
            }
            ops::creation::ones_like(root)
        }
        Some(g) => {
            if g.dims() != root.dims() {
                return Err(Error::shape(format!(
                    "Mismatch in shape: grad_output[{i}] has a shape of {} and output[{i}] has a shape of {}.",
                    shape_str(&g.dims()),
                    shape_str(&root.dims())
                )));
            }
            // PyTorch casts a gradient of another dtype to the output's dtype.
            if g.dtype() != root.dtype() {
                return ops::convert::to_dtype(g, root.dtype());
            }
            Ok(g.clone())
        }
    }
}

/// Run backward from `roots`. Returns the gradients of `opts.inputs` when
/// `opts.accumulate` is false (`autograd.grad`), else an empty vector.
pub fn run_backward(
    roots: &[Tensor],
    grads: &[Option<Tensor>],
    opts: &BackwardOptions,
) -> Result<Vec<Option<Tensor>>> {
    let _pass = PassGuard::enter();
    let _mode = GradModeGuard::new(opts.create_graph);
    let mut root_grads = Vec::with_capacity(roots.len());
    for (i, r) in roots.iter().enumerate() {
        let g = validate_root(i, r, grads.get(i).and_then(Option::as_ref))?;
        let edge = r
            .gradient_edge()
            .expect("a tensor that requires grad has an edge");
        root_grads.push((edge, g));
    }
    let _context = ContextGuard;
    let (mut graph, mut ready) = prepare(&root_grads, opts)?;
    if must_probe(&graph, opts) {
        let probed = run_nodes(&mut graph, ready, opts, &mut [], true);
        if probed.is_err() && !opts.retain_graph {
            graph.release_unrun();
        }
        probed?;
        (graph, ready) = prepare(&root_grads, opts)?;
    }
    // The graph holds the roots' gradients now, and frees each where it is consumed.
    drop(root_grads);
    let mut results: Vec<Option<Tensor>> = vec![None; opts.inputs.map_or(0, |i| i.len())];
    let run = run_nodes(&mut graph, ready, opts, &mut results, false);
    if run.is_err() && !opts.retain_graph {
        graph.release_unrun();
    }
    if run.is_ok() {
        crate::memory::backward_ended();
    }
    run.map(|()| results)
}

/// Steps 1 and 2, and the roots' gradients in place: the graph and its first ready nodes.
fn prepare(root_grads: &[(Edge, Tensor)], opts: &BackwardOptions) -> Result<(Graph, ReadyQueue)> {
    let root_edges: Vec<Edge> = root_grads.iter().map(|(e, _)| e.clone()).collect();
    let mut graph = Graph::discover(&root_edges);
    graph.mark_targets(opts.inputs)?;
    graph.count_dependencies();
    let mut ready = ReadyQueue::default();
    for (e, g) in root_grads {
        let s = graph.states.get_mut(&e.key()).expect("discovered");
        if s.needed {
            s.add(e.input_nr, g.clone(), opts.create_graph)?;
            // A root that another root leads to waits for its dependencies like any node.
            ready.push_if_ready(e.key(), s);
        }
    }
    Ok((graph, ready))
}

/// Whether the pass must be probed first (step 6). An in-backward step cannot be undone
/// without a copy of every parameter and its optimizer state, and holding the steps until
/// the pass ends would keep every gradient alive: the probe costs a second backward
/// instead, and no memory, and decides feasibility before anything is stepped.
fn must_probe(graph: &Graph, opts: &BackwardOptions) -> bool {
    crate::autograd::budget::is_active()
        && opts.accumulate
        && !opts.create_graph
        && graph.states.values().any(|s| {
            s.needed
                && s.is_target
                && s.node
                    .as_accumulate()
                    .is_some_and(|a| a.has_effects(opts.grad_consumer))
        })
}

/// Step 3: run the ready nodes until none is left. A `probe` (step 6) retains the graph,
/// runs no hooks, and hands no gradient to a leaf: the gradients of leaves without effects
/// are held to the end, as `.grad` would hold them, the others dropped, as their
/// consumers would.
fn run_nodes(
    graph: &mut Graph,
    mut ready: ReadyQueue,
    opts: &BackwardOptions,
    results: &mut [Option<Tensor>],
    probe: bool,
) -> Result<()> {
    let mut held = Vec::new();
    let watch = interrupt::watch();
    let _scratch = ScratchGuard;
    let _pass = crate::autograd::budget::enter_pass(probe);
    while let Some(Ready(sequence_nr, k)) = ready.0.pop() {
        crate::autograd::budget::at_node(sequence_nr);
        if watch.pending() {
            (opts.check_interrupt)()?;
        }
        let s = graph.states.get_mut(&k).expect("discovered");
        let node = s.node.clone();
        memory::set_context(node.name());
        let is_target = s.is_target;
        let grads = s.receive(opts, results, probe)?;

        let mut outputs = Vec::new();
        if let Some(sink) = node.as_accumulate() {
            let grad = grads.into_iter().next().flatten();
            if let (Some(g), true) = (grad, opts.accumulate && is_target) {
                if !probe {
                    sink.accept(g, opts.grad_consumer, opts.create_graph)?;
                } else if !sink.has_effects(opts.grad_consumer) {
                    held.push(g);
                }
            }
        } else if let Some(needs) = edge_needs(&node, graph) {
            let run = Run {
                needs: &needs,
                releases: !opts.retain_graph && !probe,
            };
            if grads.iter().any(Option::is_some) {
                outputs = node.apply(&node, &grads, &run)?;
            }
            drop(grads);
            if run.releases {
                node.release_saved();
            }
        }

        // The node ran: the inputs its recomputes kept for each other go.
        crate::autograd::remat::drop_scratch();
        // A buffer of this node (or of a leaf's consumer) that did not fit a memory budget.
        crate::autograd::budget::check()?;

        // Pass the gradients on; a node whose last gradient came is ready.
        let mut outputs = outputs.into_iter();
        for e in node.base().edges.iter() {
            let g = outputs.next().flatten();
            let Some(e) = e else { continue };
            let Some(child) = graph.states.get_mut(&e.key()).filter(|c| c.needed) else {
                continue;
            };
            if let Some(g) = g {
                child.add(e.input_nr, g, opts.create_graph)?;
            }
            child.dependencies = child.dependencies.saturating_sub(1);
            ready.push_if_ready(e.key(), child);
        }
    }
    drop(held);
    Ok(())
}

/// Which of a node's edges lead to a wanted gradient; `None` when none does.
fn edge_needs(node: &Arc<dyn Node>, graph: &Graph) -> Option<Vec<bool>> {
    let needs: Vec<bool> = node
        .base()
        .edges
        .iter()
        .map(|e| e.as_ref().is_some_and(|e| graph.needed(e)))
        .collect();
    needs.iter().any(|&n| n).then_some(needs)
}

/// Clears the memory-history context when backward ends, by error too.
struct ContextGuard;

/// Drops the scratch of recomputes when a pass ends, also when a node failed.
struct ScratchGuard;

impl Drop for ScratchGuard {
    fn drop(&mut self) {
        crate::autograd::remat::drop_scratch();
    }
}

impl Drop for ContextGuard {
    fn drop(&mut self) {
        memory::set_context("");
    }
}
