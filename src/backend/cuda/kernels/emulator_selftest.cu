// Kernels that exercise the emulator (emulator_test.cpp launches them); they also compile
// with nvcc, which checks that what the emulator accepts is valid CUDA.
#include "gs_cuda.cuh"

extern "C" __global__ void gs_selftest_axpy(size_t n, float a, const float* x, float* y) {
  GS_GRID_STRIDE(i, n) y[i] = a * x[i] + y[i];
}
GS_EXPORT(gs_selftest_axpy)

// Block b reduces x[b * per_block, (b + 1) * per_block). Every thread stores what it got in
// every[b * blockDim.x + t]; a second sum of 2x through the same scratch checks reuse.
template <class T>
__device__ __forceinline__ void block_reduce(const T* x, T* sums, T* maxes, T* every,
                                             int per_block) {
  __shared__ T scratch[32];
  const T* row = x + (size_t)blockIdx.x * per_block;
  T s = 0, m = -INFINITY;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) {
    s += row[i];
    m = m > row[i] ? m : row[i];
  }
  const T total = gs::block_sum(s, scratch);
  const T twice = gs::block_sum(T(2) * s, scratch);
  const T top = gs::block_max(m, scratch);
  every[(size_t)blockIdx.x * blockDim.x + threadIdx.x] = total;
  if (threadIdx.x == 0) {
    sums[2 * blockIdx.x] = total;
    sums[2 * blockIdx.x + 1] = twice;
    maxes[blockIdx.x] = top;
  }
}
extern "C" __global__ void gs_selftest_block_reduce_f32(const float* x, float* sums,
                                                        float* maxes, float* every,
                                                        int per_block) {
  block_reduce(x, sums, maxes, every, per_block);
}
GS_EXPORT(gs_selftest_block_reduce_f32)
extern "C" __global__ void gs_selftest_block_reduce_f64(const double* x, double* sums,
                                                        double* maxes, double* every,
                                                        int per_block) {
  block_reduce(x, sums, maxes, every, per_block);
}
GS_EXPORT(gs_selftest_block_reduce_f64)

// Inclusive prefix sum within segments of `width` lanes (a power of 2 up to 32).
extern "C" __global__ void gs_selftest_warp_scan(const int* x, int* y, int n, int width) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x & 31;
  int v = i < n ? x[i] : 0;
  for (int d = 1; d < width; d <<= 1) {
    const int up = __shfl_up_sync(0xffffffffu, v, d, width);
    if ((lane & (width - 1)) >= d) v += up;
  }
  if (i < n) y[i] = v;
}
GS_EXPORT(gs_selftest_warp_scan)

// One row of 16 results per thread, for a 1-D block.
extern "C" __global__ void gs_selftest_warp_ops(int* out) {
  const unsigned t = threadIdx.x, lane = t & 31;
  int* o = out + 16 * (blockIdx.x * blockDim.x + t);
  const unsigned all = __activemask();
  o[0] = __shfl_sync(all, int(t), 3);
  o[1] = __shfl_down_sync(all, int(t), 1);
  o[2] = __shfl_xor_sync(all, int(t), 5);
  o[3] = __shfl_xor_sync(all, int(t), 8, 8);  // a later segment: own value; earlier: read
  o[4] = __shfl_sync(all, int(t), lane + 1, 4);
  o[5] = int(__ballot_sync(all, lane & 1));
  o[6] = __any_sync(all, lane == 7);
  o[7] = __all_sync(all, lane < 40);
  o[8] = int(__match_any_sync(all, lane / 4));
  o[9] = int(__reduce_add_sync(all, lane));
  o[10] = __syncthreads_count(t % 3 == 0);
  o[11] = int(all);
  // A shuffle among the lower half-warp only, while the upper half goes on to a barrier.
  int v = int(t);
  if (lane < 16) v = __shfl_sync(0x0000ffffu, v, 15);
  __syncthreads();
  o[12] = v;
  const double d = __shfl_xor_sync(all, 0.5 + t, 1);
  o[13] = int(d * 2);
  o[14] = int(__reduce_max_sync(all, int(lane) - 10));
  int pred;
  o[15] = int(__match_all_sync(all, 7, &pred)) ^ pred;
}
GS_EXPORT(gs_selftest_warp_ops)

