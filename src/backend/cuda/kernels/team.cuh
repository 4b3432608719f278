// Teams of threads that serve one line (or a few adjacent columns) together: their
// reductions and scans, by warp shuffles and, across warps, shared memory. Included by the
// kernel files that reduce or scan lines (lines.cu, nn.cu).
//
// A block is blockDim = (CW, R, G): G teams of CW adjacent columns x R slices (CW and R
// powers of two, CW <= 32, CW * R * G a multiple of 32). Thread (x, y, z) serves column x
// of team z as its slice y. A team narrower than a warp shares the warp with others, in
// aligned segments.
#pragma once

#include "gs_cuda.cuh"

namespace gs {

enum class Shfl { Xor, Up, Idx };

template <bool Wide>
struct WordOf {
  using type = unsigned;
};
template <>
struct WordOf<true> {
  using type = unsigned long long;
};

// A shuffle of any small trivially copyable value, word by word.
template <class S>
__device__ __forceinline__ S shfl(S v, unsigned arg, Shfl how) {
  using W = typename WordOf<sizeof(S) % 8 == 0>::type;
  constexpr int kWords = sizeof(S) / sizeof(W);
  constexpr unsigned kFull = 0xffffffffu;
  W w[kWords];
  memcpy(w, &v, sizeof(S));
  for (int i = 0; i < kWords; ++i) {
    if (how == Shfl::Xor)
      w[i] = __shfl_xor_sync(kFull, w[i], (int)arg);
    else if (how == Shfl::Up)
      w[i] = __shfl_up_sync(kFull, w[i], arg);
    else
      w[i] = __shfl_sync(kFull, w[i], (int)arg);
  }
  memcpy(&v, w, sizeof(S));
  return v;
}

// One thread's place in the block's teams. A team spans `span` = CW * R threads; teams
// narrower than a warp share it in segments of `lim` lanes.
struct Team {
  unsigned cw, span, lim, lane, warp, first_warp, x, y;

  __device__ Team() {
    cw = blockDim.x;
    span = blockDim.x * blockDim.y;
    lim = span < 32u ? span : 32u;
    x = threadIdx.x;
    y = threadIdx.y;
    const unsigned t = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
    lane = t & 31u;
    warp = t >> 5;
    first_warp = (threadIdx.z * span) >> 5;
  }

  // `f` over the team's values of each column (f commutative and associative); every thread
  // gets its column's result with the same bits. Every thread of the block calls it.
  // `scratch`: 1024 values of shared memory.
  template <class S, class F>
  __device__ S reduce(S v, F f, S* scratch) const {
    for (unsigned o = cw; o < lim; o <<= 1) v = f(v, shfl(v, o, Shfl::Xor));
    if (span > 32u) {
      if (lane < cw) scratch[warp * 32u + x] = v;
      __syncthreads();
      v = scratch[first_warp * 32u + x];
      for (unsigned w = first_warp + 1; w < first_warp + (span >> 5); ++w)
        v = f(v, scratch[w * 32u + x]);
      __syncthreads();
    }
    return v;
  }

  // The exclusive scan of the team's values of each column in slice order (f associative,
  // `id` its identity), and in `total` the column's whole fold. Every thread calls it.
  template <class S, class F>
  __device__ S scan(S v, F f, S id, S* scratch, S& total) const {
    const unsigned pos = lane % lim;
    for (unsigned o = cw; o < lim; o <<= 1) {
      const S t = shfl(v, o, Shfl::Up);
      if (pos >= o) v = f(t, v);
    }
    const S before = shfl(v, cw, Shfl::Up);
    S ex = pos >= cw ? before : id;
    if (span > 32u) {
      if (lane >= 32u - cw) scratch[warp * 32u + x] = v;
      __syncthreads();
      S pre = id;
      total = id;
      for (unsigned w = first_warp; w < first_warp + (span >> 5); ++w) {
        const S s = scratch[w * 32u + x];
        if (w < warp) pre = f(pre, s);
        total = f(total, s);
      }
      __syncthreads();
      ex = f(pre, ex);
    } else {
      total = shfl(v, (lane - pos) + lim - cw + x, Shfl::Idx);
    }
    return ex;
  }
};

}  // namespace gs
