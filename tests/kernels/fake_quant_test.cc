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
#include <map>

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
std::vector<double> block_values(std::mt19937_64& rng, int kind, int64_t n, const Fmt& f,
                                 double denorm, int range) {
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
    std::vector<double> b = block_values(rng, kinds.back(), block_size, fmt(format), denorm, range);
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

namespace tilerun::kernels {
namespace {

// quantize (kernels/block_quant.cc) on blocks of every kind above: its codes and scales bit for
// bit against its reference, and dequantize(quantize(x)) against fake_quant(x) bit for bit
// wherever the scale is stored exactly (f32 scales always; e8m0 while amax / max_finite lies in
// [2^-127, 2^127]). `block` is [B] (300 rows of one block) or [R, B] (a 5 × 3 grid of blocks).
void check_quantize(const std::string& format, const std::vector<int64_t>& block,
                    const std::string& scale, DType dtype) {
  std::mt19937_64 rng(testing::test_seed());
  const double denorm = dtype == DType::F32 ? 0x1p-149 : dtype == DType::BF16 ? 0x1p-133 : 0x1p-24;
  const int range = dtype == DType::F16 ? 8 : 100;
  const int64_t br = block.size() == 2 ? block[0] : 1, bc = block.back();
  const int64_t grid_r = block.size() == 2 ? 5 : 300, grid_c = block.size() == 2 ? 3 : 1;
  const int64_t cols = grid_c * bc;
  RefTensor x{.shape = block.size() == 2 ? std::vector<int64_t>{grid_r * br, cols}
                                         : std::vector<int64_t>{grid_r, bc}};
  x.data.resize(static_cast<size_t>(grid_r * br * cols));
  std::vector<double> amax(static_cast<size_t>(grid_r * grid_c));
  for (int64_t rb = 0; rb < grid_r; ++rb)
    for (int64_t cb = 0; cb < grid_c; ++cb) {
      std::vector<double> b = block_values(rng, static_cast<int>((rb * grid_c + cb) % 8), br * bc,
                                           fmt(format), denorm, range);
      for (int64_t e = 0; e < br * bc; ++e)
        x.data[(rb * br + e / bc) * cols + cb * bc + e % bc] = b[e];
    }
  x = testing::rounded(dtype, x);
  for (int64_t rb = 0; rb < grid_r; ++rb)
    for (int64_t cb = 0; cb < grid_c; ++cb) {
      double& m = amax[rb * grid_c + cb];
      for (int64_t e = 0; e < br * bc; ++e) {
        const double a = std::abs(x.data[(rb * br + e / bc) * cols + cb * bc + e % bc]);
        m = std::isnan(a) || std::isnan(m) ? a + m : std::max(m, a);
      }
    }
  const Attrs attrs = {{"format", format}, {"block", block}, {"scale", scale}};
  const std::string what = format + " " + scale + " block " + std::to_string(br) + "x" +
                           std::to_string(bc) + " " + std::string(dtype_name(dtype));
  std::vector<RefTensor> want = testing::run_reference("quantize", {x}, attrs);
  testing::KernelRunner runner;
  std::vector<testing::Bytes> got = runner.run("quantize", {x}, attrs, dtype, 1234.5);
  ASSERT_EQ(got.size(), 2u);
  for (int o = 0; o < 2; ++o) {
    std::vector<double> g = testing::decode(got[o]);
    ASSERT_EQ(g.size(), want[o].data.size());
    int64_t mismatches = 0;
    for (size_t i = 0; i < g.size(); ++i)
      if (!same(g[i], want[o].data[i]) && mismatches++ < 5)
        ADD_FAILURE() << what << ": output " << o << " element " << i << " is " << std::hexfloat
                      << g[i] << ", the reference " << want[o].data[i] << std::defaultfloat;
    EXPECT_EQ(mismatches, 0) << what << " output " << o;
  }
  if (block.size() == 2 || scale == "f8e4m3") return;  // fake_quant has 1×B blocks, f32/ue8m0
  const Fmt f = fmt(format);
  const std::map<int, DType> types = {{0, got[0].dtype}, {1, got[1].dtype}};
  std::vector<testing::Bytes> back = runner.run(
      "dequantize", {{x.shape, testing::decode(got[0])}, {want[1].shape, testing::decode(got[1])}},
      {{"to", std::string(dtype_name(dtype))}}, dtype, 1234.5, types);
  const Attrs fq = {
      {"format", format}, {"block", bc}, {"scale", scale == "e8m0" ? "ue8m0" : "f32"}};
  std::vector<testing::Bytes> fake = runner.run("fake_quant", {x}, fq, dtype, 1234.5);
  std::vector<double> y = testing::decode(back[0]), w = testing::decode(fake[0]);
  int64_t compared = 0, mismatches = 0;
  for (size_t i = 0; i < y.size(); ++i) {
    const double a = amax[i / bc] / f.max;
    // fake_quant's power of two below e8m0's range (quantize stores 2^-127), or amax = inf
    // (fake_quant's whole block is NaN; quantize stores e8m0's largest, 2^127).
    if (scale == "e8m0" && ((a > 0 && a < 0x1p-127) || a > 0x1p127)) continue;
    ++compared;
    if (!same(y[i], w[i]) && mismatches++ < 5)
      ADD_FAILURE() << what << ": dequantize(quantize(x)) element " << i << " is " << std::hexfloat
                    << y[i] << ", fake_quant " << w[i] << std::defaultfloat;
  }
  EXPECT_EQ(mismatches, 0) << what;
  EXPECT_GT(compared, static_cast<int64_t>(y.size()) / 2) << what;
}

TEST(QuantizeBits, RowBlocksMatchTheReferenceAndFakeQuant) {
  for (DType dtype : {DType::F32, DType::BF16, DType::F16}) {
    check_quantize("f8e4m3", {128}, "f32", dtype);
    check_quantize("fp4e2m1", {32}, "e8m0", dtype);  // MXFP4
  }
  check_quantize("f8e5m2", {32}, "e8m0", DType::F32);
  check_quantize("f8e4m3", {64}, "e8m0", DType::BF16);
  check_quantize("fp4e2m1", {16}, "f32", DType::F32);
  check_quantize("f8e4m3", {8192}, "f32", DType::F32);  // longer than a tile
}

TEST(QuantizeBits, Nvfp4ScalesMatchTheReference) {
  for (DType dtype : {DType::F32, DType::BF16}) check_quantize("fp4e2m1", {16}, "f8e4m3", dtype);
}

TEST(QuantizeBits, SquareBlocksMatchTheReference) {
  check_quantize("f8e4m3", {128, 128}, "f32", DType::BF16);
  check_quantize("f8e4m3", {128, 128}, "e8m0", DType::F32);
  check_quantize("fp4e2m1", {16, 32}, "f8e4m3", DType::F32);
}

}  // namespace
}  // namespace tilerun::kernels
