// Launches the kernels of emulator_selftest.cu through the C API with hand-packed params, as
// the Rust side will, and checks them against plain loops; then times a few launches.
//
// Build and run, from this directory:
//   g++ -std=c++17 -O2 -DGS_EMULATE -x c++ emulator_selftest.cu emulator.cpp emulator_test.cpp
//       -o /tmp/emulator_test && /tmp/emulator_test
// (`--quick` skips the timings.)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

// The C API, declared here as a foreign caller sees it.
extern "C" {
int gs_emu_launch(const char* name, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                  unsigned by, unsigned bz, unsigned shared_bytes, void** params);
const char* gs_emu_last_error(void);
int gs_emu_kernel_exists(const char* name);
}

namespace {

int failures = 0;

#define CHECK(cond, ...)                                                             \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      ++failures;                                                                    \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                      \
      std::fprintf(stderr, __VA_ARGS__);                                             \
      std::fputc('\n', stderr);                                                      \
    }                                                                                \
  } while (0)

bool launch(const char* name, unsigned gx, unsigned bx, void** params, unsigned smem = 0) {
  const int rc = gs_emu_launch(name, gx, 1, 1, bx, 1, 1, smem, params);
  CHECK(rc == 0, "%s failed: %s", name, gs_emu_last_error());
  return rc == 0;
}

// Expects the launch to fail with a message containing `expect`.
void launch_fails(const char* what, const char* name, unsigned gx, unsigned gy, unsigned gz,
                  unsigned bx, unsigned by, unsigned bz, unsigned smem, void** params,
                  const char* expect) {
  const int rc = gs_emu_launch(name, gx, gy, gz, bx, by, bz, smem, params);
  const std::string msg = gs_emu_last_error();
  CHECK(rc != 0, "%s: launch succeeded", what);
  CHECK(msg.find(expect) != std::string::npos, "%s: message '%s' lacks '%s'", what,
        msg.c_str(), expect);
  std::printf("  %-34s -> %s\n", what, msg.c_str());
}

std::mt19937 rng(12345);

