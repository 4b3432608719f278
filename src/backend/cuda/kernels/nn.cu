// layer_norm's rows and their backward, the row gather/scatter under nll_loss, embedding and
// its backward (backend/nn.rs), with the CPU kernels' semantics (backend/cpu/nn.rs): row
// statistics and column sums accumulate in double, elements are computed in the tensor's
// type.

#include "gs_cuda.cuh"
#include "team.cuh"

namespace {

using i64 = long long;

struct Add {
  __device__ double operator()(double a, double b) const { return a + b; }
};

struct Pair {
  double a, b;
};
struct AddPair {
  __device__ Pair operator()(Pair x, Pair y) const { return Pair{x.a + y.a, x.b + y.b}; }
};

template <class T>
__device__ __forceinline__ T zero() {
  return gs::from_acc<T>(0);
}

// The rows a block's teams serve, first and step: the same trip count for every thread of
// a block (the loops hold barriers).
__device__ __forceinline__ i64 first_row() { return (i64)blockIdx.x * blockDim.z; }
__device__ __forceinline__ i64 row_step() { return (i64)gridDim.x * blockDim.z; }

// layer_norm over rows of n, a team of blockDim.y threads per row (blockDim = (1, R, G)):
// the mean, then the biased variance about it (two passes, as the CPU kernel), then
// y = (x - mean) * rstd [* w] [+ b] in T.
template <class T>
__device__ void layer_norm(i64 rows, i64 n, const T* x, const T* w, const T* b, double eps,
                           T* y, T* mean, T* rstd) {
  __shared__ double scratch[1024];
  const gs::Team tm;
  for (i64 r0 = first_row(); r0 < rows; r0 += row_step()) {
    const i64 row = r0 + threadIdx.z;
    const bool on = row < rows;
    const T* xr = x + (on ? row : 0) * n;
    double s = 0.0;
    if (on)
      for (i64 k = tm.y; k < n; k += blockDim.y) s += double(xr[k]);
    const double mu = tm.reduce(s, Add(), scratch) / double(n);
    double q = 0.0;
    if (on)
      for (i64 k = tm.y; k < n; k += blockDim.y) {
        const double d = double(xr[k]) - mu;
        q += d * d;
      }
    const double var = tm.reduce(q, Add(), scratch) / double(n);
    const T mt = T(mu), rt = T(1.0 / sqrt(var + eps));
    if (on) {
      T* yr = y + row * n;
      for (i64 k = tm.y; k < n; k += blockDim.y) {
        T v = (xr[k] - mt) * rt;
        if (w) v = v * w[k];
        if (b) v = v + b[k];
        yr[k] = v;
      }
      if (tm.y == 0) {
        mean[row] = mt;
        rstd[row] = rt;
      }
    }
  }
}

// layer_norm's input gradient per row (same geometry): with h = g * w and x^ = (x - mean)
// * rstd, gx = rstd * (h - mean(h) - x^ * mean(h * x^)).
template <class T>
__device__ void layer_norm_backward(i64 rows, i64 n, const T* g, const T* x, const T* mean,
                                    const T* rstd, const T* w, T* gx) {
  __shared__ Pair scratch[1024];
  const gs::Team tm;
  for (i64 r0 = first_row(); r0 < rows; r0 += row_step()) {
    const i64 row = r0 + threadIdx.z;
    const bool on = row < rows;
    const i64 off = (on ? row : 0) * n;
    const T m = mean[on ? row : 0], r = rstd[on ? row : 0];
    Pair s{0.0, 0.0};
    if (on)
      for (i64 k = tm.y; k < n; k += blockDim.y) {
        const double h = double(w ? g[off + k] * w[k] : g[off + k]);
        s.a += h;
        s.b += h * double((x[off + k] - m) * r);
      }
    s = tm.reduce(s, AddPair(), scratch);
    const T mg = T(s.a / double(n)), mgx = T(s.b / double(n));
    if (on)
      for (i64 k = tm.y; k < n; k += blockDim.y) {
        const T h = w ? g[off + k] * w[k] : g[off + k];
        gx[off + k] = r * (h - mg - (x[off + k] - m) * r * mgx);
      }
  }
}

// layer_norm's weight and bias gradients, first stage: per chunk of rows, each column's
// sum of g * x^ and of g, in double, to (chunks, n) buffers. blockDim = (32, 8): a warp reads
// 32 adjacent columns of a row; blockIdx.x is the column tile, blockIdx.y the chunk.
template <class T>
__device__ void layer_norm_param_parts(i64 rows, i64 n, i64 rows_per_chunk, const T* g,
                                       const T* x, const T* mean, const T* rstd, double* pw,
                                       double* pb) {
  __shared__ double sw[8][32], sb[8][32];
  const unsigned tx = threadIdx.x, ty = threadIdx.y;
  const i64 j = (i64)blockIdx.x * 32 + tx;
  const i64 chunk = blockIdx.y;
  const i64 r0 = chunk * rows_per_chunk;
  const i64 r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  double aw = 0.0, ab = 0.0;
  if (j < n)
    for (i64 r = r0 + ty; r < r1; r += 8) {
      const T gv = g[r * n + j];
      aw += double(gv * ((x[r * n + j] - mean[r]) * rstd[r]));
      ab += double(gv);
    }
  sw[ty][tx] = aw;
  sb[ty][tx] = ab;
  __syncthreads();
  if (ty == 0 && j < n) {
    for (int k = 1; k < 8; ++k) {
      aw += sw[k][tx];
      ab += sb[k][tx];
    }
    pw[chunk * n + j] = aw;
    pb[chunk * n + j] = ab;
  }
}

// Second stage: each column's chunk sums, added in chunk order (deterministic), to T.
template <class T>
__device__ void column_sums(i64 n, i64 chunks, const double* pw, const double* pb, T* dw,
                            T* db) {
  GS_GRID_STRIDE(j, (size_t)n) {
    double a = 0.0, b = 0.0;
    for (i64 c = 0; c < chunks; ++c) {
      a += pw[c * n + j];
      b += pb[c * n + j];
    }
    dw[j] = T(a);
    db[j] = T(b);
  }
}

// out[i] = x[i, t[i]], 0 where t[i] is the ignored class.
template <class T>
__device__ void gather_rows(i64 rows, i64 c, const T* x, const i64* t, i64 ignore, T* y) {
  GS_GRID_STRIDE(i, (size_t)rows) {
    const i64 k = t[i];
    y[i] = k == ignore ? zero<T>() : x[i * c + k];
  }
}

// y[i, t[i]] = g[i] into zeros, except at the ignored class.
template <class T>
__device__ void scatter_rows(i64 rows, i64 c, const T* g, const i64* t, i64 ignore, T* y) {
  GS_GRID_STRIDE(i, (size_t)rows) {
    const i64 k = t[i];
    if (k != ignore) y[i * c + k] = g[i];
  }
}

// The rows of an embedding and of its gradient: blockDim = (X, Y), Y rows per block at a
// time, X threads along a row of d.
#define GS_ROWS(r, k, len, d)                                                          \
  for (i64 r = (i64)blockIdx.x * blockDim.y + threadIdx.y; r < (len);                  \
       r += (i64)gridDim.x * blockDim.y)                                               \
    for (i64 k = threadIdx.x; k < (d); k += blockDim.x)

// y[r] = w[ids[r]], zeros where ids[r] is `zero_id` (with has_zero).
template <class T>
__device__ void embedding(i64 len, i64 d, const T* w, const i64* ids, int has_zero,
                          i64 zero_id, T* y) {
  GS_ROWS(r, k, len, d) {
    const i64 id = ids[r];
    y[r * d + k] = (has_zero && id == zero_id) ? zero<T>() : w[id * d + k];
  }
}

// acc[ids[r]] += g[r], except the padding rows. Atomic adds in A (float for 16-bit types,
// then rounded once by the caller): the sum is exact up to the order of the adds, which
// varies from run to run where ids repeat.
template <class T, class A>
__device__ void embedding_backward(i64 len, i64 d, const T* g, const i64* ids, int has_pad,
                                   i64 pad, A* acc) {
  GS_ROWS(r, k, len, d) {
    const i64 id = ids[r];
    if (!(has_pad && id == pad)) atomicAdd(acc + id * d + k, A(gs::to_acc(g[r * d + k])));
  }
}

}  // namespace

