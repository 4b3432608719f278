//! Tensors a node saves for its backward, with the version check that catches a saved
//! tensor modified in place. Under `saved_tensors_hooks` a saved tensor is handed to the
//! innermost pack hook and only what it returned is kept (plus the original's version
//! counter and, for double backward, its gradient edge).

use std::sync::Arc;

use crate::autograd::budget;
use crate::autograd::function::Ctx;
use crate::autograd::grad_mode;
use crate::autograd::node::{Edge, Node};
use crate::autograd::remat::Cell;
use crate::autograd::saved_hooks::{self, Packed};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::memory::Role;
use crate::tensor::{shape_str, Tensor};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    Input,
    Output,
    /// A tensor the op made for its backward only (relu's bit mask): nobody else holds it.
    Internal,
}

enum Store {
    /// An alias of the saved tensor without history (shares buffer and version counter),
    /// and the original when it is an input that requires grad (for double backward).
    Plain {
        data: Tensor,
        original: Option<Tensor>,
    },
    /// An autocast cast of a parameter, kept as the parameter and cast again on unpack
    /// (see `crate::autocast`): no bytes of its own.
    Recast {
        parameter: Tensor,
        version: u64,
        dtype: DType,
    },
    /// What a pack hook returned. `witness` is an empty view sharing the original's version
    /// counter (no data); `edge` is the original's gradient edge when it required grad.
    Packed {
        packed: Box<dyn Packed>,
        witness: Tensor,
        dims: Vec<usize>,
        dtype: DType,
        edge: Option<Edge>,
    },
    /// Under a memory budget, an op output with a recipe: its cell holds the data until
    /// the budget evicts it, and recomputes it on unpack (see `remat`).
    Cell {
        cell: Arc<Cell>,
        /// The sequence number of the node that saved it.
        saver: u64,
        witness: Tensor,
        dims: Vec<usize>,
        edge: Option<Edge>,
    },
}

pub struct SavedTensor {
    store: Store,
    kind: Kind,
    version: u64,
}

impl SavedTensor {
    /// Save an input of the op.
    pub fn input(t: &Tensor) -> SavedTensor {
        SavedTensor::new(t, Kind::Input)
    }

    /// Save the op's own output. It is stored without its history (which would be a cycle)
    /// and reconnected to the node when unpacked under `create_graph`.
    pub fn output(t: &Tensor) -> SavedTensor {
        SavedTensor::new(t, Kind::Output)
    }

    /// Save a tensor the op computed for its backward alone (never differentiated).
    pub fn internal(t: &Tensor) -> SavedTensor {
        SavedTensor::new(t, Kind::Internal)
    }

    fn new(t: &Tensor, kind: Kind) -> SavedTensor {
        let data = t.detach();
        let version = t.version();
        let wants_original = kind == Kind::Input && t.requires_grad();
        // Packed and rematerialised inputs keep only the edge to their history.
        let edge = || {
            if wants_original {
                t.gradient_edge()
            } else {
                None
            }
        };
        if let Some(packed) = saved_hooks::pack(&data) {
            if let Ok(witness) = empty_view(t) {
                return SavedTensor {
                    store: Store::Packed {
                        packed,
                        witness,
                        dims: t.dims(),
                        dtype: t.dtype(),
                        edge: edge(),
                    },
                    kind,
                    version,
                };
            }
        }
        let cell = t.remat_cell().filter(|c| budget::is_active() && c.holds(t));
        if let Some(cell) = cell {
            if let Ok(witness) = empty_view(t) {
                let saver = cell.save(t);
                return SavedTensor {
                    store: Store::Cell {
                        cell,
                        saver,
                        witness,
                        dims: t.dims(),
                        edge: edge(),
                    },
                    kind,
                    version,
                };
            }
        }
        if let Some(parameter) = crate::autocast::parameter_source(t) {
            return SavedTensor {
                store: Store::Recast {
                    version: parameter.version(),
                    parameter,
                    dtype: t.dtype(),
                },
                kind,
                version,
            };
        }
        if budget::is_active() && (kind == Kind::Internal || !t.is_leaf()) {
            budget::note_kept(t);
        }
        data.set_role(Role::Activation, true);
        SavedTensor {
            store: Store::Plain {
                // A leaf that requires grad is kept too, so double backward differentiates
                // through it. Leaves hold their sinks weakly, so this forms no cycle.
                original: wants_original.then(|| t.clone()),
                data,
            },
            kind,
            version,
        }
    }

    fn version_error(&self, node: &str, dtype: DType, dims: &[usize], now: u64) -> Error {
        Error::autograd(format!(
            "one of the variables needed for gradient computation has been modified by an \
             inplace operation: [{} {}], which is {} of {}, is at version {}; expected \
             version {} instead.",
            dtype.name(),
            shape_str(dims),
            match self.kind {
                Kind::Output => "output 0",
                Kind::Input => "an input",
                Kind::Internal => "a saved tensor",
            },
            node,
            now,
            self.version
        ))
    }

    pub fn unpack(&self, node: &Arc<dyn Node>) -> Result<Tensor> {
        self.unpack_with(node.name(), Some(node))
    }

    /// Unpack for a node that is not a Rust `Node` (a Python `Function`'s context): the
    /// name is for messages; an output is never reconnected.
    pub fn unpack_named(&self, name: &str) -> Result<Tensor> {
        self.unpack_with(name, None)
    }

