// CPU emulation of the CUDA execution model, so that gradstream's .cu kernel sources can be
// compiled by a host C++17 compiler (with GS_EMULATE defined) and run in tests without a GPU.
//
// Kernel files do not include this header directly: they include gs_cuda.cuh, which picks
// this header or the real CUDA headers. The C API at the top is what the Rust side calls.
//
// Model: a launch runs its blocks one after another on the calling OS thread. Every CUDA
// thread of a block is a fiber that runs until it finishes or waits in a barrier
// (__syncthreads, or a warp operation such as __syncwarp, a shuffle or a vote). See
// emulator.cpp for the scheduling rules.
//
// What differs from a GPU, for kernel authors:
// - Threads switch only inside barriers and warp operations. Code that waits for another
//   thread or block by spinning on memory (spin locks held across a barrier, inter-block
//   flags, grid-wide sync) hangs. Atomics are plain read-modify-writes.
// - __syncthreads() must be reached by every thread of the block: one that returned early
//   makes the launch fail with "deadlock: ...". Warp operations wait for the unfinished
//   lanes of their mask, which must all be in the same operation with the same mask.
// - __activemask() returns the unfinished lanes of the warp, not those that took the same
//   branch. Shuffling from a lane that exited or is outside the mask returns all-ones bits
//   (NaN for floats, -1 for integers).
// - __shared__ is `static`: use GS_DYNAMIC_SHARED, not `extern __shared__`. Static shared
//   arrays keep the previous block's contents; dynamic shared memory is filled with 0xff at
//   every block start.
// - Fast-math intrinsics (__expf, __logf, __sinf...) are the accurate libm functions, so
//   results are closer to the true values than a GPU's; float->int casts in plain C++ are
//   undefined out of range, where the GPU saturates (the __float2int_* intrinsics saturate).
// - Each thread has a 64 KiB stack (a guard page below): big local arrays overflow it.
// - __CUDA_ARCH__ is not defined; test GS_EMULATE instead. No inline PTX, textures,
//   cooperative groups, __constant__ written from the host, or dynamic parallelism.
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

// Launches kernel `name` (exported with GS_EXPORT) on a gx*gy*gz grid of bx*by*bz blocks
// with `shared_bytes` of dynamic shared memory. `params` is laid out like cuLaunchKernel's
// kernelParams: one pointer per kernel argument, pointing at the argument's value.
// Returns 0 on success; otherwise non-zero and gs_emu_last_error() says why.
int gs_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                  unsigned by, unsigned bz, unsigned shared_bytes, void** params);

// The message of the calling OS thread's last failed launch ("" if none).
const char* gs_emu_last_error(void);

// 1 if a kernel of that name is registered, else 0.
int gs_emu_kernel_exists(const char* name);

#ifdef __cplusplus
}
#endif

#ifdef __cplusplus

#if defined(__CUDACC__)
#error "emulator.h is for host compilers; nvcc uses the real CUDA headers (see gs_cuda.cuh)"
#endif

#include <math.h>

#include <climits>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <utility>

// ---------------------------------------------------------------------------------------
// Qualifiers. Included standard headers come first: macros must not rewrite them.

#define __global__
#define __device__
#define __host__
#define __constant__
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
// One static object per declaration is right because the blocks of a launch run one after
// another on one OS thread. Contents survive from block to block (on a GPU they are
// undefined), so a kernel must not rely on them.
#define __shared__ static
// __restrict__ is a g++ keyword already. __noinline__ is deliberately not defined: libstdc++
// spells attributes as __attribute__((__noinline__)).

// ---------------------------------------------------------------------------------------
// Vector types and built-in variables.

#define GS_EMU_VEC2(T, name, al)                                                      \
  struct __attribute__((aligned(al))) name {                                         \
    T x, y;                                                                          \
  };                                                                                 \
  inline name make_##name(T x, T y) { return name{x, y}; }
#define GS_EMU_VEC3(T, name)                                                         \
  struct name {                                                                      \
    T x, y, z;                                                                       \
  };                                                                                 \
  inline name make_##name(T x, T y, T z) { return name{x, y, z}; }
#define GS_EMU_VEC4(T, name, al)                                                      \
  struct __attribute__((aligned(al))) name {                                         \
    T x, y, z, w;                                                                    \
  };                                                                                 \
  inline name make_##name(T x, T y, T z, T w) { return name{x, y, z, w}; }

