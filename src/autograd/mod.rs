//! gradstream's own autograd: nodes recorded by ops, and the engine that runs them.

pub mod accumulate;
pub mod budget;
pub mod engine;
pub mod function;
pub mod grad_mode;
pub mod grad_sum;
pub mod interrupt;
pub mod node;
pub mod pass;
pub mod remat;
pub mod saved;
pub mod saved_hooks;
