// The 8-bit float formats in kernels (compiler/transforms/narrow_float.h), JIT-compiled by the
// CPU backend, against the host's independent conversion from double (graph/model/
// numeric_convert.h): every code decoded, and every rounding boundary — each midpoint between
// two neighbouring codes (the tie) and the floats just either side of it — plus specials and
// random bit patterns encoded. (tests/cuda/cuda_kernel_test.cc runs the same kernel on the GPU
// and compares bit for bit.)
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "compiler/codegen/cpu_backend.h"
#include "compiler/test_kernels.h"
#include "graph/model/numeric_convert.h"

namespace tilerun::compiler {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Outputs {
  std::vector<float> d4, d5, ds;
  std::vector<uint8_t> q4, q5, qs;
};

// Runs the test kernel: codes in c (the same byte for all three formats), values in x.
Outputs run(std::vector<uint8_t> c, std::vector<float> x) {
  static std::unique_ptr<CpuKernel> kernel = compile_cpu(testing::narrow_float_kernel());
  const size_t n = x.size();
  Outputs o{std::vector<float>(n),         std::vector<float>(n),
            std::vector<float>(n),         std::vector<uint8_t>(n, 0xAA),
            std::vector<uint8_t>(n, 0xAA), std::vector<uint8_t>(n, 0xAA)};
  kernel->launch({.buffers = {c.data(), c.data(), c.data(), x.data(), o.d4.data(), o.d5.data(),
                              o.ds.data(), o.q4.data(), o.q5.data(), o.qs.data()},
                  .dims = {static_cast<int64_t>(n)},
                  .scalars = {}});
  return o;
}

bool same(float a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

TEST(NarrowFloat, EveryCodeDecodesExactly) {
  std::vector<uint8_t> c(256);
  for (int i = 0; i < 256; ++i) c[i] = static_cast<uint8_t>(i);
  Outputs o = run(c, std::vector<float>(256, 1.0f));
  for (int i = 0; i < 256; ++i) {
    const uint8_t code = static_cast<uint8_t>(i);
    EXPECT_TRUE(same(o.d4[i], graph::f8e4m3_to_double(code)))
        << "e4m3 code " << i << ": " << o.d4[i];
    EXPECT_TRUE(same(o.d5[i], graph::f8e5m2_to_double(code)))
        << "e5m2 code " << i << ": " << o.d5[i];
    EXPECT_TRUE(same(o.ds[i], graph::e8m0_to_double(code))) << "e8m0 code " << i << ": " << o.ds[i];
  }
  // A few by hand, so the host decoder is checked against something else too.
  EXPECT_EQ(o.d4[0x7E], 448.0f);
  EXPECT_EQ(o.d4[0x01], std::ldexp(1.0f, -9));
  EXPECT_EQ(o.d5[0x7B], 57344.0f);
  EXPECT_EQ(o.d5[0x7C], kInf);
  EXPECT_EQ(o.d5[0x01], std::ldexp(1.0f, -16));
  EXPECT_EQ(o.ds[127], 1.0f);
  EXPECT_EQ(o.ds[0], std::ldexp(1.0f, -127));
}

// Every decoded value of every format, the midpoints between neighbours, and one float either
// side of each; then specials and random bit patterns.
std::vector<float> boundary_inputs() {
  std::vector<double> grid;
  for (int i = 0; i < 256; ++i) {
    for (double v : {graph::f8e4m3_to_double(uint8_t(i)), graph::f8e5m2_to_double(uint8_t(i)),
                     graph::e8m0_to_double(uint8_t(i))})
      if (std::isfinite(v)) grid.push_back(v);
  }
  // The next magnitude past the largest finite one (where rounding overflows) as a grid point.
  grid.insert(grid.end(), {480.0, -480.0, 65536.0, -65536.0, 0x1p128});
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  std::vector<float> x;
  auto add_around = [&](double v) {
    float f = static_cast<float>(v);
    if (static_cast<double>(f) != v) return;  // midpoints of e8m0 near 2^128 are not floats
    x.insert(x.end(), {f, std::nextafter(f, -kInf), std::nextafter(f, kInf)});
  };
  for (size_t i = 0; i < grid.size(); ++i) {
    add_around(grid[i]);
    if (i + 1 < grid.size()) add_around((grid[i] + grid[i + 1]) / 2);
  }
  // e8m0 rounds between powers of two at 1.5·2^k.
  for (int k = -127; k < 128; ++k) add_around(1.5 * std::ldexp(1.0, k));
  const float specials[] = {0.0f,
                            -0.0f,
                            kInf,
                            -kInf,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(),
                            1e-45f,
                            -1e-45f,
                            std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(),
                            std::bit_cast<float>(0x7f800001u),
                            std::bit_cast<float>(0xffc12345u)};
  x.insert(x.end(), std::begin(specials), std::end(specials));
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < (1 << 18); ++i) x.push_back(std::bit_cast<float>(uint32_t(rng())));
  return x;
}

TEST(NarrowFloat, RoundingMatchesTheHostAtEveryBoundary) {
  std::vector<float> x = boundary_inputs();
  Outputs o = run(std::vector<uint8_t>(x.size(), 0), x);
  int64_t checked = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(o.q4[i], graph::round_to_f8e4m3(x[i])) << "e4m3 of " << x[i] << " (" << i << ")";
    ASSERT_EQ(o.q5[i], graph::round_to_f8e5m2(x[i])) << "e5m2 of " << x[i] << " (" << i << ")";
    ASSERT_EQ(o.qs[i], graph::round_to_e8m0(x[i])) << "e8m0 of " << x[i] << " (" << i << ")";
    ++checked;
  }
  EXPECT_GT(checked, 200000);
}

