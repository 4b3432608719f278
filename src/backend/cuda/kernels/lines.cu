// Kernels over the lines of a contiguous tensor seen as outer x n x inner: each (outer,
// inner) column is a line of n elements at stride `inner` (backend/lines.rs). The same
// semantics as the CPU kernels (backend/cpu/lines.rs): float32 lines accumulate in double,
// int64 lines wrap, NaN wins max/min and argmax/argmin (first index on ties), softmax's max
// skips NaN, which then propagates through its exp.
//
// Each launch is a grid of teams (team.cuh): a team of CW adjacent columns x R slices, whose
// thread (x, y) reads the elements y, y + R, ... of column x's line. For lines along the last
// dim (inner == 1) CW is 1: a team of R threads reads one line, adjacent threads adjacent
// elements. For lines along an outer dim a warp reads CW adjacent columns of one row. Either
// way a warp's loads are coalesced.
//
// A team may take one chunk of a line, elements [c * chunk_len, (c + 1) * chunk_len), when
// lines are too long and too few to fill the device alone: its partial result goes to an
// (outer, chunks, inner) buffer that a second launch combines, in chunk order.

#include "gs_cuda.cuh"
#include "team.cuh"

namespace {

using i64 = long long;
using u64 = unsigned long long;

constexpr i64 kNoIndex = 0x7fffffffffffffffLL;
// Elements per thread per tile in the scans.
constexpr int kItems = 4;

// What sums and products accumulate in: double for float lines (as the CPU kernels),
// unsigned for int64 lines (wrapping, without signed overflow).
template <class T>
struct LineAcc {
  using type = double;
};
template <>
struct LineAcc<i64> {
  using type = u64;
};

template <class T>
__device__ __forceinline__ bool is_nan(T v) {
  return v != v;
}

template <class Out, class A>
__device__ __forceinline__ Out narrow(A a) {
  return static_cast<Out>(a);
}

__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }

// The lines of a launch and the chunks they are cut into.
struct Lines {
  i64 outer, n, inner, chunk_len, chunks, groups;

  __device__ Lines(i64 outer_, i64 n_, i64 inner_, i64 chunk_len_, i64 chunks_)
      : outer(outer_), n(n_), inner(inner_), chunk_len(chunk_len_), chunks(chunks_) {
    groups = (inner + blockDim.x - 1) / blockDim.x;
  }
  __device__ i64 teams() const { return outer * groups * chunks; }
};

// Where team `t`'s thread in column lane `x` works: its line (o, col), its chunk's elements
// [begin, end), and whether there is such a column.
struct Spot {
  i64 o, col, chunk, begin, end;
  bool on;

  __device__ Spot(const Lines& L, i64 t, unsigned x) {
    on = t < L.teams();
    const i64 tt = on ? t : 0;
    chunk = tt % L.chunks;
    const i64 r = tt / L.chunks;
    o = r / L.groups;
    col = (r % L.groups) * blockDim.x + x;
    on = on && col < L.inner;
    begin = chunk * L.chunk_len;
    end = begin + L.chunk_len < L.n ? begin + L.chunk_len : L.n;
  }
  // Offset of element k of the line.
  __device__ i64 at(const Lines& L, i64 k) const { return (o * L.n + k) * L.inner + col; }
  // Offset of this chunk's result in an (outer, chunks, inner) buffer.
  __device__ i64 part(const Lines& L) const { return (o * L.chunks + chunk) * L.inner + col; }
  // Offset of the previous chunk's result.
  __device__ i64 prev(const Lines& L) const { return part(L) - L.inner; }
};

// The teams a block serves, first and step: every thread of a block loops the same number
// of times (the loops hold barriers).
__device__ __forceinline__ i64 first_team() { return (i64)blockIdx.x * blockDim.z; }
__device__ __forceinline__ i64 team_step() { return (i64)gridDim.x * blockDim.z; }

// ------------------------------------------------------------------------- sum, prod

