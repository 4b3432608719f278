// Convolution's data movement around cuBLAS (backend/cuda/conv.rs does the products with
// candle's matmul): im2col, its adjoint col2im, and the swap of a chunk's image and channel
// dims between NCHW tensors and the (channel, image, position) layout of a GEMM over the
// chunk. backend/cpu/conv.rs is the reference.
//
// Columns of a chunk of `nc` images are a (c_in kh kw) x (nc oh ow) matrix: row
// (c, ki, kj), column (image, oy, ox) holds x[image, c, oy sh - ph + ki dh, ox sw - pw + kj dw]
// (0 in the padding). A group's K = c_in/groups kh kw rows are contiguous, so the rows of
// all groups form one batched GEMM.
//
// col2im is a gather: each input element sums the column entries that read it, so it needs
// no atomics and its result does not depend on the schedule.

#include "gs_cuda.cuh"

namespace {

// The geometry the kernels share, from the parameters GS_CONV_PARAMS names.
struct Geometry {
  long long nc, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow;
};

#define GS_CONV_PARAMS                                                                    \
  long long nc, long long c, long long h, long long w, long long kh, long long kw,        \
      long long sh, long long sw, long long ph, long long pw, long long dh, long long dw, \
      long long oh, long long ow
#define GS_CONV_GEOMETRY Geometry{nc, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw, oh, ow}

// One thread per column entry: writes run along the columns, so they coalesce (and so do
// the reads, for a stride of 1).
template <class T>
__device__ void im2col(const T* x, T* cols, Geometry g) {
  const long long l = g.oh * g.ow, row = g.nc * l;
  const long long total = g.c * g.kh * g.kw * row;
  GS_GRID_STRIDE(idx, (size_t)total) {
    const long long r = idx / row, j = idx % row;
    const long long img = j / l, p = j % l;
    const long long kj = r % g.kw, ki = (r / g.kw) % g.kh, ch = r / (g.kw * g.kh);
    const long long iy = (p / g.ow) * g.sh - g.ph + ki * g.dh;
    const long long ix = (p % g.ow) * g.sw - g.pw + kj * g.dw;
    T v = T(0);
    if (iy >= 0 && iy < g.h && ix >= 0 && ix < g.w) v = x[((img * g.c + ch) * g.h + iy) * g.w + ix];
    cols[idx] = v;
  }
}

// One thread per input element of the chunk: the sum, over the kernel positions (ki, kj)
// ascending, of the column entry at the output position that reads it through (ki, kj).
template <class T>
__device__ void col2im(const T* cols, T* x, Geometry g) {
  using A = typename gs::Acc<T>::type;
  const long long l = g.oh * g.ow, row = g.nc * l;
  const long long total = g.nc * g.c * g.h * g.w;
  GS_GRID_STRIDE(idx, (size_t)total) {
    const long long ix = idx % g.w, iy = (idx / g.w) % g.h;
    const long long ch = (idx / (g.w * g.h)) % g.c, img = idx / (g.w * g.h * g.c);
    A acc = A(0);
    for (long long ki = 0; ki < g.kh; ++ki) {
      const long long ty = iy + g.ph - ki * g.dh;
      if (ty < 0) break;  // ty falls as ki grows
      if (ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
      const long long oy = ty / g.sh;
      for (long long kj = 0; kj < g.kw; ++kj) {
        const long long tx = ix + g.pw - kj * g.dw;
        if (tx < 0) break;
        if (tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
        const long long r = (ch * g.kh + ki) * g.kw + kj;
        acc += gs::to_acc(cols[r * row + img * l + oy * g.ow + tx / g.sw]);
      }
    }
    x[idx] = gs::from_acc<T>(acc);
  }
}

// dst (b, a, l) = src (a, b, l) with its middle dims swapped, plus bias[ai] when given:
// the GEMM's (c_out, nc, l) into a chunk of images (nc, c_out, l), and back for gradients.
template <class T>
__device__ void swap_outer(const T* src, T* dst, long long a, long long b, long long l,
                           const T* bias) {
  const long long total = a * b * l;
  GS_GRID_STRIDE(idx, (size_t)total) {
    const long long p = idx % l, ai = (idx / l) % a, bi = idx / (l * a);
    T v = src[(ai * b + bi) * l + p];
    if (bias != nullptr) v += bias[ai];
    dst[idx] = v;
  }
}

}  // namespace

#define GS_CONV(T, suffix)                                                                  \
  extern "C" __global__ void gs_im2col_##suffix(const T* x, T* cols, GS_CONV_PARAMS) {     \
    im2col<T>(x, cols, GS_CONV_GEOMETRY);                                                   \
  }                                                                                         \
  GS_EXPORT(gs_im2col_##suffix)                                                             \
  extern "C" __global__ void gs_col2im_##suffix(const T* cols, T* x, GS_CONV_PARAMS) {     \
    col2im<T>(cols, x, GS_CONV_GEOMETRY);                                                   \
  }                                                                                         \
  GS_EXPORT(gs_col2im_##suffix)                                                             \
  extern "C" __global__ void gs_swap_outer_##suffix(const T* src, T* dst, long long a,     \
                                                    long long b, long long l,               \
                                                    const T* bias) {                        \
    swap_outer<T>(src, dst, a, b, l, bias);                                                 \
  }                                                                                         \
  GS_EXPORT(gs_swap_outer_##suffix)

GS_CONV(float, f32)
GS_CONV(double, f64)