#define GS_LAYER_NORM(T, s)                                                                   \
  extern "C" __global__ void gs_layer_norm_##s(i64 rows, i64 n, const T* x, const T* w,       \
                                               const T* b, double eps, T* y, T* mean,         \
                                               T* rstd) {                                     \
    layer_norm<T>(rows, n, x, w, b, eps, y, mean, rstd);                                      \
  }                                                                                           \
  GS_EXPORT(gs_layer_norm_##s)                                                                \
  extern "C" __global__ void gs_layer_norm_backward_##s(i64 rows, i64 n, const T* g,          \
                                                        const T* x, const T* mean,            \
                                                        const T* rstd, const T* w, T* gx) {   \
    layer_norm_backward<T>(rows, n, g, x, mean, rstd, w, gx);                                 \
  }                                                                                           \
  GS_EXPORT(gs_layer_norm_backward_##s)                                                       \
  extern "C" __global__ void gs_layer_norm_param_parts_##s(                                   \
      i64 rows, i64 n, i64 rows_per_chunk, const T* g, const T* x, const T* mean,             \
      const T* rstd, double* pw, double* pb) {                                                \
    layer_norm_param_parts<T>(rows, n, rows_per_chunk, g, x, mean, rstd, pw, pb);             \
  }                                                                                           \
  GS_EXPORT(gs_layer_norm_param_parts_##s)                                                    \
  extern "C" __global__ void gs_column_sums_##s(i64 n, i64 chunks, const double* pw,          \
                                                const double* pb, T* dw, T* db) {             \
    column_sums<T>(n, chunks, pw, pb, dw, db);                                                \
  }                                                                                           \
  GS_EXPORT(gs_column_sums_##s)

GS_LAYER_NORM(float, f32)
GS_LAYER_NORM(double, f64)

#define GS_ROWS_OPS(T, A, s)                                                                  \
  extern "C" __global__ void gs_gather_rows_##s(i64 rows, i64 c, const T* x, const i64* t,    \
                                                i64 ignore, T* y) {                           \
    gather_rows<T>(rows, c, x, t, ignore, y);                                                 \
  }                                                                                           \
  GS_EXPORT(gs_gather_rows_##s)                                                               \
  extern "C" __global__ void gs_scatter_rows_##s(i64 rows, i64 c, const T* g, const i64* t,   \
                                                 i64 ignore, T* y) {                          \
    scatter_rows<T>(rows, c, g, t, ignore, y);                                                \
  }                                                                                           \
  GS_EXPORT(gs_scatter_rows_##s)                                                              \
  extern "C" __global__ void gs_embedding_##s(i64 len, i64 d, const T* w, const i64* ids,     \
                                              int has_zero, i64 zero_id, T* y) {              \
    embedding<T>(len, d, w, ids, has_zero, zero_id, y);                                       \
  }                                                                                           \
  GS_EXPORT(gs_embedding_##s)                                                                 \
  extern "C" __global__ void gs_embedding_backward_##s(i64 len, i64 d, const T* g,            \
                                                       const i64* ids, int has_pad, i64 pad,  \
                                                       A* acc) {                              \
    embedding_backward<T, A>(len, d, g, ids, has_pad, pad, acc);                              \
  }                                                                                           \
  GS_EXPORT(gs_embedding_backward_##s)

GS_ROWS_OPS(float, float, f32)
GS_ROWS_OPS(double, double, f64)
GS_ROWS_OPS(__half, float, f16)
GS_ROWS_OPS(__nv_bfloat16, float, bf16)
