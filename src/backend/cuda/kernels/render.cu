// The fused NeRF volume renderer and its O(S) backward (ops/volume_render.rs has the
// maths; backend/cpu/render.rs is the reference these are tested against).
//
// One warp per ray: a ray's S samples go through in chunks of 32, one sample per lane, so
// loads and stores of a ray's rows are coalesced and a batch of a few thousand rays fills
// the device. The transmittance T_i = prod_{j<i} f_j (f = 1 - alpha + 1e-10) is a product
// scan over the lanes, carried from chunk to chunk; the backward's suffix sum
// B_{i-1} = gw_i alpha_i + f_i B_i is an affine scan run from the last chunk to the first.
// The scans multiply in a tree order where the CPU kernel runs front to back, so results
// agree to rounding, not bit for bit.
//
// Inputs are dense, in the compute type T (float or double): raw (R, S, 4), z (R, S),
// dir (R, 3) and noise (R, S) or null. The forward writes out (R, 5 + S); the backward
// writes graw (R, S, 4), and gz (R, S) and gdir (R, 3) where not null.

#include "gs_cuda.cuh"

namespace {

constexpr int HEAD = 5;

template <class T>
struct Consts {
  static constexpr T FAR = T(1e10);   // the distance after a ray's last sample
  static constexpr T EPS = T(1e-10);  // added to every transmittance factor
};

template <class T>
__device__ __forceinline__ T sigmoid(T x) {
  return T(1) / (T(1) + exp(-x));
}

template <class T>
__device__ __forceinline__ T relu(T x) {
  return x > T(0) ? x : T(0);
}

// One ray's inputs.
template <class T>
struct Ray {
  const T* raw;    // (S, 4)
  const T* z;      // (S)
  const T* noise;  // (S) or null
  long long n;
  T norm;

  __device__ __forceinline__ T pre_sigma(long long i) const {
    const T s = raw[4 * i + 3];
    return noise ? s + noise[i] : s;
  }
  // The distance to the next sample, before scaling by the direction's norm.
  __device__ __forceinline__ T step(long long i) const {
    return i + 1 < n ? z[i + 1] - z[i] : Consts<T>::FAR;
  }
};

template <class T>
__device__ __forceinline__ Ray<T> ray_of(long long r, long long n, const T* raw, const T* z,
                                         const T* dir, const T* noise) {
  Ray<T> ray;
  ray.raw = raw + r * n * 4;
  ray.z = z + r * n;
  ray.noise = noise ? noise + r * n : nullptr;
  ray.n = n;
  if (dir) {
    const T* d = dir + r * 3;
    ray.norm = sqrt(d[0] * d[0] + d[1] * d[1] + d[2] * d[2]);
  } else {
    ray.norm = T(1);
  }
  return ray;
}

// Exclusive product scan of `f` over the warp; `total` gets the product of all 32.
template <class T>
__device__ __forceinline__ T exclusive_product(T f, unsigned lane, T& total) {
  T inc = f;
  for (int o = 1; o < 32; o <<= 1) {
    const T up = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= unsigned(o)) inc *= up;
  }
  total = __shfl_sync(0xffffffffu, inc, 31);
  const T ex = __shfl_up_sync(0xffffffffu, inc, 1);
  return lane == 0 ? T(1) : ex;
}

// Where the warp's rays are: ray `first` and then every `step`-th.
struct Warps {
  long long first, step;
  unsigned lane;
};

__device__ __forceinline__ Warps warps() {
  const unsigned per_block = blockDim.x >> 5;
  Warps w;
  w.first = (long long)blockIdx.x * per_block + (threadIdx.x >> 5);
  w.step = (long long)gridDim.x * per_block;
  w.lane = threadIdx.x & 31u;
  return w;
}