template <class A>
struct Fold {
  int prod;
  __device__ A id() const { return prod ? A(1) : A(0); }
  __device__ A operator()(A a, A b) const { return prod ? a * b : a + b; }
};

// The sum or product of each line (or chunk), accumulated in LineAcc<In>.
template <class In, class Out>
__device__ void fold(Lines L, const In* x, Out* y, int prod) {
  using A = typename LineAcc<In>::type;
  __shared__ A scratch[1024];
  const gs::Team tm;
  const Fold<A> f{prod};
  for (i64 t = first_team(); t < L.teams(); t += team_step()) {
    const Spot s(L, t + threadIdx.z, tm.x);
    A acc = f.id();
    if (s.on)
      for (i64 k = s.begin + tm.y; k < s.end; k += blockDim.y) acc = f(acc, A(x[s.at(L, k)]));
    acc = tm.reduce(acc, f, scratch);
    if (s.on && tm.y == 0) y[s.part(L)] = narrow<Out>(acc);
  }
}

// ------------------------------------------------------------------ max, min, argmax

template <class T>
struct Best {
  T v;
  i64 i;
};

// Prefers NaN, then the larger (smaller) value, then the smaller index: a total order, so
// the result is the CPU kernel's (first NaN, else first extreme) in any combining order.
template <class T>
struct BestOf {
  int max;
  __device__ Best<T> id() const { return Best<T>{T(0), kNoIndex}; }
  __device__ Best<T> operator()(Best<T> a, Best<T> b) const {
    if (a.i == kNoIndex) return b;
    if (b.i == kNoIndex) return a;
    const bool an = is_nan(a.v), bn = is_nan(b.v);
    if (an || bn) return (an && bn) ? (a.i < b.i ? a : b) : (an ? a : b);
    if (max ? a.v > b.v : a.v < b.v) return a;
    if (max ? b.v > a.v : b.v < a.v) return b;
    return a.i < b.i ? a : b;
  }
};

// The extreme of each line (or chunk): its value to `yv` and its index to `yi` (either may
// be null). `xi`, when given, holds each element's index (a second pass over the chunks'
// results); else an element's index is its position.
template <class T>
__device__ void extreme(Lines L, const T* x, const i64* xi, T* yv, i64* yi, int max) {
  __shared__ Best<T> scratch[1024];
  const gs::Team tm;
  const BestOf<T> f{max};
  for (i64 t = first_team(); t < L.teams(); t += team_step()) {
    const Spot s(L, t + threadIdx.z, tm.x);
    Best<T> b = f.id();
    if (s.on)
      for (i64 k = s.begin + tm.y; k < s.end; k += blockDim.y) {
        const i64 p = s.at(L, k);
        b = f(b, Best<T>{x[p], xi ? xi[p] : k});
      }
    b = tm.reduce(b, f, scratch);
    if (s.on && tm.y == 0) {
      if (yv) yv[s.part(L)] = b.v;
      if (yi) yi[s.part(L)] = b.i;
    }
  }
}

// -------------------------------------------------------------------------- softmax

// The larger, skipping NaN, +0 over -0 (every lane of a butterfly gets the same bits).
template <class T>
struct MaxSkipNan {
  __device__ T operator()(T a, T b) const {
    return (b > a || (b == a && !signbit(b))) ? b : a;
  }
};

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};