TEST(NarrowFloat, RoundingRulesByHand) {
  // Ties to even, saturation, overflow, NaN: the formats' rules written out.
  std::vector<float> x = {
      448.0f,    464.0f,   1000.0f, kInf, -kInf,  // e4m3 saturates
      0x1p-10f,                                   // half the smallest e4m3 subnormal: ties to 0
      0x1.8p-9f,                                  // 1.5 steps: ties to even (2 steps)
      57344.0f,  61440.0f, 1.5f,    3.0f, std::numeric_limits<float>::quiet_NaN()};
  Outputs o = run(std::vector<uint8_t>(x.size(), 0), x);
  const std::vector<uint8_t> e4 = {0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x00,
                                   0x02, 0x7E, 0x7E, 0x3C, 0x44, 0x7F};
  const std::vector<uint8_t> e5 = {0x5F, 0x5F, 0x64, 0x7C, 0xFC, 0x14,
                                   0x1A, 0x7B, 0x7C, 0x3E, 0x42, 0x7E};
  const std::vector<uint8_t> s = {0x88, 0x88, 0x89, 0xFE, 0x00, 0x75,
                                  0x77, 0x8F, 0x8F, 0x80, 0x81, 0xFF};
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_EQ(o.q4[i], e4[i]) << "e4m3 of " << x[i];
    EXPECT_EQ(o.q5[i], e5[i]) << "e5m2 of " << x[i];
    EXPECT_EQ(o.qs[i], s[i]) << "e8m0 of " << x[i];
  }
}

