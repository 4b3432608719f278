// Pooling and resampling on planes (P, H, W), dense, in the compute type (float or
// double): max pooling with the position of each window's maximum, its adjoint and the
// reads its double backward and `return_indices` make; and the separable linear map behind
// average pooling and interpolation, with its adjoint. backend/pool.rs documents the
// window and tap conventions; backend/cpu/pool.rs is the reference.
//
// Every kernel gives one thread one output element and sums in the CPU kernels' order, so
// results match them bit for bit (up to the FMAs nvcc contracts). The adjoints are gathers,
// not scatters: each input element finds the outputs that read it, in ascending order, so
// they are deterministic and need no atomics.

#include "gs_cuda.cuh"

namespace {

// One axis of a max-pooling window (backend/pool.rs's WindowAxis).
struct Axis {
  long long input, output, kernel, stride, padding, dilation;
  bool adaptive;

  __device__ __forceinline__ long long adaptive_start(long long o) const {
    return o * input / (output > 0 ? output : 1);
  }
  __device__ __forceinline__ long long adaptive_end(long long o) const {
    const long long out = output > 0 ? output : 1;
    return ((o + 1) * input + out - 1) / out;
  }
  // The input position of window position k of output o, or -1 when outside the input.
  __device__ __forceinline__ long long pos(long long o, long long k) const {
    if (adaptive) {
      const long long s = adaptive_start(o);
      return s + k < adaptive_end(o) ? s + k : -1;
    }
    const long long i = o * stride - padding + k * dilation;
    return i >= 0 && i < input ? i : -1;
  }
  // The first position of output o's window at or after 0 (what PyTorch reports for a
  // window wholly in the padding).
  __device__ __forceinline__ long long first_unpadded(long long o) const {
    if (adaptive) return adaptive_start(o);
    long long i = o * stride - padding;
    if (i < 0) i += ((-i + dilation - 1) / dilation) * dilation;
    return i;
  }
};

// The two axes, from the kernel's parameters: (input, output, kernel, stride, padding,
// dilation, adaptive) for H then W.
struct Window {
  Axis h, w;
};

#define GS_WINDOW_PARAMS                                                                 \
  long long hi, long long ho, long long hk, long long hs, long long hp, long long hd,    \
      int ha, long long wi, long long wo, long long wk, long long ws, long long wp,      \
      long long wd, int wa
#define GS_WINDOW                                                                        \
  Window { Axis{hi, ho, hk, hs, hp, hd, ha != 0}, Axis{wi, wo, wk, ws, wp, wd, wa != 0} }

template <class T, class A>
__device__ void max_pool(long long planes, const T* x, T* vals, A* args, Window w) {
  const long long op = w.h.output * w.w.output, ip = w.h.input * w.w.input;
  GS_GRID_STRIDE(idx, (size_t)(planes * op)) {
    const long long p = idx / op, r = idx % op;
    const long long oh = r / w.w.output, ow = r % w.w.output;
    const T* xp = x + p * ip;
    T best = T(-INFINITY);
    long long arg = -1;
    for (long long kh = 0; kh < w.h.kernel; ++kh) {
      const long long ih = w.h.pos(oh, kh);
      if (ih < 0) continue;
      for (long long kw = 0; kw < w.w.kernel; ++kw) {
        const long long iw = w.w.pos(ow, kw);
        if (iw < 0) continue;
        const T v = xp[ih * w.w.input + iw];
        const long long k = kh * w.w.kernel + kw;
        // PyTorch's rule: the first valid position unless a larger value or a NaN comes
        // later (the first maximum wins, the last NaN does).
        if (arg < 0) arg = k;
        if (v > best || isnan(v)) {
          best = v;
          arg = k;
        }
      }
    }
    vals[idx] = best;
    args[idx] = A(arg < 0 ? 0 : arg);
  }
}

// The adjoint of max pooling as a gather: input element (ih, iw) sums, over the outputs
// whose window holds it at their maximum, their gradients, in ascending output order (the
// order the CPU kernel's scatter adds them in).
template <class T, class A>
__device__ void max_pool_scatter(long long planes, const T* g, const A* args, T* out,
                                 Window w) {
  const long long op = w.h.output * w.w.output, ip = w.h.input * w.w.input;
  GS_GRID_STRIDE(idx, (size_t)(planes * ip)) {
    const long long p = idx / ip, r = idx % ip;
    const long long ih = r / w.w.input, iw = r % w.w.input;
    const T* gp = g + p * op;
    const A* ap = args + p * op;
    T acc = T(0);
    // Output rows reading row ih, ascending, with the window position there: adaptive
    // windows cover a range of outputs; a strided window's kh = (ih + pad - oh stride) /
    // dilation, which grows as oh falls, so kh runs down.
    const long long h_count = w.h.adaptive ? 0 : w.h.kernel;
    long long h_lo = 0, h_hi = -1;
    if (w.h.adaptive && w.h.input > 0) {
      h_lo = ih * w.h.output / w.h.input;
      h_hi = ((ih + 1) * w.h.output + w.h.input - 1) / w.h.input - 1;
    }
    for (long long hstep = 0; hstep < h_count + (h_hi - h_lo + 1); ++hstep) {
      long long oh, kh;
      if (w.h.adaptive) {
        oh = h_lo + hstep;
        kh = ih - w.h.adaptive_start(oh);
        if (oh >= w.h.output || kh < 0 || kh >= w.h.kernel) continue;
      } else {
        kh = w.h.kernel - 1 - hstep;
        const long long t = ih + w.h.padding - kh * w.h.dilation;
        if (t < 0 || t % w.h.stride != 0) continue;
        oh = t / w.h.stride;
        if (oh >= w.h.output) continue;
      }
      const long long w_count = w.w.adaptive ? 0 : w.w.kernel;
      long long w_lo = 0, w_hi = -1;
      if (w.w.adaptive && w.w.input > 0) {
        w_lo = iw * w.w.output / w.w.input;
        w_hi = ((iw + 1) * w.w.output + w.w.input - 1) / w.w.input - 1;
      }
      for (long long wstep = 0; wstep < w_count + (w_hi - w_lo + 1); ++wstep) {
        long long ow, kw;
        if (w.w.adaptive) {
          ow = w_lo + wstep;
          kw = iw - w.w.adaptive_start(ow);
          if (ow >= w.w.output || kw < 0 || kw >= w.w.kernel) continue;
        } else {
          kw = w.w.kernel - 1 - wstep;
          const long long t = iw + w.w.padding - kw * w.w.dilation;
          if (t < 0 || t % w.w.stride != 0) continue;
          ow = t / w.w.stride;
          if (ow >= w.w.output) continue;
        }
        const long long o = oh * w.w.output + ow;
        if ((long long)ap[o] == kh * w.w.kernel + kw) acc += gp[o];
      }
    }
    out[idx] = acc;
  }
}

// x read at each window's maximum (max pooling's double backward).
template <class T, class A>
__device__ void max_pool_gather(long long planes, const T* x, const A* args, T* out,
                                Window w) {
  const long long op = w.h.output * w.w.output, ip = w.h.input * w.w.input;
  GS_GRID_STRIDE(idx, (size_t)(planes * op)) {
    const long long p = idx / op, r = idx % op;
    const long long k = (long long)args[idx];
    const long long ih = w.h.pos(r / w.w.output, k / w.w.kernel);
    const long long iw = w.w.pos(r % w.w.output, k % w.w.kernel);
    out[idx] = ih >= 0 && iw >= 0 ? x[p * ip + ih * w.w.input + iw] : T(0);
  }
}

// PyTorch's flat indices (into H * W) of each window's maximum.
template <class A>
__device__ void max_pool_indices(long long n, const A* args, long long* out, Window w) {
  const long long op = w.h.output * w.w.output > 0 ? w.h.output * w.w.output : 1;
  GS_GRID_STRIDE(idx, (size_t)n) {
    const long long r = idx % op;
    const long long oh = r / w.w.output, ow = r % w.w.output;
    const long long k = (long long)args[idx];
    long long ih = w.h.pos(oh, k / w.w.kernel);
    long long iw = w.w.pos(ow, k % w.w.kernel);
    if (ih < 0 || iw < 0) {
      ih = w.h.first_unpadded(oh);
      iw = w.w.first_unpadded(ow);
    }
    out[idx] = ih * w.w.input + iw;
  }
}

// The separable map out[p, i, j] = sum_a R[i, a] sum_b C[j, b] x[p, a, b] with each axis
// as compressed rows: output o reads inputs idx[off[o] .. off[o + 1]) with weights w[...].
// The sums nest as the CPU kernel's passes do: forward, a row pass then a column pass (the
// inner sum over the row taps); the adjoint (the same map with the taps transposed, which
// the host builds) sums over the columns first (`rows_outer`).
template <class T>
__device__ void resample(long long planes, const T* x, T* out, long long h_in, long long w_in,
                         long long h_out, long long w_out, const long long* taps,
                         const double* weights, long long c_off_at, long long c_idx_at,
                         long long r_idx_at, long long c_w_at, int rows_outer) {
  const long long* r_off = taps;
  const long long* c_off = taps + c_off_at;
  const long long* c_idx = taps + c_idx_at;
  const long long* r_idx = taps + r_idx_at;
  const double* r_w = weights;
  const double* c_w = weights + c_w_at;
  const long long op = h_out * w_out, ip = h_in * w_in;
  GS_GRID_STRIDE(idx, (size_t)(planes * op)) {
    const long long p = idx / op, r = idx % op;
    const long long i = r / w_out, j = r % w_out;
    const T* xp = x + p * ip;
    T acc = T(0);
    if (rows_outer) {
      for (long long ra = r_off[i]; ra < r_off[i + 1]; ++ra) {
        const T* row = xp + r_idx[ra] * w_in;
        T tmp = T(0);
        for (long long cb = c_off[j]; cb < c_off[j + 1]; ++cb) tmp += T(c_w[cb]) * row[c_idx[cb]];
        acc += T(r_w[ra]) * tmp;
      }
    } else {
      for (long long cb = c_off[j]; cb < c_off[j + 1]; ++cb) {
        const long long b = c_idx[cb];
        T tmp = T(0);
        for (long long ra = r_off[i]; ra < r_off[i + 1]; ++ra)
          tmp += T(r_w[ra]) * xp[r_idx[ra] * w_in + b];
        acc += T(c_w[cb]) * tmp;
      }
    }
    out[idx] = acc;
  }
}

}  // namespace