std::vector<float> random_floats(size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

void test_axpy() {
  size_t n = (1 << 20) + 3;
  float a = 1.5f;
  std::vector<float> xs = random_floats(n, -1, 1), ys = random_floats(n, -1, 1), y0 = ys;
  const float* x = xs.data();
  float* y = ys.data();
  void* p[] = {&n, &a, &x, &y};
  if (!launch("gs_selftest_axpy", 64, 128, p)) return;  // several grid-stride rounds
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += std::fabs(ys[i] - (a * xs[i] + y0[i])) > 1e-6f;
  CHECK(bad == 0, "axpy: %zu wrong elements", bad);
}

template <class T>
void test_block_reduce(const char* kernel, double tol) {
  for (unsigned bd : {32u, 64u, 96u, 128u, 160u, 256u, 512u, 992u, 1024u}) {
    const unsigned blocks = 3;
    int per_block = 2500;
    std::vector<T> xs(size_t(blocks) * per_block);
    std::uniform_real_distribution<double> d(-1, 1);
    for (auto& v : xs) v = T(d(rng));
    xs[7] = T(3.5);  // the maximum of block 0
    std::vector<T> sums(2 * blocks), maxes(blocks), every(size_t(blocks) * bd);
    const T* x = xs.data();
    T *s = sums.data(), *m = maxes.data(), *e = every.data();
    void* p[] = {&x, &s, &m, &e, &per_block};
    if (!launch(kernel, blocks, bd, p)) continue;
    for (unsigned b = 0; b < blocks; ++b) {
      double ref = 0;
      T top = -INFINITY;
      for (int i = 0; i < per_block; ++i) {
        ref += double(xs[b * per_block + i]);
        top = std::max(top, xs[b * per_block + i]);
      }
      CHECK(std::fabs(double(sums[2 * b]) - ref) <= tol * (1 + std::fabs(ref)),
            "%s bd=%u block %u: sum %.9g, expected %.9g", kernel, bd, b, double(sums[2 * b]),
            ref);
      CHECK(sums[2 * b + 1] == 2 * sums[2 * b], "%s bd=%u: second sum through the same "
            "scratch %.9g != 2 * %.9g", kernel, bd, double(sums[2 * b + 1]),
            double(sums[2 * b]));
      CHECK(maxes[b] == top, "%s bd=%u block %u: max %g, expected %g", kernel, bd, b,
            double(maxes[b]), double(top));
      for (unsigned t = 0; t < bd; ++t)
        if (std::memcmp(&every[b * bd + t], &sums[2 * b], sizeof(T)) != 0) {
          CHECK(false, "%s bd=%u block %u: thread %u got %.9g, thread 0 %.9g", kernel, bd, b,
                t, double(every[b * bd + t]), double(sums[2 * b]));
          break;
        }
    }
  }
}

void test_warp_scan() {
  for (int width : {32, 8, 4, 1}) {
    int n = 1000;
    std::vector<int> xs(n), ys(n, -7);
    for (auto& v : xs) v = int(rng() % 100) - 50;
    const int* x = xs.data();
    int* y = ys.data();
    void* p[] = {&x, &y, &n, &width};
    if (!launch("gs_selftest_warp_scan", (n + 127) / 128, 128, p)) continue;
    size_t bad = 0;
    for (int i = 0; i < n; ++i) {
      int ref = 0;
      for (int j = i - i % width; j <= i; ++j) ref += xs[j];
      bad += ys[i] != ref;
    }
    CHECK(bad == 0, "warp scan width %d: %zu wrong", width, bad);
  }
}

void test_warp_ops() {
  for (unsigned bd : {64u, 48u}) {  // 48: the second warp has 16 lanes
    const unsigned blocks = 2;
    std::vector<int> out(size_t(16) * blocks * bd, 12345);
    int* o = out.data();
    void* p[] = {&o};
    if (!launch("gs_selftest_warp_ops", blocks, bd, p)) continue;
    for (unsigned b = 0; b < blocks; ++b)
      for (unsigned t = 0; t < bd; ++t) {
        const unsigned lane = t % 32, base = t - lane;
        const unsigned lanes = std::min(32u, bd - base);  // lanes in this warp
        const unsigned live = lanes == 32 ? ~0u : (1u << lanes) - 1;
        const auto exists = [&](unsigned l) { return l < lanes; };
        int e[16];
        e[0] = int(base + 3);
        // A source past the last existing lane is undefined on a GPU: the emulator poisons.
        e[1] = lane == 31 ? int(t) : exists(lane + 1) ? int(t + 1) : -1;
        e[2] = int(t ^ 5);
        e[3] = (lane & 8) ? int(t - 8) : int(t);
        e[4] = int(base + ((lane & ~3u) | ((lane + 1) & 3u)));
        e[5] = int(0xaaaaaaaau & live);
        e[6] = 1;
        e[7] = 1;
        e[8] = int((0xfu << (lane & ~3u)) & live);
        e[9] = int(lanes * (lanes - 1) / 2);
        e[10] = int((bd + 2) / 3);
        e[11] = int(live);
        e[12] = lane < 16 ? int(base + 15) : int(t);
        e[13] = int(1 + 2 * (t ^ 1));
        e[14] = int(lanes - 1) - 10;
        e[15] = int(live ^ 1u);
        const int* got = &out[16 * (b * bd + t)];
        for (int k = 0; k < 16; ++k)
          CHECK(got[k] == e[k], "warp ops bd=%u block %u thread %u: result %d is %d (0x%x), "
                "expected %d (0x%x)", bd, b, t, k, got[k], unsigned(got[k]), e[k],
                unsigned(e[k]));
      }
  }
}

void test_dynamic_shared() {
  const unsigned bd = 256, blocks = 8;
  std::vector<float> xs = random_floats(bd * blocks, -10, 10), ys(bd * blocks);
  const float* x = xs.data();
  float* y = ys.data();
  void* p[] = {&x, &y};
  const unsigned smem = ((bd * 4 + 15) & ~15u) + bd * 8;
  if (!launch("gs_selftest_reverse", blocks, bd, p, smem)) return;
  size_t bad = 0;
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < bd; ++t) {
      const float v = xs[b * bd + bd - 1 - t];
      bad += ys[b * bd + t] != v + float(2.0 * v);
    }
  CHECK(bad == 0, "dynamic shared: %zu wrong", bad);
}

