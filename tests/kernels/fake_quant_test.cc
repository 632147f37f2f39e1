// The fake_quant op as a model runs it (the registry's expansion, JIT-compiled by the CPU
// backend) gives its double reference's bits exactly, on blocks chosen to reach every path of the
// scale: amax anywhere from the smallest subnormal to inf (subnormal power-of-two scales, whose
// reciprocal f32 cannot hold, and a scale of 0 when amax / max underflows), zeros, NaN, ±inf,
// values on the format's ties and on power-of-two boundaries of the scale. Fresh random blocks
// each run (TILERUN_TEST_SEED replays a run; the seed is printed). The registered kernel cases
// (kernel_test.cc) compare ordinary random inputs within a tolerance; this is the bit-exact one.
#include <cmath>
#include <cstring>
#include <limits>

#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

constexpr double kFltMax = std::numeric_limits<float>::max();

const char* const kKinds[] = {"typical", "any binade", "tiny", "zeros",
                              "NaN",     "inf",        "huge", "ties"};

// A format's largest finite value, significand digits and exponent range (of normal values).
struct Fmt {
  double max;
  int digits, emin, emax;
};
Fmt fmt(const std::string& name) {
  return name == "fp4e2m1"  ? Fmt{6, 2, 0, 2}
         : name == "f8e4m3" ? Fmt{448, 4, -6, 8}
                            : Fmt{57344, 3, -14, 15};
}

// One block of `n` values of the kind; `denorm` is the input dtype's smallest positive subnormal,
// and ties are scaled by at most 2^±`range` (so that they stay exact in the input dtype).
std::vector<double> block(std::mt19937_64& rng, int kind, int64_t n, const Fmt& f, double denorm,
                          int range) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::uniform_int_distribution<int> coin(0, 1);
  auto sign = [&] { return coin(rng) ? -1.0 : 1.0; };
  auto below = [&](int k) { return static_cast<int>(u(rng) * k) % k; };
  std::vector<double> b(n);
  switch (kind) {
    case 0:  // magnitudes spread over 2^±20
      for (double& v : b) v = sign() * std::ldexp(1 + u(rng), below(40) - 20);
      break;
    case 1: {  // a top binade anywhere in f32, values up to 40 binades below it
      const int top = below(277) - 149;
      for (double& v : b) v = sign() * std::ldexp(1 + u(rng), top - below(40));
      break;
    }
    case 2:  // a few subnormal steps (amax / max underflows to 0 for f32 inputs) and zeros
      for (double& v : b) v = sign() * denorm * below(4);
      break;
    case 3:
      for (double& v : b) v = sign() * 0.0;
      break;
    case 4:
    case 5:
      for (double& v : b) v = sign() * u(rng) * 10;
      b[below(static_cast<int>(n))] = kind == 4 ? std::numeric_limits<double>::quiet_NaN()
                                                : sign() * std::numeric_limits<double>::infinity();
      break;
    case 6:  // amax near f32's largest value: the largest scales
      for (double& v : b) v = sign() * u(rng) * kFltMax;
      b[below(static_cast<int>(n))] = sign() * kFltMax;
      break;
    default: {  // amax = max · 2^k exactly (a power-of-two scale with no rounding up), the other
                // values halfway between neighbouring codes of the format, times 2^k
      const int k = below(2 * range + 1) - range;
      for (double& v : b) {
        const int e = f.emin + below(f.emax - f.emin + 1);
        const double half_way = (below(1 << f.digits) + 0.5) * std::ldexp(1.0, e - f.digits + 1);
        v = sign() * std::ldexp(std::min(half_way, f.max), k);
      }
      b[below(static_cast<int>(n))] = sign() * std::ldexp(f.max, k);
      break;
    }
  }
  return b;
}

bool same(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || std::memcmp(&a, &b, 8) == 0;
}

void check(const std::string& format, int64_t block_size, const std::string& scale, DType dtype) {
  std::mt19937_64 rng(testing::test_seed());
  const double denorm = dtype == DType::F32 ? 0x1p-149 : dtype == DType::BF16 ? 0x1p-133 : 0x1p-24;
  const int range = dtype == DType::F16 ? 8 : 100;
  // 300 blocks: several tiles of the tiled kernel (32 to 128 blocks a tile), the last partial.
  const int64_t blocks = 300;
  RefTensor x{.shape = {blocks, block_size}};
  std::vector<int> kinds;
  for (int64_t i = 0; i < blocks; ++i) {
    kinds.push_back(static_cast<int>(i % 8));
    std::vector<double> b = block(rng, kinds.back(), block_size, fmt(format), denorm, range);
    x.data.insert(x.data.end(), b.begin(), b.end());
  }
  x = testing::rounded(dtype, x);
  const Attrs attrs = {{"format", format}, {"block", block_size}, {"scale", scale}};
  std::vector<RefTensor> want = testing::run_reference("fake_quant", {x}, attrs);
  testing::KernelRunner runner;
  std::vector<testing::Bytes> got = runner.run("fake_quant", {x}, attrs, dtype, 1234.5);
  ASSERT_EQ(got.size(), 1u);
  // The reference rounded to the output dtype, as the kernel stores it.
  std::vector<double> y = testing::decode(got[0]);
  std::vector<double> w = testing::rounded(dtype, want[0]).data;
  ASSERT_EQ(y.size(), w.size());
  int64_t mismatches = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    if (same(y[i], w[i])) continue;
    const int64_t b = static_cast<int64_t>(i) / block_size;
    if (mismatches++ < 5)
      ADD_FAILURE() << format << " " << scale << " block " << block_size << " " << dtype_name(dtype)
                    << ": element " << i << " (a '" << kKinds[kinds[b]]
                    << "' block) x = " << std::hexfloat << x.data[i] << " gives " << y[i]
                    << ", the reference " << w[i] << std::defaultfloat;
  }
  EXPECT_EQ(mismatches, 0) << format << " " << scale << " block " << block_size << " "
                           << dtype_name(dtype);
}

TEST(FakeQuantBits, Fp4PowerOfTwoScalesMatchTheReference) {
  std::printf("[seed] %llu\n", static_cast<unsigned long long>(testing::test_seed()));
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) check("fp4e2m1", 32, "ue8m0", dtype);
}

TEST(FakeQuantBits, Fp8PowerOfTwoScalesMatchTheReference) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    check("f8e4m3", 128, "ue8m0", dtype);
    check("f8e5m2", 32, "ue8m0", dtype);
  }
}

// f32 scales keep the division: x / s is not x · (1/s) for them.
TEST(FakeQuantBits, F32ScalesMatchTheReference) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    check("f8e4m3", 128, "f32", dtype);
    check("f8e4m3", 64, "f32", dtype);
    check("fp4e2m1", 16, "f32", dtype);
  }
}

// Blocks that do not divide by 8 (no vectors, one span a block) and one larger than a tile.
TEST(FakeQuantBits, OddAndLargeBlocksMatchTheReference) {
  check("fp4e2m1", 7, "ue8m0", DType::F32);
  check("f8e4m3", 20, "ue8m0", DType::BF16);
  check("f8e4m3", 8192, "ue8m0", DType::F32);
}

}  // namespace
}  // namespace tilerun::kernels
