// The fused optimizer steps: one pass over a parameter, its gradient and its state
// buffers, in place, with PyTorch's single-tensor formulas and operation order (the same
// as the CPU kernels in backend/cpu/optim.rs, which the tests compare these with).
//
// Every step kernel has one signature, so the host code is one function:
//   (n, p, g, s0, s1, s2, scale, lo, hi, sign, c0..c9, flags)
// - p, g: the parameter and its gradient; s0..s2: the state buffers the rule takes, in
//   StepRule's order (null when absent);
// - scale, lo, hi, sign: the gradient's preparation (in-stream scaling and clipping,
//   maximize), applied to each element as it is read;
// - c0..c9 and flags: the rule's coefficients, as listed above each rule.
// Elements are computed in float (double for float64 parameters), coefficients rounded to
// that type first, as the CPU kernels do.

#include "gs_cuda.cuh"
#include "optim.cuh"

namespace {

using gs::lerp;
using gs::Prep;

// torch.maximum: NaN wins.
template <class C>
__device__ __forceinline__ C maximum(C a, C b) {
  if (a > b) return a;
  if (b >= a) return b;
  return a + b;
}

template <class C>
__device__ __forceinline__ C sqrt_(C x) {
  return sqrt(x);
}

// The coefficients of one step, in the compute type.
template <class C>
struct Coef {
  C c[10];
  int flags;
};

// SGD. c0 weight_decay, c1 momentum, c2 1 - dampening, c3 -lr;
// flags: 1 nesterov, 2 the momentum buffer is new, 4 weight decay on, 8 has a buffer.
template <class C>
__device__ __forceinline__ C sgd(C p, C g, C* s, const Coef<C>& k) {
  C d = (k.flags & 4) ? g + k.c[0] * p : g;
  if (!(k.flags & 8)) return p + k.c[3] * d;
  C b = (k.flags & 2) ? d : s[0] * k.c[1] + k.c[2] * d;
  s[0] = b;
  C step = (k.flags & 1) ? d + k.c[1] * b : b;
  return p + k.c[3] * step;
}

// Weight decay as the Adam family applies it: L2 into the gradient, or decoupled onto the
// parameter (keep = 1 - lr * wd). c0 keep, c1 wd; flags 1: L2.
template <class C>
__device__ __forceinline__ void decay(C& p, C& g, const Coef<C>& k) {
  C with_l2 = g + k.c[1] * p;
  p = p * k.c[0];
  if (k.flags & 1) g = with_l2;
}

// Adam's moments: c2 1 - beta1, c3 beta2, c4 1 - beta2.
template <class C>
__device__ __forceinline__ void moments(C* s, C g, const Coef<C>& k, C& m, C& v) {
  m = lerp(s[0], g, k.c[2]);
  v = s[1] * k.c[3] + k.c[4] * g * g;
  s[0] = m;
  s[1] = v;
}

// Adam/AdamW. c0..c4 as decay and moments, c5 sqrt(bias_correction2), c6 eps,
// c7 -step_size; flags 2: amsgrad (s[2] = max_exp_avg_sq).
template <class C>
__device__ __forceinline__ C adam(C p, C g, C* s, const Coef<C>& k) {
  decay(p, g, k);
  C m, v;
  moments(s, g, k, m, v);
  C src = v;
  if (k.flags & 2) {
    s[2] = maximum(s[2], v);
    src = s[2];
  }
  C denom = sqrt_(src) / k.c[5] + k.c[6];
  return p + k.c[7] * m / denom;
}

// RMSprop. c0 wd, c1 alpha, c2 1 - alpha, c3 eps, c4 momentum, c5 -lr;
// flags: 1 weight decay, 2 momentum (s[1]), 4 centered (grad_avg in the last buffer).
template <class C>
__device__ __forceinline__ C rmsprop(C p, C g, C* s, const Coef<C>& k) {
  if (k.flags & 1) g = g + k.c[0] * p;
  C sq = s[0] * k.c[1] + k.c[2] * g * g;
  s[0] = sq;
  C avg;
  if (k.flags & 4) {
    int last = (k.flags & 2) ? 2 : 1;
    C ga = lerp(s[last], g, k.c[2]);
    s[last] = ga;
    avg = sqrt_(sq + C(-1) * ga * ga) + k.c[3];
  } else {
    avg = sqrt_(sq) + k.c[3];
  }
  if (k.flags & 2) {
    C b = s[1] * k.c[4] + g / avg;
    s[1] = b;
    return p + k.c[5] * b;
  }
  return p + k.c[5] * g / avg;
}

// Adagrad. c0 wd, c1 eps, c2 -clr; flags 1: weight decay.
template <class C>
__device__ __forceinline__ C adagrad(C p, C g, C* s, const Coef<C>& k) {
  if (k.flags & 1) g = g + k.c[0] * p;
  C sum = s[0] + C(1) * g * g;
  s[0] = sum;
  return p + k.c[2] * g / (sqrt_(sum) + k.c[1]);
}

// Adamax. c0 wd, c1 1 - beta1, c2 beta2, c3 eps, c4 -clr; flags 1: weight decay.
template <class C>
__device__ __forceinline__ C adamax(C p, C g, C* s, const Coef<C>& k) {
  if (k.flags & 1) g = g + k.c[0] * p;
  C m = lerp(s[0], g, k.c[1]);
  C u = maximum(s[1] * k.c[2], fabs(g) + k.c[3]);
  s[0] = m;
  s[1] = u;
  return p + k.c[4] * m / u;
}

// NAdam. c0..c4 as decay and moments, c5 bias_correction2, c6 eps, c7 c_grad, c8 c_avg.
template <class C>
__device__ __forceinline__ C nadam(C p, C g, C* s, const Coef<C>& k) {
  decay(p, g, k);
  C m, v;
  moments(s, g, k, m, v);
  C denom = sqrt_(v / k.c[5]) + k.c[6];
  p = p + k.c[7] * g / denom;
  return p + k.c[8] * m / denom;
}

// RAdam. c0..c4 as decay and moments, c5 sqrt(bias_correction2), c6 eps, c7 lr,
// c8 bias_correction1, c9 rect; flags 2: the rectification is on.
template <class C>
__device__ __forceinline__ C radam(C p, C g, C* s, const Coef<C>& k) {
  decay(p, g, k);
  C m, v;
  moments(s, g, k, m, v);
  C u = m / k.c[8] * k.c[7];
  if (k.flags & 2) u = u * (k.c[5] / (sqrt_(v) + k.c[6])) * k.c[9];
  return p + C(-1) * u;
}

// Adadelta. c0 wd, c1 rho, c2 1 - rho, c3 eps, c4 -lr; flags 1: weight decay.
template <class C>
__device__ __forceinline__ C adadelta(C p, C g, C* s, const Coef<C>& k) {
  if (k.flags & 1) g = g + k.c[0] * p;
  C sq = s[0] * k.c[1] + k.c[2] * g * g;
  C std_ = sqrt_(sq + k.c[3]);
  C delta = sqrt_(s[1] + k.c[3]) / std_ * g;
  s[0] = sq;
  s[1] = s[1] * k.c[1] + k.c[2] * delta * delta;
  return p + k.c[4] * delta;
}

// Rprop. c0 eta_minus, c1 eta_plus, c2 step_size_min, c3 step_size_max.
template <class C>
__device__ __forceinline__ C rprop(C p, C g, C* s, const Coef<C>& k) {
  const C zero = C(0);
  C prod = g * s[0];
  C factor;
  if (prod > zero)
    factor = k.c[1];
  else if (prod < zero)
    factor = k.c[0];
  else if (prod == zero)
    factor = C(1);
  else
    factor = prod;  // NaN stays NaN, as PyTorch's masked writes leave it
  C ss = s[1] * factor;
  ss = ss < k.c[2] ? k.c[2] : (ss > k.c[3] ? k.c[3] : ss);
  if (factor == k.c[0]) g = zero;
  s[0] = g;
  s[1] = ss;
  C sign = g > zero ? C(1) : (g < zero ? C(-1) : (g == zero ? zero : g));
  return p + C(-1) * sign * ss;
}

// ASGD. c0 wd, c1 1 - lambd * eta, c2 -eta, c3 mu; flags 1: weight decay, 2: mu != 1.
template <class C>
__device__ __forceinline__ C asgd(C p, C g, C* s, const Coef<C>& k) {
  if (k.flags & 1) g = g + k.c[0] * p;
  p = p * k.c[1];
  p = p + k.c[2] * g;
  s[0] = (k.flags & 2) ? s[0] + (p - s[0]) * k.c[3] : p;
  return p;
}

enum Rule { SGD, ADAM, RMSPROP, ADAGRAD, ADAMAX, NADAM, RADAM, ADADELTA, RPROP, ASGD };

template <Rule R, class T>
__device__ __forceinline__ void step(long long n, T* p, const T* g, T* s0, T* s1, T* s2,
                                     double scale, double lo, double hi, double sign,
                                     const double* c, int flags) {
  using C = typename gs::Acc<T>::type;
  const Prep<C> prep{C(scale), C(lo), C(hi), C(sign)};
  Coef<C> k;
  for (int j = 0; j < 10; ++j) k.c[j] = C(c[j]);
  k.flags = flags;
  GS_GRID_STRIDE(i, (size_t)n) {
    C s[3] = {s0 ? gs::to_acc(s0[i]) : C(0), s1 ? gs::to_acc(s1[i]) : C(0),
              s2 ? gs::to_acc(s2[i]) : C(0)};
    C pv = gs::to_acc(p[i]);
    C gv = prep.apply(gs::to_acc(g[i]));
    C out;
    switch (R) {
      case SGD: out = sgd(pv, gv, s, k); break;
      case ADAM: out = adam(pv, gv, s, k); break;
      case RMSPROP: out = rmsprop(pv, gv, s, k); break;
      case ADAGRAD: out = adagrad(pv, gv, s, k); break;
      case ADAMAX: out = adamax(pv, gv, s, k); break;
      case NADAM: out = nadam(pv, gv, s, k); break;
      case RADAM: out = radam(pv, gv, s, k); break;
      case ADADELTA: out = adadelta(pv, gv, s, k); break;
      case RPROP: out = rprop(pv, gv, s, k); break;
      case ASGD: out = asgd(pv, gv, s, k); break;
    }
    p[i] = gs::from_acc<T>(out);
    if (s0) s0[i] = gs::from_acc<T>(s[0]);
    if (s1) s1[i] = gs::from_acc<T>(s[1]);
    if (s2) s2[i] = gs::from_acc<T>(s[2]);
  }
}

// Sum of |g|^norm (max |g| for an infinite norm) in double, added into *out by atomics.
template <class T>
__device__ __forceinline__ void norm_pow(long long n, const T* g, double norm, double* out) {
  __shared__ double scratch[32];
  const bool inf = isinf(norm);
  double acc = 0.0;
  GS_GRID_STRIDE(i, (size_t)n) {
    double a = fabs((double)gs::to_acc(g[i]));
    if (inf)
      acc = gs::max_nan(acc, a);
    else
      acc += norm == 2.0 ? a * a : (norm == 1.0 ? a : pow(a, norm));
  }
  if (inf) {
    acc = gs::block_max(acc, scratch);
    // Non-negative doubles order as their bit patterns: an integer max is the float max
    // (a NaN, all ones above the sign, wins as torch's norm does).
    if (threadIdx.x == 0)
      atomicMax(reinterpret_cast<unsigned long long*>(out), (unsigned long long)__double_as_longlong(acc));
  } else {
    acc = gs::block_sum(acc, scratch);
    if (threadIdx.x == 0) atomicAdd(out, acc);
  }
}

// t = t * factor, or clamp(t, lo, hi) (NaN stays NaN).
template <class T>
__device__ __forceinline__ void scale_clamp(long long n, T* t, double factor, double lo,
                                            double hi, int clamp) {
  using C = typename gs::Acc<T>::type;
  GS_GRID_STRIDE(i, (size_t)n) {
    C x = gs::to_acc(t[i]);
    if (clamp)
      x = x < C(lo) ? C(lo) : (x > C(hi) ? C(hi) : x);
    else
      x = x * C(factor);
    t[i] = gs::from_acc<T>(x);
  }
}

}  // namespace