void test_atomics() {
  int n = 100000;
  std::vector<int> xs(n);
  for (auto& v : xs) v = int(rng() % 100);
  std::vector<unsigned> bins(16, 0);
  float total = 0;
  int largest = -1;
  const int* x = xs.data();
  unsigned* bp = bins.data();
  float* tp = &total;
  int* lp = &largest;
  void* p[] = {&x, &n, &bp, &tp, &lp};
  if (!launch("gs_selftest_histogram", 40, 256, p)) return;
  std::vector<unsigned> ref(16, 0);
  double sum = 0;
  for (int v : xs) {
    ++ref[v & 15];
    sum += v;
  }
  CHECK(bins == ref, "histogram bins differ");
  CHECK(double(total) == sum, "atomicAdd float total %g, expected %g", double(total), sum);
  CHECK(largest == *std::max_element(xs.begin(), xs.end()), "atomicMax %d", largest);
}

// Reference rounding to a 16-bit format, by search over the format's decoded values: an
// implementation independent of the emulator's bit manipulation.
struct Format16 {
  std::vector<double> value;  // of codes 0 .. max finite positive code
  double overflow;            // the first magnitude that rounds to infinity
  uint16_t inf_code;
  uint16_t encode(float f) const {
    if (std::isnan(f)) return 0x7fff;
    const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
    const double a = std::fabs(double(f));
    if (a >= overflow) return sign | inf_code;
    size_t lo = std::upper_bound(value.begin(), value.end(), a) - value.begin() - 1;
    if (lo + 1 < value.size()) {
      const double d_lo = a - value[lo], d_hi = value[lo + 1] - a;
      if (d_hi < d_lo || (d_hi == d_lo && (lo & 1))) ++lo;
    }
    return uint16_t(sign | lo);
  }
};

Format16 half_format() {
  Format16 f;
  for (uint32_t c = 0; c <= 0x7bff; ++c) {
    const uint32_t e = c >> 10, m = c & 0x3ff;
    f.value.push_back(e == 0 ? std::ldexp(double(m), -24)
                             : std::ldexp(double(1024 + m), int(e) - 25));
  }
  f.overflow = (65504.0 + 65536.0) / 2;  // the tie goes to the even code, infinity
  f.inf_code = 0x7c00;
  return f;
}

Format16 bf16_format() {
  Format16 f;
  for (uint32_t c = 0; c <= 0x7f7f; ++c) f.value.push_back(double(bits_to_float(c << 16)));
  f.overflow = (f.value.back() + std::ldexp(1.0, 128)) / 2;
  f.inf_code = 0x7f80;
  return f;
}

double decode_half(uint16_t c) {
  const uint32_t e = (c >> 10) & 31, m = c & 0x3ff;
  const double s = (c & 0x8000) ? -1 : 1;
  if (e == 31) return m ? NAN : s * INFINITY;
  return s * (e == 0 ? std::ldexp(double(m), -24) : std::ldexp(double(1024 + m), int(e) - 25));
}

