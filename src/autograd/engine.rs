//! Backward: run the graph from the roots, latest-created node first, freeing as it goes.
//!
//! 1. Discover the nodes reachable from the roots; with `inputs`, keep only those that
//!    lead to one of them (path pruning).
//! 2. Count, for each node, the gradients it will receive.
//! 3. Pop ready nodes from a max-heap on sequence number. A node's pending gradient lives
//!    in the `GradStore` from its first contribution until the node runs. The node is told
//!    which of its edges lead to a wanted gradient and computes only those; its saved
//!    tensors are released right after (unless `retain_graph`).
//!    Between nodes, a flag set by the SIGINT handler is checked, without the GIL.
//! 4. A leaf's sink runs as soon as its gradient is final: hooks, `.grad`, consumers.

use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::Arc;

use crate::autograd::grad_mode::GradModeGuard;
use crate::autograd::grad_sum::add_grads;
use crate::autograd::interrupt;
use crate::autograd::node::{node_key, Node};
use crate::error::{Error, Result};
use crate::memory;
use crate::ops;
use crate::tensor::{shape_str, Tensor};

/// Called for each leaf whose gradient is final, instead of storing `.grad`.
pub type GradConsumer<'a> = &'a (dyn Fn(&Tensor, &Tensor) -> Result<()> + Sync);

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

/// Pending gradients, keyed by node. An entry is removed the moment its node runs.
struct GradStore {
    pending: HashMap<usize, Tensor>,
}

impl GradStore {
    /// First contribution is moved in; later ones are summed.
    fn add(&mut self, key: usize, grad: Tensor, create_graph: bool) -> Result<()> {
        let sum = match self.pending.remove(&key) {
            None => grad,
            Some(acc) => add_grads(acc, &grad, create_graph)?,
        };
        self.pending.insert(key, sum);
        Ok(())
    }

    fn take(&mut self, key: usize) -> Option<Tensor> {
        self.pending.remove(&key)
    }
}

