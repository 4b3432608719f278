// What the optimizer kernels share (optim.cu, adafactor.cu): the gradient's preparation
// and PyTorch's lerp.
#pragma once

#include "gs_cuda.cuh"

namespace gs {

// The gradient as a step reads it: scaled (in-stream unscaling), clipped, negated for
// maximize.
template <class C>
struct Prep {
  C scale, lo, hi, sign;
  __device__ __forceinline__ C apply(C g) const {
    g = g * scale;
    g = g < lo ? lo : (g > hi ? hi : g);
    return g * sign;
  }
};

// PyTorch's lerp: two formulas, chosen by the weight, for accuracy at both ends.
template <class C>
__device__ __forceinline__ C lerp(C a, C b, C w) {
  return (w < C(0.5) && w > C(-0.5)) ? a + w * (b - a) : b - (b - a) * (C(1) - w);
}

}  // namespace gs
