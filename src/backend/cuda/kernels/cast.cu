// Dtype casts (`CastOps`) with backend/cast.rs's rules: to bool `x != 0`; float to an
// integer type as PyTorch's CPU kernels do (toward zero, the type's minimum for NaN, inf and
// what does not fit, uint8 the low byte of the int64 value); integers wrap; the 16-bit floats are
// reached through float (PyTorch rounds twice too); the rest rounds to nearest even.
//
//   gs_cast_<src>_<dst>(n, x, table, rank, out)
// x: the address of the first element, read through its layout table (null: dense); out:
// dense. <dst> is `bool` for bool (stored as 0/1 bytes, as u8 is).

#include "elementwise.cuh"

namespace {

using gs_ew::In;

// The value of an element: an integer exactly, a float as a double (exact).
__device__ __forceinline__ long long int_of(unsigned char v) { return v; }
__device__ __forceinline__ long long int_of(int v) { return v; }
__device__ __forceinline__ long long int_of(long long v) { return v; }
__device__ __forceinline__ double real_of(float v) { return v; }
__device__ __forceinline__ double real_of(double v) { return v; }
__device__ __forceinline__ double real_of(__half v) { return __half2float(v); }
__device__ __forceinline__ double real_of(__nv_bfloat16 v) { return __bfloat162float(v); }

// x86's cvttsd2si: toward zero, or the minimum for NaN and out of range.
__device__ __forceinline__ long long float_to_i64(double d) {
  if (!(d >= -9223372036854775808.0 && d < 9223372036854775808.0)) return -9223372036854775807LL - 1;
  return (long long)d;
}
__device__ __forceinline__ int float_to_i32(double d) {
  const long long w = float_to_i64(d);
  return (w < -2147483648LL || w > 2147483647LL) ? int(-2147483647 - 1) : int(w);
}

// An integer value as D.
template <class D>
__device__ __forceinline__ D from_int(long long v);
template <>
__device__ __forceinline__ unsigned char from_int<unsigned char>(long long v) {
  return (unsigned char)(unsigned long long)v;
}
template <>
__device__ __forceinline__ int from_int<int>(long long v) {
  return (int)(unsigned int)(unsigned long long)v;
}
template <>
__device__ __forceinline__ long long from_int<long long>(long long v) {
  return v;
}
template <>
__device__ __forceinline__ float from_int<float>(long long v) {
  return (float)v;
}
template <>
__device__ __forceinline__ double from_int<double>(long long v) {
  return (double)v;
}
template <>
__device__ __forceinline__ __half from_int<__half>(long long v) {
  return __float2half_rn((float)v);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_int<__nv_bfloat16>(long long v) {
  return __float2bfloat16_rn((float)v);
}

// A float value (exact in a double) as D.
template <class D>
__device__ __forceinline__ D from_real(double d);
template <>
__device__ __forceinline__ unsigned char from_real<unsigned char>(double d) {
  return (unsigned char)(unsigned long long)float_to_i64(d);
}
template <>
__device__ __forceinline__ int from_real<int>(double d) {
  return float_to_i32(d);
}
template <>
__device__ __forceinline__ long long from_real<long long>(double d) {
  return float_to_i64(d);
}
template <>
__device__ __forceinline__ float from_real<float>(double d) {
  return (float)d;
}
template <>
__device__ __forceinline__ double from_real<double>(double d) {
  return d;
}
template <>
__device__ __forceinline__ __half from_real<__half>(double d) {
  return __float2half_rn((float)d);
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_real<__nv_bfloat16>(double d) {
  return __float2bfloat16_rn((float)d);
}

// Bool is a destination of its own: 0/1 bytes.
struct Bool {};

template <class S, class D>
struct Convert {
  __device__ __forceinline__ static D of(S v) { return from_int<D>(int_of(v)); }
};
template <class S>
struct Convert<S, Bool> {
  __device__ __forceinline__ static unsigned char of(S v) { return int_of(v) != 0; }
};
#define GS_REAL_SOURCE(S)                                                                    \
  template <class D>                                                                         \
  struct Convert<S, D> {                                                                     \
    __device__ __forceinline__ static D of(S v) { return from_real<D>(real_of(v)); }         \
  };                                                                                         \
  template <>                                                                                \
  struct Convert<S, Bool> {                                                                  \
    __device__ __forceinline__ static unsigned char of(S v) { return real_of(v) != 0.0; }    \
  };
GS_REAL_SOURCE(float)
GS_REAL_SOURCE(double)
GS_REAL_SOURCE(__half)
GS_REAL_SOURCE(__nv_bfloat16)

template <class D>
struct Stored {
  using type = D;
};
template <>
struct Stored<Bool> {
  using type = unsigned char;
};

}  // namespace

#define GS_CAST(S, s, D, d)                                                                  \
  extern "C" __global__ void gs_cast_##s##_##d(long long n, const S* x,                     \
                                               const long long* table, int rank,            \
                                               Stored<D>::type* out) {                      \
    gs_ew::map1(n, In<S>{x, table, rank}, out, [](S v) { return Convert<S, D>::of(v); });    \
  }                                                                                          \
  GS_EXPORT(gs_cast_##s##_##d)

#define GS_CAST_FROM(S, s)                                                                   \
  GS_CAST(S, s, Bool, bool)                                                                    \
  GS_CAST(S, s, unsigned char, u8)                                                           \
  GS_CAST(S, s, int, i32)                                                                    \
  GS_CAST(S, s, long long, i64)                                                              \
  GS_CAST(S, s, __half, f16)                                                                 \
  GS_CAST(S, s, __nv_bfloat16, bf16)                                                         \
  GS_CAST(S, s, float, f32)                                                                  \
  GS_CAST(S, s, double, f64)

GS_CAST_FROM(unsigned char, u8)
GS_CAST_FROM(int, i32)
GS_CAST_FROM(long long, i64)
GS_CAST_FROM(__half, f16)
GS_CAST_FROM(__nv_bfloat16, bf16)
GS_CAST_FROM(float, f32)
GS_CAST_FROM(double, f64)
