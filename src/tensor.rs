//! The engine's tensor: a candle tensor plus gradstream's autograd metadata.
//!
//! `Tensor` is a cheap handle (`Arc`); the Python `Tensor` class wraps one. Every candle
//! buffer a `Tensor` holds is registered with `memory` for exact accounting.

use crate::backend::cast::Convert;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use candle_core::Shape;
use parking_lot::{Mutex, RwLock};

use crate::autograd::accumulate::AccumulateGrad;
use crate::autograd::node::{Edge, Node};
use crate::dtype::DType;
use crate::error::{CandleContext, Error, Result};
use crate::memory::{self, Role};

/// A hook on a tensor's incoming gradient (`register_hook`): may return a replacement.
pub type GradHook = Arc<dyn Fn(&Tensor) -> Result<Option<Tensor>> + Send + Sync>;
/// A hook run once a leaf's `.grad` is final (`register_post_accumulate_grad_hook`).
pub type PostAccumulateHook = Arc<dyn Fn(&Tensor) -> Result<()> + Send + Sync>;

pub(crate) struct Data {
    pub t: candle_core::Tensor,
    pub dtype: DType,
    /// Registry key of the buffer (`None` for empty tensors).
    pub key: Option<usize>,
    /// For a non-contiguous view: a 1-D contiguous handle on a run of the buffer that
    /// holds every element of `t`, from which `view` cuts new layouts
    /// (`ops::shape::view::strided_view`).
    pub span: Option<candle_core::Tensor>,
}

/// An empty view may start past its buffer's end (the columns 2.. of a 0-row tensor);
/// candle's copies index the buffer from that offset and panic. Such a tensor gets a
/// zero-size buffer of its own: it shares no element, so nothing is lost.
fn own_if_empty(t: candle_core::Tensor) -> candle_core::Tensor {
    if t.elem_count() == 0 && t.layout().start_offset() > 0 {
        if let Ok(z) = crate::device::zeros(t.shape(), t.dtype(), t.device()) {
            return z;
        }
    }
    t
}

impl Data {
    fn new(t: candle_core::Tensor, dtype: DType) -> Data {
        let t = own_if_empty(t);
        let key = memory::storage_key(&t).map(|b| {
            memory::register(&b);
            b.addr
        });
        Data {
            t,
            dtype,
            key,
            span: None,
        }
    }
}

impl Drop for Data {
    fn drop(&mut self) {
        if let Some(k) = self.key {
            memory::unregister(k);
        }
    }
}

#[derive(Default)]
pub struct AutogradMeta {
    pub requires_grad: bool,
    pub grad: Option<Tensor>,
    pub grad_fn: Option<Arc<dyn Node>>,
    /// Which output of `grad_fn` this tensor is (0 but for ops with several outputs).
    pub output_nr: usize,
    pub accumulator: Option<Weak<AccumulateGrad>>,
    pub retains_grad: bool,
    pub is_parameter: bool,
    pub post_accumulate_hooks: Vec<(u64, PostAccumulateHook)>,
    /// Hooks of a leaf; a non-leaf keeps its hooks on its grad_fn.
    pub grad_hooks: Vec<(u64, GradHook)>,
    /// Under a memory budget: how to recompute this op output (`autograd::remat`).
    pub remat: Option<Arc<crate::autograd::remat::Cell>>,
}

pub struct TensorImpl {
    data: RwLock<Data>,
    /// Bumped by every in-place change; shared with views so a saved tensor notices.
    version: Arc<AtomicU64>,
    pub(crate) meta: Mutex<AutogradMeta>,
}

impl Drop for TensorImpl {
    fn drop(&mut self) {
        let meta = self.meta.get_mut();
        if meta.is_parameter {
            if let Some(k) = self.data.get_mut().key {
                memory::remove_role(k, Role::Parameter);
            }
        }
        if let Some(g) = meta.grad.take() {
            g.set_role(Role::Gradient, false);
        }
    }
}

#[derive(Clone)]
pub struct Tensor(pub(crate) Arc<TensorImpl>);

static HOOK_IDS: AtomicU64 = AtomicU64::new(1);

pub fn next_hook_id() -> u64 {
    HOOK_IDS.fetch_add(1, Ordering::Relaxed)
}

