// Adafactor's step (torch.optim.Adafactor's formulas and order, as the CPU kernel in
// backend/cpu/adafactor.rs). Not one element-wise pass like the other rules: a matrix's
// second moment is a row and a column variance, the step is scaled by the parameter's
// norm and clipped by the update's. The host launches, in stream order:
//
//   1. sumsq(p) into norms[0]                     (the parameter's norm, before decay)
//   2. variance (a vector), or row_var, col_var and row_mean (a matrix)
//   3. update_norm into norms[1]                  (the update is computed, not stored)
//   4. apply: p = decay(p) + coef * update, coef from norms[0..2]
//
// so nothing the size of the parameter is allocated. Elements are computed in float
// (double for float64), sums of squares in double, as the CPU kernel does.

#include "gs_cuda.cuh"
#include "optim.cuh"

namespace {

using gs::Prep;

constexpr int kThreads = 256;

// The factored estimate's inverse square root for element i: a matrix's
// row_var[br] * col_var[b, j] / row_mean[b], or a vector's variance[i]; clamped below by
// eps1^2.
template <class T>
struct Scale {
  using C = typename gs::Acc<T>::type;
  const T* v0;  // variance, or row_var (batch * rows)
  const T* v1;  // col_var (batch * cols), null for a vector
  const double* row_mean;
  long long rows, cols;
  C eps1_sq;
  __device__ __forceinline__ C operator()(long long i) const {
    C est;
    if (v1) {
      const long long br = i / cols, j = i % cols, b = br / rows;
      est = gs::to_acc(v0[br]) * gs::to_acc(v1[b * cols + j]) / C(row_mean[b]);
    } else {
      est = gs::to_acc(v0[i]);
    }
    if (est < eps1_sq) est = eps1_sq;
    return C(1) / sqrt(est);
  }
};

template <class T>
__device__ __forceinline__ Prep<typename gs::Acc<T>::type> prep_of(double scale, double lo,
                                                                   double hi, double sign) {
  using C = typename gs::Acc<T>::type;
  return Prep<C>{C(scale), C(lo), C(hi), C(sign)};
}

// *out += sum of x^2, in double.
template <class T>
__device__ __forceinline__ void sumsq(long long n, const T* x, double* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  GS_GRID_STRIDE(i, (size_t)n) {
    const double v = (double)gs::to_acc(x[i]);
    acc += v * v;
  }
  acc = gs::block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

// A vector's variance: v = lerp(v, g^2, w).
template <class T>
__device__ __forceinline__ void variance(long long n, const T* g, T* v, Prep<typename gs::Acc<T>::type> prep,
                                         double w) {
  using C = typename gs::Acc<T>::type;
  GS_GRID_STRIDE(i, (size_t)n) {
    const C gi = prep.apply(gs::to_acc(g[i]));
    v[i] = gs::from_acc<T>(gs::lerp(gs::to_acc(v[i]), gi * gi, C(w)));
  }
}

// A matrix's row variances, one block per row of `cols`: lerp(row_var, mean g^2, w).
template <class T>
__device__ __forceinline__ void row_var(long long cols, const T* g, T* rv,
                                        Prep<typename gs::Acc<T>::type> prep, double w) {
  using C = typename gs::Acc<T>::type;
  __shared__ double scratch[32];
  const long long br = blockIdx.x;
  const T* row = g + br * cols;
  double acc = 0.0;
  for (long long j = threadIdx.x; j < cols; j += blockDim.x) {
    const double x = (double)prep.apply(gs::to_acc(row[j]));
    acc += x * x;
  }
  acc = gs::block_sum(acc, scratch);
  if (threadIdx.x == 0)
    rv[br] = gs::from_acc<T>(gs::lerp(gs::to_acc(rv[br]), C(acc / (double)cols), C(w)));
}

// A matrix's column variances, a thread per (matrix, column), down its rows.
template <class T>
__device__ __forceinline__ void col_var(long long batch, long long rows, long long cols,
                                        const T* g, T* cv, Prep<typename gs::Acc<T>::type> prep,
                                        double w) {
  using C = typename gs::Acc<T>::type;
  GS_GRID_STRIDE(k, (size_t)(batch * cols)) {
    const long long b = (long long)k / cols, j = (long long)k % cols;
    const T* m = g + b * rows * cols + j;
    double acc = 0.0;
    for (long long r = 0; r < rows; ++r) {
      const double x = (double)prep.apply(gs::to_acc(m[r * cols]));
      acc += x * x;
    }
    cv[k] = gs::from_acc<T>(gs::lerp(gs::to_acc(cv[k]), C(acc / (double)rows), C(w)));
  }
}

// Each matrix's mean row variance, clamped below by eps1; one block per matrix.
template <class T>
__device__ __forceinline__ void row_mean(long long rows, const T* rv, double eps1, double* out) {
  using C = typename gs::Acc<T>::type;
  __shared__ C scratch[32];
  const long long b = blockIdx.x;
  C acc = C(0);
  for (long long r = threadIdx.x; r < rows; r += blockDim.x) acc += gs::to_acc(rv[b * rows + r]);
  acc = gs::block_sum(acc, scratch);
  if (threadIdx.x == 0) {
    const C m = acc / C(rows);
    out[b] = (double)(m < C(eps1) ? C(eps1) : m);
  }
}

// *out += sum of (g * scale)^2, in double.
template <class T>
__device__ __forceinline__ void update_norm(long long n, const T* g, Scale<T> scale,
                                            Prep<typename gs::Acc<T>::type> prep, double* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  GS_GRID_STRIDE(i, (size_t)n) {
    const double u = (double)(prep.apply(gs::to_acc(g[i])) * scale((long long)i));
    acc += u * u;
  }
  acc = gs::block_sum(acc, scratch);
  if (threadIdx.x == 0) atomicAdd(out, acc);
}

// p = decay(p) + coef * g * scale: alpha = max(eps2, |p| / sqrt(n)) * rho, clipped by
// max(1, |update| / (sqrt(n) d)). `keep` is 1 - lr * weight_decay, or 1 for none.
template <class T>
__device__ __forceinline__ void apply(long long n, T* p, const T* g, Scale<T> scale,
                                      Prep<typename gs::Acc<T>::type> prep, const double* norms,
                                      double rho, double eps2, double d, double keep, int decay) {
  using C = typename gs::Acc<T>::type;
  const double root_n = sqrt((double)n);
  const double alpha = fmax(eps2, sqrt(norms[0]) / root_n) * rho;
  const double denom = fmax(1.0, sqrt(norms[1]) / (root_n * d));
  const C coef = C(-alpha / denom);
  GS_GRID_STRIDE(i, (size_t)n) {
    T x = p[i];
    if (decay) x = gs::from_acc<T>(gs::to_acc(x) * C(keep));
    const C u = prep.apply(gs::to_acc(g[i])) * scale((long long)i);
    p[i] = gs::from_acc<T>(gs::to_acc(x) + coef * u);
  }
}

}  // namespace

#define GS_PREP_ARGS double scale, double lo, double hi, double sign
#define GS_SCALE_ARGS(T) \
  const T *v0, const T *v1, const double *rmean, long long rows, long long cols, double eps1_sq
#define GS_SCALE(T) (Scale<T>{v0, v1, rmean, rows, cols, (typename gs::Acc<T>::type)(eps1_sq)})

#define GS_ADAFACTOR(T, suffix)                                                              \
  extern "C" __global__ void gs_adafactor_sumsq_##suffix(long long n, const T* x,            \
                                                         double* out) {                      \
    sumsq<T>(n, x, out);                                                                     \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_sumsq_##suffix)                                                     \
  extern "C" __global__ void gs_adafactor_variance_##suffix(long long n, const T* g, T* v,   \
                                                            GS_PREP_ARGS, double w) {        \
    variance<T>(n, g, v, prep_of<T>(scale, lo, hi, sign), w);                                \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_variance_##suffix)                                                  \
  extern "C" __global__ void gs_adafactor_row_var_##suffix(long long cols, const T* g,       \
                                                           T* rv, GS_PREP_ARGS, double w) {  \
    row_var<T>(cols, g, rv, prep_of<T>(scale, lo, hi, sign), w);                             \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_row_var_##suffix)                                                   \
  extern "C" __global__ void gs_adafactor_col_var_##suffix(                                  \
      long long batch, long long rows, long long cols, const T* g, T* cv, GS_PREP_ARGS,      \
      double w) {                                                                            \
    col_var<T>(batch, rows, cols, g, cv, prep_of<T>(scale, lo, hi, sign), w);                \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_col_var_##suffix)                                                   \
  extern "C" __global__ void gs_adafactor_row_mean_##suffix(long long rows, const T* rv,     \
                                                            double eps1, double* out) {      \
    row_mean<T>(rows, rv, eps1, out);                                                        \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_row_mean_##suffix)                                                  \
  extern "C" __global__ void gs_adafactor_update_norm_##suffix(                              \
      long long n, const T* g, GS_SCALE_ARGS(T), GS_PREP_ARGS, double* out) {                \
    update_norm<T>(n, g, GS_SCALE(T), prep_of<T>(scale, lo, hi, sign), out);                 \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_update_norm_##suffix)                                               \
  extern "C" __global__ void gs_adafactor_apply_##suffix(                                    \
      long long n, T* p, const T* g, GS_SCALE_ARGS(T), GS_PREP_ARGS, const double* norms,    \
      double rho, double eps2, double d, double keep, int decay) {                           \
    apply<T>(n, p, g, GS_SCALE(T), prep_of<T>(scale, lo, hi, sign), norms, rho, eps2, d,     \
             keep, decay);                                                                   \
  }                                                                                          \
  GS_EXPORT(gs_adafactor_apply_##suffix)

GS_ADAFACTOR(float, f32)
GS_ADAFACTOR(double, f64)
GS_ADAFACTOR(__half, f16)
GS_ADAFACTOR(__nv_bfloat16, bf16)
