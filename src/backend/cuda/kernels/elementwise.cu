// Element-wise functions (`ElementwiseOps`): unary, binary (with the activations' fused
// backward) and float predicates, with the CPU kernels' semantics
// (backend/cpu/elementwise.rs): f16/bf16 computed in float, PyTorch's integer rules
// (wrapping, identity rounding), round half to even.
//
// One kernel per dtype and kind, the function picked by an op code (elementwise.rs's
// unary_code/binary_code give the same numbers) with two scalar parameters p0, p1:
//   gs_unary_<dtype>(n, x, table, rank, out, op, p0, p1)
//   gs_binary_<dtype>(n, a, table_a, b, table_b, rank, out, op, p0, p1)
//   gs_predicate_<dtype>(n, x, table, rank, out, pred)
//   gs_compare_<dtype>(n, a, table_a, b, table_b, rank, out, op)     (0/1 bytes)
//   gs_where_<b1|b2|b4|b8>(n, cond, table_c, a, table_a, b, table_b, rank, out)
// Inputs: the address of their first element and their layout table (null: dense), all of
// one shape (broadcast views have stride 0); the output is dense.

#include "elementwise.cuh"

namespace {

using gs_ew::In;

// Unary op codes. p0/p1: softplus beta/threshold, the exponent of x ** e, the base of b ** x.
enum Unary : int {
  NEG = 0,
  ABS = 1,
  SIGN = 2,
  SQUARE = 3,
  RECIPROCAL = 4,
  EXP = 5,
  LOG = 6,
  LOG2 = 7,
  LOG10 = 8,
  LOG1P = 9,
  EXPM1 = 10,
  SQRT = 11,
  RSQRT = 12,
  SIN = 13,
  COS = 14,
  TAN = 15,
  TANH = 16,
  ASIN = 17,
  ACOS = 18,
  ATAN = 19,
  SINH = 20,
  COSH = 21,
  ASINH = 22,
  ACOSH = 23,
  ATANH = 24,
  SIGMOID = 25,
  RELU = 26,
  SOFTPLUS = 27,
  GELU = 28,
  GELU_TANH = 29,
  SILU = 30,
  ERF = 31,
  FLOOR = 32,
  CEIL = 33,
  ROUND = 34,
  TRUNC = 35,
  FRAC = 36,
  POW_SCALAR = 37,
  SCALAR_POW = 38,
  BIT_NOT = 39,
};

enum Predicate : int { IS_NAN = 0, IS_INF = 1, IS_FINITE = 2 };

// A float op on T, computed in C (float for the 16-bit types, as the CPU kernels do).
template <class T>
__device__ __forceinline__ void unary_float(long long n, In<T> x, T* out, int op, double p0,
                                            double p1) {
  using C = typename gs::Acc<T>::type;
  auto go = [&](auto f) {
    gs_ew::map1(n, x, out, [=](T v) { return gs::from_acc<T>(f(gs::to_acc(v))); });
  };
  switch (op) {
    case NEG: return go([](C v) { return -v; });
    case ABS: return go([](C v) { return fabs(v); });
    // sign(NaN) and sign(-0) are +0
    case SIGN: return go([](C v) { return v > C(0) ? C(1) : (v < C(0) ? C(-1) : C(0)); });
    case SQUARE: return go([](C v) { return v * v; });
    case RECIPROCAL: return go([](C v) { return C(1) / v; });
    case EXP: return go([](C v) { return exp(v); });
    case LOG: return go([](C v) { return log(v); });
    case LOG2: return go([](C v) { return log2(v); });
    case LOG10: return go([](C v) { return log10(v); });
    case LOG1P: return go([](C v) { return log1p(v); });
    case EXPM1: return go([](C v) { return expm1(v); });
    case SQRT: return go([](C v) { return sqrt(v); });
    case RSQRT: return go([](C v) { return C(1) / sqrt(v); });
    case SIN: return go([](C v) { return sin(v); });
    case COS: return go([](C v) { return cos(v); });
    case TAN: return go([](C v) { return tan(v); });
    case TANH: return go([](C v) { return tanh(v); });
    case ASIN: return go([](C v) { return asin(v); });
    case ACOS: return go([](C v) { return acos(v); });
    case ATAN: return go([](C v) { return atan(v); });
    case SINH: return go([](C v) { return sinh(v); });
    case COSH: return go([](C v) { return cosh(v); });
    case ASINH: return go([](C v) { return asinh(v); });
    case ACOSH: return go([](C v) { return acosh(v); });
    case ATANH: return go([](C v) { return atanh(v); });
    case SIGMOID: return go([](C v) { return gs_ew::sigmoid(v); });
    // NaN passes (a comparison with NaN is false), -0 stays -0
    case RELU: return go([](C v) { return v < C(0) ? C(0) : v; });
    case SOFTPLUS: {
      const C beta = C(p0), th = C(p1);
      return go([=](C v) {
        const C bx = v * beta;
        return bx > th ? v : log1p(exp(bx)) / beta;
      });
    }
    case GELU: return go([](C v) { return v * gs_ew::normal_cdf(v); });
    case GELU_TANH: {
      const C k = C(sqrt(2.0 / 3.14159265358979323846)), c = C(0.044715);
      return go([=](C v) { return C(0.5) * v * (C(1) + tanh(k * (v + c * v * v * v))); });
    }
    case SILU: return go([](C v) { return v * gs_ew::sigmoid(v); });
    case ERF: return go([](C v) { return erf(v); });
    case FLOOR: return go([](C v) { return floor(v); });
    case CEIL: return go([](C v) { return ceil(v); });
    // rint rounds half to even (the default rounding mode), as torch.round
    case ROUND: return go([](C v) { return rint(v); });
    case TRUNC: return go([](C v) { return trunc(v); });
    case FRAC: return go([](C v) { return v - trunc(v); });
    case POW_SCALAR: {
      // The exponents the CPU kernel computes without pow.
      if (p0 == 2.0) return go([](C v) { return v * v; });
      if (p0 == 1.0) return go([](C v) { return v; });
      if (p0 == 0.5) return go([](C v) { return sqrt(v); });
      const C e = C(p0);
      return go([=](C v) { return pow(v, e); });
    }
    case SCALAR_POW: {
      const C b = C(p0);
      return go([=](C v) { return pow(b, v); });
    }
    default: return;  // the host refuses the rest (bitwise not)
  }
}

// An integer op on T, wrapping; the rounding functions are the identity.
template <class T>
__device__ __forceinline__ void unary_int(long long n, In<T> x, T* out, int op, double p0) {
  auto go = [&](auto f) { gs_ew::map1(n, x, out, f); };
  switch (op) {
    case NEG: return go([](T v) { return gs_ew::wrap_neg(v); });
    case ABS:
      return go([](T v) { return gs_ew::negative(v) ? gs_ew::wrap_neg(v) : v; });
    case SIGN:
      return go([](T v) { return v > T(0) ? T(1) : (gs_ew::negative(v) ? T(-1) : T(0)); });
    case SQUARE: return go([](T v) { return gs_ew::wrap_mul(v, v); });
    case RELU: return go([](T v) { return gs_ew::negative(v) ? T(0) : v; });
    case FLOOR:
    case CEIL:
    case ROUND:
    case TRUNC: return go([](T v) { return v; });
    case BIT_NOT: return go([](T v) { return T(~v); });
    case POW_SCALAR: {
      const long long e = gs_ew::sat_i64(p0);
      return go([=](T v) { return gs_ew::int_pow(v, e); });
    }
    default: return;  // the host refuses the float-only functions
  }
}

template <class T>
__device__ __forceinline__ void predicate(long long n, In<T> x, unsigned char* out, int p) {
  auto go = [&](auto f) {
    gs_ew::map1(n, x, out, [=](T v) { return (unsigned char)f(gs::to_acc(v)); });
  };
  switch (p) {
    case IS_NAN: return go([](auto v) { return isnan(v); });
    case IS_INF: return go([](auto v) { return isinf(v); });
    default: return go([](auto v) { return isfinite(v); });
  }
}

// Binary op codes. p0/p1: softplus beta/threshold (its backward).
enum Binary : int {
  ADD = 0,
  SUB = 1,
  MUL = 2,
  DIV = 3,
  POW = 4,
  FLOOR_DIV = 5,
  TRUNC_DIV = 6,
  REM = 7,
  FMOD = 8,
  ATAN2 = 9,
  HYPOT = 10,
  MAX = 11,
  MIN = 12,
  AND = 13,
  OR = 14,
  XOR = 15,
  // g * f'(s): s is sigmoid's and tanh's output, the other functions' input
  GRAD_SIGMOID = 16,
  GRAD_SILU = 17,
  GRAD_GELU = 18,
  GRAD_GELU_TANH = 19,
  GRAD_SOFTPLUS = 20,
  GRAD_TANH = 21,
};

// max/min where a NaN in either operand wins (the first's if both), as the CPU kernel.
template <class C>
__device__ __forceinline__ C nan_max(C a, C b) {
  return (a != a || a > b) ? a : b;
}
template <class C>
__device__ __forceinline__ C nan_min(C a, C b) {
  return (a != a || a < b) ? a : b;
}

// Python's `a // b` on floats (CPython's float_floor_div, which PyTorch follows).
template <class C>
__device__ __forceinline__ C floor_div(C a, C b) {
  if (b == C(0)) return a / b;
  const C m = fmod(a, b);
  C div = (a - m) / b;
  if (m != C(0) && ((b < C(0)) != (m < C(0)))) div -= C(1);
  if (div != C(0)) {
    const C f = floor(div);
    return div - f > C(0.5) ? f + C(1) : f;
  }
  return copysign(C(0), a / b);
}

// Python's `a % b` on floats: the result has the divisor's sign.
template <class C>
__device__ __forceinline__ C float_rem(C a, C b) {
  const C m = fmod(a, b);
  return (m != C(0) && ((b < C(0)) != (m < C(0)))) ? m + b : m;
}

template <class T>
__device__ __forceinline__ void binary_float(long long n, In<T> a, In<T> b, T* out, int op,
                                             double p0, double p1) {
  using C = typename gs::Acc<T>::type;
  auto go = [&](auto f) {
    gs_ew::map2(n, a, b, out,
                [=](T x, T y) { return gs::from_acc<T>(f(gs::to_acc(x), gs::to_acc(y))); });
  };
  switch (op) {
    case ADD: return go([](C x, C y) { return x + y; });
    case SUB: return go([](C x, C y) { return x - y; });
    case MUL: return go([](C x, C y) { return x * y; });
    case DIV: return go([](C x, C y) { return x / y; });
    case POW: return go([](C x, C y) { return pow(x, y); });
    case FLOOR_DIV: return go([](C x, C y) { return floor_div(x, y); });
    case TRUNC_DIV: return go([](C x, C y) { return trunc(x / y); });
    case REM: return go([](C x, C y) { return float_rem(x, y); });
    case FMOD: return go([](C x, C y) { return fmod(x, y); });
    case ATAN2: return go([](C x, C y) { return atan2(x, y); });
    case HYPOT: return go([](C x, C y) { return hypot(x, y); });
    case MAX: return go([](C x, C y) { return nan_max(x, y); });
    case MIN: return go([](C x, C y) { return nan_min(x, y); });
    case GRAD_SIGMOID: return go([](C g, C y) { return g * y * (C(1) - y); });
    case GRAD_TANH: return go([](C g, C y) { return g * (C(1) - y * y); });
    case GRAD_SILU:
      return go([](C g, C x) {
        const C s = gs_ew::sigmoid(x);
        return g * s * (C(1) + x * (C(1) - s));
      });
    case GRAD_GELU: return go([](C g, C x) { return g * gs_ew::gelu_grad(x); });
    case GRAD_GELU_TANH: {
      const C k = C(sqrt(2.0 / 3.14159265358979323846)), c = C(0.044715),
              c3 = C(3.0 * 0.044715), half = C(0.5);
      return go([=](C g, C x) {
        const C x2 = x * x;
        const C t = tanh(k * (x + c * x * x2));
        return g * (half * (C(1) + t) + half * x * (C(1) - t * t) * k * (C(1) + c3 * x2));
      });
    }
    case GRAD_SOFTPLUS: {
      const C beta = C(p0), th = C(p1);
      return go([=](C g, C x) {
        const C bx = x * beta;
        return bx > th ? g : g * gs_ew::sigmoid(bx);
      });
    }
    default: return;  // the host refuses the rest (bitwise ops)
  }
}

// `a / b` toward zero, wrapping (MIN / -1 == MIN); 0 for a zero divisor (the op refuses
// those first).
template <class T>
__device__ __forceinline__ T trunc_div(T a, T b) {
  if (b == T(0)) return T(0);
  if (gs_ew::is_signed<T>() && b == T(-1)) return gs_ew::wrap_neg(a);
  return T(a / b);
}

// The remainder of trunc_div, with the dividend's sign.
template <class T>
__device__ __forceinline__ T trunc_rem(T a, T b) {
  if (b == T(0) || (gs_ew::is_signed<T>() && b == T(-1))) return T(0);
  return T(a % b);
}

template <class T>
__device__ __forceinline__ void binary_int(long long n, In<T> a, In<T> b, T* out, int op) {
  auto go = [&](auto f) { gs_ew::map2(n, a, b, out, f); };
  constexpr bool sign = gs_ew::is_signed<T>();
  switch (op) {
    case ADD: return go([](T x, T y) { return gs_ew::wrap_add(x, y); });
    case SUB: return go([](T x, T y) { return gs_ew::wrap_sub(x, y); });
    case MUL: return go([](T x, T y) { return gs_ew::wrap_mul(x, y); });
    case POW: return go([](T x, T y) { return gs_ew::int_pow(x, (long long)y); });
    case FLOOR_DIV:
      return go([](T x, T y) {
        const T q = trunc_div(x, y);
        const bool down = sign && trunc_rem(x, y) != T(0) && ((x < T(0)) != (y < T(0)));
        return down ? gs_ew::wrap_sub(q, T(1)) : q;
      });
    case TRUNC_DIV: return go([](T x, T y) { return trunc_div(x, y); });
    case REM:
      return go([](T x, T y) {
        const T r = trunc_rem(x, y);
        const bool shift = sign && r != T(0) && ((r < T(0)) != (y < T(0)));
        return shift ? gs_ew::wrap_add(r, y) : r;
      });
    case FMOD: return go([](T x, T y) { return trunc_rem(x, y); });
    case MAX: return go([](T x, T y) { return x > y ? x : y; });
    case MIN: return go([](T x, T y) { return x < y ? x : y; });
    case AND: return go([](T x, T y) { return T(x & y); });
    case OR: return go([](T x, T y) { return T(x | y); });
    case XOR: return go([](T x, T y) { return T(x ^ y); });
    default: return;  // the host refuses the float-only functions
  }
}

// Comparison codes (elementwise.rs's compare_code): C's comparisons, false with NaN but
// for NE, as PyTorch's.
enum Compare : int { EQ = 0, NE = 1, LT = 2, LE = 3, GT = 4, GE = 5 };

// What a comparison compares: the 16-bit floats as float, the rest as they are.
template <class T>
__device__ __forceinline__ T compared(T v) {
  return v;
}
__device__ __forceinline__ float compared(__half v) { return __half2float(v); }
__device__ __forceinline__ float compared(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
__device__ __forceinline__ void compare(long long n, In<T> a, In<T> b, unsigned char* out,
                                        int op) {
  auto go = [&](auto f) {
    gs_ew::map2(n, a, b, out,
                [=](T x, T y) { return (unsigned char)f(compared(x), compared(y)); });
  };
  switch (op) {
    case EQ: return go([](auto x, auto y) { return x == y; });
    case NE: return go([](auto x, auto y) { return x != y; });
    case LT: return go([](auto x, auto y) { return x < y; });
    case LE: return go([](auto x, auto y) { return x <= y; });
    case GT: return go([](auto x, auto y) { return x > y; });
    default: return go([](auto x, auto y) { return x >= y; });
  }
}

// out[i] = cond[i] ? a[i] : b[i]; elements moved by their size, whatever their dtype.
template <class T>
__device__ __forceinline__ void select(long long n, In<unsigned char> c, In<T> a, In<T> b,
                                       T* out) {
  GS_GRID_STRIDE(i, (size_t)n) {
    const long long k = (long long)i;
    out[i] = c.p[gs_ew::offset(k, c.rank, c.table)] ? a.p[gs_ew::offset(k, a.rank, a.table)]
                                                     : b.p[gs_ew::offset(k, b.rank, b.table)];
  }
}

}  // namespace

#define GS_UNARY(T, suffix, body)                                                            \
  extern "C" __global__ void gs_unary_##suffix(long long n, const T* x,                     \
                                               const long long* table, int rank, T* out,    \
                                               int op, double p0, double p1) {              \
    const In<T> in{x, table, rank};                                                          \
    (void)p0;                                                                                \
    (void)p1;                                                                                \
    body;                                                                                    \
  }                                                                                          \
  GS_EXPORT(gs_unary_##suffix)

#define GS_BINARY(T, suffix, body)                                                           \
  extern "C" __global__ void gs_binary_##suffix(                                             \
      long long n, const T* a, const long long* table_a, const T* b,                         \
      const long long* table_b, int rank, T* out, int op, double p0, double p1) {            \
    const In<T> x{a, table_a, rank}, y{b, table_b, rank};                                    \
    (void)p0;                                                                                \
    (void)p1;                                                                                \
    body;                                                                                    \
  }                                                                                          \
  GS_EXPORT(gs_binary_##suffix)

#define GS_PREDICATE(T, suffix)                                                              \
  extern "C" __global__ void gs_predicate_##suffix(long long n, const T* x,                 \
                                                   const long long* table, int rank,        \
                                                   unsigned char* out, int p) {             \
    predicate<T>(n, In<T>{x, table, rank}, out, p);                                          \
  }                                                                                          \
  GS_EXPORT(gs_predicate_##suffix)

GS_UNARY(float, f32, unary_float<float>(n, in, out, op, p0, p1))
GS_UNARY(double, f64, unary_float<double>(n, in, out, op, p0, p1))
GS_UNARY(__half, f16, unary_float<__half>(n, in, out, op, p0, p1))
GS_UNARY(__nv_bfloat16, bf16, unary_float<__nv_bfloat16>(n, in, out, op, p0, p1))
GS_UNARY(unsigned char, u8, unary_int<unsigned char>(n, in, out, op, p0))
GS_UNARY(int, i32, unary_int<int>(n, in, out, op, p0))
GS_UNARY(long long, i64, unary_int<long long>(n, in, out, op, p0))

GS_BINARY(float, f32, binary_float<float>(n, x, y, out, op, p0, p1))
GS_BINARY(double, f64, binary_float<double>(n, x, y, out, op, p0, p1))
GS_BINARY(__half, f16, binary_float<__half>(n, x, y, out, op, p0, p1))
GS_BINARY(__nv_bfloat16, bf16, binary_float<__nv_bfloat16>(n, x, y, out, op, p0, p1))
GS_BINARY(unsigned char, u8, binary_int<unsigned char>(n, x, y, out, op))
GS_BINARY(int, i32, binary_int<int>(n, x, y, out, op))
GS_BINARY(long long, i64, binary_int<long long>(n, x, y, out, op))

GS_PREDICATE(float, f32)
GS_PREDICATE(double, f64)
GS_PREDICATE(__half, f16)
GS_PREDICATE(__nv_bfloat16, bf16)

#define GS_COMPARE(T, suffix)                                                                \
  extern "C" __global__ void gs_compare_##suffix(                                            \
      long long n, const T* a, const long long* table_a, const T* b,                         \
      const long long* table_b, int rank, unsigned char* out, int op) {                      \
    compare<T>(n, In<T>{a, table_a, rank}, In<T>{b, table_b, rank}, out, op);                \
  }                                                                                          \
  GS_EXPORT(gs_compare_##suffix)

GS_COMPARE(float, f32)
GS_COMPARE(double, f64)
GS_COMPARE(__half, f16)
GS_COMPARE(__nv_bfloat16, bf16)
GS_COMPARE(unsigned char, u8)
GS_COMPARE(int, i32)
GS_COMPARE(long long, i64)

#define GS_WHERE(T, suffix)                                                                  \
  extern "C" __global__ void gs_where_##suffix(                                              \
      long long n, const unsigned char* c, const long long* table_c, const T* a,             \
      const long long* table_a, const T* b, const long long* table_b, int rank, T* out) {    \
    select<T>(n, In<unsigned char>{c, table_c, rank}, In<T>{a, table_a, rank},               \
              In<T>{b, table_b, rank}, out);                                                 \
  }                                                                                          \
  GS_EXPORT(gs_where_##suffix)

GS_WHERE(unsigned char, b1)
GS_WHERE(unsigned short, b2)
GS_WHERE(unsigned int, b4)
GS_WHERE(unsigned long long, b8)