void test_half() {
  std::vector<float> in = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN,
                           bits_to_float(0x7f800001), bits_to_float(0xffc00001),
                           65504.0f, 65519.99f, 65520.0f, -65520.0f, 65536.0f, 1e30f,
                           std::ldexp(1.0f, -24), std::ldexp(1.0f, -25),
                           std::nextafter(std::ldexp(1.0f, -25), 1.0f), std::ldexp(3.0f, -26),
                           std::ldexp(1.0f, -14), std::nextafter(std::ldexp(1.0f, -14), 0.0f),
                           1.0f + std::ldexp(1.0f, -11), 1.0f + std::ldexp(3.0f, -11),
                           -(1.0f + std::ldexp(1.0f, -11)), 3.3895314e38f,
                           bits_to_float(0x7f7fffff), bits_to_float(0x7f7f8000),
                           bits_to_float(0x7f7f7fff), bits_to_float(0x00000001),
                           bits_to_float(0x00008000), bits_to_float(0x00018000),
                           bits_to_float(0x3f808000), bits_to_float(0x3f818000)};
  // Every half and every bf16 value, which must survive the round trip.
  for (uint32_t c = 0; c < 65536; ++c) in.push_back(float(decode_half(uint16_t(c))));
  for (uint32_t c = 0; c < 65536; ++c) in.push_back(bits_to_float(c << 16));
  std::uniform_real_distribution<float> ex(-40, 20);
  for (int i = 0; i < 200000; ++i) {
    const float v = std::exp2(ex(rng));
    in.push_back((rng() & 1) ? -v : v);
  }
  for (int i = 0; i < 100000; ++i) in.push_back(bits_to_float(uint32_t(rng())));
  int n = int(in.size());
  std::vector<uint16_t> h(n), b(n);
  std::vector<float> hf(n), bf(n);
  const float* x = in.data();
  uint16_t *hp = h.data(), *bp = b.data();
  float *hfp = hf.data(), *bfp = bf.data();
  void* p[] = {&x, &hp, &bp, &hfp, &bfp, &n};
  if (!launch("gs_selftest_half_roundtrip", 512, 256, p)) return;
  const Format16 half = half_format(), bf16 = bf16_format();
  size_t bad = 0;
  for (int i = 0; i < n; ++i) {
    const uint16_t eh = half.encode(in[i]), eb = bf16.encode(in[i]);
    const float efh = float(decode_half(eh));
    const float efb = (eb & 0x7fff) > 0x7f80 ? NAN : bits_to_float(uint32_t(eb) << 16);
    const auto same = [](float got, float want) {
      return std::isnan(want) ? std::isnan(got) : float_to_bits(got) == float_to_bits(want);
    };
    const bool ok = h[i] == eh && b[i] == eb && same(hf[i], efh) && same(bf[i], efb);
    if (!ok && ++bad <= 5)
      CHECK(false, "16-bit conversion of %a (0x%08x): half 0x%04x (expected 0x%04x) -> %a, "
            "bf16 0x%04x (expected 0x%04x) -> %a", double(in[i]), float_to_bits(in[i]), h[i],
            eh, double(hf[i]), b[i], eb, double(bf[i]));
  }
  CHECK(bad == 0, "16-bit conversions: %zu of %d wrong", bad, n);
}

// erfc^-1 by bisection: a reference independent of the emulator's Newton iterations.
double erfcinv_reference(double y) {
  if (y <= 0) return INFINITY;
  if (y >= 2) return -INFINITY;
  double lo = -30, hi = 30;  // erfc is decreasing
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2;
    (std::erfc(mid) > y ? lo : hi) = mid;
  }
  return (lo + hi) / 2;
}

int popcount32(uint32_t u) {
  int c = 0;
  for (; u; u &= u - 1) ++c;
  return c;
}
int clz32(uint32_t u) {
  int c = 0;
  for (uint32_t bit = 0x80000000u; bit && !(u & bit); bit >>= 1) ++c;
  return c;
}
int ffs32(uint32_t u) {
  for (int i = 0; i < 32; ++i)
    if (u >> i & 1) return i + 1;
  return 0;
}

