// Accuracy and edge cases of the strict math routines (strict_math.h), measured the way they
// run: expanded into SIMT IR and JIT-compiled by the CPU backend, against the double-precision
// function. Target: ≤ 2 ulp wherever the exact result is a normal float.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/ir/builder.h"

namespace tilerun::compiler {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}
float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

// y[i] = f(x[i]) (and the second operand z for binary routines) as a JIT-compiled kernel.
class Elementwise {
 public:
  Elementwise(const std::string& name, const std::function<Val(Val, Val)>& f) {
    KernelBuilder kb(name);
    Dim N = kb.dim("N");
    Buf x = kb.input("x", DType::F32, {N}), z = kb.input("z", DType::F32, {N});
    Buf y = kb.output("y", DType::F32, {N});
    kb.body({ceildiv(N, 256)}, 256, [&](Scope& s) {
      Idx base = s.block_idx(0) * 256;
      s.parallel(256, [&](Idx i) {
        s.if_then(base + i < N, [&] { y(base + i) = f(x(base + i), z(base + i)); });
      });
    });
    kernel_ = compile_cpu(kb.build());
    std::printf("[jit] %-8s compiled in %7.1f ms\n", name.c_str(), kernel_->compile_ms());
  }
  std::vector<float> operator()(std::vector<float> x, std::vector<float> z = {}) const {
    if (z.empty()) z.assign(x.size(), 0.0f);
    std::vector<float> y(x.size(), kNaN);
    kernel_->launch(
        {.buffers = {x.data(), z.data(), y.data()}, .dims = {int64_t(x.size())}, .scalars = {}});
    return y;
  }

 private:
  std::unique_ptr<CpuKernel> kernel_;
};

std::mt19937& rng() {
  static std::mt19937 gen = [] {
    unsigned seed = std::random_device{}();
    std::printf("[seed] %u\n", seed);
    return std::mt19937(seed);
  }();
  return gen;
}

// Uniform in value over [lo, hi] and uniform in bit pattern over the finite floats in between
// (the latter reaches every binade, tiny and huge).
std::vector<float> samples(float lo, float hi, size_t n) {
  std::vector<float> v;
  std::uniform_real_distribution<float> uv(lo, hi);
  std::uniform_int_distribution<uint32_t> ub(0, 0xffffffffu);
  while (v.size() < n / 2) v.push_back(uv(rng()));
  while (v.size() < n) {
    float f = from_bits(ub(rng()));
    if (std::isfinite(f) && f >= lo && f <= hi) v.push_back(f);
  }
  return v;
}

// Error of y in units of the last place of the exact result (as a float).
double ulp_error(float y, double exact) {
  float r = static_cast<float>(exact);
  double ulp = std::nextafter(std::fabs(r), kInf) - std::fabs(r);
  if (!std::isfinite(ulp)) ulp = std::fabs(r) - std::nextafter(std::fabs(r), 0.0f);
  return std::fabs(double(y) - exact) / ulp;
}

// Max ulp error over inputs whose exact result is a normal float; prints it for the log.
double max_ulp(const char* name, const std::vector<float>& x, const std::vector<float>& y,
               const std::function<double(double)>& exact) {
  double worst = 0;
  float worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double e = exact(x[i]);
    if (!(std::fabs(e) >= std::numeric_limits<float>::min() &&
          std::fabs(e) <= std::numeric_limits<float>::max()))
      continue;
    double u = ulp_error(y[i], e);
    if (!(u <= worst)) {
      worst = u;
      worst_x = x[i];
    }
  }
  std::printf("[ulp] %-8s max %.3f ulp (at x = %.9g) over %zu inputs\n", name, worst, worst_x,
              x.size());
  return worst;
}

constexpr size_t kSamples = 1 << 20;