    fn unpack_with(&self, name: &str, node: Option<&Arc<dyn Node>>) -> Result<Tensor> {
        match &self.store {
            Store::Plain { data, original } => {
                if data.version() != self.version {
                    return Err(self.version_error(
                        name,
                        data.dtype(),
                        &data.dims(),
                        data.version(),
                    ));
                }
                if grad_mode::is_enabled() {
                    // create_graph: hand back tensors with their history so the backward is recorded.
                    if let Some(o) = original {
                        return Ok(o.clone());
                    }
                    if let (Kind::Output, Some(node)) = (self.kind, node) {
                        let t = data.detach();
                        t.set_grad_fn(Some(node.clone()));
                        return Ok(t);
                    }
                }
                Ok(data.clone())
            }
            Store::Recast {
                parameter,
                version,
                dtype,
            } => {
                if parameter.version() != *version {
                    return Err(Error::autograd(format!(
                        "one of the variables needed for gradient computation has been \
                         modified by an inplace operation: the parameter [{} {}] whose \
                         autocast copy {} saved is at version {}; expected version {} instead.",
                        parameter.dtype().name(),
                        shape_str(&parameter.dims()),
                        name,
                        parameter.version(),
                        version
                    )));
                }
                // Under create_graph the cast is recorded again, so the gradient reaches
                // the parameter; otherwise it is a plain copy for this backward.
                let source = if grad_mode::is_enabled() {
                    parameter.clone()
                } else {
                    parameter.detach()
                };
                crate::ops::convert::to_dtype(&source, *dtype)
            }
            Store::Cell {
                cell,
                witness,
                dims,
                edge,
                ..
            } => {
                if witness.version() != self.version {
                    let now = witness.version();
                    return Err(self.version_error(name, witness.dtype(), dims, now));
                }
                let t = cell.value()?.detach();
                Ok(self.reconnect(t, edge, node))
            }
            Store::Packed {
                packed,
                witness,
                dims,
                dtype,
                edge,
            } => {
                if witness.version() != self.version {
                    return Err(self.version_error(name, *dtype, dims, witness.version()));
                }
                let t = packed.unpack()?;
                if t.dims() != *dims || t.dtype() != *dtype {
                    return Err(Error::autograd(format!(
                        "saved_tensors_hooks: the unpack hook returned a tensor of dtype {} and \
                         shape {} for a tensor of dtype {} and shape {} saved by {}; it must \
                         return a tensor of the saved tensor's dtype and shape",
                        t.dtype().name(),
                        shape_str(&t.dims()),
                        dtype.name(),
                        shape_str(dims),
                        name
                    )));
                }
                Ok(self.reconnect(t, edge, node))
            }
        }
    }

    /// Under create_graph, give a tensor kept without history its gradient edge back.
    fn reconnect(&self, t: Tensor, edge: &Option<Edge>, node: Option<&Arc<dyn Node>>) -> Tensor {
        if !grad_mode::is_enabled() {
            return t;
        }
        let reconnect = match self.kind {
            Kind::Input => edge.clone(),
            Kind::Output => node.map(|n| Edge {
                node: n.clone(),
                input_nr: 0,
            }),
            Kind::Internal => None,
        };
        match reconnect {
            Some(e) => {
                let t = t.detach();
                t.set_gradient_edge(e);
                t
            }
            None => t,
        }
    }
}

/// A bilinear op's backward (a product, a convolution) needs each operand only for the other's gradient: `a` is saved
/// when `b` needs a gradient (`nb`), `b` when `a` does (`na`).
pub fn save_crossed(a: &Tensor, b: &Tensor, na: bool, nb: bool) -> Vec<SavedTensor> {
    let mut v = Vec::new();
    if nb {
        v.push(SavedTensor::input(a));
    }
    if na {
        v.push(SavedTensor::input(b));
    }
    v
}

/// The gradients `[a's, b's]` of a bilinear op from the operands `save_crossed` kept, those
/// `ctx` wants: `grad_a` reads `b`, `grad_b` reads `a`. The saved tensors go first
/// (`Ctx::release_saved`), and the gradient read from the larger operand is computed first,
/// so that operand is freed before the other gradient is allocated: for `x @ w.t()` the
/// activation `x` goes before its gradient exists, one buffer of its size less at the peak
/// of the backward.
pub fn crossed_grads(
    ctx: &mut Ctx,
    na: bool,
    nb: bool,
    grad_a: impl FnOnce(&Tensor) -> Result<Tensor>,
    grad_b: impl FnOnce(&Tensor) -> Result<Tensor>,
) -> Result<[Option<Tensor>; 2]> {
    let mut it = ctx.saved.iter();
    let a = if nb { it.next().cloned() } else { None };
    let b = if na { it.next().cloned() } else { None };
    let a = a.filter(|_| ctx.needs(1));
    let b = b.filter(|_| ctx.needs(0));
    let a_first = match (&a, &b) {
        (Some(a), Some(b)) => a.numel() >= b.numel(),
        _ => true,
    };
    ctx.release_saved();
    let grad_b = |a: Option<Tensor>| a.map(|a| grad_b(&a)).transpose();
    let grad_a = |b: Option<Tensor>| b.map(|b| grad_a(&b)).transpose();
    Ok(match a_first {
        true => {
            let gb = grad_b(a)?;
            [grad_a(b)?, gb]
        }
        false => {
            let ga = grad_a(b)?;
            [ga, grad_b(a)?]
        }
    })
}

/// A tensor without elements that shares `t`'s version counter: it keeps the version
/// check of a packed tensor working without keeping its data.
fn empty_view(t: &Tensor) -> Result<Tensor> {
    let d = t.data();
    let empty = crate::device::zeros(0, d.dtype(), d.device()).op("save")?;
    Ok(t.view_of(empty))
}

impl Drop for SavedTensor {
    fn drop(&mut self) {
        match &self.store {
            Store::Plain { data, .. } => data.set_role(Role::Activation, false),
            Store::Cell { cell, saver, .. } => cell.release(*saver),
            _ => {}
        }
    }
}