#[derive(PartialEq, Eq, PartialOrd, Ord)]
struct Ready(u64, usize);

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
    let _mode = GradModeGuard::new(opts.create_graph);
    let mut root_grads = Vec::with_capacity(roots.len());
    for (i, r) in roots.iter().enumerate() {
        let g = validate_root(i, r, grads.get(i).and_then(Option::as_ref))?;
        let edge = r
            .gradient_edge()
            .expect("a tensor that requires grad has an edge");
        root_grads.push((edge.node, g));
    }

    // Discover the graph.
    let mut nodes: HashMap<usize, Arc<dyn Node>> = HashMap::new();
    let mut order: Vec<usize> = Vec::new(); // post-order, children first
    {
        let mut stack: Vec<(Arc<dyn Node>, bool)> =
            root_grads.iter().map(|(n, _)| (n.clone(), false)).collect();
        let mut seen: HashSet<usize> = HashSet::new();
        while let Some((n, expanded)) = stack.pop() {
            let k = node_key(&n);
            if expanded {
                order.push(k);
                continue;
            }
            if !seen.insert(k) {
                continue;
            }
            stack.push((n.clone(), true));
            for e in n.base().edges.iter().flatten() {
                if !seen.contains(&e.key()) {
                    stack.push((e.node.clone(), false));
                }
            }
            nodes.insert(k, n);
        }
    }

    // Targets: the nodes whose incoming gradient is wanted.
    let mut captured: HashMap<usize, usize> = HashMap::new(); // node -> index in inputs
    let targets: Option<HashSet<usize>> = match opts.inputs {
        None => None,
        Some(inputs) => {
            let mut t = HashSet::new();
            for (i, inp) in inputs.iter().enumerate() {
                let edge = inp.gradient_edge().ok_or_else(|| {
                    Error::autograd(format!(
                        "One of the differentiated Tensors (input {i}) does not require grad"
                    ))
                })?;
                t.insert(edge.key());
                captured.entry(edge.key()).or_insert(i);
                // keep the sink alive for the duration
                nodes.entry(edge.key()).or_insert(edge.node);
            }
            Some(t)
        }
    };

    // needed: the node leads to a target (or is one). Post-order visits children first.
    let mut needed: HashSet<usize> = HashSet::new();
    for &k in &order {
        let n = &nodes[&k];
        let is_target = targets.as_ref().is_none_or(|t| t.contains(&k));
        let child_needed = n
            .base()
            .edges
            .iter()
            .flatten()
            .any(|e| needed.contains(&e.key()));
        if is_target || child_needed {
            needed.insert(k);
        }
    }

    // Dependencies along edges out of nodes that will run.
    let mut deps: HashMap<usize, usize> = HashMap::new();
    for &k in &order {
        if !needed.contains(&k) {
            continue;
        }
        for e in nodes[&k].base().edges.iter().flatten() {
            if needed.contains(&e.key()) {
                *deps.entry(e.key()).or_default() += 1;
            }
        }
    }

    let mut store = GradStore {
        pending: HashMap::new(),
    };
    let mut heap = BinaryHeap::new();
    let mut scheduled: HashSet<usize> = HashSet::new();
    for (n, g) in root_grads {
        let k = node_key(&n);
        if !needed.contains(&k) {
            continue;
        }
        store.add(k, g, opts.create_graph)?;
        // A root that another root leads to waits for its dependencies like any node.
        if deps.get(&k).copied().unwrap_or(0) == 0 && scheduled.insert(k) {
            heap.push(Ready(n.base().sequence_nr, k));
        }
    }

    let mut results: Vec<Option<Tensor>> = vec![None; opts.inputs.map_or(0, |i| i.len())];
    let mut ran: HashSet<usize> = HashSet::new();
    let watch = interrupt::watch();
    let _context = ContextGuard;
    while let Some(Ready(_, k)) = heap.pop() {
        if !ran.insert(k) {
            continue;
        }
        if watch.pending() {
            (opts.check_interrupt)()?;
        }
        let node = nodes[&k].clone();
        memory::set_context(node.name());

        // The pending gradient leaves the store now; it is moved on, never copied.
        let outputs = match store.take(k) {
            None => Vec::new(),
            Some(grad) => {
                let grad = node.base().run_pre_hooks(grad)?;
                if let Some(t) = node.base().retained() {
                    let sum = match t.take_grad() {
                        None => grad.clone(),
                        Some(old) => add_grads(old, &grad, opts.create_graph)?,
                    };
                    t.set_grad(Some(sum))?;
                }
                if let (Some(&i), false) = (captured.get(&k), opts.accumulate) {
                    results[i] = Some(grad.clone());
                }
                let is_target = targets.as_ref().is_none_or(|t| t.contains(&k));
                if let Some(leaf) = node.leaf() {
                    if opts.accumulate && is_target {
                        if let Some(leaf) = leaf.upgrade().map(Tensor) {
                            run_sink(&leaf, grad, opts)?;
                        }
                    }
                    Vec::new()
                } else if let Some(needs) = edge_needs(&node, &needed) {
                    let out = node.apply(&node, &grad, &needs)?;
                    drop(grad);
                    if !opts.retain_graph {
                        node.release_saved();
                    }
                    out
                } else {
                    Vec::new()
                }
            }
        };

        let mut outputs = outputs.into_iter();
        for e in node.base().edges.iter() {
            let g = outputs.next().flatten();
            let Some(e) = e else { continue };
            let ck = e.key();
            if !needed.contains(&ck) {
                continue;
            }
            if let Some(g) = g {
                store.add(ck, g, opts.create_graph)?;
            }
            let d = deps.get_mut(&ck).expect("dependency counted");
            *d -= 1;
            if *d == 0 {
                heap.push(Ready(e.node.base().sequence_nr, ck));
            }
        }
    }
    Ok(results)
}

/// Which of a node's edges lead to a wanted gradient; `None` when none does.
fn edge_needs(node: &Arc<dyn Node>, needed: &HashSet<usize>) -> Option<Vec<bool>> {
    let needs: Vec<bool> = node
        .base()
        .edges
        .iter()
        .map(|e| e.as_ref().is_some_and(|e| needed.contains(&e.key())))
        .collect();
    needs.iter().any(|&n| n).then_some(needs)
}

/// Clears the memory-history context when backward ends, by error too.
struct ContextGuard;

impl Drop for ContextGuard {
    fn drop(&mut self) {
        memory::set_context("");
    }
}

/// A leaf's gradient is final: pre-hooks, then `.grad` (or the consumer), then
/// post-accumulate hooks, which may take the gradient away.
fn run_sink(leaf: &Tensor, grad: Tensor, opts: &BackwardOptions) -> Result<()> {
    let hooks: Vec<_> = leaf
        .0
        .meta
        .lock()
        .grad_hooks
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    let mut grad = grad;
    for h in hooks {
        if let Some(g) = h(&grad)? {
            grad = g;
        }
    }
    if let Some(consumer) = opts.grad_consumer {
        return consumer(leaf, &grad);
    }
    let new_grad = match leaf.take_grad() {
        // Steal the buffer only if nothing else holds it and it is dense; under
        // create_graph the gradient keeps its history.
        None if opts.create_graph => grad,
        None if grad.is_uniquely_owned() && grad.data().is_contiguous() => grad,
        None => ops::convert::clone(&grad)?,
        Some(old) => add_grads(old, &grad, opts.create_graph)?,
    };
    leaf.set_grad(Some(new_grad))?;
    let post: Vec<_> = leaf
        .0
        .meta
        .lock()
        .post_accumulate_hooks
        .iter()
        .map(|(_, h)| h.clone())
        .collect();
    for h in post {
        h(leaf)?;
    }
    Ok(())
}
