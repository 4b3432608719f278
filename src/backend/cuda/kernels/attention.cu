// Scaled dot-product attention, FlashAttention-2 style (backend/attention.rs), with the CPU
// kernels' semantics (backend/cpu/attention.rs): no L x S matrix is stored.
//
// A block serves one row at a time (a query row, or in the backward's second kernel a key
// row), walking the other side in tiles of blockDim.x: each thread computes one score of the
// tile, the block shares the tile's probabilities (or score gradients) in shared memory, and
// then each thread adds the tile into the output columns it owns (c = threadIdx.x, + blockDim.x,
// ...), which it alone reads and writes, so nothing needs atomics and results are the same
// from run to run.
//
// - forward: a running max and sum per query row (online softmax); the output row is rescaled
//   per tile, divided by the sum at the end; the log-sum-exp is -inf (and the row zero) where
//   every key is masked.
// - backward_rows: D_i = rowsum(dout_i * out_i) per query row and, if asked, dq_i =
//   scale * sum_j dS_ij k_j with dS_ij = P_ij (dP_ij Z_ij - D_i), dP_ij = dout_i . v_j.
// - backward_keys: per key row, dv_j = sum_i Pd_ij dout_i and dk_j = scale * sum_i dS_ij q_i.
//
// Operand rows are strided: row r of batch item b of operand `o` starts at element
// base[o * n + b] + r * row of its storage. The row vectors a block reuses for every tile
// (q_i and dout_i; k_j and v_j) are staged in dynamic shared memory when they fit ("staged").

#include "gs_cuda.cuh"

