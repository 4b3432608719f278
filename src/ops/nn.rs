//! Fused neural-network functionals (softmax, layer_norm, losses...) with their backward rules.
