//! The node every op records: a backward closure over the tensors the op saved.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

use crate::autograd::grad_mode;
use crate::autograd::node::{Edge, EdgeGrads, Node, NodeBase, Run};
use crate::autograd::saved::SavedTensor;
use crate::error::{Error, Result};
use crate::tensor::Tensor;

/// What a backward rule sees besides the incoming gradient.
pub struct Ctx<'a> {
    /// `needs[i]`: input i's gradient is wanted in this backward (it has an edge, and the
    /// edge leads to a tensor whose gradient is asked for). Others return `None`.
    pub needs: Vec<bool>,
    /// The saved tensors, unpacked and version-checked, in the order they were saved.
    pub saved: Vec<Tensor>,
    pub node: &'a Arc<dyn Node>,
    /// The engine drops the node's saved tensors when the rule returns.
    releases: bool,
}

impl Ctx<'_> {
    pub fn needs(&self, i: usize) -> bool {
        self.needs[i]
    }

    /// The rule is done with `saved` (it keeps clones of what it still reads): drop them
    /// and the node's own, now instead of when the rule returns, so that a buffer nothing
    /// else holds is freed before the rule allocates more. With the graph retained only
    /// `saved` goes.
    pub fn release_saved(&mut self) {
        self.saved.clear();
        if self.releases {
            self.node.release_saved();
        }
    }
}

pub type BackwardFn = Box<dyn Fn(&mut Ctx, &Tensor) -> EdgeGrads + Send + Sync>;
/// The backward of an op with several outputs: `grads[i]` is output i's gradient, `None`
/// where none came.
pub type OutputsBackwardFn = Box<dyn Fn(&mut Ctx, &[Option<Tensor>]) -> EdgeGrads + Send + Sync>;

enum Rule {
    One(BackwardFn),
    Outputs(usize, OutputsBackwardFn),
}

pub struct FnNode {
    name: &'static str,
    base: NodeBase,
    saved: Mutex<Option<Vec<SavedTensor>>>,
    saved_count: usize,
    rule: Rule,
}

static BACKWARD_CALLS: AtomicU64 = AtomicU64::new(0);

/// How many backward rules have run in this process (for tests of pruning).
pub fn backward_calls() -> u64 {
    BACKWARD_CALLS.load(Ordering::Relaxed)
}

impl Node for FnNode {
    fn name(&self) -> &str {
        self.name
    }
    fn base(&self) -> &NodeBase {
        &self.base
    }
    fn apply(&self, me: &Arc<dyn Node>, grads: &[Option<Tensor>], run: &Run) -> EdgeGrads {
        match (&self.rule, grads) {
            (Rule::One(backward), [Some(grad)]) => self.run(me, run, &|ctx| backward(ctx, grad)),
            (Rule::Outputs(_, backward), _) => self.run(me, run, &|ctx| backward(ctx, grads)),
            (Rule::One(_), _) => Ok(vec![None; self.base.edges.len()]),
        }
    }
    fn num_outputs(&self) -> usize {
        match &self.rule {
            Rule::One(_) => 1,
            Rule::Outputs(n, _) => *n,
        }
    }
    fn release_saved(&self) {
        self.saved.lock().take();
    }
}

impl FnNode {
    /// Unpack the saved tensors and run the backward rule.
    fn run(
        &self,
        me: &Arc<dyn Node>,
        run: &Run,
        rule: &dyn Fn(&mut Ctx) -> EdgeGrads,
    ) -> EdgeGrads {
        let saved = {
            let guard = self.saved.lock();
            match guard.as_ref() {
                Some(s) => s.iter().map(|s| s.unpack(me)).collect::<Result<Vec<_>>>()?,
                None if self.saved_count == 0 => Vec::new(),
                None => {
                    return Err(Error::autograd(format!(
                        "Trying to backward through the graph a second time (or directly access \
                         saved tensors after they have already been freed). Saved intermediate \
                         values of the graph are freed when you call .backward() or \
                         autograd.grad(). Specify retain_graph=True if you need to backward \
                         through the graph a second time or if you need to access saved tensors \
                         after calling backward. (node: {})",
                        self.name
                    )))
                }
            }
        };
        let mut ctx = Ctx {
            needs: run.needs.to_vec(),
            saved,
            node: me,
            releases: run.releases,
        };
        BACKWARD_CALLS.fetch_add(1, Ordering::Relaxed);
        let grads = rule(&mut ctx)?;
        // A pack hook that failed while this backward was recorded (create_graph).
        crate::autograd::saved_hooks::check()?;
        debug_assert_eq!(grads.len(), self.base.edges.len(), "{}", self.name);
        Ok(grads)
    }
}

