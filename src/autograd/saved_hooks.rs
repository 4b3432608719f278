//! Saved-tensor hooks (`saved_tensors_hooks(pack, unpack)`): a per-thread stack of
//! policies that every tensor an op saves for backward goes through. The innermost
//! policy applies. The core knows only this trait; the Python implementation lives in
//! `bindings/saved_hooks.rs`.
//!
//! A pack hook runs inside an op's forward, which cannot fail on account of it (ops
//! record their node after computing). A pack error is therefore kept here and raised at
//! the next boundary back to Python (`take_pack_error`): the op's result conversion, the
//! end of the in-place op, the end of the node's backward, or the end of the context.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::sync::Arc;

use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::memory::Role;
use crate::tensor::Tensor;

/// What a pack hook made of a saved tensor; `unpack` gives it back when backward needs it.
pub trait Packed: Send + Sync {
    fn unpack(&self) -> Result<Tensor>;
}

/// A saved-tensor policy.
pub trait SavedHooks: Send + Sync {
    fn pack(&self, t: &Tensor) -> Result<Box<dyn Packed>>;
    /// For bindings that need their own type back (Python `Function`s pack in Python).
    fn as_any(&self) -> &dyn Any;
}

thread_local! {
    static STACK: RefCell<Vec<Arc<dyn SavedHooks>>> = const { RefCell::new(Vec::new()) };
    /// A pack hook is running: tensors its own ops save are not packed again.
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
    static PACK_ERROR: RefCell<Option<Error>> = const { RefCell::new(None) };
}

pub fn push(hooks: Arc<dyn SavedHooks>) {
    STACK.with(|s| s.borrow_mut().push(hooks));
}

/// Remove the innermost policy; false when the stack was empty.
pub fn pop() -> bool {
    STACK.with(|s| s.borrow_mut().pop().is_some())
}

/// The innermost policy, if any.
pub fn current() -> Option<Arc<dyn SavedHooks>> {
    STACK.with(|s| s.borrow().last().cloned())
}

pub fn depth() -> usize {
    STACK.with(|s| s.borrow().len())
}

/// Pack `t` with the innermost policy: `None` when there is none (or one is already
/// running, or an earlier pack failed and has not been raised yet).
pub fn pack(t: &Tensor) -> Option<Box<dyn Packed>> {
    if IN_HOOK.with(Cell::get) || PACK_ERROR.with(|e| e.borrow().is_some()) {
        return None;
    }
    let hooks = current()?;
    IN_HOOK.with(|f| f.set(true));
    let r = hooks.pack(t);
    IN_HOOK.with(|f| f.set(false));
    match r {
        Ok(p) => Some(p),
        Err(e) => {
            PACK_ERROR.with(|slot| *slot.borrow_mut() = Some(e));
            None
        }
    }
}

/// The pack error waiting to be raised, if any (taken: it is raised once).
pub fn take_pack_error() -> Option<Error> {
    PACK_ERROR.with(|e| e.borrow_mut().take())
}

/// `Err` with the waiting pack error, if any.
pub fn check() -> Result<()> {
    crate::autograd::budget::check()?;
    match take_pack_error() {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

// ---------------------------------------------------------------- a built-in policy

/// Whether `t`'s buffer is a parameter's: the built-in policies keep those as they are
/// (a parameter is alive anyway; a copy would add memory, not save it).
pub fn holds_parameter(t: &Tensor) -> bool {
    t.storage_key()
        .is_some_and(|k| crate::memory::has_role(k, Role::Parameter))
}

/// `save_in_bfloat16()`: float32/float64 saved tensors are kept in bfloat16 (counted as
/// saved activations) and converted back to their dtype when backward needs them.
/// Others (half types, integers, bool, relu's bit masks, parameters) are kept as they are.
pub struct SaveInBf16;

struct Bf16Packed {
    t: Tensor,
    dtype: DType,
}

impl SavedHooks for SaveInBf16 {
    fn pack(&self, t: &Tensor) -> Result<Box<dyn Packed>> {
        let dtype = t.dtype();
        let t = match dtype {
            DType::Float32 | DType::Float64 if !holds_parameter(t) => {
                crate::ops::convert::to_dtype(t, DType::BFloat16)?
            }
            _ => t.clone(),
        };
        t.set_role(Role::Activation, true);
        Ok(Box::new(Bf16Packed { t, dtype }))
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
}

impl Packed for Bf16Packed {
    fn unpack(&self) -> Result<Tensor> {
        if self.t.dtype() == self.dtype {
            return Ok(self.t.clone());
        }
        crate::ops::convert::to_dtype(&self.t, self.dtype)
    }
}

impl Drop for Bf16Packed {
    fn drop(&mut self) {
        self.t.set_role(Role::Activation, false);
    }
}