template <class T>
__device__ void forward(long long rays, long long n, const T* raw, const T* z, const T* dir,
                        const T* noise, int white, T* out) {
  const Warps w = warps();
  const long long width = HEAD + n;
  for (long long r = w.first; r < rays; r += w.step) {
    const Ray<T> ray = ray_of(r, n, raw, z, dir, noise);
    T* o = out + r * width;
    T trans = T(1);  // T at the chunk's first sample
    T rgb[3] = {T(0), T(0), T(0)}, depth = T(0), acc = T(0);
    for (long long base = 0; base < n; base += 32) {
      const long long i = base + w.lane;
      const bool in = i < n;
      T alpha = T(0), f = T(1);
      if (in) {
        const T sigma = relu(ray.pre_sigma(i));
        alpha = T(1) - exp(-(sigma * (ray.step(i) * ray.norm)));
        f = (T(1) - alpha) + Consts<T>::EPS;
      }
      T total;
      const T t = trans * exclusive_product(f, w.lane, total);
      if (in) {
        const T wt = alpha * t;
        o[HEAD + i] = wt;
        for (int k = 0; k < 3; ++k) rgb[k] += wt * sigmoid(ray.raw[4 * i + k]);
        depth += wt * ray.z[i];
        acc += wt;
      }
      trans *= total;
    }
    for (int k = 0; k < 3; ++k) rgb[k] = gs::warp_sum(rgb[k]);
    depth = gs::warp_sum(depth);
    acc = gs::warp_sum(acc);
    if (w.lane == 0) {
      for (int k = 0; k < 3; ++k) o[k] = white ? rgb[k] + (T(1) - acc) : rgb[k];
      o[3] = depth;
      o[4] = acc;
    }
  }
}