void test_math() {
  std::vector<float> xs = random_floats(20000, -5, 5);
  for (float v : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, 5.0f, -5.0f, 2.5f, -2.5f}) xs.push_back(v);
  int n = int(xs.size());
  std::vector<float> out(16 * size_t(n));
  const float* x = xs.data();
  float* o = out.data();
  void* p[] = {&x, &o, &n};
  if (!launch("gs_selftest_math", 32, 128, p)) return;
  const char* names[16] = {"__expf", "__logf", "__fdividef", "rsqrtf", "rsqrt", "__frcp_rn",
                           "__saturatef", "normcdff", "erfcinvf", "erfinvf", "erfcinvf(tiny)",
                           "normcdfinvf", "bit casts", "__popc/__clz/__ffs", "min/max",
                           "__float2int_rn"};
  size_t bad[16] = {};
  for (int i = 0; i < n; ++i) {
    const double v = xs[i], a = std::fabs(v);
    const uint32_t u = float_to_bits(xs[i]), ua = float_to_bits(float(a));
    const double e[16] = {
        std::exp(v), std::log(a + 1), v / 3 + v / 7, 1 / std::sqrt(a + 1), 1 / std::sqrt(a + 1),
        1 / (v + 10), std::min(std::max(v, 0.0), 1.0), 0.5 * std::erfc(-v / std::sqrt(2.0)),
        erfcinv_reference((xs[i] + 5.0f) * 0.2f), erfcinv_reference(1.0 - double(xs[i] * 0.2f)),
        erfcinv_reference(std::exp2(-25.0 * a)),
        -std::sqrt(2.0) * erfcinv_reference(2.0 * double((xs[i] + 5.0f) * 0.1f)), 1,
        double(popcount32(u) + 100 * clz32(ua) + 10000 * ffs32(u)),
        double(std::min(v, 0.5) + std::max(v, -0.5)) + std::min(3, int(xs[i])) +
            std::max(2u, unsigned(a)),
        std::min(std::max(std::nearbyint(double(xs[i] * 1e9f)), -2147483648.0), 2147483647.0) +
            std::nearbyint(double(xs[i] * 1000.0f + 0.5f))};
    const double tol[16] = {1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 0,    1e-6,
                            1e-6, 1e-6, 1e-6, 1e-6, 0,    0,    1e-6, 1e-6};  // relative
    for (int k = 0; k < 16; ++k) {
      const double got = out[16 * size_t(i) + k];
      const bool ok = std::isinf(e[k])
                          ? got == e[k]
                          : std::fabs(got - e[k]) <= tol[k] * std::max(1.0, std::fabs(e[k]));
      if (!ok && bad[k]++ < 3)
        CHECK(false, "%s at x = %.9g: %.9g, expected %.9g", names[k], v, got, e[k]);
    }
  }
  for (int k = 0; k < 16; ++k) CHECK(bad[k] == 0, "%s: %zu of %d wrong", names[k], bad[k], n);
}

// The racy kernel must give wrong results: the emulator must not run the threads in an
// order that happens to satisfy every read.
void test_race() {
  const unsigned bd = 256, blocks = 4;
  std::vector<float> xs(bd * blocks), ys(bd * blocks);
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = float(i) + 0.5f;
  for (int dir : {1, -1}) {
    const float* x = xs.data();
    float* y = ys.data();
    void* p[] = {&x, &y, &dir};
    size_t wrong[2];
    for (int racy = 0; racy < 2; ++racy) {
      std::fill(ys.begin(), ys.end(), 0.0f);
      if (!launch(racy ? "gs_selftest_shift_racy" : "gs_selftest_shift", blocks, bd, p)) return;
      wrong[racy] = 0;
      for (unsigned b = 0; b < blocks; ++b)
        for (unsigned t = 0; t < bd; ++t)
          wrong[racy] += ys[b * bd + t] != xs[b * bd + (t + bd + dir) % bd];
    }
    CHECK(wrong[0] == 0, "shift dir %d with __syncthreads: %zu wrong", dir, wrong[0]);
    CHECK(wrong[1] > 0, "shift dir %d without __syncthreads: the race went unnoticed", dir);
    std::printf("  missing __syncthreads, neighbour %+d: %zu of %u results wrong\n", dir,
                wrong[1], bd * blocks);
  }
}

void test_index() {
  const unsigned gx = 3, gy = 2, gz = 2, bx = 8, by = 4, bz = 3, nt = bx * by * bz;
  std::vector<unsigned> out(size_t(8) * gx * gy * gz * nt, 0xdeadbeef);
  unsigned* o = out.data();
  void* p[] = {&o};
  if (gs_emu_launch("gs_selftest_index", gx, gy, gz, bx, by, bz, 0, p) != 0) {
    CHECK(false, "index launch failed: %s", gs_emu_last_error());
    return;
  }
  size_t bad = 0;
  for (unsigned b = 0; b < gx * gy * gz; ++b)
    for (unsigned t = 0; t < nt; ++t) {
      const unsigned* r = &out[8 * (size_t(b) * nt + t)];
      const unsigned e[8] = {t % bx, t / bx % by, t / (bx * by), b % gx, b / gx % gy,
                             b / (gx * gy), t & ~31u, nt};
      bad += !std::equal(e, e + 8, r);
    }
  CHECK(bad == 0, "3-D indices: %zu threads wrong", bad);
}