// Softmax or log-softmax of each line: exp(v - max) in T, summed in double.
template <class T>
__device__ void softmax(Lines L, const T* x, T* y, int log_) {
  __shared__ T mscratch[1024];
  __shared__ double sscratch[1024];
  const gs::Team tm;
  for (i64 t = first_team(); t < L.teams(); t += team_step()) {
    const Spot s(L, t + threadIdx.z, tm.x);
    T m = T(-INFINITY);
    if (s.on)
      for (i64 k = s.begin + tm.y; k < s.end; k += blockDim.y)
        m = MaxSkipNan<T>()(m, x[s.at(L, k)]);
    m = tm.reduce(m, MaxSkipNan<T>(), mscratch);
    double sum = 0.0;
    if (s.on)
      for (i64 k = s.begin + tm.y; k < s.end; k += blockDim.y)
        sum += double(exp_of(x[s.at(L, k)] - m));
    sum = tm.reduce(sum, Add(), sscratch);
    if (s.on) {
      const double shift = double(m) + ::log(sum);
      for (i64 k = s.begin + tm.y; k < s.end; k += blockDim.y) {
        const i64 p = s.at(L, k);
        y[p] = log_ ? T(double(x[p]) - shift) : T(double(exp_of(x[p] - m)) / sum);
      }
    }
  }
}

// ----------------------------------------------------------------------------- scans

// cumsum / cumprod: the state is the running sum or product.
template <class T>
struct RunningFold {
  using A = typename LineAcc<T>::type;
  using S = A;
  const T* x;
  Fold<A> f;
  __device__ S id() const { return f.id(); }
  __device__ S operator()(S a, S b) const { return f(a, b); }
  __device__ S load(i64 p) const { return A(x[p]); }
  __device__ T out(S s) const { return narrow<T>(s); }
  __device__ S carry(const A* c, i64 p) const { return c[p]; }
  __device__ void total(S s, A* ta, A*, i64 p) const { ta[p] = s; }
};

// The map h -> a h + b; composed, earlier first. The identity (1, 0) is skipped, not
// multiplied, so an infinite a never meets a zero that is not in the recurrence.
template <class A>
struct Affine {
  A a, b;
};

// h[i] = a[i] h[i-1] + b[i], h before the line 0: the state is the composed map, whose b
// is h.
template <class T>
struct LinearRecurrence {
  using A = typename LineAcc<T>::type;
  using S = Affine<A>;
  const T* xa;
  const T* xb;
  __device__ S id() const { return S{A(1), A(0)}; }
  __device__ S operator()(S e, S l) const {
    if (e.a == A(1) && e.b == A(0)) return l;
    if (l.a == A(1) && l.b == A(0)) return e;
    return S{l.a * e.a, l.a * e.b + l.b};
  }
  __device__ S load(i64 p) const { return S{A(xa[p]), A(xb[p])}; }
  __device__ T out(S s) const { return narrow<T>(s.b); }
  __device__ S carry(const A* c, i64 p) const { return S{A(1), c[p]}; }
  __device__ void total(S s, A* ta, A* tb, i64 p) const {
    ta[p] = s.a;
    tb[p] = s.b;
  }
};

// An inclusive scan of each line (or chunk), front to back or back to front, in tiles of
// R * kItems elements: each thread scans its kItems in registers, the team scans the
// threads' totals, and a running carry joins the tiles. With `carry` (chunks after a first
// pass), chunk c starts from the scanned total of chunks 0..c-1. `y` null: only each
// chunk's total is written, to `ta` (and `tb`).
template <class T, class Rule>
__device__ void scan_lines(Lines L, const Rule& rule, const typename LineAcc<T>::type* carry,
                           T* y, typename LineAcc<T>::type* ta, typename LineAcc<T>::type* tb,
                           int reverse) {
  using S = typename Rule::S;
  __shared__ S scratch[1024];
  const gs::Team tm;
  const i64 tile = (i64)blockDim.y * kItems;
  for (i64 t = first_team(); t < L.teams(); t += team_step()) {
    const Spot s(L, t + threadIdx.z, tm.x);
    S c = rule.id();
    if (s.on && carry && s.chunk > 0) c = rule.carry(carry, s.prev(L));
    // chunk_len, not the chunk's own length: the same trip count for the whole block.
    for (i64 p0 = 0; p0 < L.chunk_len; p0 += tile) {
      S loc[kItems];
      S run = rule.id();
      for (int j = 0; j < kItems; ++j) {
        const i64 p = s.begin + p0 + (i64)tm.y * kItems + j;
        if (s.on && p < s.end) run = rule(run, rule.load(s.at(L, reverse ? L.n - 1 - p : p)));
        loc[j] = run;
      }
      S total;
      const S ex = tm.scan(run, rule, rule.id(), scratch, total);
      if (y) {
        const S pre = rule(c, ex);
        for (int j = 0; j < kItems; ++j) {
          const i64 p = s.begin + p0 + (i64)tm.y * kItems + j;
          if (s.on && p < s.end)
            y[s.at(L, reverse ? L.n - 1 - p : p)] = rule.out(rule(pre, loc[j]));
        }
      }
      c = rule(c, total);
    }
    if (ta && s.on && tm.y == 0) rule.total(c, ta, tb, s.part(L));
  }
}

}  // namespace