// fp4e2m1 as value codes (no storage format yet): every code decoded, every tie and its
// neighbours, specials and random bit patterns encoded, against the host.
TEST(NarrowFloat, Fp4CodesMatchTheHost) {
  static std::unique_ptr<CpuKernel> kernel = compile_cpu(testing::fp4_kernel());
  std::vector<double> grid;
  for (int i = 0; i < 16; ++i) grid.push_back(graph::fp4e2m1_to_double(uint8_t(i)));
  grid.insert(grid.end(), {8.0, -8.0});  // past the largest magnitude: saturation
  std::sort(grid.begin(), grid.end());
  grid.erase(std::unique(grid.begin(), grid.end()), grid.end());
  std::vector<float> x;
  for (size_t i = 0; i < grid.size(); ++i) {
    std::vector<double> points = {grid[i]};
    if (i + 1 < grid.size()) points.push_back((grid[i] + grid[i + 1]) / 2);
    for (double v : points) {
      float f = static_cast<float>(v);
      x.insert(x.end(), {f, std::nextafter(f, -kInf), std::nextafter(f, kInf)});
    }
  }
  x.insert(x.end(), {0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(), 1e-45f,
                     -1e-45f, 0.25f, -0.25f, 0.75f, 1e30f});
  std::mt19937 rng(std::random_device{}());
  for (int i = 0; i < (1 << 16); ++i) x.push_back(std::bit_cast<float>(uint32_t(rng())));
  std::uniform_real_distribution<float> u(-7.0f, 7.0f);
  for (int i = 0; i < (1 << 16); ++i) x.push_back(u(rng));
  const size_t n = x.size();
  std::vector<int32_t> c(n), q(n, -1);
  for (size_t i = 0; i < n; ++i) c[i] = static_cast<int32_t>(i % 16);
  std::vector<float> d(n);
  kernel->launch({.buffers = {c.data(), x.data(), d.data(), q.data()},
                  .dims = {static_cast<int64_t>(n)},
                  .scalars = {}});
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(q[i], graph::round_to_fp4e2m1(x[i])) << "e2m1 of " << x[i] << " (" << i << ")";
    ASSERT_TRUE(same(d[i], graph::fp4e2m1_to_double(uint8_t(c[i])))) << "code " << c[i];
  }
  // By hand: 0.25 ties to 0 (even), 0.75 to 1, 2.5 to 2, 5 to 4 (even), 7 saturates to 6.
  std::vector<float> h = {0.25f, 0.75f, 2.5f, 5.0f, 7.0f, -7.0f, -0.0f};
  std::vector<int32_t> hc(h.size(), 0), hq(h.size(), -1);
  std::vector<float> hd(h.size());
  kernel->launch({.buffers = {hc.data(), h.data(), hd.data(), hq.data()},
                  .dims = {static_cast<int64_t>(h.size())},
                  .scalars = {}});
  EXPECT_EQ(hq, (std::vector<int32_t>{0x0, 0x2, 0x4, 0x6, 0x7, 0xF, 0x8}));
}

// round_to_narrow_float, the fake-quant's round trip on the f32 bits, against encoding then
// decoding, bit for bit (NaNs too): every boundary of every format, fp4's ties and neighbours,
// specials, and random bit patterns and values.
TEST(NarrowFloat, RoundTripOnTheBitsIsEncodeThenDecode) {
  static std::unique_ptr<CpuKernel> kernel = compile_cpu(testing::narrow_round_kernel());
  std::vector<float> x = boundary_inputs();
  for (int i = 0; i < 16; ++i) {
    const float v = static_cast<float>(graph::fp4e2m1_to_double(uint8_t(i)));
    for (float w : {v, v * 1.25f, v * 0.75f, v + 0.25f})
      x.insert(x.end(), {w, std::nextafter(w, -kInf), std::nextafter(w, kInf)});
  }
  std::mt19937 rng(std::random_device{}());
  std::uniform_real_distribution<float> u(-600.0f, 600.0f);
  for (int i = 0; i < (1 << 16); ++i) x.push_back(u(rng));
  const size_t n = x.size();
  std::vector<std::vector<float>> out(6, std::vector<float>(n, 0.0f));
  kernel->launch({.buffers = {x.data(), out[0].data(), out[1].data(), out[2].data(), out[3].data(),
                              out[4].data(), out[5].data()},
                  .dims = {static_cast<int64_t>(n)},
                  .scalars = {}});
  const char* names[] = {"e4m3", "e5m2", "e2m1"};
  for (int f = 0; f < 3; ++f)
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out[2 * f][i]), std::bit_cast<uint32_t>(out[2 * f + 1][i]))
          << names[f] << " of " << x[i] << " (bits " << std::hex << std::bit_cast<uint32_t>(x[i])
          << ")";
}

}  // namespace
}  // namespace tilerun::compiler