void test_sync_loop() {
  const unsigned bd = 96, blocks = 2;
  int iters = 5;
  std::vector<float> out(bd * blocks);
  float* o = out.data();
  void* p[] = {&iters, &o};
  if (!launch("gs_selftest_sync_loop", blocks, bd, p)) return;
  std::vector<float> acc(bd, 0.0f), s(bd);
  for (int k = 0; k < iters; ++k) {
    for (unsigned t = 0; t < bd; ++t) s[t] = acc[t] + float(t);
    for (unsigned t = 0; t < bd; ++t) acc[t] = s[(t + 1) % bd];
  }
  for (unsigned b = 0; b < blocks; ++b)
    for (unsigned t = 0; t < bd; ++t)
      CHECK(out[b * bd + t] == acc[t], "sync loop block %u thread %u: %g, expected %g", b, t,
            double(out[b * bd + t]), double(acc[t]));
}

void test_errors() {
  std::vector<int> buf(4096, 0);
  int* o = buf.data();
  void* p[] = {&o};
  CHECK(gs_emu_kernel_exists("gs_selftest_axpy") == 1, "kernel_exists(axpy)");
  CHECK(gs_emu_kernel_exists("nope") == 0, "kernel_exists(nope)");
  launch_fails("unknown kernel", "nope", 1, 1, 1, 32, 1, 1, 0, p, "no kernel");
  launch_fails("1025 threads", "gs_selftest_trap", 1, 1, 1, 1025, 1, 1, 0, p, "1024");
  launch_fails("block 32x32x2", "gs_selftest_trap", 1, 1, 1, 32, 32, 2, 0, p, "1024");
  launch_fails("grid y 65536", "gs_selftest_trap", 1, 65536, 1, 32, 1, 1, 0, p, "65535");
  launch_fails("empty grid", "gs_selftest_trap", 0, 1, 1, 32, 1, 1, 0, p, "empty");
  launch_fails("227 KiB + 1 of shared memory", "gs_selftest_trap", 1, 1, 1, 32, 1, 1,
               227 * 1024 + 1, p, "227 KiB");
  launch_fails("exit before __syncthreads", "gs_selftest_deadlock", 2, 1, 1, 64, 1, 1, 0, p,
               "deadlock");
  launch_fails("half-warp shuffle vs barrier", "gs_selftest_warp_deadlock", 1, 1, 1, 64, 1, 1,
               0, p, "deadlock");
  for (int exits : {0, 1}) {
    void* q[] = {&o, &exits};
    launch_fails(exits ? "__syncwarp mask mismatch, at exit" : "__syncwarp mask mismatch",
                 "gs_selftest_mask_mismatch", 1, 1, 1, 32, 1, 1, 0, q, "disagree");
  }
  launch_fails("__trap with waiting threads", "gs_selftest_trap", 3, 1, 1, 128, 1, 1, 0, p,
               "__trap");
  // Launches still work after failures that dropped waiting threads.
  std::fill(buf.begin(), buf.end(), 0);
  void* q[] = {&o};
  if (gs_emu_launch("gs_selftest_trap", 1, 1, 1, 256, 1, 1, 0, q) == 0)
    CHECK(std::count(buf.begin(), buf.begin() + 256, 1) == 256, "launch after failures");
  else
    CHECK(false, "launch after failures: %s", gs_emu_last_error());
}

void test_two_host_threads() {
  auto work = [](int seed, int* bad) {
    size_t n = 50000;
    float a = float(seed);
    std::vector<float> xs(n, 1.0f), ys(n, 0.0f);
    const float* x = xs.data();
    float* y = ys.data();
    void* p[] = {&n, &a, &x, &y};
    for (int r = 0; r < 20; ++r)
      if (gs_emu_launch("gs_selftest_axpy", 16, 1, 1, 128, 1, 1, 0, p) != 0) ++*bad;
    for (float v : ys) *bad += v != 20.0f * a;
  };
  int bad1 = 0, bad2 = 0;
  std::thread t1(work, 2, &bad1), t2(work, 3, &bad2);
  t1.join();
  t2.join();
  CHECK(bad1 == 0 && bad2 == 0, "concurrent launches from two host threads");
}