#define GS_LINES_ARGS i64 outer, i64 n, i64 inner, i64 chunk_len, i64 chunks
#define GS_LINES Lines(outer, n, inner, chunk_len, chunks)

#define GS_FOLD(In, Out, sin, sout)                                                          \
  extern "C" __global__ void gs_line_fold_##sin##_##sout(GS_LINES_ARGS, const In* x, Out* y, \
                                                         int prod) {                         \
    fold<In, Out>(GS_LINES, x, y, prod);                                                     \
  }                                                                                          \
  GS_EXPORT(gs_line_fold_##sin##_##sout)

GS_FOLD(float, float, f32, f32)
GS_FOLD(float, double, f32, f64)
GS_FOLD(double, float, f64, f32)
GS_FOLD(double, double, f64, f64)
GS_FOLD(i64, i64, i64, i64)

#define GS_EXTREME(T, s)                                                                     \
  extern "C" __global__ void gs_line_extreme_##s(GS_LINES_ARGS, const T* x, const i64* xi,   \
                                                 T* yv, i64* yi, int max) {                  \
    extreme<T>(GS_LINES, x, xi, yv, yi, max);                                                \
  }                                                                                          \
  GS_EXPORT(gs_line_extreme_##s)

GS_EXTREME(float, f32)
GS_EXTREME(double, f64)
GS_EXTREME(i64, i64)

#define GS_SOFTMAX(T, s)                                                                     \
  extern "C" __global__ void gs_line_softmax_##s(GS_LINES_ARGS, const T* x, T* y, int log) { \
    softmax<T>(GS_LINES, x, y, log);                                                         \
  }                                                                                          \
  GS_EXPORT(gs_line_softmax_##s)

GS_SOFTMAX(float, f32)
GS_SOFTMAX(double, f64)

#define GS_SCAN(T, s)                                                                        \
  extern "C" __global__ void gs_line_scan_##s(GS_LINES_ARGS, const T* x,                     \
                                              const LineAcc<T>::type* carry, T* y,           \
                                              LineAcc<T>::type* total, int prod, int reverse) { \
    const RunningFold<T> rule{x, Fold<LineAcc<T>::type>{prod}};                              \
    scan_lines<T>(GS_LINES, rule, carry, y, total, nullptr, reverse);                        \
  }                                                                                          \
  GS_EXPORT(gs_line_scan_##s)

GS_SCAN(float, f32)
GS_SCAN(double, f64)
GS_SCAN(i64, i64)

#define GS_LINEAR(T, s)                                                                      \
  extern "C" __global__ void gs_line_linear_scan_##s(                                        \
      GS_LINES_ARGS, const T* a, const T* b, const double* carry, T* y, double* total_a,     \
      double* total_b, int reverse) {                                                        \
    const LinearRecurrence<T> rule{a, b};                                                    \
    scan_lines<T>(GS_LINES, rule, carry, y, total_a, total_b, reverse);                      \
  }                                                                                          \
  GS_EXPORT(gs_line_linear_scan_##s)

GS_LINEAR(float, f32)
GS_LINEAR(double, f64)
