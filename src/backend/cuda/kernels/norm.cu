// Batch norm's per-channel kernels on (N, C, S) tensors (backend/norm.rs), with the CPU
// kernels' semantics (backend/cpu/norm.rs): per-channel sums in double, per-channel
// coefficients f64 (C,) vectors, elements computed in the tensor's type.
//
// A channel's elements are N runs of S, C * S apart. The sums go in two launches with no
// atomics: per (channel, chunk of N) partial sums, then each channel's partials added in
// chunk order, so a result does not depend on the scheduling.

#include "gs_cuda.cuh"

namespace {

using i64 = long long;

enum Sums { kSum = 0, kSquares = 1, kGrad = 2 };

// Partial sums of a chunk of rows_per_chunk of the N runs of each channel, in double:
// kSum: sum x; kSquares: sum (x - centre)^2; kGrad: sum g to pa and sum g (x - centre) to pb.
// Each to a (C, chunks) buffer. blockDim = (32, 8): thread y takes every 8th run of the
// chunk; along a run the 32 lanes read adjacent elements: with S >= 32 one channel's, with
// S < 32 those of 32 / S adjacent channels (adjacent in memory too). blockIdx.x is the chunk,
// blockIdx.y strides over the channel groups.
template <class T>
__device__ void channel_sums(int what, i64 N, i64 C, i64 S, i64 rows_per_chunk, const T* x,
                             const T* g, const double* centre, double* pa, double* pb) {
  __shared__ double sa[8][32], sb[8][32];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  const i64 lanes = S < 32 ? S : 32;  // lanes per channel
  const i64 per = 32 / lanes;         // channels per group
  const i64 groups = (C + per - 1) / per;
  const i64 chunks = gridDim.x, chunk = blockIdx.x;
  const i64 n0 = chunk * rows_per_chunk;
  const i64 n1 = n0 + rows_per_chunk < N ? n0 + rows_per_chunk : N;
  for (i64 grp = blockIdx.y; grp < groups; grp += gridDim.y) {
    const i64 c = grp * per + tx / lanes;
    double a = 0.0, b = 0.0;
    if (tx < per * lanes && c < C) {
      const double m = centre ? centre[c] : 0.0;
      for (i64 n = n0 + ty; n < n1; n += 8) {
        const i64 run = (n * C + c) * S;
        for (i64 s = tx % lanes; s < S; s += lanes) {
          const double xv = double(x[run + s]);
          if (what == kSum) {
            a += xv;
          } else if (what == kSquares) {
            const double d = xv - m;
            a += d * d;
          } else {
            const double gv = double(g[run + s]);
            a += gv;
            b += gv * (xv - m);
          }
        }
      }
    }
    sa[ty][tx] = a;
    sb[ty][tx] = b;
    __syncthreads();
    if (ty == 0) {
      for (int k = 1; k < 8; ++k) {
        a += sa[k][tx];
        b += sb[k][tx];
      }
      sa[0][tx] = a;
      sb[0][tx] = b;
    }
    __syncthreads();
    if (ty == 0 && tx < per && grp * per + tx < C) {
      double ta = 0.0, tb = 0.0;
      for (i64 l = tx * lanes; l < (tx + 1) * lanes; ++l) {
        ta += sa[0][l];
        tb += sb[0][l];
      }
      const i64 at = (grp * per + tx) * chunks + chunk;
      pa[at] = ta;
      if (pb) pb[at] = tb;
    }
    __syncthreads();  // sa, sb are free for the next group
  }
}

// out[c] = (sum of channel c's partials, in chunk order) / divisor.
__device__ void channel_total(i64 C, i64 chunks, const double* parts, double divisor,
                              double* out) {
  GS_GRID_STRIDE(c, (size_t)C) {
    double s = 0.0;
    for (i64 k = 0; k < chunks; ++k) s += parts[c * chunks + k];
    out[c] = s / divisor;
  }
}

// Element i's channel and place in its run, kept up to date along a grid-stride loop
// without a division per element.
struct ChannelWalk {
  i64 i, stride, s, c, ds, dc, S, C;
  __device__ ChannelWalk(i64 C_, i64 S_) : S(S_), C(C_) {
    i = (i64)blockIdx.x * blockDim.x + threadIdx.x;
    stride = (i64)blockDim.x * gridDim.x;
    s = i % S;
    c = (i / S) % C;
    ds = stride % S;
    dc = (stride / S) % C;
  }
  __device__ void next() {
    i += stride;
    s += ds;
    c += dc;
    if (s >= S) {
      s -= S;
      ++c;
    }
    if (c >= C) c -= C;
  }
};

// y = (x - centre[c]) * scale[c] + shift[c], in T.
template <class T>
__device__ void channel_affine(i64 N, i64 C, i64 S, const T* x, const double* centre,
                               const double* scale, const double* shift, T* y) {
  const i64 total = N * C * S;
  for (ChannelWalk w(C, S); w.i < total; w.next())
    y[w.i] = (x[w.i] - T(centre[w.c])) * T(scale[w.c]) + T(shift[w.c]);
}

// y = a[c] g + b[c] (x - centre[c]) + d[c], in T.
template <class T>
__device__ void channel_combine(i64 N, i64 C, i64 S, const T* g, const T* x, const double* a,
                                const double* centre, const double* b, const double* d, T* y) {
  const i64 total = N * C * S;
  for (ChannelWalk w(C, S); w.i < total; w.next())
    y[w.i] = T(a[w.c]) * g[w.i] + T(b[w.c]) * (x[w.i] - T(centre[w.c])) + T(d[w.c]);
}

}  // namespace

extern "C" __global__ void gs_channel_total(i64 C, i64 chunks, const double* parts,
                                            double divisor, double* out) {
  channel_total(C, chunks, parts, divisor, out);
}
GS_EXPORT(gs_channel_total)

#define GS_NORM(T, s)                                                                        \
  extern "C" __global__ void gs_channel_sums_##s(int what, i64 N, i64 C, i64 S,              \
                                                 i64 rows_per_chunk, const T* x, const T* g, \
                                                 const double* centre, double* pa,           \
                                                 double* pb) {                               \
    channel_sums<T>(what, N, C, S, rows_per_chunk, x, g, centre, pa, pb);                    \
  }                                                                                          \
  GS_EXPORT(gs_channel_sums_##s)                                                             \
  extern "C" __global__ void gs_channel_affine_##s(i64 N, i64 C, i64 S, const T* x,          \
                                                   const double* centre, const double* scale, \
                                                   const double* shift, T* y) {              \
    channel_affine<T>(N, C, S, x, centre, scale, shift, y);                                  \
  }                                                                                          \
  GS_EXPORT(gs_channel_affine_##s)                                                           \
  extern "C" __global__ void gs_channel_combine_##s(i64 N, i64 C, i64 S, const T* g,         \
                                                    const T* x, const double* a,             \
                                                    const double* centre, const double* b,   \
                                                    const double* d, T* y) {                 \
    channel_combine<T>(N, C, S, g, x, a, centre, b, d, y);                                   \
  }                                                                                          \
  GS_EXPORT(gs_channel_combine_##s)

GS_NORM(float, f32)
GS_NORM(double, f64)
