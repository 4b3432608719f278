// What the element-wise kernel files share: reading an operand of any layout, the integer
// types' wrapping arithmetic, conversions with Rust's `as` rules, and the scalar functions
// the CPU kernels (backend/cpu/elementwise.rs) define themselves.
#pragma once

#include "gs_cuda.cuh"

namespace gs_ew {

// An input operand: dense from `p` when `table` is null, else through its layout table
// (launch.rs's layout_table; `p` is the address of its first element).
template <class T>
struct In {
  const T* p;
  const long long* table;
  int rank;
};

// The offset of element i (row-major) of a layout table's tensor, or i if it is dense.
// Kept a loop (not unrolled): it is inlined into every op's loop of every kernel.
__device__ __forceinline__ long long offset(long long i, int rank, const long long* table) {
  if (!table) return i;
  long long off = 0;
#pragma unroll 1
  for (int d = rank - 1; d >= 0; --d) {
    const long long n = table[d];
    off += (i % n) * table[rank + d];
    i /= n;
  }
  return off;
}

// The offsets of element i in two operands of one shape: one walk over the dims.
__device__ __forceinline__ void offsets2(long long i, int rank, const long long* ta,
                                         const long long* tb, long long& oa, long long& ob) {
  if (!ta || !tb) {
    oa = offset(i, rank, ta);
    ob = offset(i, rank, tb);
    return;
  }
  oa = 0;
  ob = 0;
#pragma unroll 1
  for (int d = rank - 1; d >= 0; --d) {
    const long long n = ta[d], k = i % n;
    oa += k * ta[rank + d];
    ob += k * tb[rank + d];
    i /= n;
  }
}

// out[i] = f(x[i]) over the grid.
template <class T, class U, class F>
__device__ __forceinline__ void map1(long long n, In<T> x, U* out, F f) {
  GS_GRID_STRIDE(i, (size_t)n) out[i] = f(x.p[offset((long long)i, x.rank, x.table)]);
}

// out[i] = f(a[i], b[i]) over the grid.
template <class T, class U, class F>
__device__ __forceinline__ void map2(long long n, In<T> a, In<T> b, U* out, F f) {
  GS_GRID_STRIDE(i, (size_t)n) {
    long long oa, ob;
    offsets2((long long)i, a.rank, a.table, b.table, oa, ob);
    out[i] = f(a.p[oa], b.p[ob]);
  }
}

// The unsigned twin of an integer type: wrapping arithmetic is done there (signed overflow
// is undefined in C++; the CPU kernels wrap, as PyTorch's do).
template <class T>
struct Unsigned;
template <>
struct Unsigned<unsigned char> {
  using type = unsigned char;
};
template <>
struct Unsigned<unsigned int> {
  using type = unsigned int;
};
template <>
struct Unsigned<int> {
  using type = unsigned int;
};
template <>
struct Unsigned<long long> {
  using type = unsigned long long;
};

template <class T>
__device__ __forceinline__ constexpr bool is_signed() {
  return T(-1) < T(0);
}
// v < 0, false for the unsigned types without comparing (nvcc warns of that).
template <class T>
__device__ __forceinline__ bool negative(T v) {
  return v < T(0);
}
__device__ __forceinline__ bool negative(unsigned char) { return false; }
__device__ __forceinline__ bool negative(unsigned int) { return false; }

template <class T>
__device__ __forceinline__ T wrap_add(T a, T b) {
  using U = typename Unsigned<T>::type;
  return T(U(U(a) + U(b)));
}
template <class T>
__device__ __forceinline__ T wrap_sub(T a, T b) {
  using U = typename Unsigned<T>::type;
  return T(U(U(a) - U(b)));
}
template <class T>
__device__ __forceinline__ T wrap_mul(T a, T b) {
  using U = typename Unsigned<T>::type;
  return T(U(U(a) * U(b)));
}
template <class T>
__device__ __forceinline__ T wrap_neg(T a) {
  return wrap_sub(T(0), a);
}

// Rust's `f as i64`: toward zero, saturating, NaN to 0 (a C cast out of range is undefined).
__device__ __forceinline__ long long sat_i64(double d) {
  if (d != d) return 0;
  if (d >= 9223372036854775807.0) return 9223372036854775807LL;
  if (d <= -9223372036854775808.0) return -9223372036854775807LL - 1;
  return (long long)d;
}

// `b ** e` on integers, wrapping; a negative exponent gives 1/b**|e| truncated (1 for 1,
// ±1 for -1, else 0), as PyTorch's kernel (the CPU kernel's int_pow).
template <class T>
__device__ __forceinline__ T int_pow(T b, long long e) {
  if (e < 0) {
    const long long bi = (long long)b;
    if (bi == 1) return T(1);
    if (bi == -1) return e % 2 == 0 ? T(1) : b;
    return T(0);
  }
  T acc = T(1), base = b;
  for (unsigned long long k = (unsigned long long)e; k > 0; k >>= 1) {
    if (k & 1) acc = wrap_mul(acc, base);
    base = wrap_mul(base, base);
  }
  return acc;
}

template <class C>
__device__ __forceinline__ C sigmoid(C x) {
  return C(1) / (C(1) + exp(-x));
}

// The standard normal CDF Φ: CUDA's normcdf, accurate in both tails. The CPU kernel's f32
// Φ (vmath::normal_cdf) keeps that accuracy with a polynomial fit; its f64 one, (1 + erf)/2,
// cancels below x ≈ -5, where the two differ by less than 1e-16 absolute.
__device__ __forceinline__ float normal_cdf(float x) { return normcdff(x); }
__device__ __forceinline__ double normal_cdf(double x) { return normcdf(x); }

// GELU's derivative, Φ(x) + x·φ(x), in the CPU kernel's operation order per type.
__device__ __forceinline__ float gelu_grad(float x) {
  return normal_cdf(x) + x * 0.3989423f * exp(-0.5f * x * x);
}
__device__ __forceinline__ double gelu_grad(double x) {
  return normal_cdf(x) + x * (exp(-0.5 * x * x) / 2.5066282746310002);
}

}  // namespace gs_ew