template <class T>
__device__ void backward(long long rays, long long n, const T* raw, const T* z, const T* dir,
                         const T* noise, int white, const T* g, T* graw, T* gz, T* gdir) {
  const Warps w = warps();
  const long long width = HEAD + n;
  for (long long r = w.first; r < rays; r += w.step) {
    const Ray<T> ray = ray_of(r, n, raw, z, dir, noise);
    const T* gr = g + r * width;
    T* ga = graw + r * n * 4;
    T* gzr = gz ? gz + r * n : nullptr;

    // Front to back: alpha_i and T_i wait in graw's slots 0 and 1 (each lane reads back
    // only what it wrote: lane l owns sample base + l in both passes).
    T trans = T(1);
    for (long long base = 0; base < n; base += 32) {
      const long long i = base + w.lane;
      T alpha = T(0), f = T(1);
      if (i < n) {
        const T sigma = relu(ray.pre_sigma(i));
        alpha = T(1) - exp(-(sigma * (ray.step(i) * ray.norm)));
        f = (T(1) - alpha) + Consts<T>::EPS;
      }
      T total;
      const T t = trans * exclusive_product(f, w.lane, total);
      if (i < n) {
        ga[4 * i] = alpha;
        ga[4 * i + 1] = t;
      }
      trans *= total;
    }

    const T g_rgb[3] = {gr[0], gr[1], gr[2]};
    const T g_depth = gr[3];
    const T g_acc = white ? gr[4] - (g_rgb[0] + g_rgb[1] + g_rgb[2]) : gr[4];
    T g_norm = T(0);
    T b_carry = T(0);   // B at the chunk's last sample: the sum over every later sample
    T pending = T(0);   // gz of the previous chunk's first sample, before g_dist_{i-1}
    for (long long base = n > 0 ? ((n - 1) / 32) * 32 : -1; base >= 0; base -= 32) {
      const long long i = base + w.lane;
      const bool in = i < n;
      T alpha = T(0), t = T(0), gw = T(0), c[3] = {T(0), T(0), T(0)};
      if (in) {
        alpha = ga[4 * i];
        t = ga[4 * i + 1];
        for (int k = 0; k < 3; ++k) c[k] = sigmoid(ray.raw[4 * i + k]);
        gw = gr[HEAD + i] + (g_rgb[0] * c[0] + g_rgb[1] * c[1] + g_rgb[2] * c[2]) +
             g_depth * ray.z[i] + g_acc;
      }
      // B_i = sum_{m > i} gw_m alpha_m prod_{i<j<m} f_j: sample i's operator maps B_i to
      // B_{i-1} = gw_i alpha_i + f_i B_i; compose each lane's with those of the lanes
      // after it (x -> a + m x), then lane l's B is the composition from lane l + 1 on,
      // applied to the carry.
      T a = in ? gw * alpha : T(0);
      T m = in ? (T(1) - alpha) + Consts<T>::EPS : T(1);
      for (int o = 1; o < 32; o <<= 1) {
        const T a2 = __shfl_down_sync(0xffffffffu, a, o);
        const T m2 = __shfl_down_sync(0xffffffffu, m, o);
        if (w.lane + o < 32) {
          a = a + m * a2;
          m = m * m2;
        }
      }
      T a_next = __shfl_down_sync(0xffffffffu, a, 1);
      T m_next = __shfl_down_sync(0xffffffffu, m, 1);
      if (w.lane == 31) {
        a_next = T(0);
        m_next = T(1);
      }
      const T b = a_next + m_next * b_carry;
      const T a0 = __shfl_sync(0xffffffffu, a, 0);
      const T m0 = __shfl_sync(0xffffffffu, m, 0);

      T g_dist_norm = T(0), g_norm_part = T(0), gz_own = T(0);
      if (in) {
        const T wt = alpha * t;
        const T g_alpha = t * (gw - b);
        const T pre = ray.pre_sigma(i);
        const T sigma = relu(pre);
        const T step = ray.step(i);
        const T dist = step * ray.norm;
        const T e = exp(-(sigma * dist));
        for (int k = 0; k < 3; ++k) ga[4 * i + k] = wt * g_rgb[k] * c[k] * (T(1) - c[k]);
        ga[4 * i + 3] = pre > T(0) ? g_alpha * e * dist : T(0);
        const T g_dist = g_alpha * e * sigma;
        g_dist_norm = g_dist * ray.norm;
        g_norm_part = g_dist * step;
        gz_own = g_depth * wt;
        if (i + 1 < n) gz_own -= g_dist_norm;
      }
      b_carry = a0 + m0 * b_carry;
      g_norm += g_norm_part;
      if (gzr) {
        // gz_i = (g_depth w_i - g_dist_i |d|) + g_dist_{i-1} |d|, in the CPU kernel's order.
        // The lane before supplies g_dist_{i-1}; lane 0 waits for the next (earlier) chunk,
        // whose lane 31 finishes it.
        const T from_prev = __shfl_up_sync(0xffffffffu, g_dist_norm, 1);
        const T pend = __shfl_sync(0xffffffffu, pending, 0);
        if (in && w.lane > 0) gzr[i] = gz_own + from_prev;
        if (w.lane == 31 && base + 32 < n) gzr[base + 32] = pend + g_dist_norm;
        pending = gz_own;
      }
    }
    if (gzr && w.lane == 0 && n > 0) gzr[0] = pending;
    g_norm = gs::warp_sum(g_norm);
    if (gdir && dir && w.lane < 3) {
      const T* d = dir + r * 3;
      gdir[r * 3 + w.lane] = ray.norm > T(0) ? g_norm * d[w.lane] / ray.norm : T(0);
    }
  }
}

}  // namespace

#define GS_RENDER(T, suffix)                                                                \
  extern "C" __global__ void gs_volume_render_##suffix(long long rays, long long n,         \
                                                       const T* raw, const T* z,            \
                                                       const T* dir, const T* noise,        \
                                                       int white, T* out) {                 \
    forward<T>(rays, n, raw, z, dir, noise, white, out);                                    \
  }                                                                                         \
  GS_EXPORT(gs_volume_render_##suffix)                                                      \
  extern "C" __global__ void gs_volume_render_backward_##suffix(                            \
      long long rays, long long n, const T* raw, const T* z, const T* dir, const T* noise,  \
      int white, const T* g, T* graw, T* gz, T* gdir) {                                     \
    backward<T>(rays, n, raw, z, dir, noise, white, g, graw, gz, gdir);                     \
  }                                                                                         \
  GS_EXPORT(gs_volume_render_backward_##suffix)

GS_RENDER(float, f32)
GS_RENDER(double, f64)
