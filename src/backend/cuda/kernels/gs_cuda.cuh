// The one header every gradstream kernel file includes.
//
// nvcc (__CUDACC__): the real CUDA headers. A host compiler with GS_EMULATE defined: the
// CPU emulator (emulator.h), so the same source runs in tests without a GPU.
//
// A kernel file looks like:
//
//   #include "gs_cuda.cuh"
//   extern "C" __global__ void gs_scale_f32(size_t n, float a, float* x) {
//     GS_GRID_STRIDE(i, n) x[i] *= a;
//   }
//   GS_EXPORT(gs_scale_f32)
#pragma once

#if defined(__CUDACC__)

#include <cuda_bf16.h>
#include <cuda_fp16.h>

// Kernels are found by name in the PTX module: nothing to register.
#define GS_EXPORT(name)
#define GS_DYNAMIC_SHARED(T, var)                                                    \
  extern __shared__ __align__(16) unsigned char gs_dyn_smem[];                       \
  T* var = reinterpret_cast<T*>(gs_dyn_smem)

#elif defined(GS_EMULATE)

#include "emulator.h"

// Registers the kernel for gs_emu_launch; place it after the kernel's definition.
#define GS_EXPORT(name) GS_EMU_REGISTER(name)
// The launch's dynamic shared memory (16-byte aligned, filled with 0xff at block start).
#define GS_DYNAMIC_SHARED(T, var) T* var = reinterpret_cast<T*>(::gs_emu::builtins().dynamic_shared)

#else
#error "gs_cuda.cuh: compile with nvcc, or with a host C++ compiler and -DGS_EMULATE"
#endif

// A loop over [0, n) spread over every thread of the grid.
#define GS_GRID_STRIDE(i, n)                                                         \
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);            \
       i += (size_t)blockDim.x * gridDim.x)

namespace gs {

// The offset (in elements) of element `i`, row-major, of a strided layout whose table is
// `[dims[0..rank), strides[rank..2 rank)]` (launch.rs's layout_table).
__device__ __forceinline__ long long strided_offset(long long i, int rank,
                                                    const long long* table) {
  long long off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const long long n = table[d];
    off += (i % n) * table[rank + d];
    i /= n;
  }
  return off;
}

// The type to accumulate T in.
template <class T>
struct Acc;
template <>
struct Acc<float> {
  using type = float;
};
template <>
struct Acc<double> {
  using type = double;
};
template <>
struct Acc<__half> {
  using type = float;
};
template <>
struct Acc<__nv_bfloat16> {
  using type = float;
};

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ double to_double(double x) { return x; }
__device__ __forceinline__ double to_double(float x) { return x; }

__device__ __forceinline__ float to_acc(float x) { return x; }
__device__ __forceinline__ double to_acc(double x) { return x; }
__device__ __forceinline__ float to_acc(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 x) { return __bfloat162float(x); }

// Round to nearest even.
template <class T>
__device__ __forceinline__ T from_float(float f);
template <>
__device__ __forceinline__ float from_float<float>(float f) {
  return f;
}
template <>
__device__ __forceinline__ double from_float<double>(float f) {
  return f;
}
template <>
__device__ __forceinline__ __half from_float<__half>(float f) {
  return __float2half_rn(f);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float f) {
  return __float2bfloat16_rn(f);
}

template <class T>
__device__ __forceinline__ T from_acc(typename Acc<T>::type a) {
  return from_float<T>(a);
}
template <>
__device__ __forceinline__ double from_acc<double>(double a) {
  return a;
}

// max that propagates NaN (as torch.max does) and prefers +0 to -0, so every lane of a
// butterfly reduction ends with the same bits.
template <class T>
__device__ __forceinline__ T max_nan(T a, T b) {
  return (a != a || a > b || (a == b && !signbit(a))) ? a : b;
}

// Sum / max over the 32 lanes of a warp, all of which must call it; every lane gets the
// result.
__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_sum(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ __forceinline__ double warp_max(double v) {
  for (int offset = 16; offset > 0; offset >>= 1)
    v = max_nan(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum / max over a block whose blockDim.x is a multiple of 32 (up to 1024; blockDim.y and
// .z must be 1). Every thread must call it and gets the result. `scratch` is a __shared__
// array of 32 elements; it may be passed to the next call at once.
//
// Each warp reduces its lanes and posts a partial; then every warp reduces the partials
// itself (the butterfly gives all lanes the same bits), which costs one __syncthreads fewer
// than having warp 0 reduce and broadcast.
template <class T>
__device__ __forceinline__ T block_sum(T v, T* scratch) {
  const unsigned lane = threadIdx.x & 31u;
  v = warp_sum(v);
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = warp_sum(lane < (blockDim.x >> 5) ? scratch[lane] : T(0));
  __syncthreads();  // all partials read: scratch is free again
  return v;
}
template <class T>
__device__ __forceinline__ T block_max(T v, T* scratch) {
  const unsigned lane = threadIdx.x & 31u;
  v = warp_max(v);
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = warp_max(lane < (blockDim.x >> 5) ? scratch[lane] : T(-INFINITY));
  __syncthreads();
  return v;
}

}  // namespace gs
