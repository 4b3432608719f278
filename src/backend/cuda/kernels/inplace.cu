// In-place writes into any non-overlapping view: `dst op= src` (src broadcast to dst's
// shape and strided), `fill_`, and a dense copy of any layout (backend/cpu/inplace.rs is
// the reference).
//
// A strided operand comes with its layout table (launch.rs's layout_table) and rank; a
// null table means the operand is dense, and element i is at offset i. Moving elements
// (assign, fill, copy) depends only on their size, so those kernels are exported per size
// (b1, b2, b4, b8); arithmetic is per element type. Integers wrap, as two's complement
// does; half types compute in float and round once.

#include "gs_cuda.cuh"

#include <type_traits>

namespace {

__device__ __forceinline__ long long offset_of(long long i, int rank, const long long* table) {
  return table ? gs::strided_offset(i, rank, table) : i;
}

enum Op { ASSIGN, ADD, SUB, MUL, DIV };

// Integers: wrap through the unsigned type (signed overflow is undefined in C++).
template <class T>
struct Arith {
  template <int O>
  __device__ static __forceinline__ T apply(T d, T s) {
    using U = typename std::make_unsigned<T>::type;
    switch (O) {
      case ADD: return T(U(d) + U(s));
      case SUB: return T(U(d) - U(s));
      case MUL: return T(U(d) * U(s));
      default: return s;
    }
  }
};

template <class T>
struct FloatArith {
  template <int O>
  __device__ static __forceinline__ T apply(T d, T s) {
    using C = typename gs::Acc<T>::type;
    const C a = gs::to_acc(d), b = gs::to_acc(s);
    switch (O) {
      case ADD: return gs::from_acc<T>(a + b);
      case SUB: return gs::from_acc<T>(a - b);
      case MUL: return gs::from_acc<T>(a * b);
      case DIV: return gs::from_acc<T>(a / b);
      default: return s;
    }
  }
};
template <>
struct Arith<float> : FloatArith<float> {};
template <>
struct Arith<double> : FloatArith<double> {};
template <>
struct Arith<__half> : FloatArith<__half> {};
template <>
struct Arith<__nv_bfloat16> : FloatArith<__nv_bfloat16> {};

template <int O, class T>
__device__ void update(long long n, T* dst, const long long* dt, int dr, const T* src,
                       const long long* st, int sr) {
  GS_GRID_STRIDE(i, (size_t)n) {
    T* d = dst + offset_of(i, dr, dt);
    const T s = src[offset_of(i, sr, st)];
    *d = O == ASSIGN ? s : Arith<T>::template apply<O>(*d, s);
  }
}

template <class T>
__device__ void fill(long long n, T* dst, const long long* dt, int dr, T v) {
  GS_GRID_STRIDE(i, (size_t)n) dst[offset_of(i, dr, dt)] = v;
}

template <class T>
__device__ void copy(long long n, const T* src, const long long* st, int sr, T* out) {
  GS_GRID_STRIDE(i, (size_t)n) out[i] = src[offset_of(i, sr, st)];
}

}  // namespace

// Assign, fill and copy by element size. fill takes the value's bits, made on the host
// (the dtype's own rounding of the f64 value).
#define GS_MOVE(T, suffix)                                                                  \
  extern "C" __global__ void gs_assign_##suffix(long long n, T* dst, const long long* dt,   \
                                                int dr, const T* src, const long long* st,  \
                                                int sr) {                                   \
    update<ASSIGN, T>(n, dst, dt, dr, src, st, sr);                                         \
  }                                                                                         \
  GS_EXPORT(gs_assign_##suffix)                                                             \
  extern "C" __global__ void gs_fill_##suffix(long long n, T* dst, const long long* dt,     \
                                              int dr, long long bits) {                     \
    fill<T>(n, dst, dt, dr, (T)(unsigned long long)bits);                                    \
  }                                                                                         \
  GS_EXPORT(gs_fill_##suffix)                                                               \
  extern "C" __global__ void gs_dense_copy_##suffix(long long n, const T* src,              \
                                                    const long long* st, int sr, T* out) {  \
    copy<T>(n, src, st, sr, out);                                                           \
  }                                                                                         \
  GS_EXPORT(gs_dense_copy_##suffix)

GS_MOVE(unsigned char, b1)
GS_MOVE(unsigned short, b2)
GS_MOVE(unsigned int, b4)
GS_MOVE(unsigned long long, b8)

#define GS_ARITH_OP(name, O, T, suffix)                                                     \
  extern "C" __global__ void gs_##name##_##suffix(long long n, T* dst, const long long* dt, \
                                                  int dr, const T* src,                     \
                                                  const long long* st, int sr) {            \
    update<O, T>(n, dst, dt, dr, src, st, sr);                                              \
  }                                                                                         \
  GS_EXPORT(gs_##name##_##suffix)

#define GS_ARITH(T, suffix)          \
  GS_ARITH_OP(add, ADD, T, suffix)   \
  GS_ARITH_OP(sub, SUB, T, suffix)   \
  GS_ARITH_OP(mul, MUL, T, suffix)

GS_ARITH(unsigned char, u8)
GS_ARITH(int, i32)
GS_ARITH(long long, i64)
GS_ARITH(float, f32)
GS_ARITH(double, f64)
GS_ARITH(__half, f16)
GS_ARITH(__nv_bfloat16, bf16)
GS_ARITH_OP(div, DIV, float, f32)
GS_ARITH_OP(div, DIV, double, f64)
GS_ARITH_OP(div, DIV, __half, f16)
GS_ARITH_OP(div, DIV, __nv_bfloat16, bf16)