template <class F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

void timings() {
  const unsigned grid = 4096, block = 256, threads = grid * block;
  size_t n = threads;
  float a = 0.5f;
  std::vector<float> xs(n, 1.0f), ys(n, 0.0f);
  const float* x = xs.data();
  float* y = ys.data();
  void* p[] = {&n, &a, &x, &y};
  const double t_axpy = best_seconds(5, [&] { launch("gs_selftest_axpy", grid, block, p); });
  const double t_loop = best_seconds(5, [&] {
    for (size_t i = 0; i < n; ++i) ys[i] = a * xs[i] + ys[i];
    asm volatile("" ::: "memory");
  });
  std::printf("  axpy, 2^20 elements, %u x %u threads: %.2f ms = %.1f ns/thread "
              "(the plain loop: %.2f ms)\n",
              grid, block, t_axpy * 1e3, t_axpy / threads * 1e9, t_loop * 1e3);

  std::vector<float> out(threads);
  float* o = out.data();
  double t_sync[2];
  const int iters[2] = {0, 4};
  for (int k = 0; k < 2; ++k) {
    int it = iters[k];
    void* q[] = {&it, &o};
    t_sync[k] = best_seconds(3, [&] { launch("gs_selftest_sync_loop", grid, block, q); });
  }
  const double per_barrier = (t_sync[1] - t_sync[0]) / (double(threads) * 2 * iters[1]);
  std::printf("  __syncthreads, %u x %u threads: %.1f ns/thread with no barrier, %.2f ms with "
              "%d barriers each: %.1f ns per thread per barrier\n",
              grid, block, t_sync[0] / threads * 1e9, t_sync[1] * 1e3, 2 * iters[1],
              per_barrier * 1e9);

  int nscan = int(threads), width = 32;
  std::vector<int> si(threads, 1), so(threads);
  const int* sip = si.data();
  int* sop = so.data();
  void* r[] = {&sip, &sop, &nscan, &width};
  const double t_scan = best_seconds(3, [&] { launch("gs_selftest_warp_scan", grid, block, r); });
  std::printf("  warp scan (5 __shfl_up_sync), %u x %u threads: %.2f ms = %.1f ns/thread, "
              "%.1f ns per shuffle\n",
              grid, block, t_scan * 1e3, t_scan / threads * 1e9,
              (t_scan - t_sync[0]) / threads / 5 * 1e9);

  for (unsigned bd : {256u, 1024u}) {
    const unsigned blocks = threads / bd;
    int per_block = int(bd);
    std::vector<float> sums(2 * blocks), maxes(blocks), every(threads);
    const float* xp = xs.data();
    float *s = sums.data(), *m = maxes.data(), *e = every.data();
    void* q[] = {&xp, &s, &m, &e, &per_block};
    const double t =
        best_seconds(3, [&] { launch("gs_selftest_block_reduce_f32", blocks, bd, q); });
    std::printf("  3 block reductions (30 shuffles, 6 barriers), %u x %u threads: %.2f ms = "
                "%.0f ns/thread\n", blocks, bd, t * 1e3, t / threads * 1e9);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && !std::strcmp(argv[1], "--quick");  // skip the timings
  std::printf("emulator self-test\n");
  test_axpy();
  test_block_reduce<float>("gs_selftest_block_reduce_f32", 1e-5);
  test_block_reduce<double>("gs_selftest_block_reduce_f64", 1e-12);
  test_warp_scan();
  test_warp_ops();
  test_dynamic_shared();
  test_atomics();
  test_half();
  test_math();
  test_index();
  test_sync_loop();
  test_race();
  test_errors();
  test_two_host_threads();
  if (!quick) {
    std::printf("timings:\n");
    timings();
  }
  if (failures) {
    std::printf("%d check(s) FAILED\n", failures);
    return 1;
  }
  std::printf("all checks passed\n");
  return 0;
}