#define GS_STEP(rule, R, T, suffix)                                                          \
  extern "C" __global__ void gs_##rule##_##suffix(                                           \
      long long n, T* p, const T* g, T* s0, T* s1, T* s2, double scale, double lo, double hi, \
      double sign, double c0, double c1, double c2, double c3, double c4, double c5,         \
      double c6, double c7, double c8, double c9, int flags) {                               \
    const double c[10] = {c0, c1, c2, c3, c4, c5, c6, c7, c8, c9};                           \
    step<R, T>(n, p, g, s0, s1, s2, scale, lo, hi, sign, c, flags);                          \
  }                                                                                          \
  GS_EXPORT(gs_##rule##_##suffix)

#define GS_RULE(rule, R)                     \
  GS_STEP(rule, R, float, f32)               \
  GS_STEP(rule, R, double, f64)              \
  GS_STEP(rule, R, __half, f16)              \
  GS_STEP(rule, R, __nv_bfloat16, bf16)

GS_RULE(sgd, SGD)
GS_RULE(adam, ADAM)
GS_RULE(rmsprop, RMSPROP)
GS_RULE(adagrad, ADAGRAD)
GS_RULE(adamax, ADAMAX)
GS_RULE(nadam, NADAM)
GS_RULE(radam, RADAM)
GS_RULE(adadelta, ADADELTA)
GS_RULE(rprop, RPROP)
GS_RULE(asgd, ASGD)

#define GS_NORM(T, suffix)                                                                 \
  extern "C" __global__ void gs_norm_pow_##suffix(long long n, const T* g, double norm,    \
                                                   double* out) {                          \
    norm_pow<T>(n, g, norm, out);                                                          \
  }                                                                                        \
  GS_EXPORT(gs_norm_pow_##suffix)                                                          \
  extern "C" __global__ void gs_scale_clamp_##suffix(long long n, T* t, double factor,     \
                                                      double lo, double hi, int clamp) {   \
    scale_clamp<T>(n, t, factor, lo, hi, clamp);                                           \
  }                                                                                        \
  GS_EXPORT(gs_scale_clamp_##suffix)

GS_NORM(float, f32)
GS_NORM(double, f64)
GS_NORM(__half, f16)
GS_NORM(__nv_bfloat16, bf16)