GS_EMU_VEC2(signed char, char2, 2)
GS_EMU_VEC4(signed char, char4, 4)
GS_EMU_VEC2(unsigned char, uchar2, 2)
GS_EMU_VEC4(unsigned char, uchar4, 4)
GS_EMU_VEC2(short, short2, 4)
GS_EMU_VEC4(short, short4, 8)
GS_EMU_VEC2(unsigned short, ushort2, 4)
GS_EMU_VEC4(unsigned short, ushort4, 8)
GS_EMU_VEC2(int, int2, 8)
GS_EMU_VEC3(int, int3)
GS_EMU_VEC4(int, int4, 16)
GS_EMU_VEC2(unsigned, uint2, 8)
GS_EMU_VEC3(unsigned, uint3)
GS_EMU_VEC4(unsigned, uint4, 16)
GS_EMU_VEC2(long long, longlong2, 16)
GS_EMU_VEC2(unsigned long long, ulonglong2, 16)
GS_EMU_VEC2(float, float2, 8)
GS_EMU_VEC3(float, float3)
GS_EMU_VEC4(float, float4, 16)
GS_EMU_VEC2(double, double2, 16)

#undef GS_EMU_VEC2
#undef GS_EMU_VEC3
#undef GS_EMU_VEC4

struct dim3 {
  unsigned x, y, z;
  constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
  constexpr operator uint3() const { return uint3{x, y, z}; }
};

namespace gs_emu {

// What the built-in variables read. Written by the scheduler before it runs a thread.
struct Builtins {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned char* dynamic_shared;
};
extern Builtins g_builtins;
inline const Builtins& builtins() { return g_builtins; }

// Raised by __trap() and by misuse of warp operations; gs_emu_launch reports it as an error.
struct KernelError : std::runtime_error {
  using std::runtime_error::runtime_error;
};
[[noreturn]] void trap(const char* what);

enum class WarpOp : unsigned char {
  Sync, ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, MatchAny, MatchAll,
  RedAdd, RedMinU, RedMaxU, RedMinS, RedMaxS, RedAnd, RedOr, RedXor,
};

// Posts this lane's part of a warp operation, waits until every unfinished lane named in
// `mask` has posted the same operation, and returns this lane's result. `value` holds the
// operand's bytes (zero-extended); `arg` is the shuffle's lane/delta/lane mask.
std::uint64_t warp_op(WarpOp op, unsigned mask, std::uint64_t value, int arg = 0,
                      int width = 32);
// __syncthreads with a predicate; returns how many threads of the block passed pred != 0.
int block_barrier(int pred);
// Lanes of the calling thread's warp that have not finished.
unsigned live_lanes();

template <class T>
inline std::uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value,
                "warp operations take values of at most 8 bytes");
  std::uint64_t b = 0;
  std::memcpy(&b, &v, sizeof(T));
  return b;
}
template <class T>
inline T from_bits(std::uint64_t b) {
  T v;
  std::memcpy(&v, &b, sizeof(T));
  return v;
}

// Kernel registration: GS_EXPORT(name) in gs_cuda.cuh builds a Registrar whose entry
// unpacks cuLaunchKernel-style params into a typed call of the kernel.
using Entry = void (*)(void** params);
struct Registrar {
  Registrar(const char* name, Entry entry);
};
template <class... A, std::size_t... I>
inline void call_unpacked(void (*f)(A...), [[maybe_unused]] void** p, std::index_sequence<I...>) {
  f(*static_cast<A*>(p[I])...);
}
template <class... A>
inline void call_kernel(void (*f)(A...), void** p) {
  call_unpacked(f, p, std::index_sequence_for<A...>{});
}
template <auto F>
void trampoline(void** p) {
  call_kernel(F, p);
}

}  // namespace gs_emu

#define GS_EMU_REGISTER(name)                                                        \
  static const ::gs_emu::Registrar gs_emu_registrar_##name(#name,                    \
                                                            &::gs_emu::trampoline<&name>);

#define threadIdx (::gs_emu::builtins().thread_idx)
#define blockIdx (::gs_emu::builtins().block_idx)
#define blockDim (::gs_emu::builtins().block_dim)
#define gridDim (::gs_emu::builtins().grid_dim)
constexpr int warpSize = 32;

// ---------------------------------------------------------------------------------------
// Barriers, warp operations, fences.

// The asm statements stop the compiler from moving shared-memory accesses across a
// barrier; the opaque call would too, but only as long as the barrier is not inlined.
#define GS_EMU_FENCE() asm volatile("" ::: "memory")