#define GS_MAX_POOL(T, A, suffix, asuffix)                                                 \
  extern "C" __global__ void gs_max_pool_##suffix##_##asuffix(                             \
      long long planes, const T* x, T* vals, A* args, GS_WINDOW_PARAMS) {                  \
    max_pool<T, A>(planes, x, vals, args, GS_WINDOW);                                      \
  }                                                                                        \
  GS_EXPORT(gs_max_pool_##suffix##_##asuffix)                                              \
  extern "C" __global__ void gs_max_pool_scatter_##suffix##_##asuffix(                     \
      long long planes, const T* g, const A* args, T* out, GS_WINDOW_PARAMS) {             \
    max_pool_scatter<T, A>(planes, g, args, out, GS_WINDOW);                               \
  }                                                                                        \
  GS_EXPORT(gs_max_pool_scatter_##suffix##_##asuffix)                                      \
  extern "C" __global__ void gs_max_pool_gather_##suffix##_##asuffix(                      \
      long long planes, const T* x, const A* args, T* out, GS_WINDOW_PARAMS) {             \
    max_pool_gather<T, A>(planes, x, args, out, GS_WINDOW);                                \
  }                                                                                        \
  GS_EXPORT(gs_max_pool_gather_##suffix##_##asuffix)

GS_MAX_POOL(float, unsigned char, f32, u8)
GS_MAX_POOL(float, int, f32, i32)
GS_MAX_POOL(double, unsigned char, f64, u8)
GS_MAX_POOL(double, int, f64, i32)

#define GS_INDICES(A, asuffix)                                                             \
  extern "C" __global__ void gs_max_pool_indices_##asuffix(long long n, const A* args,     \
                                                            long long* out,                \
                                                            GS_WINDOW_PARAMS) {            \
    max_pool_indices<A>(n, args, out, GS_WINDOW);                                          \
  }                                                                                        \
  GS_EXPORT(gs_max_pool_indices_##asuffix)

GS_INDICES(unsigned char, u8)
GS_INDICES(int, i32)

#define GS_RESAMPLE(T, suffix)                                                             \
  extern "C" __global__ void gs_resample_##suffix(                                         \
      long long planes, const T* x, T* out, long long h_in, long long w_in,                \
      long long h_out, long long w_out, const long long* taps, const double* weights,      \
      long long c_off_at, long long c_idx_at, long long r_idx_at, long long c_w_at,        \
      int rows_outer) {                                                                    \
    resample<T>(planes, x, out, h_in, w_in, h_out, w_out, taps, weights, c_off_at,         \
                c_idx_at, r_idx_at, c_w_at, rows_outer);                                   \
  }                                                                                        \
  GS_EXPORT(gs_resample_##suffix)

GS_RESAMPLE(float, f32)
GS_RESAMPLE(double, f64)