thread_local! {
    static STRUCTURE_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Record nodes and edges but save no tensors: the graph shows which leaves a function
/// uses (checkpointing needs that) at no activation memory. Such nodes cannot run.
pub fn set_structure_only(on: bool) -> bool {
    STRUCTURE_ONLY.with(|s| s.replace(on))
}

/// Whether an op on these inputs must record a node.
pub fn should_record(inputs: &[&Tensor]) -> bool {
    grad_mode::is_enabled() && inputs.iter().any(|t| t.requires_grad())
}

/// Attach a backward node to `out` if grad mode is on and an input requires grad.
/// `save` runs only when a node is recorded; its tensors are released after the node runs.
pub fn record(
    name: &'static str,
    out: &Tensor,
    inputs: &[&Tensor],
    save: impl FnOnce() -> Vec<SavedTensor>,
    backward: impl Fn(&mut Ctx, &Tensor) -> EdgeGrads + Send + Sync + 'static,
) {
    if should_record(inputs) {
        let node = new_node(name, inputs, save, Rule::One(Box::new(backward)));
        attach(&node, std::slice::from_ref(out), inputs);
    }
}

/// `record` for a one-input op whose backward reads its input and its output:
/// `backward(x, y, g)` is the input's gradient.
pub fn record_with_input_and_output(
    name: &'static str,
    out: &Tensor,
    x: &Tensor,
    backward: impl Fn(&Tensor, &Tensor, &Tensor) -> Result<Tensor> + Send + Sync + 'static,
) {
    let save = || vec![SavedTensor::input(x), SavedTensor::output(out)];
    record(name, out, &[x], save, move |ctx, g| {
        Ok(vec![Some(backward(&ctx.saved[0], &ctx.saved[1], g)?)])
    });
}

/// `record` for an op with several outputs (`split`): one node, output i of which is
/// `outs[i]`, with its own gradient. Saves nothing.
pub fn record_outputs(
    name: &'static str,
    outs: &[Tensor],
    inputs: &[&Tensor],
    backward: impl Fn(&mut Ctx, &[Option<Tensor>]) -> EdgeGrads + Send + Sync + 'static,
) {
    if should_record(inputs) {
        let rule = Rule::Outputs(outs.len(), Box::new(backward));
        let node = new_node(name, inputs, Vec::new, rule);
        attach(&node, outs, inputs);
    }
}

fn new_node(
    name: &'static str,
    inputs: &[&Tensor],
    save: impl FnOnce() -> Vec<SavedTensor>,
    rule: Rule,
) -> Arc<dyn Node> {
    let edges = inputs.iter().map(|t| t.gradient_edge()).collect();
    let structure_only = STRUCTURE_ONLY.with(|s| s.get());
    let saved = if structure_only { Vec::new() } else { save() };
    Arc::new(FnNode {
        name,
        base: NodeBase::new(edges),
        saved_count: if structure_only {
            usize::MAX
        } else {
            saved.len()
        },
        saved: Mutex::new((!structure_only).then_some(saved)),
        rule,
    })
}

/// Make `outs` the outputs of `node`, and label their buffers in the memory history.
fn attach(node: &Arc<dyn Node>, outs: &[Tensor], inputs: &[&Tensor]) {
    for (i, out) in outs.iter().enumerate() {
        out.set_gradient_edge(Edge {
            node: node.clone(),
            input_nr: i,
        });
        if crate::memory::is_recording() {
            let keys: Vec<_> = inputs.iter().map(|t| t.storage_key()).collect();
            crate::memory::label_output(out.storage_key(), &keys, node.name());
        }
    }
}