inline void __syncthreads() {
  GS_EMU_FENCE();
  gs_emu::block_barrier(0);
  GS_EMU_FENCE();
}
inline int __syncthreads_count(int pred) {
  GS_EMU_FENCE();
  int n = gs_emu::block_barrier(pred);
  GS_EMU_FENCE();
  return n;
}
inline int __syncthreads_and(int pred) {
  GS_EMU_FENCE();
  int n = gs_emu::block_barrier(pred);
  GS_EMU_FENCE();
  return n == static_cast<int>(blockDim.x * blockDim.y * blockDim.z);
}
inline int __syncthreads_or(int pred) {
  GS_EMU_FENCE();
  int n = gs_emu::block_barrier(pred);
  GS_EMU_FENCE();
  return n != 0;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  GS_EMU_FENCE();
  gs_emu::warp_op(gs_emu::WarpOp::Sync, mask, 0);
  GS_EMU_FENCE();
}
inline void __threadfence() { GS_EMU_FENCE(); }
inline void __threadfence_block() { GS_EMU_FENCE(); }
inline void __threadfence_system() { GS_EMU_FENCE(); }
// The emulator cannot know which lanes took the same branch: it answers the unfinished ones.
inline unsigned __activemask() { return gs_emu::live_lanes(); }

template <class T>
inline T __shfl_sync(unsigned mask, T var, int src_lane, int width = warpSize) {
  return gs_emu::from_bits<T>(
      gs_emu::warp_op(gs_emu::WarpOp::ShflIdx, mask, gs_emu::to_bits(var), src_lane, width));
}
template <class T>
inline T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gs_emu::from_bits<T>(gs_emu::warp_op(gs_emu::WarpOp::ShflUp, mask,
                                              gs_emu::to_bits(var), int(delta), width));
}
template <class T>
inline T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = warpSize) {
  return gs_emu::from_bits<T>(gs_emu::warp_op(gs_emu::WarpOp::ShflDown, mask,
                                              gs_emu::to_bits(var), int(delta), width));
}
template <class T>
inline T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = warpSize) {
  return gs_emu::from_bits<T>(
      gs_emu::warp_op(gs_emu::WarpOp::ShflXor, mask, gs_emu::to_bits(var), lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
  return unsigned(gs_emu::warp_op(gs_emu::WarpOp::Ballot, mask, pred != 0));
}
inline int __any_sync(unsigned mask, int pred) {
  return int(gs_emu::warp_op(gs_emu::WarpOp::Any, mask, pred != 0));
}
inline int __all_sync(unsigned mask, int pred) {
  return int(gs_emu::warp_op(gs_emu::WarpOp::All, mask, pred != 0));
}
template <class T>
inline unsigned __match_any_sync(unsigned mask, T value) {
  return unsigned(gs_emu::warp_op(gs_emu::WarpOp::MatchAny, mask, gs_emu::to_bits(value)));
}
template <class T>
inline unsigned __match_all_sync(unsigned mask, T value, int* pred) {
  unsigned m = unsigned(gs_emu::warp_op(gs_emu::WarpOp::MatchAll, mask, gs_emu::to_bits(value)));
  *pred = m != 0;
  return m;
}
#define GS_EMU_REDUCE(name, op, T)                                                   \
  inline T name(unsigned mask, T value) {                                            \
    return T(gs_emu::warp_op(gs_emu::WarpOp::op, mask, unsigned(value)));            \
  }
GS_EMU_REDUCE(__reduce_add_sync, RedAdd, unsigned)
GS_EMU_REDUCE(__reduce_add_sync, RedAdd, int)
GS_EMU_REDUCE(__reduce_min_sync, RedMinU, unsigned)
GS_EMU_REDUCE(__reduce_min_sync, RedMinS, int)
GS_EMU_REDUCE(__reduce_max_sync, RedMaxU, unsigned)
GS_EMU_REDUCE(__reduce_max_sync, RedMaxS, int)
GS_EMU_REDUCE(__reduce_and_sync, RedAnd, unsigned)
GS_EMU_REDUCE(__reduce_or_sync, RedOr, unsigned)
GS_EMU_REDUCE(__reduce_xor_sync, RedXor, unsigned)
#undef GS_EMU_REDUCE

[[noreturn]] inline void __trap() { gs_emu::trap("__trap() called"); }
[[noreturn]] inline void __brkpt() { gs_emu::trap("__brkpt() called"); }
inline void __nanosleep(unsigned) {}
long long clock64();

template <class T>
inline T __ldg(const T* p) {
  return *p;
}

// ---------------------------------------------------------------------------------------
// Atomics. Threads switch only inside barriers, so a plain read-modify-write is atomic.

#define GS_EMU_ATOMIC(name, T, expr)                                                 \
  inline T name(T* address, T val) {                                                 \
    T old = *address;                                                                \
    *address = (expr);                                                               \
    return old;                                                                      \
  }
GS_EMU_ATOMIC(atomicAdd, int, int(unsigned(old) + unsigned(val)))
GS_EMU_ATOMIC(atomicAdd, unsigned, old + val)
GS_EMU_ATOMIC(atomicAdd, unsigned long long, old + val)
GS_EMU_ATOMIC(atomicAdd, float, old + val)
GS_EMU_ATOMIC(atomicAdd, double, old + val)
GS_EMU_ATOMIC(atomicSub, int, int(unsigned(old) - unsigned(val)))
GS_EMU_ATOMIC(atomicSub, unsigned, old - val)
GS_EMU_ATOMIC(atomicExch, int, val)
GS_EMU_ATOMIC(atomicExch, unsigned, val)
GS_EMU_ATOMIC(atomicExch, unsigned long long, val)
GS_EMU_ATOMIC(atomicExch, float, val)
GS_EMU_ATOMIC(atomicMax, int, old < val ? val : old)
GS_EMU_ATOMIC(atomicMax, unsigned, old < val ? val : old)
GS_EMU_ATOMIC(atomicMax, long long, old < val ? val : old)
GS_EMU_ATOMIC(atomicMax, unsigned long long, old < val ? val : old)
GS_EMU_ATOMIC(atomicMin, int, val < old ? val : old)
GS_EMU_ATOMIC(atomicMin, unsigned, val < old ? val : old)
GS_EMU_ATOMIC(atomicMin, long long, val < old ? val : old)
GS_EMU_ATOMIC(atomicMin, unsigned long long, val < old ? val : old)
GS_EMU_ATOMIC(atomicAnd, int, old & val)
GS_EMU_ATOMIC(atomicAnd, unsigned, old & val)
GS_EMU_ATOMIC(atomicAnd, unsigned long long, old & val)
GS_EMU_ATOMIC(atomicOr, int, old | val)
GS_EMU_ATOMIC(atomicOr, unsigned, old | val)
GS_EMU_ATOMIC(atomicOr, unsigned long long, old | val)
GS_EMU_ATOMIC(atomicXor, int, old ^ val)
GS_EMU_ATOMIC(atomicXor, unsigned, old ^ val)
GS_EMU_ATOMIC(atomicXor, unsigned long long, old ^ val)
GS_EMU_ATOMIC(atomicInc, unsigned, old >= val ? 0u : old + 1)
GS_EMU_ATOMIC(atomicDec, unsigned, (old == 0 || old > val) ? val : old - 1)
#undef GS_EMU_ATOMIC

#define GS_EMU_ATOMIC_CAS(T)                                                         \
  inline T atomicCAS(T* address, T compare, T val) {                                 \
    T old = *address;                                                                \
    if (old == compare) *address = val;                                              \
    return old;                                                                      \
  }
GS_EMU_ATOMIC_CAS(int)
GS_EMU_ATOMIC_CAS(unsigned)
GS_EMU_ATOMIC_CAS(unsigned long long)
GS_EMU_ATOMIC_CAS(unsigned short)
#undef GS_EMU_ATOMIC_CAS

// ---------------------------------------------------------------------------------------
// Math. <cmath>'s float overloads (exp(float)...) and isnan & co. in the global namespace,
// as CUDA has them there.

using std::fpclassify;
using std::isfinite;
using std::isinf;
using std::isnan;
using std::isnormal;
using std::signbit;

inline float __int_as_float(int i) { return gs_emu::from_bits<float>(std::uint32_t(i)); }
inline int __float_as_int(float f) { return int(std::uint32_t(gs_emu::to_bits(f))); }
inline float __uint_as_float(unsigned u) { return gs_emu::from_bits<float>(u); }
inline unsigned __float_as_uint(float f) { return unsigned(gs_emu::to_bits(f)); }
inline double __longlong_as_double(long long i) {
  return gs_emu::from_bits<double>(std::uint64_t(i));
}
inline long long __double_as_longlong(double d) { return (long long)gs_emu::to_bits(d); }

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
inline int __ffsll(long long x) { return __builtin_ffsll(x); }
inline unsigned __brev(unsigned x) {
  x = ((x >> 1) & 0x55555555u) | ((x & 0x55555555u) << 1);
  x = ((x >> 2) & 0x33333333u) | ((x & 0x33333333u) << 2);
  x = ((x >> 4) & 0x0f0f0f0fu) | ((x & 0x0f0f0f0fu) << 4);
  return __builtin_bswap32(x);
}
inline unsigned long long __brevll(unsigned long long x) {
  return ((unsigned long long)__brev(unsigned(x)) << 32) | __brev(unsigned(x >> 32));
}
inline int __mulhi(int a, int b) { return int(((long long)a * b) >> 32); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return unsigned(((unsigned long long)a * b) >> 32);
}
namespace gs_emu {
__extension__ using int128 = __int128;
__extension__ using uint128 = unsigned __int128;
}  // namespace gs_emu
inline long long __mul64hi(long long a, long long b) {
  return (long long)((gs_emu::int128(a) * b) >> 64);
}
inline unsigned long long __umul64hi(unsigned long long a, unsigned long long b) {
  return (unsigned long long)((gs_emu::uint128(a) * b) >> 64);
}

// CUDA's min/max: overloads in the global namespace, float ones with fminf/fmaxf's NaN rule.
#define GS_EMU_MINMAX(R, A, B)                                                       \
  inline R min(A a, B b) {                                                           \
    return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(a) : static_cast<R>(b); \
  }                                                                                  \
  inline R max(A a, B b) {                                                           \
    return static_cast<R>(a) < static_cast<R>(b) ? static_cast<R>(b) : static_cast<R>(a); \
  }
GS_EMU_MINMAX(int, int, int)
GS_EMU_MINMAX(unsigned, unsigned, unsigned)
GS_EMU_MINMAX(unsigned, int, unsigned)
GS_EMU_MINMAX(unsigned, unsigned, int)
GS_EMU_MINMAX(long, long, long)
GS_EMU_MINMAX(unsigned long, unsigned long, unsigned long)
GS_EMU_MINMAX(unsigned long, long, unsigned long)
GS_EMU_MINMAX(unsigned long, unsigned long, long)
GS_EMU_MINMAX(long long, long long, long long)
GS_EMU_MINMAX(unsigned long long, unsigned long long, unsigned long long)
GS_EMU_MINMAX(unsigned long long, long long, unsigned long long)
GS_EMU_MINMAX(unsigned long long, unsigned long long, long long)
#undef GS_EMU_MINMAX
inline float min(float a, float b) { return std::fmin(a, b); }
inline float max(float a, float b) { return std::fmax(a, b); }
inline double min(double a, double b) { return std::fmin(a, b); }
inline double max(double a, double b) { return std::fmax(a, b); }
inline double min(float a, double b) { return std::fmin(double(a), b); }
inline double max(float a, double b) { return std::fmax(double(a), b); }
inline double min(double a, float b) { return std::fmin(a, double(b)); }
inline double max(double a, float b) { return std::fmax(a, double(b)); }

inline float __fdividef(float a, float b) { return a / b; }
inline float fdividef(float a, float b) { return a / b; }
inline float __frcp_rn(float x) { return 1.0f / x; }
inline float __saturatef(float x) { return x >= 1.0f ? 1.0f : (x > 0.0f ? x : 0.0f); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }
inline float __fsqrt_rn(float x) { return std::sqrt(x); }
inline float __frsqrt_rn(float x) { return 1.0f / std::sqrt(x); }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __fma_rn(double a, double b, double c) { return std::fma(a, b, c); }

// Conversions saturate and send NaN to 0, as the GPU's cvt instructions do (a C++ cast
// out of range is undefined).
namespace gs_emu {
template <class I, class F>
inline I saturate_to(F r) {
  if (std::isnan(r)) return 0;
  if (r <= F(std::numeric_limits<I>::min())) return std::numeric_limits<I>::min();
  if (r >= F(std::numeric_limits<I>::max())) return std::numeric_limits<I>::max();
  return I(r);
}
}  // namespace gs_emu
inline int __float2int_rn(float x) { return gs_emu::saturate_to<int>(std::nearbyint(x)); }
inline int __float2int_rz(float x) { return gs_emu::saturate_to<int>(std::trunc(x)); }
inline int __float2int_rd(float x) { return gs_emu::saturate_to<int>(std::floor(x)); }
inline int __float2int_ru(float x) { return gs_emu::saturate_to<int>(std::ceil(x)); }
inline unsigned __float2uint_rn(float x) {
  return gs_emu::saturate_to<unsigned>(std::nearbyint(x));
}
inline unsigned __float2uint_rz(float x) { return gs_emu::saturate_to<unsigned>(std::trunc(x)); }
inline long long __float2ll_rn(float x) {
  return gs_emu::saturate_to<long long>(std::nearbyint(x));
}
inline long long __float2ll_rz(float x) { return gs_emu::saturate_to<long long>(std::trunc(x)); }
inline int __double2int_rn(double x) { return gs_emu::saturate_to<int>(std::nearbyint(x)); }
inline int __double2int_rz(double x) { return gs_emu::saturate_to<int>(std::trunc(x)); }
inline float __int2float_rn(int x) { return float(x); }
inline float __uint2float_rn(unsigned x) { return float(x); }
inline float __ll2float_rn(long long x) { return float(x); }
inline float __double2float_rn(double x) { return float(x); }

inline double normcdf(double x) { return 0.5 * std::erfc(-x * 0.70710678118654752440); }
inline float normcdff(float x) { return float(normcdf(double(x))); }
double erfinv(double y);
double erfcinv(double y);
inline float erfinvf(float y) { return float(erfinv(double(y))); }
inline float erfcinvf(float y) { return float(erfcinv(double(y))); }
inline double normcdfinv(double p) { return -1.41421356237309504880 * erfcinv(2.0 * p); }
inline float normcdfinvf(float p) { return float(normcdfinv(double(p))); }
inline float rcbrtf(float x) { return 1.0f / std::cbrt(x); }
inline double rcbrt(double x) { return 1.0 / std::cbrt(x); }

// glibc declares __expf & co. as aliases of its accurate functions, and C23 adds rsqrt,
// sinpi...: those names are mapped with macros so they cannot collide with libc.
namespace gs_emu::cuda_math {
inline float fast_expf(float x) { return std::exp(x); }
inline float fast_exp10f(float x) { return std::pow(10.0f, x); }
inline float fast_logf(float x) { return std::log(x); }
inline float fast_log2f(float x) { return std::log2(x); }
inline float fast_log10f(float x) { return std::log10(x); }
inline float fast_sinf(float x) { return std::sin(x); }
inline float fast_cosf(float x) { return std::cos(x); }
inline float fast_tanf(float x) { return std::tan(x); }
inline float fast_powf(float x, float y) { return std::pow(x, y); }
inline void fast_sincosf(float x, float* s, float* c) {
  *s = std::sin(x);
  *c = std::cos(x);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline double sinpi(double x) { return std::sin(3.14159265358979323846 * x); }
inline double cospi(double x) { return std::cos(3.14159265358979323846 * x); }
inline float sinpif(float x) { return float(sinpi(double(x))); }
inline float cospif(float x) { return float(cospi(double(x))); }
}  // namespace gs_emu::cuda_math
#define __expf ::gs_emu::cuda_math::fast_expf
#define __exp10f ::gs_emu::cuda_math::fast_exp10f
#define __logf ::gs_emu::cuda_math::fast_logf
#define __log2f ::gs_emu::cuda_math::fast_log2f
#define __log10f ::gs_emu::cuda_math::fast_log10f
#define __sinf ::gs_emu::cuda_math::fast_sinf
#define __cosf ::gs_emu::cuda_math::fast_cosf
#define __tanf ::gs_emu::cuda_math::fast_tanf
#define __powf ::gs_emu::cuda_math::fast_powf
#define __sincosf ::gs_emu::cuda_math::fast_sincosf
#define rsqrtf ::gs_emu::cuda_math::rsqrtf
#define rsqrt ::gs_emu::cuda_math::rsqrt
#define sinpi ::gs_emu::cuda_math::sinpi
#define cospi ::gs_emu::cuda_math::cospi
#define sinpif ::gs_emu::cuda_math::sinpif
#define cospif ::gs_emu::cuda_math::cospif

// ---------------------------------------------------------------------------------------
// 16-bit floats: storage types with CUDA's conversions (round to nearest even; any NaN
// becomes the canonical 0x7fff, as cuda_fp16.hpp / cuda_bf16.hpp do).

namespace gs_emu {
inline unsigned short float_to_half_bits(float f) {
  const std::uint32_t u = __float_as_uint(f);
  const std::uint32_t sign = (u >> 16) & 0x8000u;
  const std::uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return 0x7fffu;
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity
  std::uint32_t r, rem, halfway;
  if (a >= 0x38800000u) {  // normal half: rebias the exponent, keep 10 mantissa bits
    const std::uint32_t m = a - 0x38000000u;
    r = m >> 13;
    rem = m & 0x1fffu;
    halfway = 0x1000u;
  } else {  // subnormal half (or zero): count in units of 2^-24
    if (a < 0x33000000u) return sign;  // below 2^-25: rounds to zero (2^-25 itself ties to even)
    const std::uint32_t e = a >> 23;
    const std::uint32_t mant = (a & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // 14..24
    r = mant >> shift;
    rem = mant & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1u);
  }
  r += (rem > halfway || (rem == halfway && (r & 1u))) ? 1u : 0u;
  return static_cast<unsigned short>(sign | r);
}
inline float half_bits_to_float(unsigned short h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t e = (h >> 10) & 0x1fu;
  const std::uint32_t m = h & 0x3ffu;
  if (e == 0x1fu) return __uint_as_float(m ? 0x7fffffffu : (sign | 0x7f800000u));
  if (e == 0) {
    const float v = float(m) * 5.9604644775390625e-8f;  // m * 2^-24, exact
    return sign ? -v : v;
  }
  return __uint_as_float(sign | ((e + 112u) << 23) | (m << 13));
}
inline unsigned short float_to_bf16_bits(float f) {
  const std::uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fffu;
  return static_cast<unsigned short>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
inline float bf16_bits_to_float(unsigned short b) {
  return __uint_as_float(std::uint32_t(b) << 16);
}
// d as a float rounded to odd (toward zero, the last bit set if inexact): rounding that to
// a 16-bit float once more gives d rounded to nearest even directly, as the device's
// __double2half / __double2bfloat16 do (float keeps 2+ more bits than either).
inline float double_to_float_odd(double d) {
  float f = float(d);
  if (d != d || double(f) == d || std::isinf(f)) return f;
  if (std::fabs(double(f)) > std::fabs(d)) f = std::nextafter(f, 0.0f);
  std::uint32_t u = __float_as_uint(f);
  if (double(f) != d) u |= 1u;
  return __uint_as_float(u);
}
}  // namespace gs_emu

struct __half_raw {
  unsigned short x;
};
struct __nv_bfloat16_raw {
  unsigned short x;
};

struct __align__(2) __half {
  unsigned short __x;
  __half() = default;
  constexpr __half(__half_raw r) : __x(r.x) {}
  __half(float f) : __x(gs_emu::float_to_half_bits(f)) {}
  __half(double d) : __x(gs_emu::float_to_half_bits(float(d))) {}
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  __half(I i) : __x(gs_emu::float_to_half_bits(float(i))) {}
  operator float() const { return gs_emu::half_bits_to_float(__x); }
  operator __half_raw() const { return __half_raw{__x}; }
};
struct __align__(2) __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
  constexpr __nv_bfloat16(__nv_bfloat16_raw r) : __x(r.x) {}
  __nv_bfloat16(float f) : __x(gs_emu::float_to_bf16_bits(f)) {}
  __nv_bfloat16(double d) : __x(gs_emu::float_to_bf16_bits(float(d))) {}
  template <class I, std::enable_if_t<std::is_integral<I>::value, int> = 0>
  __nv_bfloat16(I i) : __x(gs_emu::float_to_bf16_bits(float(i))) {}
  operator float() const { return gs_emu::bf16_bits_to_float(__x); }
  operator __nv_bfloat16_raw() const { return __nv_bfloat16_raw{__x}; }
};
using half = __half;
using nv_bfloat16 = __nv_bfloat16;
struct __align__(4) __half2 {
  __half x, y;
};
struct __align__(4) __nv_bfloat162 {
  __nv_bfloat16 x, y;
};

inline float __half2float(__half h) { return gs_emu::half_bits_to_float(h.__x); }
inline __half __float2half(float f) { return __half_raw{gs_emu::float_to_half_bits(f)}; }
inline __half __float2half_rn(float f) { return __float2half(f); }
inline __half __double2half(double d) { return __float2half(gs_emu::double_to_float_odd(d)); }
inline unsigned short __half_as_ushort(__half h) { return h.__x; }
inline __half __ushort_as_half(unsigned short u) { return __half_raw{u}; }
inline short __half_as_short(__half h) { return short(h.__x); }
inline __half __short_as_half(short s) { return __half_raw{(unsigned short)s}; }
inline float __bfloat162float(__nv_bfloat16 b) { return gs_emu::bf16_bits_to_float(b.__x); }
inline __nv_bfloat16 __float2bfloat16(float f) {
  return __nv_bfloat16_raw{gs_emu::float_to_bf16_bits(f)};
}
inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __float2bfloat16(f); }
inline __nv_bfloat16 __double2bfloat16(double d) {
  return __float2bfloat16(gs_emu::double_to_float_odd(d));
}
inline unsigned short __bfloat16_as_ushort(__nv_bfloat16 b) { return b.__x; }
inline __nv_bfloat16 __ushort_as_bfloat16(unsigned short u) { return __nv_bfloat16_raw{u}; }
inline short __bfloat16_as_short(__nv_bfloat16 b) { return short(b.__x); }
inline __nv_bfloat16 __short_as_bfloat16(short s) { return __nv_bfloat16_raw{(unsigned short)s}; }

inline __half2 __halves2half2(__half a, __half b) { return __half2{a, b}; }
inline __half2 __floats2half2_rn(float a, float b) {
  return __half2{__float2half(a), __float2half(b)};
}
inline __half2 __float2half2_rn(float a) { return __floats2half2_rn(a, a); }
inline float2 __half22float2(__half2 h) { return float2{__half2float(h.x), __half2float(h.y)}; }
inline float __low2float(__half2 h) { return __half2float(h.x); }
inline float __high2float(__half2 h) { return __half2float(h.y); }
inline __nv_bfloat162 __halves2bfloat162(__nv_bfloat16 a, __nv_bfloat16 b) {
  return __nv_bfloat162{a, b};
}
inline __nv_bfloat162 __floats2bfloat162_rn(float a, float b) {
  return __nv_bfloat162{__float2bfloat16(a), __float2bfloat16(b)};
}
inline float2 __bfloat1622float2(__nv_bfloat162 h) {
  return float2{__bfloat162float(h.x), __bfloat162float(h.y)};
}
inline float __low2float(__nv_bfloat162 h) { return __bfloat162float(h.x); }
inline float __high2float(__nv_bfloat162 h) { return __bfloat162float(h.y); }

// Arithmetic in float, then one rounding: exact for + - * / since float's 24 bits are at
// least twice the 16-bit formats' precision plus two. (__hfma rounds to double first,
// which can differ from one rounding in rare halfway cases.)
#define GS_EMU_HALF_OPS(H, to_f, from_f)                                             \
  inline H operator+(H a, H b) { return from_f(to_f(a) + to_f(b)); }                 \
  inline H operator-(H a, H b) { return from_f(to_f(a) - to_f(b)); }                 \
  inline H operator*(H a, H b) { return from_f(to_f(a) * to_f(b)); }                 \
  inline H operator/(H a, H b) { return from_f(to_f(a) / to_f(b)); }                 \
  inline H operator-(H a) { return from_f(-to_f(a)); }                               \
  inline H operator+(H a) { return a; }                                              \
  inline H& operator+=(H& a, H b) { return a = a + b; }                              \
  inline H& operator-=(H& a, H b) { return a = a - b; }                              \
  inline H& operator*=(H& a, H b) { return a = a * b; }                              \
  inline H& operator/=(H& a, H b) { return a = a / b; }                              \
  inline bool operator==(H a, H b) { return to_f(a) == to_f(b); }                    \
  inline bool operator!=(H a, H b) { return to_f(a) != to_f(b); }                    \
  inline bool operator<(H a, H b) { return to_f(a) < to_f(b); }                      \
  inline bool operator<=(H a, H b) { return to_f(a) <= to_f(b); }                    \
  inline bool operator>(H a, H b) { return to_f(a) > to_f(b); }                      \
  inline bool operator>=(H a, H b) { return to_f(a) >= to_f(b); }                    \
  inline H __hadd(H a, H b) { return a + b; }                                        \
  inline H __hsub(H a, H b) { return a - b; }                                        \
  inline H __hmul(H a, H b) { return a * b; }                                        \
  inline H __hdiv(H a, H b) { return a / b; }                                        \
  inline H __hneg(H a) { return -a; }                                                \
  inline H __habs(H a) { return from_f(std::fabs(to_f(a))); }                        \
  inline H __hfma(H a, H b, H c) {                                                   \
    return from_f(float(std::fma(double(to_f(a)), double(to_f(b)), double(to_f(c))))); \
  }                                                                                  \
  inline H __hmax(H a, H b) { return from_f(std::fmax(to_f(a), to_f(b))); }          \
  inline H __hmin(H a, H b) { return from_f(std::fmin(to_f(a), to_f(b))); }          \
  inline bool __heq(H a, H b) { return a == b; }                                     \
  inline bool __hne(H a, H b) { return a != b; }                                     \
  inline bool __hlt(H a, H b) { return a < b; }                                      \
  inline bool __hle(H a, H b) { return a <= b; }                                     \
  inline bool __hgt(H a, H b) { return a > b; }                                      \
  inline bool __hge(H a, H b) { return a >= b; }                                     \
  inline bool __hisnan(H a) { return std::isnan(to_f(a)); }                          \
  inline int __hisinf(H a) { return std::isinf(to_f(a)) ? (to_f(a) < 0 ? -1 : 1) : 0; }
GS_EMU_HALF_OPS(__half, __half2float, __float2half)
GS_EMU_HALF_OPS(__nv_bfloat16, __bfloat162float, __float2bfloat16)
#undef GS_EMU_HALF_OPS

inline __half atomicAdd(__half* address, __half val) {
  __half old = *address;
  *address = old + val;
  return old;
}
inline __nv_bfloat16 atomicAdd(__nv_bfloat16* address, __nv_bfloat16 val) {
  __nv_bfloat16 old = *address;
  *address = old + val;
  return old;
}

#endif  // __cplusplus
