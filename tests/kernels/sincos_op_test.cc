// The `sin` and `cos` ops as a model runs them (the registry's expansion, its map kernel, JIT-
// compiled by the CPU backend) are within 1 ulp of the double functions in f32 over the whole
// range: random bit patterns (every binade up to 3.4e38 equally), the floats nearest multiples
// of π/2, and the specials. The routines themselves are scanned in
// tests/compiler/strict_math_test.cc; this checks that the op path adds no rounding of its own.
#include <cmath>
#include <cstring>
#include <numbers>

#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

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

// |y - exact| in ulps of the binade holding the exact value.
double ulp_error(double y, double exact) {
  int e;
  std::frexp(exact, &e);
  return std::fabs(y - exact) / std::ldexp(1.0, std::max(e - 24, -149));
}

// Fresh random bit patterns each run (TILERUN_TEST_SEED replays a run; the seed is printed).
std::vector<double> arguments() {
  std::printf("[seed] %llu\n", static_cast<unsigned long long>(testing::test_seed()));
  std::mt19937_64 rng(testing::test_seed());
  std::uniform_int_distribution<uint32_t> ub(0, 0xffffffffu);
  std::vector<double> x;
  for (int i = 0; i < (1 << 18); ++i) x.push_back(from_bits(ub(rng)));
  for (int k = 1; k < 200000; k += 13) x.push_back(static_cast<float>(k * (std::numbers::pi / 2)));
  for (double v : {0.0, -0.0, 1e-45, 1e22, 3.4028234663852886e38, 131072.0, 105615.0})
    x.push_back(static_cast<float>(v));
  return x;
}

void check_op(const std::string& op, double (*exact)(double)) {
  std::vector<double> x = arguments();
  testing::KernelRunner runner;
  RefTensor in{{static_cast<int64_t>(x.size())}, x};
  std::vector<testing::Bytes> out = runner.run(op, {in}, {}, DType::F32, 1234.5);
  ASSERT_EQ(out.size(), 1u);
  std::vector<double> y = testing::decode(out[0]);
  ASSERT_EQ(y.size(), x.size());
  double worst = 0, worst_x = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) {
      float f = static_cast<float>(y[i]);
      ASSERT_EQ(bits(f), 0x7fc00000u) << op << "(" << x[i] << ") is not the canonical NaN";
      continue;
    }
    double u = ulp_error(y[i], exact(x[i]));
    if (!(u <= worst)) worst = u, worst_x = x[i];
  }
  std::printf("[ulp] %s op: max %.3f ulp at x = %a over %zu arguments\n", op.c_str(), worst,
              worst_x, x.size());
  EXPECT_LE(worst, 1.0) << op << " at x = " << worst_x;
}

TEST(SinCosOp, SinWithinOneUlpOverTheWholeF32Range) {
  check_op("sin", [](double x) { return std::sin(x); });
}

TEST(SinCosOp, CosWithinOneUlpOverTheWholeF32Range) {
  check_op("cos", [](double x) { return std::cos(x); });
}

// The backward ops are the other function times dy (dy · cos x, -dy · sin x): for dy = 1 they
// give the cos and -sin ops' bits, so they are as accurate.
TEST(SinCosOp, GradientsOfUnitDyAreTheOtherFunctionBitForBit) {
  std::vector<double> x = arguments();
  testing::KernelRunner runner;
  const int64_t n = static_cast<int64_t>(x.size());
  RefTensor in{{n}, x}, ones{{n}, std::vector<double>(x.size(), 1.0)};
  std::vector<double> s = testing::decode(runner.run("sin", {in}, {}, DType::F32, 0)[0]);
  std::vector<double> c = testing::decode(runner.run("cos", {in}, {}, DType::F32, 0)[0]);
  std::vector<double> ds =
      testing::decode(runner.run("sin_grad", {in, ones}, {}, DType::F32, 0)[0]);
  std::vector<double> dc =
      testing::decode(runner.run("cos_grad", {in, ones}, {}, DType::F32, 0)[0]);
  for (size_t i = 0; i < x.size(); ++i) {
    if (!std::isfinite(x[i])) continue;
    ASSERT_EQ(bits(float(ds[i])), bits(float(c[i]))) << "sin_grad at x = " << x[i];
    ASSERT_EQ(bits(float(dc[i])), bits(float(-s[i]))) << "cos_grad at x = " << x[i];
  }
}

}  // namespace
}  // namespace tilerun::kernels
