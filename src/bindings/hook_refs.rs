//! Python hooks held by the engine, made visible to Python's garbage collector.
//!
//! A hook that closes over the tensor it is registered on forms a cycle through Rust
//! (function -> Tensor object -> TensorImpl -> hook -> function) that the collector cannot
//! see. As PyTorch does, a Tensor object that is the only owner of its tensor reports the
//! Python functions of that tensor's hooks (and of its `grad_fn`'s, when only the tensor
//! holds the node) in `__traverse__`, and drops them in `__clear__`. A tensor that other
//! objects or graphs share reports nothing: each reference is reported once, by its owner.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use pyo3::gc::PyVisit;
use pyo3::prelude::*;
use pyo3::PyTraverseError;

use crate::bindings::tensor::PyTensor;
use crate::tensor::Tensor;

/// A Python function a hook calls; the hook's closure holds the only strong reference.
pub struct HookFunction(pub Py<PyAny>);

type Registry = BTreeMap<u64, Weak<HookFunction>>;

fn registry() -> MutexGuard<'static, Registry> {
    static R: Mutex<Registry> = Mutex::new(BTreeMap::new());
    // Hold no lock while Python runs: entries are only read, added and removed here.
    R.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Record that hook `id` calls `f`, for the collector.
pub fn remember(id: u64, f: &Arc<HookFunction>) {
    let mut r = registry();
    if r.len() >= 64 && r.len().is_power_of_two() {
        r.retain(|_, w| w.strong_count() > 0);
    }
    r.insert(id, Arc::downgrade(f));
}

enum HookSite {
    Tensor,
    PostAccumulate,
    Node(Arc<dyn crate::autograd::node::Node>),
}

/// The Python functions of the hooks that only `t` owns, with where each hook is held;
/// empty unless the Tensor object is `t`'s only owner.
fn owned_hooks(t: &Tensor) -> Vec<(u64, HookSite, Arc<HookFunction>)> {
    if Arc::strong_count(&t.0) != 1 {
        return Vec::new();
    }
    let mut ids: Vec<(u64, HookSite)> = Vec::new();
    let node = {
        // Never wait inside the collector: a tensor busy elsewhere reports nothing now.
        let Some(m) = t.0.meta.try_lock() else {
            return Vec::new();
        };
        ids.extend(m.grad_hooks.iter().map(|(id, _)| (*id, HookSite::Tensor)));
        ids.extend(
            m.post_accumulate_hooks
                .iter()
                .map(|(id, _)| (*id, HookSite::PostAccumulate)),
        );
        m.grad_fn.clone()
    };
    // The clone above is the second owner: the tensor's grad_fn is the first.
    if let Some(node) = node.filter(|n| Arc::strong_count(n) == 2) {
        for id in node.base().pre_hook_ids() {
            ids.push((id, HookSite::Node(node.clone())));
        }
    }
    let r = registry();
    ids.into_iter()
        .filter_map(|(id, site)| {
            let f = r.get(&id)?.upgrade()?;
            // This upgrade is the second owner: the hook's closure is the first.
            (Arc::strong_count(&f) == 2).then_some((id, site, f))
        })
        .collect()
}

/// Whether pyo3 has written the tensor into this object yet. CPython 3.11 and 3.12 create
/// a subclass instance's `__dict__` (`Parameter`) after the object is tracked by the
/// collector and before pyo3 fills it in, so a collection can traverse it while it is
/// still zeroed.
fn initialized(obj: &PyTensor) -> bool {
    const _: () = assert!(std::mem::size_of::<PyTensor>() == std::mem::size_of::<usize>());
    // SAFETY: a PyTensor is one `Arc` pointer (checked above), never null once written;
    // reading its bits as an integer is defined for zeroed and for written memory alike.
    unsafe { std::ptr::read_volatile((obj as *const PyTensor).cast::<usize>()) != 0 }
}

#[pymethods]
impl PyTensor {
    fn __traverse__(&self, visit: PyVisit<'_>) -> Result<(), PyTraverseError> {
        if !initialized(self) {
            return Ok(());
        }
        for (_, _, f) in owned_hooks(&self.t) {
            visit.call(&f.0)?;
        }
        Ok(())
    }

    fn __clear__(&self) {
        if !initialized(self) {
            return;
        }
        let hooks = owned_hooks(&self.t);
        for (id, site, _) in &hooks {
            match site {
                HookSite::Tensor => self.t.remove_grad_hook(*id),
                HookSite::PostAccumulate => self.t.remove_post_accumulate_hook(*id),
                HookSite::Node(node) => node.base().remove_pre_hook(*id),
            }
        }
        // The functions are released here, after every lock above was let go.
        drop(hooks);
    }
}
