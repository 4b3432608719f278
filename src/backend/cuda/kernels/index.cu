// Advanced indexing (ops/index/plan.rs; backend/cpu/index.rs is the reference): read the
// elements a plan names out of any strided source (`take`), write or accumulate values
// into them in place (`put`), and find an index value out of bounds.
//
// Element e of an indexing result, laid out (outer, count, inner) row-major, sits at
// `outer_off(o) + sum_j coords[j, b] * adv_stride[j] + inner_off(i)` in the source, where
// outer and inner are the source's non-indexed dims before and after the index position.
// The host packs one int64 table: [outer dims, outer strides, inner dims, inner strides,
// the indexed dims' strides]; coords is the plan's dense (k, count) int64 tensor.
//
// Moving elements depends only on their size (b1, b2, b4, b8); accumulating is per type.
// Repeated positions must all add, so accumulation is atomic: the hardware's atomicAdd for
// float, double, int32, uint32 and int64 (as unsigned 64-bit: two's complement wraps the
// same); for the 1- and 2-byte types (u8, i16, f16, bf16) a compare-and-swap loop on the
// aligned 32-bit word holding the element (f16 and bf16 use the hardware's own atomicAdd
// where the architecture has it: sm_70 and sm_80). Integer sums are exact and so the same
// in any order; float sums of repeated positions depend on the order the atomics land in.

#include "gs_cuda.cuh"

namespace {

struct Plan {
  const long long* table;
  int outer_rank, inner_rank, k;
  const long long* coords;  // (k, count)
  long long count, inner;