// Reverses each block's chunk through dynamic shared memory: n floats, then n doubles.
extern "C" __global__ void gs_selftest_reverse(const float* x, float* y) {
  GS_DYNAMIC_SHARED(unsigned char, smem);
  const unsigned n = blockDim.x, t = threadIdx.x;
  float* f = reinterpret_cast<float*>(smem);
  double* d = reinterpret_cast<double*>(smem + ((n * sizeof(float) + 15) & ~size_t(15)));
  const size_t i = (size_t)blockIdx.x * n + t;
  f[t] = x[i];
  d[t] = 2.0 * x[i];
  __syncthreads();
  y[i] = f[n - 1 - t] + float(d[n - 1 - t]);
}
GS_EXPORT(gs_selftest_reverse)

extern "C" __global__ void gs_selftest_histogram(const int* x, int n, unsigned* bins,
                                                 float* total, int* largest) {
  GS_GRID_STRIDE(i, (size_t)n) {
    atomicAdd(&bins[x[i] & 15], 1u);
    atomicAdd(total, float(x[i]));
    atomicMax(largest, x[i]);
  }
}
GS_EXPORT(gs_selftest_histogram)

extern "C" __global__ void gs_selftest_half_roundtrip(const float* x, unsigned short* h,
                                                      unsigned short* b, float* hf, float* bf,
                                                      int n) {
  GS_GRID_STRIDE(i, (size_t)n) {
    const __half hv = gs::from_float<__half>(x[i]);
    const __nv_bfloat16 bv = gs::from_float<__nv_bfloat16>(x[i]);
    h[i] = __half_as_ushort(hv);
    b[i] = __bfloat16_as_ushort(bv);
    hf[i] = gs::to_float(hv);
    bf[i] = gs::to_float(bv);
  }
}
GS_EXPORT(gs_selftest_half_roundtrip)

// CUDA's math functions that the host library lacks; 16 results per element.
extern "C" __global__ void gs_selftest_math(const float* x, float* out, int n) {
  GS_GRID_STRIDE(i, (size_t)n) {
    const float v = x[i], a = fabsf(v);
    float* o = out + 16 * i;
    o[0] = __expf(v);
    o[1] = __logf(a + 1.0f);
    o[2] = __fdividef(v, 3.0f) + fdividef(v, 7.0f);
    o[3] = rsqrtf(a + 1.0f);
    o[4] = float(rsqrt(double(a) + 1.0));
    o[5] = __frcp_rn(v + 10.0f);
    o[6] = __saturatef(v);
    o[7] = normcdff(v);
    o[8] = erfcinvf((v + 5.0f) * 0.2f);  // [0, 2]
    o[9] = erfinvf(v * 0.2f);             // [-1, 1]
    o[10] = erfcinvf(exp2f(-25.0f * a));  // down to erfcinvf(2^-125)
    o[11] = normcdfinvf((v + 5.0f) * 0.1f);
    o[12] = float(__int_as_float(__float_as_int(v)) == v &&
                  __uint_as_float(__float_as_uint(v)) == v &&
                  __longlong_as_double(__double_as_longlong(double(v))) == double(v));
    o[13] = float(__popc(__float_as_uint(v)) + 100 * __clz(__float_as_int(a)) +
                  10000 * __ffs(__float_as_int(v)));
    o[14] = min(v, 0.5f) + max(v, -0.5f) + float(min(3, int(v)) + max(2u, unsigned(a)));
    o[15] = float(__float2int_rn(v * 1e9f)) + float(__float2int_rn(v * 1000.0f + 0.5f));
  }
}
GS_EXPORT(gs_selftest_math)