impl Tensor {
    /// A new leaf that does not require grad.
    pub fn new(t: candle_core::Tensor, dtype: DType) -> Tensor {
        debug_assert_eq!(t.dtype(), dtype.candle());
        Tensor(Arc::new(TensorImpl {
            data: RwLock::new(Data::new(t, dtype)),
            version: Arc::new(AtomicU64::new(0)),
            meta: Mutex::new(AutogradMeta::default()),
        }))
    }

    /// Wrap a candle tensor whose gradstream dtype is its candle dtype (never bool).
    pub fn from_candle(t: candle_core::Tensor) -> Result<Tensor> {
        let dt = DType::from_candle(t.dtype())?;
        Ok(Tensor::new(t, dt))
    }

    /// A tensor sharing this one's buffer and version counter (a view): `detach`, and
    /// the result of view ops before their history is attached.
    pub fn view_of(&self, t: candle_core::Tensor) -> Tensor {
        let dtype = self.dtype();
        let span = if t.is_contiguous() { None } else { self.span() };
        let mut data = Data::new(t, dtype);
        data.span = span;
        Tensor(Arc::new(TensorImpl {
            data: RwLock::new(data),
            version: self.0.version.clone(),
            meta: Mutex::new(AutogradMeta::default()),
        }))
    }

    pub fn data(&self) -> candle_core::Tensor {
        self.0.data.read().t.clone()
    }

    /// A 1-D contiguous handle on a run of the buffer holding every element of this
    /// tensor: its own data when contiguous, else the span its view chain recorded.
    /// `None` for a non-contiguous tensor that was not made as a view.
    pub fn span(&self) -> Option<candle_core::Tensor> {
        let d = self.0.data.read();
        match &d.span {
            Some(s) => Some(s.clone()),
            // reshape, not flatten_all: a 1-D tensor's flatten_all keeps its stride,
            // which for a single element need not be 1.
            None if d.t.is_contiguous() => d.t.reshape(d.t.elem_count()).ok(),
            None => None,
        }
    }

    pub fn dtype(&self) -> DType {
        self.0.data.read().dtype
    }

    /// The device holding this tensor's buffer.
    pub fn device(&self) -> candle_core::Device {
        self.0.data.read().t.device().clone()
    }

    pub fn shape(&self) -> Shape {
        self.0.data.read().t.shape().clone()
    }

    pub fn dims(&self) -> Vec<usize> {
        self.0.data.read().t.dims().to_vec()
    }

    pub fn rank(&self) -> usize {
        self.0.data.read().t.rank()
    }

    pub fn numel(&self) -> usize {
        self.0.data.read().t.elem_count()
    }

    pub fn storage_key(&self) -> Option<usize> {
        self.0.data.read().key
    }

    /// Replace the data (`t.data = other`, dtype/device moves of a parameter).
    pub fn set_data(&self, t: candle_core::Tensor, dtype: DType) {
        let is_param = self.0.meta.lock().is_parameter;
        let new = Data::new(t, dtype);
        let old_key = {
            let mut d = self.0.data.write();
            let old = d.key;
            *d = new;
            old
        };
        if is_param {
            if let Some(k) = old_key {
                memory::remove_role(k, Role::Parameter);
            }
            self.set_role(Role::Parameter, true);
        }
    }

    pub fn version(&self) -> u64 {
        self.0.version.load(Ordering::Relaxed)
    }

    pub fn bump_version(&self) {
        self.0.version.fetch_add(1, Ordering::Relaxed);
    }