  // The offset of result element e in a buffer laid out as the table says.
  __device__ __forceinline__ long long offset(long long e) const {
    const long long i = e % inner;
    const long long rest = e / inner;
    const long long b = rest % count, o = rest / count;
    long long off = gs::strided_offset(o, outer_rank, table) +
                    gs::strided_offset(i, inner_rank, table + 2 * outer_rank);
    const long long* adv = table + 2 * (outer_rank + inner_rank);
    for (int j = 0; j < k; ++j) off += coords[j * count + b] * adv[j];
    return off;
  }
};

#define GS_PLAN_PARAMS                                                                     \
  const long long *table, int outer_rank, int inner_rank, int k, const long long *coords, \
      long long count, long long inner
#define GS_PLAN Plan{table, outer_rank, inner_rank, k, coords, count, inner}

__device__ __forceinline__ long long offset_of(long long i, int rank, const long long* t) {
  return t ? gs::strided_offset(i, rank, t) : i;
}

template <class T>
__device__ void take(long long n, const T* x, T* out, Plan p) {
  GS_GRID_STRIDE(e, (size_t)n) out[e] = x[p.offset(e)];
}

// The bits of a 1- or 2-byte element and back, and its sum (some go unused where the
// hardware adds half types itself).
#define GS_NARROW [[maybe_unused]] __device__ __forceinline__
GS_NARROW unsigned bits_of(unsigned char v) { return v; }
GS_NARROW unsigned bits_of(short v) { return (unsigned short)v; }
GS_NARROW unsigned bits_of(__half v) { return __half_as_ushort(v); }
GS_NARROW unsigned bits_of(__nv_bfloat16 v) { return __bfloat16_as_ushort(v); }
GS_NARROW void of_bits(unsigned b, unsigned char& v) { v = (unsigned char)b; }
GS_NARROW void of_bits(unsigned b, short& v) { v = (short)(unsigned short)b; }
GS_NARROW void of_bits(unsigned b, __half& v) { v = __ushort_as_half((unsigned short)b); }
GS_NARROW void of_bits(unsigned b, __nv_bfloat16& v) {
  v = __ushort_as_bfloat16((unsigned short)b);
}
GS_NARROW unsigned char add(unsigned char a, unsigned char b) { return (unsigned char)(a + b); }
GS_NARROW short add(short a, short b) {
  return (short)(unsigned short)((unsigned)a + (unsigned)b);
}
GS_NARROW __half add(__half a, __half b) {
  return __float2half_rn(__half2float(a) + __half2float(b));
}
GS_NARROW __nv_bfloat16 add(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __float2bfloat16_rn(__bfloat162float(a) + __bfloat162float(b));
}
#undef GS_NARROW

// *p += v for a 1- or 2-byte T: compare-and-swap on the aligned word that holds it, the
// other bytes of the word written back as they were read.
template <class T>
__device__ __forceinline__ void atomic_add_narrow(T* p, T v) {
  const unsigned long long a = (unsigned long long)p;
  unsigned* word = (unsigned*)(a & ~3ull);
  const unsigned shift = unsigned(a & 3ull) * 8u;
  const unsigned mask = ((1u << (8u * sizeof(T))) - 1u) << shift;
  unsigned old = *word, assumed;
  do {
    assumed = old;
    T cur;
    of_bits((assumed & mask) >> shift, cur);
    const T next = add(cur, v);
    old = atomicCAS(word, assumed, (assumed & ~mask) | (bits_of(next) << shift));
  } while (assumed != old);
}

__device__ __forceinline__ void atomic_add(float* p, float v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(double* p, double v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(int* p, int v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(unsigned* p, unsigned v) { atomicAdd(p, v); }
__device__ __forceinline__ void atomic_add(long long* p, long long v) {
  atomicAdd((unsigned long long*)p, (unsigned long long)v);
}
__device__ __forceinline__ void atomic_add(unsigned char* p, unsigned char v) {
  atomic_add_narrow(p, v);
}
__device__ __forceinline__ void atomic_add(short* p, short v) { atomic_add_narrow(p, v); }
__device__ __forceinline__ void atomic_add(__half* p, __half v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  atomicAdd(p, v);
#else
  atomic_add_narrow(p, v);
#endif
}
__device__ __forceinline__ void atomic_add(__nv_bfloat16* p, __nv_bfloat16 v) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  atomicAdd(p, v);
#else
  atomic_add_narrow(p, v);
#endif
}

// dst[plan(e)] = src[e] (or += with `accumulate`), for the first n elements of the result
// (the CPU kernel stops where the source's elements end).
template <class T, bool ACCUMULATE>
__device__ void put(long long n, T* dst, Plan p, const T* src, const long long* st, int sr) {
  GS_GRID_STRIDE(e, (size_t)n) {
    const T v = src[offset_of(e, sr, st)];
    T* d = dst + p.offset(e);
    if constexpr (ACCUMULATE)
      atomic_add(d, v);
    else
      *d = v;
  }
}

// The row-major position of the first element of v outside [lo, hi) that is not
// `except` (when has_except), min-ed into *first (which starts at all ones).
__device__ void find_out_of_bounds(long long n, const long long* v, const long long* vt,
                                   int vr, long long lo, long long hi, int has_except,
                                   long long except, unsigned long long* first) {
  // Each thread's indices ascend, so its first hit is its smallest.
  GS_GRID_STRIDE(i, (size_t)n) {
    const long long x = v[offset_of(i, vr, vt)];
    if ((x < lo || x >= hi) && !(has_except && x == except)) {
      atomicMin(first, (unsigned long long)i);
      break;
    }
  }
}

}  // namespace

#define GS_MOVE(T, suffix)                                                                 \
  extern "C" __global__ void gs_take_##suffix(long long n, const T* x, T* out,             \
                                              GS_PLAN_PARAMS) {                            \
    take<T>(n, x, out, GS_PLAN);                                                           \
  }                                                                                        \
  GS_EXPORT(gs_take_##suffix)                                                              \
  extern "C" __global__ void gs_put_##suffix(long long n, T* dst, GS_PLAN_PARAMS,          \
                                             const T* src, const long long* st, int sr) {  \
    put<T, false>(n, dst, GS_PLAN, src, st, sr);                                           \
  }                                                                                        \
  GS_EXPORT(gs_put_##suffix)

GS_MOVE(unsigned char, b1)
GS_MOVE(unsigned short, b2)
GS_MOVE(unsigned int, b4)
GS_MOVE(unsigned long long, b8)

#define GS_ACCUMULATE(T, suffix)                                                            \
  extern "C" __global__ void gs_put_add_##suffix(long long n, T* dst, GS_PLAN_PARAMS,       \
                                                 const T* src, const long long* st,         \
                                                 int sr) {                                  \
    put<T, true>(n, dst, GS_PLAN, src, st, sr);                                             \
  }                                                                                         \
  GS_EXPORT(gs_put_add_##suffix)

GS_ACCUMULATE(unsigned char, u8)
GS_ACCUMULATE(short, i16)
GS_ACCUMULATE(int, i32)
GS_ACCUMULATE(unsigned, u32)
GS_ACCUMULATE(long long, i64)
GS_ACCUMULATE(float, f32)
GS_ACCUMULATE(double, f64)
GS_ACCUMULATE(__half, f16)
GS_ACCUMULATE(__nv_bfloat16, bf16)

extern "C" __global__ void gs_find_out_of_bounds(long long n, const long long* v,
                                                 const long long* vt, int vr, long long lo,
                                                 long long hi, int has_except,
                                                 long long except, unsigned long long* first) {
  find_out_of_bounds(n, v, vt, vr, lo, hi, has_except, except, first);
}
GS_EXPORT(gs_find_out_of_bounds)

// out[1] = v at position out[0], when out[0] names one (one thread).
extern "C" __global__ void gs_out_of_bounds_value(const long long* v, const long long* vt,
                                                  int vr, long long* out) {
  if (blockIdx.x == 0 && threadIdx.x == 0 && out[0] >= 0) out[1] = v[offset_of(out[0], vr, vt)];
}
GS_EXPORT(gs_out_of_bounds_value)
