// relu/threshold with a 1-bit mask of the elements that passed (`MaskOps`), as the CPU
// kernels (backend/cpu/mask.rs): bit i % 8 of byte i / 8, NaN passes.
//
//   gs_threshold_<dtype>(n, x, table, rank, out, mask, th, value)
//     out = x if x > th else value, and, when mask is not null, its bits. x is read through
//     its layout table (null: dense); out may be x itself (threshold_, dense, no mask).
//   gs_select_by_mask_<dtype>(n, g, table, rank, mask, out)
//     out = g where the bit is set, else 0; out may be g itself (dense).
//   gs_unpack_mask(n, mask, out): the bits as 0/1 bytes.
// th and value arrive already rounded to the dtype (the host rounds them as the CPU kernel
// does), so converting them back is exact.

#include "elementwise.cuh"

namespace {

using gs_ew::In;

// A double the host rounded to T, as T: exact (an int64 bound saturates, as Rust's `as`).
template <class T>
__device__ __forceinline__ T from_double(double d) {
  return T(d);
}
template <>
__device__ __forceinline__ __half from_double<__half>(double d) {
  return __float2half_rn(float(d));
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_double<__nv_bfloat16>(double d) {
  return __float2bfloat16_rn(float(d));
}
template <>
__device__ __forceinline__ long long from_double<long long>(double d) {
  return gs_ew::sat_i64(d);
}

// The value an element is compared as: the 16-bit floats in float (exact).
template <class T>
__device__ __forceinline__ T key(T v) {
  return v;
}
__device__ __forceinline__ float key(__half v) { return __half2float(v); }
__device__ __forceinline__ float key(__nv_bfloat16 v) { return __bfloat162float(v); }

// Each warp handles 32 consecutive elements per step, so its ballot of who passed is the
// 4 mask bytes of those elements, written by lanes 0-3: no atomics, coalesced. The loop
// runs while any lane of the warp has an element, so every lane reaches each ballot.
template <class T>
__device__ __forceinline__ void threshold(long long n, In<T> x, T* out, unsigned char* mask,
                                          double th_d, double value_d) {
  const T th = from_double<T>(th_d), value = from_double<T>(value_d);
  const unsigned lane = threadIdx.x & 31u;
  const long long stride = (long long)blockDim.x * gridDim.x;
  const long long bytes = (n + 7) / 8;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i - lane < n;
       i += stride) {
    const bool valid = i < n;
    bool passed = false;
    if (valid) {
      const T v = x.p[gs_ew::offset(i, x.rank, x.table)];
      passed = !(key(v) <= key(th));
      out[i] = passed ? v : value;
    }
    if (mask) {
      const unsigned bits = __ballot_sync(0xffffffffu, passed);
      const long long byte = (i - lane) / 8 + lane;
      if (lane < 4 && byte < bytes) mask[byte] = (unsigned char)(bits >> (8 * lane));
    }
  }
}

__device__ __forceinline__ bool bit(const unsigned char* mask, long long i) {
  return (mask[i >> 3] >> (i & 7)) & 1;
}

template <class T>
__device__ __forceinline__ void select_by_mask(long long n, In<T> g, const unsigned char* mask,
                                               T* out) {
  const T zero = from_double<T>(0.0);
  GS_GRID_STRIDE(i, (size_t)n) {
    const long long k = (long long)i;
    out[k] = bit(mask, k) ? g.p[gs_ew::offset(k, g.rank, g.table)] : zero;
  }
}

}  // namespace

#define GS_MASK(T, suffix)                                                                   \
  extern "C" __global__ void gs_threshold_##suffix(long long n, const T* x,                 \
                                                   const long long* table, int rank, T* out, \
                                                   unsigned char* mask, double th,          \
                                                   double value) {                          \
    threshold<T>(n, In<T>{x, table, rank}, out, mask, th, value);                            \
  }                                                                                          \
  GS_EXPORT(gs_threshold_##suffix)                                                           \
  extern "C" __global__ void gs_select_by_mask_##suffix(long long n, const T* g,            \
                                                        const long long* table, int rank,   \
                                                        const unsigned char* mask, T* out) { \
    select_by_mask<T>(n, In<T>{g, table, rank}, mask, out);                                  \
  }                                                                                          \
  GS_EXPORT(gs_select_by_mask_##suffix)

GS_MASK(float, f32)
GS_MASK(double, f64)
GS_MASK(__half, f16)
GS_MASK(__nv_bfloat16, bf16)
GS_MASK(unsigned char, u8)
GS_MASK(unsigned int, u32)
GS_MASK(int, i32)
GS_MASK(long long, i64)

extern "C" __global__ void gs_unpack_mask(long long n, const unsigned char* mask,
                                          unsigned char* out) {
  GS_GRID_STRIDE(i, (size_t)n) out[i] = bit(mask, (long long)i);
}
GS_EXPORT(gs_unpack_mask)