// y[i] = the value of the neighbour `dir` places along within the block, through shared
// memory. The racy one lacks the __syncthreads() between the write and the read.
extern "C" __global__ void gs_selftest_shift(const float* x, float* y, int dir) {
  __shared__ float s[1024];
  const unsigned t = threadIdx.x, n = blockDim.x;
  const size_t i = (size_t)blockIdx.x * n + t;
  s[t] = x[i];
  __syncthreads();
  y[i] = s[(t + n + dir) % n];
}
GS_EXPORT(gs_selftest_shift)
extern "C" __global__ void gs_selftest_shift_racy(const float* x, float* y, int dir) {
  __shared__ float s[1024];
  const unsigned t = threadIdx.x, n = blockDim.x;
  const size_t i = (size_t)blockIdx.x * n + t;
  s[t] = x[i];
  y[i] = s[(t + n + dir) % n];
}
GS_EXPORT(gs_selftest_shift_racy)

// Threads exit before a __syncthreads() the others wait in: undefined on a GPU.
extern "C" __global__ void gs_selftest_deadlock(int* out) {
  if (threadIdx.x >= 16) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}
GS_EXPORT(gs_selftest_deadlock)

// Half a warp waits in a full-warp shuffle while the other half waits in __syncthreads().
extern "C" __global__ void gs_selftest_warp_deadlock(int* out) {
  int v = threadIdx.x;
  if (threadIdx.x < 16) v = __shfl_sync(0xffffffffu, v, 0);
  __syncthreads();
  out[threadIdx.x] = v;
}
GS_EXPORT(gs_selftest_warp_deadlock)

// Traps in one thread of block 1 while the others of its block wait in a barrier.
extern "C" __global__ void gs_selftest_trap(int* out) {
  __syncthreads();
  if (blockIdx.x == 1 && threadIdx.x == 5) __trap();
  __syncthreads();
  out[blockIdx.x * blockDim.x + threadIdx.x] = 1;
}
GS_EXPORT(gs_selftest_trap)

// Every thread of a 3-D launch records its indices and its warp's first linear thread id.
extern "C" __global__ void gs_selftest_index(unsigned* out) {
  const unsigned linear = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned block = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned nthreads = blockDim.x * blockDim.y * blockDim.z;
  unsigned* o = out + 8 * ((size_t)block * nthreads + linear);
  o[0] = threadIdx.x;
  o[1] = threadIdx.y;
  o[2] = threadIdx.z;
  o[3] = blockIdx.x;
  o[4] = blockIdx.y;
  o[5] = blockIdx.z;
  o[6] = __shfl_sync(__activemask(), linear, 0);
  o[7] = __syncthreads_count(1);
}
GS_EXPORT(gs_selftest_index)

// 2 * iters barriers per thread, for timing; out[i] checks the exchange through shared memory.
extern "C" __global__ void gs_selftest_sync_loop(int iters, float* out) {
  __shared__ float s[1024];
  const unsigned t = threadIdx.x, n = blockDim.x;
  float acc = 0;
  for (int k = 0; k < iters; ++k) {
    s[t] = acc + float(t);
    __syncthreads();
    acc = s[(t + 1) % n];
    __syncthreads();
  }
  out[(size_t)blockIdx.x * n + t] = acc;
}
GS_EXPORT(gs_selftest_sync_loop)

// Lanes of one warp in __syncwarp with masks that overlap but differ: undefined on a GPU.
// With lane_31_exits, the mismatch comes to light when lane 31 exits.
extern "C" __global__ void gs_selftest_mask_mismatch(int* out, int lane_31_exits) {
  if (lane_31_exits && threadIdx.x == 31) return;
  __syncwarp(threadIdx.x == 0 ? 0x3u : 0xffffffffu);
  out[threadIdx.x] = 1;
}
GS_EXPORT(gs_selftest_mask_mismatch)