    pub fn same(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    pub fn id(&self) -> usize {
        Arc::as_ptr(&self.0) as usize
    }

    pub fn downgrade(&self) -> Weak<TensorImpl> {
        Arc::downgrade(&self.0)
    }

    /// Whether no other gradstream tensor holds this one's buffer, so it may be written in
    /// place: no other handle, no view (views share the version counter; that also covers
    /// buffers the byte accounting does not see), no other tensor wrapping the buffer.
    pub fn is_uniquely_owned(&self) -> bool {
        Arc::strong_count(&self.0) == 1
            && Arc::strong_count(&self.0.version) == 1
            && self.storage_key().is_none_or(memory::is_unique)
    }

    pub fn set_role(&self, role: Role, on: bool) {
        if let Some(k) = self.storage_key() {
            if on {
                memory::add_role(k, role)
            } else {
                memory::remove_role(k, role)
            }
        }
    }

    // ---- autograd metadata ----

    pub fn requires_grad(&self) -> bool {
        let m = self.0.meta.lock();
        m.requires_grad || m.grad_fn.is_some()
    }

    pub fn is_leaf(&self) -> bool {
        self.0.meta.lock().grad_fn.is_none()
    }

    pub fn grad_fn(&self) -> Option<Arc<dyn Node>> {
        self.0.meta.lock().grad_fn.clone()
    }

    /// Make this tensor the (only) output of `node`, or a leaf with `None`.
    pub fn set_grad_fn(&self, node: Option<Arc<dyn Node>>) {
        let mut m = self.0.meta.lock();
        m.grad_fn = node;
        m.output_nr = 0;
    }

    /// Make this tensor output `edge.input_nr` of `edge.node`.
    pub fn set_gradient_edge(&self, edge: Edge) {
        let mut m = self.0.meta.lock();
        m.grad_fn = Some(edge.node);
        m.output_nr = edge.input_nr;
    }

    pub fn set_requires_grad(&self, requires_grad: bool) -> Result<()> {
        let mut m = self.0.meta.lock();
        if m.grad_fn.is_some() {
            if !requires_grad {
                return Err(Error::autograd(
                    "you can only change requires_grad flags of leaf variables. If you want to use a \
                     computed variable in a subgraph that doesn't require differentiation use \
                     var_no_grad = var.detach().",
                ));
            }
            return Ok(());
        }
        if requires_grad && !self.dtype().is_floating_point() {
            return Err(Error::autograd(format!(
                "only Tensors of floating point dtype can require gradients (got {})",
                self.dtype().name()
            )));
        }
        m.requires_grad = requires_grad;
        Ok(())
    }

    pub fn mark_parameter(&self) {
        let mut m = self.0.meta.lock();
        if !m.is_parameter {
            m.is_parameter = true;
            drop(m);
            self.set_role(Role::Parameter, true);
        }
    }

    pub fn remat_cell(&self) -> Option<Arc<crate::autograd::remat::Cell>> {
        self.0.meta.lock().remat.clone()
    }

    pub fn set_remat_cell(&self, cell: Option<Arc<crate::autograd::remat::Cell>>) {
        self.0.meta.lock().remat = cell;
    }

    pub fn grad(&self) -> Option<Tensor> {
        self.0.meta.lock().grad.clone()
    }

    /// Take `.grad` out (the engine sums into it and puts it back).
    pub fn take_grad(&self) -> Option<Tensor> {
        let g = self.0.meta.lock().grad.take();
        if let Some(g) = &g {
            g.set_role(Role::Gradient, false);
        }
        g
    }

    pub fn set_grad(&self, grad: Option<Tensor>) -> Result<()> {
        if let Some(g) = &grad {
            if g.dims() != self.dims() {
                return Err(Error::shape(format!(
                    "assigned grad has data of a different size: grad {:?} vs tensor {:?}",
                    g.dims(),
                    self.dims()
                )));
            }
            if g.dtype() != self.dtype() {
                return Err(Error::type_(format!(
                    "assigned grad has data of a different type: grad {} vs tensor {}",
                    g.dtype().name(),
                    self.dtype().name()
                )));
            }
            g.set_role(Role::Gradient, true);
        }
        let old = std::mem::replace(&mut self.0.meta.lock().grad, grad);
        if let Some(o) = old {
            o.set_role(Role::Gradient, false);
        }
        Ok(())
    }

    /// The edge gradients for this tensor flow along: its grad_fn, or its leaf sink.
    pub fn gradient_edge(&self) -> Option<Edge> {
        let mut m = self.0.meta.lock();
        if let Some(f) = &m.grad_fn {
            return Some(Edge {
                node: f.clone(),
                input_nr: m.output_nr,
            });
        }
        if !m.requires_grad {
            return None;
        }
        if let Some(acc) = m.accumulator.as_ref().and_then(Weak::upgrade) {
            return Some(Edge {
                node: acc,
                input_nr: 0,
            });
        }
        let acc = Arc::new(AccumulateGrad::new(Arc::downgrade(&self.0)));
        m.accumulator = Some(Arc::downgrade(&acc));
        Some(Edge {
            node: acc,
            input_nr: 0,
        })
    }

    /// `detach()`: same buffer and version counter, no history. O(1).
    pub fn detach(&self) -> Tensor {
        self.view_of(self.data())
    }

    pub fn retain_grad(&self) -> Result<()> {
        let (node, output) = {
            let mut m = self.0.meta.lock();
            if m.grad_fn.is_none() {
                if !m.requires_grad {
                    return Err(Error::autograd(
                        "can't retain_grad on Tensor that has requires_grad=False",
                    ));
                }
                return Ok(());
            }
            if m.retains_grad {
                return Ok(());
            }
            m.retains_grad = true;
            (m.grad_fn.clone().unwrap(), m.output_nr)
        };
        node.base().set_retained(output, Arc::downgrade(&self.0));
        Ok(())
    }

    pub fn add_grad_hook(&self, hook: GradHook) -> u64 {
        let id = next_hook_id();
        let (node, output) = {
            let mut m = self.0.meta.lock();
            match &m.grad_fn {
                Some(f) => (f.clone(), m.output_nr),
                None => {
                    m.grad_hooks.push((id, hook));
                    return id;
                }
            }
        };
        node.base().add_pre_hook(output, id, hook);
        id
    }

    pub fn remove_grad_hook(&self, id: u64) {
        let node = {
            let mut m = self.0.meta.lock();
            m.grad_hooks.retain(|(i, _)| *i != id);
            m.grad_fn.clone()
        };
        if let Some(n) = node {
            n.base().remove_pre_hook(id);
        }
    }

    pub fn add_post_accumulate_hook(&self, hook: PostAccumulateHook) -> Result<u64> {
        let mut m = self.0.meta.lock();
        if m.grad_fn.is_some() {
            return Err(Error::autograd(
                "post accumulate grad hooks cannot be registered on non-leaf tensors",
            ));
        }
        let id = next_hook_id();
        m.post_accumulate_hooks.push((id, hook));
        Ok(id)
    }

    pub fn remove_post_accumulate_hook(&self, id: u64) {
        self.0
            .meta
            .lock()
            .post_accumulate_hooks
            .retain(|(i, _)| *i != id);
    }

    /// Check that this tensor may be written in place.
    pub fn check_inplace(&self, op: &str) -> Result<()> {
        if !crate::autograd::grad_mode::is_enabled() {
            return Ok(());
        }
        let m = self.0.meta.lock();
        if m.grad_fn.is_none() && m.requires_grad {
            return Err(Error::autograd(format!(
                "{op}: a leaf Variable that requires grad is being used in an in-place operation."
            )));
        }
        // The outputs of split/chunk/unbind, like PyTorch's: one node holds every piece's
        // history, so the history of one piece cannot be rewritten on its own.
        if let Some(f) = m.grad_fn.as_ref().filter(|f| f.num_outputs() > 1) {
            let op_name = f.name().split("Backward").next().unwrap_or_default();
            return Err(Error::autograd(format!(
                "Output {} of {op_name} is a view and is being modified inplace. This view is \
                 the output of a function that returns multiple views. Such functions do not \
                 allow the output views to be modified inplace. You should replace the inplace \
                 operation by an out-of-place one.",
                m.output_nr
            )));
        }
        Ok(())
    }

    pub fn contiguous_data(&self) -> Result<candle_core::Tensor> {
        self.data().dense().op("contiguous")
    }

    /// The elements, cast to `T`, as a host vector in row-major order: a counted
    /// [`crate::host::read`] for the reason `why`.
    pub fn to_vec<T: candle_core::WithDType>(&self, why: &'static str) -> Result<Vec<T>> {
        crate::host::read(why, &self.data())
    }
}

/// `got` must have `want`'s shape and dtype (a gradient and its tensor). On a mismatch the
/// error is `shape(got, want)` of the two shapes, or `dtype(got, want)` of the dtype names.
pub fn check_like(
    got: &Tensor,
    want: &Tensor,
    shape: impl FnOnce(String, String) -> Error,
    dtype: impl FnOnce(&str, &str) -> Error,
) -> Result<()> {
    if got.dims() != want.dims() {
        return Err(shape(shape_str(&got.dims()), shape_str(&want.dims())));
    }
    if got.dtype() != want.dtype() {
        return Err(dtype(got.dtype().name(), want.dtype().name()));
    }
    Ok(())
}

/// A shape (or any list of numbers) as PyTorch prints it: `[2, 3]`.
pub fn shape_str<T: std::fmt::Display>(dims: &[T]) -> String {
    let items: Vec<String> = dims.iter().map(|d| d.to_string()).collect();
    format!("[{}]", items.join(", "))
}