TEST(StrictMath, ExpWithinTwoUlp) {
  Elementwise f("exp", [](Val x, Val) { return exp(x); });
  std::vector<float> x = samples(-104.0f, 89.0f, kSamples);
  EXPECT_LE(max_ulp("exp", x, f(x), [](double v) { return std::exp(v); }), 2.0);
  std::vector<float> edge = {0.0f,     -0.0f,   1e-45f,  -1e-45f,  88.72283f,
                             88.7229f, 89.0f,   1000.0f, -1000.0f, -87.33654f,
                             -103.9f,  -104.0f, kInf,    -kInf,    kNaN};
  std::vector<float> y = f(edge);
  EXPECT_EQ(y[0], 1.0f);
  EXPECT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], 1.0f);
  EXPECT_EQ(y[4], std::exp(88.72283f));
  EXPECT_EQ(y[5], kInf);
  EXPECT_EQ(y[7], kInf);
  EXPECT_EQ(y[8], 0.0f);
  EXPECT_NEAR(y[10], std::exp(-103.9), 2e-45);  // a subnormal result, rounded once
  EXPECT_EQ(y[12], kInf);
  EXPECT_EQ(bits(y[13]), 0u);
  EXPECT_EQ(bits(y[14]), 0x7fc00000u);
}

TEST(StrictMath, LogWithinTwoUlp) {
  Elementwise f("log", [](Val x, Val) { return log(x); });
  std::vector<float> x = samples(0.0f, std::numeric_limits<float>::max(), kSamples);
  EXPECT_LE(max_ulp("log", x, f(x), [](double v) { return std::log(v); }), 2.0);
  std::vector<float> sub = samples(0.0f, std::numeric_limits<float>::min(), 1 << 16);
  EXPECT_LE(max_ulp("log(sub)", sub, f(sub), [](double v) { return std::log(v); }), 2.0);
  std::vector<float> y = f({0.0f, -0.0f, -1.0f, 1.0f, kInf, -kInf, kNaN, 1e-45f});
  EXPECT_EQ(y[0], -kInf);
  EXPECT_EQ(y[1], -kInf);
  EXPECT_EQ(bits(y[2]), 0x7fc00000u);
  EXPECT_EQ(bits(y[3]), 0u);
  EXPECT_EQ(y[4], kInf);
  EXPECT_EQ(bits(y[5]), 0x7fc00000u);
  EXPECT_EQ(bits(y[6]), 0x7fc00000u);
  EXPECT_NEAR(y[7], std::log(double(1e-45f)), 1e-5);  // 2^-149
}

TEST(StrictMath, TanhWithinTwoUlp) {
  Elementwise f("tanh", [](Val x, Val) { return tanh(x); });
  std::vector<float> x = samples(-20.0f, 20.0f, kSamples);
  EXPECT_LE(max_ulp("tanh", x, f(x), [](double v) { return std::tanh(v); }), 2.0);
  std::vector<float> y = f({0.0f, -0.0f, 1e-40f, -1e-40f, 9.5f, -1000.0f, kInf, -kInf, kNaN});
  EXPECT_EQ(bits(y[0]), 0u);
  EXPECT_EQ(bits(y[1]), 0x80000000u);
  EXPECT_EQ(y[2], 1e-40f);
  EXPECT_EQ(y[3], -1e-40f);
  EXPECT_EQ(y[4], 1.0f);
  EXPECT_EQ(y[5], -1.0f);
  EXPECT_EQ(y[6], 1.0f);
  EXPECT_EQ(y[7], -1.0f);
  EXPECT_EQ(bits(y[8]), 0x7fc00000u);
}

TEST(StrictMath, SigmoidWithinTwoUlp) {
  Elementwise f("sigmoid", [](Val x, Val) { return sigmoid(x); });
  std::vector<float> x = samples(-87.0f, 100.0f, kSamples);
  EXPECT_LE(max_ulp("sigmoid", x, f(x), [](double v) { return 1.0 / (1.0 + std::exp(-v)); }), 2.0);
  std::vector<float> y = f({0.0f, -0.0f, kInf, -kInf, kNaN, 200.0f, -200.0f});
  EXPECT_EQ(y[0], 0.5f);
  EXPECT_EQ(y[1], 0.5f);
  EXPECT_EQ(y[2], 1.0f);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(bits(y[4]), 0x7fc00000u);
  EXPECT_EQ(y[5], 1.0f);
  EXPECT_EQ(y[6], 0.0f);
}