namespace {

using i64 = long long;
using u64 = unsigned long long;

// The slots of the base table.
enum Slot { kQ = 0, kK = 1, kV = 2, kOut = 3, kDout = 4, kMask = 5 };

__device__ __forceinline__ float exp_of(float v) { return expf(v); }
__device__ __forceinline__ double exp_of(double v) { return exp(v); }
__device__ __forceinline__ float log_of(float v) { return logf(v); }
__device__ __forceinline__ double log_of(double v) { return log(v); }

// The larger of a and b, NaN only if both are (the CPU kernel's max skips NaN).
template <class T>
__device__ __forceinline__ T max_skip_nan(T a, T b) {
  return (b > a || a != a) ? b : a;
}

template <class T>
__device__ __forceinline__ T neg_inf() {
  return -INFINITY;
}

// max_skip_nan over a block (blockDim.x a multiple of 32, every thread calls it and gets the
// same bits). `scratch`: 32 shared values.
template <class T>
__device__ __forceinline__ T block_max_skip_nan(T v, T* scratch) {
  const unsigned lane = threadIdx.x & 31u;
  for (int o = 16; o > 0; o >>= 1) v = max_skip_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  if (lane == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  v = lane < (blockDim.x >> 5) ? scratch[lane] : neg_inf<T>();
  for (int o = 16; o > 0; o >>= 1) v = max_skip_nan(v, __shfl_xor_sync(0xffffffffu, v, o));
  __syncthreads();
  return v;
}

// backend::attention::dropout_keep: a splitmix64 hash of the seed and the element's index
// (n * L + i) * S + j, compared as a 53-bit uniform with the threshold.
__device__ __forceinline__ bool dropout_keep(u64 seed, u64 index, u64 threshold) {
  u64 z = seed + index * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  return (z >> 11) >= threshold;
}

struct Shape {
  i64 n, l, s, e, ev;
};

// Everything the scores need besides q and k: mask, causal, scale, dropout.
template <class T>
struct Scores {
  const T* mask;  // null: none
  i64 mask_row, mask_col;
  int causal;
  T scale;
  int dropout;
  u64 seed, threshold;
  T keep;  // 1 / (1 - p)

  // The first key row that query i does not see.
  __device__ i64 key_end(const Shape& z, i64 i) const {
    return causal ? (i + 1 < z.s ? i + 1 : z.s) : z.s;
  }
  // The first query row that sees key j.
  __device__ i64 query_start(i64 j) const { return causal ? j : 0; }

  // The scaled score of q_i . k_j plus the mask (for a key the query sees).
  __device__ T score(const T* qi, const T* kj, i64 e, const i64* mbase, i64 b, i64 i,
                     i64 j) const {
    T d = T(0);
    for (i64 c = 0; c < e; ++c) d += qi[c] * kj[c];
    // No features: a zero score whatever the scale (1/sqrt(0) = inf), as the CPU's product.
    T x = e > 0 ? scale * d : T(0);
    if (mask) x += mask[mbase[b] + i * mask_row + j * mask_col];
    return x;
  }

  // x times the dropout mask and 1/(1-p) at element (b, i, j).
  __device__ T drop(T x, const Shape& z, i64 b, i64 i, i64 j) const {
    if (!dropout) return x;
    return dropout_keep(seed, (u64)((b * z.l + i) * z.s + j), threshold) ? x * keep : T(0);
  }
};

// The address of row r of batch item b of operand `slot`.
template <class T>
__device__ __forceinline__ const T* row_of(const T* data, const i64* base, const Shape& z,
                                           Slot slot, i64 b, i64 r, i64 stride) {
  return data + base[slot * z.n + b] + r * stride;
}

// Copies `len` elements of `src` to shared `dst` when staged (then returns dst), else
// returns src. Every thread of the block calls it.
template <class T>
__device__ __forceinline__ const T* stage(const T* src, T* dst, i64 len, int staged) {
  if (!staged) return src;
  for (i64 c = threadIdx.x; c < len; c += blockDim.x) dst[c] = src[c];
  __syncthreads();
  return dst;
}

// Output (N, L, Ev) and log-sum-exp (N, L), both zero-filled before. Dynamic shared memory:
// blockDim.x tile values, then (staged) q_i.
template <class T>
__device__ void forward(Shape z, const i64* base, i64 q_row, i64 k_row, i64 v_row,
                        const T* q, const T* k, const T* v, Scores<T> sc, int staged, T* out,
                        T* lse) {
  __shared__ T scratch[32];
  GS_DYNAMIC_SHARED(T, smem);
  T* tile = smem;
  T* qs = smem + blockDim.x;
  const i64 bd = blockDim.x, t = threadIdx.x;
  const i64* mbase = base + kMask * z.n;
  for (i64 r = blockIdx.x; r < z.n * z.l; r += gridDim.x) {
    const i64 b = r / z.l, i = r % z.l;
    const T* qi = stage(row_of(q, base, z, kQ, b, i, q_row), qs, z.e, staged);
    T* o = out + r * z.ev;
    T m = neg_inf<T>(), sum = T(0);
    const i64 end = sc.key_end(z, i);
    for (i64 j0 = 0; j0 < end; j0 += bd) {
      const i64 j = j0 + t;
      const T x = j < end ? sc.score(qi, row_of(k, base, z, kK, b, j, k_row), z.e, mbase, b, i, j)
                          : neg_inf<T>();
      const T mnew = max_skip_nan(m, block_max_skip_nan(x, scratch));
      // Every score so far is -inf: nothing to add (the same for the whole block).
      if (mnew == neg_inf<T>()) continue;
      const T p = exp_of(x - mnew);
      const T corr = exp_of(m - mnew);
      sum = sum * corr + gs::block_sum(p, scratch);
      m = mnew;
      tile[t] = j < end ? sc.drop(p, z, b, i, j) : T(0);
      __syncthreads();
      const i64 cnt = end - j0 < bd ? end - j0 : bd;
      for (i64 c = t; c < z.ev; c += bd) {
        T a = T(0);
        for (i64 u = 0; u < cnt; ++u) a += tile[u] * row_of(v, base, z, kV, b, j0 + u, v_row)[c];
        o[c] = o[c] * corr + a;
      }
      __syncthreads();
    }
    if (sum > T(0)) {
      const T inv = T(1) / sum;
      for (i64 c = t; c < z.ev; c += bd) o[c] *= inv;
      if (t == 0) lse[r] = m + log_of(sum);
    } else if (t == 0) {
      lse[r] = neg_inf<T>();
    }
    if (staged) __syncthreads();  // q_i read by all before the next row overwrites it
  }
}

// Per query row: D_i (N * L) and, if dq, dq_i (N, L, E; zero-filled before). Dynamic shared
// memory: blockDim.x tile values, then (staged) q_i and dout_i.
template <class T>
__device__ void backward_rows(Shape z, const i64* base, i64 q_row, i64 k_row, i64 v_row,
                              i64 out_row, i64 dout_row, const T* q, const T* k, const T* v,
                              const T* out, const T* lse, const T* dout, Scores<T> sc,
                              int staged, T* dd, T* dq) {
  __shared__ T scratch[32];
  GS_DYNAMIC_SHARED(T, smem);
  T* tile = smem;
  T* qs = smem + blockDim.x;
  T* gos = qs + z.e;
  const i64 bd = blockDim.x, t = threadIdx.x;
  const i64* mbase = base + kMask * z.n;
  for (i64 r = blockIdx.x; r < z.n * z.l; r += gridDim.x) {
    const i64 b = r / z.l, i = r % z.l;
    const T* oi = row_of(out, base, z, kOut, b, i, out_row);
    const T* gi = row_of(dout, base, z, kDout, b, i, dout_row);
    T part = T(0);
    for (i64 c = t; c < z.ev; c += bd) part += gi[c] * oi[c];
    const T d = gs::block_sum(part, scratch);
    if (t == 0) dd[r] = d;
    if (!dq) continue;
    const T* qi = stage(row_of(q, base, z, kQ, b, i, q_row), qs, z.e, staged);
    gi = stage(gi, gos, z.ev, staged);
    const T l = lse[r];
    T* dqi = dq + r * z.e;
    const i64 end = l == neg_inf<T>() ? 0 : sc.key_end(z, i);
    for (i64 j0 = 0; j0 < end; j0 += bd) {
      const i64 j = j0 + t;
      T ds = T(0);
      if (j < end) {
        const T p = exp_of(sc.score(qi, row_of(k, base, z, kK, b, j, k_row), z.e, mbase, b, i, j) - l);
        const T* vj = row_of(v, base, z, kV, b, j, v_row);
        T dp = T(0);
        for (i64 c = 0; c < z.ev; ++c) dp += gi[c] * vj[c];
        ds = p * (sc.drop(dp, z, b, i, j) - d);
      }
      tile[t] = ds;
      __syncthreads();
      const i64 cnt = end - j0 < bd ? end - j0 : bd;
      for (i64 c = t; c < z.e; c += bd) {
        T a = T(0);
        for (i64 u = 0; u < cnt; ++u) a += tile[u] * row_of(k, base, z, kK, b, j0 + u, k_row)[c];
        dqi[c] += sc.scale * a;
      }
      __syncthreads();
    }
    if (staged) __syncthreads();
  }
}

// Per key row: dk_j (N, S, E) if dk, dv_j (N, S, Ev) if dv, both zero-filled before; `dd`
// (D per query row) is read only for dk. Dynamic shared memory: 2 blockDim.x tile values,
// then (staged) k_j and v_j.
template <class T>
__device__ void backward_keys(Shape z, const i64* base, i64 q_row, i64 k_row, i64 v_row,
                              i64 dout_row, const T* q, const T* k, const T* v, const T* lse,
                              const T* dout, const T* dd, Scores<T> sc, int staged, T* dk,
                              T* dv) {
  GS_DYNAMIC_SHARED(T, smem);
  T* tile_p = smem;
  T* tile_s = smem + blockDim.x;
  T* ks = tile_s + blockDim.x;
  T* vs = ks + z.e;
  const i64 bd = blockDim.x, t = threadIdx.x;
  const i64* mbase = base + kMask * z.n;
  for (i64 r = blockIdx.x; r < z.n * z.s; r += gridDim.x) {
    const i64 b = r / z.s, j = r % z.s;
    const T* kj = stage(row_of(k, base, z, kK, b, j, k_row), ks, z.e, staged);
    const T* vj = dk ? stage(row_of(v, base, z, kV, b, j, v_row), vs, z.ev, staged) : nullptr;
    for (i64 i0 = sc.query_start(j); i0 < z.l; i0 += bd) {
      const i64 i = i0 + t;
      T pd = T(0), ds = T(0);
      const T l = i < z.l ? lse[b * z.l + i] : neg_inf<T>();
      if (l != neg_inf<T>()) {
        const T p = exp_of(sc.score(row_of(q, base, z, kQ, b, i, q_row), kj, z.e, mbase, b, i, j) - l);
        pd = sc.drop(p, z, b, i, j);
        if (dk) {
          const T* gi = row_of(dout, base, z, kDout, b, i, dout_row);
          T dp = T(0);
          for (i64 c = 0; c < z.ev; ++c) dp += gi[c] * vj[c];
          ds = p * (sc.drop(dp, z, b, i, j) - dd[b * z.l + i]);
        }
      }
      tile_p[t] = pd;
      tile_s[t] = ds;
      __syncthreads();
      const i64 cnt = z.l - i0 < bd ? z.l - i0 : bd;
      if (dv) {
        T* dvj = dv + r * z.ev;
        for (i64 c = t; c < z.ev; c += bd) {
          T a = T(0);
          for (i64 u = 0; u < cnt; ++u)
            a += tile_p[u] * row_of(dout, base, z, kDout, b, i0 + u, dout_row)[c];
          dvj[c] += a;
        }
      }
      if (dk) {
        T* dkj = dk + r * z.e;
        for (i64 c = t; c < z.e; c += bd) {
          T a = T(0);
          for (i64 u = 0; u < cnt; ++u)
            a += tile_s[u] * row_of(q, base, z, kQ, b, i0 + u, q_row)[c];
          dkj[c] += sc.scale * a;
        }
      }
      __syncthreads();
    }
    if (staged) __syncthreads();
  }
}

template <class T>
__device__ __forceinline__ Scores<T> scores_of(const T* mask, i64 mask_row, i64 mask_col,
                                               int causal, double scale, int dropout, i64 seed,
                                               i64 threshold, double keep) {
  return Scores<T>{mask,     mask_row,  mask_col,       causal,         T(scale),
                   dropout, (u64)seed, (u64)threshold, T(keep)};
}

}  // namespace

// The score arguments every kernel takes, in order.
#define GS_SCORE_PARAMS(T)                                                                   \
  const T *mask, i64 mask_row, i64 mask_col, int causal, double scale, int dropout, i64 seed, \
      i64 threshold, double keep
#define GS_SCORE_ARGS mask, mask_row, mask_col, causal, scale, dropout, seed, threshold, keep

#define GS_ATTENTION(T, s)                                                                    \
  extern "C" __global__ void gs_flash_forward_##s(                                            \
      i64 n, i64 l, i64 sk, i64 e, i64 ev, const i64* base, i64 q_row, i64 k_row, i64 v_row,  \
      const T* q, const T* k, const T* v, GS_SCORE_PARAMS(T), int staged, T* out, T* lse) {   \
    forward<T>(Shape{n, l, sk, e, ev}, base, q_row, k_row, v_row, q, k, v,                    \
               scores_of<T>(GS_SCORE_ARGS), staged, out, lse);                                \
  }                                                                                           \
  GS_EXPORT(gs_flash_forward_##s)                                                             \
  extern "C" __global__ void gs_flash_backward_rows_##s(                                      \
      i64 n, i64 l, i64 sk, i64 e, i64 ev, const i64* base, i64 q_row, i64 k_row, i64 v_row,  \
      i64 out_row, i64 dout_row, const T* q, const T* k, const T* v, const T* out,            \
      const T* lse, const T* dout, GS_SCORE_PARAMS(T), int staged, T* dd, T* dq) {            \
    backward_rows<T>(Shape{n, l, sk, e, ev}, base, q_row, k_row, v_row, out_row, dout_row, q, \
                     k, v, out, lse, dout, scores_of<T>(GS_SCORE_ARGS), staged, dd, dq);      \
  }                                                                                           \
  GS_EXPORT(gs_flash_backward_rows_##s)                                                       \
  extern "C" __global__ void gs_flash_backward_keys_##s(                                      \
      i64 n, i64 l, i64 sk, i64 e, i64 ev, const i64* base, i64 q_row, i64 k_row, i64 v_row,  \
      i64 dout_row, const T* q, const T* k, const T* v, const T* lse, const T* dout,          \
      const T* dd, GS_SCORE_PARAMS(T), int staged, T* dk, T* dv) {                            \
    backward_keys<T>(Shape{n, l, sk, e, ev}, base, q_row, k_row, v_row, dout_row, q, k, v,    \
                     lse, dout, dd, scores_of<T>(GS_SCORE_ARGS), staged, dk, dv);             \
  }                                                                                           \
  GS_EXPORT(gs_flash_backward_keys_##s)

GS_ATTENTION(float, f32)
GS_ATTENTION(double, f64)
