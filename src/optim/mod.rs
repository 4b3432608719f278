//! Per-parameter optimizer updates: one fused in-place kernel per step (SGD, Adam, AdamW).