TEST(StrictMath, RsqrtWithinTwoUlp) {
  Elementwise f("rsqrt", [](Val x, Val) { return rsqrt(x); });
  std::vector<float> x = samples(0.0f, std::numeric_limits<float>::max(), kSamples);
  EXPECT_LE(max_ulp("rsqrt", x, f(x), [](double v) { return 1.0 / std::sqrt(v); }), 2.0);
  std::vector<float> y = f({0.0f, -0.0f, -1.0f, kInf, kNaN, 4.0f});
  EXPECT_EQ(y[0], kInf);
  EXPECT_EQ(y[1], -kInf);
  EXPECT_EQ(bits(y[2]), 0x7fc00000u);
  EXPECT_EQ(y[3], 0.0f);
  EXPECT_EQ(bits(y[4]), 0x7fc00000u);
  EXPECT_EQ(y[5], 0.5f);
}

TEST(StrictMath, MinMaxDefinedOnSignedZeroAndNaN) {
  Elementwise fmin("min", [](Val a, Val b) { return min(a, b); });
  Elementwise fmax("max", [](Val a, Val b) { return max(a, b); });
  std::vector<float> a = {0.0f, -0.0f, kNaN, 1.0f, -3.0f, kInf, -kInf, 2.0f, 2.0f};
  std::vector<float> b = {-0.0f, 0.0f, 1.0f, kNaN, 5.0f, 1.0f, -1.0f, 2.0f, -kInf};
  std::vector<float> lo = fmin(a, b), hi = fmax(a, b);
  EXPECT_EQ(bits(lo[0]), 0x80000000u);
  EXPECT_EQ(bits(lo[1]), 0x80000000u);
  EXPECT_EQ(bits(hi[0]), 0u);
  EXPECT_EQ(bits(hi[1]), 0u);
  for (int i : {2, 3}) {
    EXPECT_EQ(bits(lo[i]), 0x7fc00000u);
    EXPECT_EQ(bits(hi[i]), 0x7fc00000u);
  }
  EXPECT_EQ(lo[4], -3.0f);
  EXPECT_EQ(hi[4], 5.0f);
  EXPECT_EQ(lo[5], 1.0f);
  EXPECT_EQ(hi[5], kInf);
  EXPECT_EQ(lo[6], -kInf);
  EXPECT_EQ(hi[6], -1.0f);
  EXPECT_EQ(lo[7], 2.0f);
  EXPECT_EQ(lo[8], -kInf);
}

TEST(StrictMath, FloatToIntSaturatesAndSendsNaNToZero) {
  Elementwise f("f2i", [](Val x, Val) { return to_f32(to_i32(x)); });
  std::vector<float> y = f({-2.7f, 2.7f, 1e10f, -1e10f, kNaN, kInf, -kInf, -0.5f});
  EXPECT_EQ(y[0], -2.0f);
  EXPECT_EQ(y[1], 2.0f);
  EXPECT_EQ(y[2], 2147483648.0f);  // INT32_MAX rounds to 2^31 as f32
  EXPECT_EQ(y[3], -2147483648.0f);
  EXPECT_EQ(y[4], 0.0f);
  EXPECT_EQ(y[5], 2147483648.0f);
  EXPECT_EQ(y[6], -2147483648.0f);
  EXPECT_EQ(y[7], 0.0f);
}

TEST(StrictMath, StoresCanonicaliseNaN) {
  Elementwise f("nan", [](Val x, Val z) { return x * z; });
  std::vector<float> y = f({kInf, from_bits(0xffc00001u), 0.0f}, {0.0f, 1.0f, kInf});
  for (float v : y) EXPECT_EQ(bits(v), 0x7fc00000u);
}

}  // namespace
}  // namespace tilerun::compiler
