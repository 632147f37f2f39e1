// The tensor core's model (codegen/mma_model.h) on values whose results are known by hand:
// exact products, alignment to the largest exponent with truncation toward zero, the final
// rounding toward zero, and IEEE special values. How it compares with the H200 is the GPU
// test's business (tests/cuda/tensor_core_gpu_test.cc).
#include "compiler/codegen/mma_model.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace tilerun::compiler {
namespace {

uint16_t bf16(float f) {  // exact bf16 values only
  uint32_t u;
  std::memcpy(&u, &f, 4);
  EXPECT_EQ(u & 0xffff, 0u) << f << " is not a bf16 value";
  return static_cast<uint16_t>(u >> 16);
}

float dot(float c, const std::vector<float>& a, const std::vector<float>& b,
          MmaModel model = hopper_mma_model()) {
  std::vector<uint16_t> x, y;
  for (float v : a) x.push_back(bf16(v));
  for (float v : b) y.push_back(bf16(v));
  return mma_dot(model, c, x.data(), 1, y.data(), 1, static_cast<int64_t>(x.size()), false);
}

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

TEST(MmaModel, ExactWhenEverythingFits) {
  // Small integers: products and sums are exact in any scheme.
  EXPECT_EQ(dot(0.0f, {1, 2, 3, 4}, {5, 6, 7, 8}), 70.0f);
  EXPECT_EQ(dot(1.5f, {-1, 2}, {3, 0.25f}), -1.0f);
  // A product needs 16 significant bits: exact (no rounding of products).
  EXPECT_EQ(dot(0.0f, {255.0f}, {255.0f}), 65025.0f);
}

TEST(MmaModel, SmallTermsAreTruncatedBelowTheLargestExponent) {
  const MmaModel m = hopper_mma_model();
  // 2^24 + 1 + ... : each 1 lies frac_bits + 1 bits below 2^(frac_bits + 1)... built so that a
  // term below 2^(emax - frac_bits) vanishes entirely.
  const float big = std::ldexp(1.0f, m.frac_bits + 1);  // leading bit at frac_bits + 1
  EXPECT_EQ(dot(big, {0.5f}, {1.0f}), big);             // 2^-1 is below the kept bits: gone
  // Within the kept bits but below f32's 24: summed exactly, then truncated toward zero.
  EXPECT_EQ(dot(std::ldexp(1.0f, 24), {1.0f, 1.0f, 1.0f}, {1.0f, 1.0f, 1.0f}),
            std::ldexp(1.0f, 24) + 2.0f);  // 2^24 + 3 truncates to 2^24 + 2, not 2^24 + 4
  EXPECT_EQ(dot(-std::ldexp(1.0f, 24), {1.0f}, {-3.0f}), -(std::ldexp(1.0f, 24) + 2.0f));
}

TEST(MmaModel, GroupsChainInKOrder) {
  // 17 terms: the first group of 16 sums exactly to 16, the 17th is added to that result.
  std::vector<float> a(17, 1.0f), b(17, 1.0f);
  EXPECT_EQ(dot(0.0f, a, b), 17.0f);
  // Alignment happens per group: 2^25 + sixteen terms of 2^-1 loses them all in one group
  // (each below the kept bits), while a group of their sum alone keeps it.
  const float big = std::ldexp(1.0f, 26);
  std::vector<float> halves(16, 0.5f), ones(16, 1.0f);
  EXPECT_EQ(dot(big, halves, ones), big);
  EXPECT_EQ(dot(0.0f, halves, ones) + big, big + 8.0f);
}

TEST(MmaModel, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(bits(dot(0.0f, {inf}, {1.0f})), bits(inf));
  EXPECT_EQ(bits(dot(0.0f, {inf, -inf}, {1.0f, 1.0f})), 0x7fc00000u);
  EXPECT_EQ(bits(dot(0.0f, {inf}, {0.0f})), 0x7fc00000u);
  EXPECT_EQ(bits(dot(std::numeric_limits<float>::quiet_NaN(), {1.0f}, {1.0f})), 0x7fc00000u);
  EXPECT_EQ(bits(dot(-inf, {1.0f}, {2.0f})), bits(-inf));
  // Signed zeros: -0 only when every term is -0.
  EXPECT_EQ(bits(dot(-0.0f, {-1.0f}, {0.0f})), bits(-0.0f));
  EXPECT_EQ(bits(dot(-0.0f, {1.0f}, {0.0f})), bits(0.0f));
  EXPECT_EQ(bits(dot(0.0f, {1.0f, -1.0f}, {3.0f, 3.0f})), bits(0.0f));
  // An overflow rounds toward zero: the largest finite f32.
  EXPECT_EQ(
      dot(std::numeric_limits<float>::max(), {std::ldexp(1.0f, 100)}, {std::ldexp(1.0f, 100)}),
      std::numeric_limits<float>::max());
  // Subnormal products and results are kept (no flush to zero).
  const float tiny = std::ldexp(1.0f, -80);
  EXPECT_EQ(bits(dot(0.0f, {tiny}, {tiny})), bits(0.0f));  // 2^-160: below f32, toward zero
  EXPECT_EQ(dot(0.0f, {std::ldexp(1.0f, -70)}, {std::ldexp(1.0f, -70)}), std::ldexp(1.0f, -140));
}

TEST(MmaModel, HalfPrecisionInputs) {
  // f16 1.0 = 0x3c00, 2.0 = 0x4000, the smallest subnormal 2^-24 = 0x0001, inf 0x7c00.
  const uint16_t one = 0x3c00, two = 0x4000, sub = 0x0001, inf = 0x7c00;
  const MmaModel m = hopper_mma_model();
  std::vector<uint16_t> a{one, two}, b{two, two};
  EXPECT_EQ(mma_dot(m, 0.0f, a.data(), 1, b.data(), 1, 2, true), 6.0f);
  std::vector<uint16_t> s{sub}, t{two};
  EXPECT_EQ(mma_dot(m, 0.0f, s.data(), 1, t.data(), 1, 1, true), std::ldexp(1.0f, -23));
  // 1 + 2^-24 needs 25 bits: f32's 24 keep 1 (toward zero).
  std::vector<uint16_t> u{one, sub}, w{one, one};
  EXPECT_EQ(mma_dot(m, 0.0f, u.data(), 1, w.data(), 1, 2, true), 1.0f);
  std::vector<uint16_t> c{inf}, d{one};
  EXPECT_TRUE(std::isinf(mma_dot(m, 0.0f, c.data(), 1, d.data(), 1, 1, true)));
}

// FP8 inputs: each format's codes decode to their values (normals, subnormals, the largest
// finite), e4m3's S.1111.111 and e5m2's exponent 31 are its specials, and mixed formats multiply.
TEST(MmaModel, Fp8CodesDecodeToTheirValues) {
  const MmaModel m = hopper_mma_model_fp8();
  auto dot8 = [&](std::vector<uint8_t> a, MmaInput fa, std::vector<uint8_t> b, MmaInput fb) {
    return mma_dot8(m, 0.0f, a.data(), 1, fa, b.data(), 1, fb, static_cast<int64_t>(a.size()));
  };
  const MmaInput e4 = MmaInput::E4M3, e5 = MmaInput::E5M2;
  // e4m3: 1.0 = 0x38, 2.0 = 0x40, 448 = 0x7e (the largest), 2^-9 = 0x01 (the smallest subnormal).
  EXPECT_EQ(dot8({0x38, 0x40}, e4, {0x7e, 0x38}, e4), 450.0f);
  EXPECT_EQ(dot8({0x01}, e4, {0x38}, e4), std::ldexp(1.0f, -9));
  EXPECT_EQ(dot8({0xb8}, e4, {0x3c}, e4), -1.5f);  // -1 * 1.5
  // e5m2: 1.0 = 0x3c, 57344 = 0x7b (the largest), 2^-16 = 0x01; times e4m3's 2.0.
  EXPECT_EQ(dot8({0x7b}, e5, {0x40}, e4), 114688.0f);
  EXPECT_EQ(dot8({0x01}, e5, {0x3c}, e5), std::ldexp(1.0f, -16));
  // Specials: e4m3 0x7f is NaN (no infinities); e5m2 0x7c is +inf, 0x7d NaN, inf * 0 NaN.
  EXPECT_TRUE(std::isnan(dot8({0x7f}, e4, {0x38}, e4)));
  EXPECT_EQ(dot8({0x7c}, e5, {0x3c}, e5), std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(dot8({0x7d}, e5, {0x3c}, e5)));
  EXPECT_TRUE(std::isnan(dot8({0x7c}, e5, {0x00}, e5)));
}

// The FP8 model's group is the instruction's 32 products, and it keeps fewer bits: a term more
// than frac_bits below the group's largest is gone.
TEST(MmaModel, Fp8GroupsAndKeptBits) {
  const MmaModel m = hopper_mma_model_fp8();
  EXPECT_EQ(m.group, 32);
  // 448 * 448 = 200704 (leading bit 2^17) and 2^-9 * 1: 2^-9 is 26 bits below, past frac_bits.
  std::vector<uint8_t> a = {0x7e, 0x01}, b = {0x7e, 0x38};
  EXPECT_EQ(mma_dot8(m, 0.0f, a.data(), 1, MmaInput::E4M3, b.data(), 1, MmaInput::E4M3, 2),
            200704.0f);
  // 33 ones: the first group of 32 sums to 32, the 33rd is added in a group of its own.
  std::vector<uint8_t> ones(33, 0x38);
  EXPECT_EQ(mma_dot8(m, 0.0f, ones.data(), 1, MmaInput::E4M3, ones.data(), 1, MmaInput::E4M3, 33),
            33.0f);
  // A group's result keeps 14 significant bits. 31 products 448·448 = 200704 (exponent 16 by its
  // inputs' exponents, so terms keep bits down to 2^(16 - 13) = 8) and 8·1: the exact sum 6221832
  // spans 2^22 .. 2^3, 20 bits; cut to 14 it is 6221824 (a multiple of 2^9).
  std::vector<uint8_t> c(31, 0x7e), d(31, 0x7e);
  c.push_back(0x50), d.push_back(0x38);  // 0x50 = 8, 0x38 = 1
  EXPECT_EQ(mma_dot8(m, 0.0f, c.data(), 1, MmaInput::E4M3, d.data(), 1, MmaInput::E4M3, 32),
            6221824.0f);
  MmaModel wide = m;
  wide.sum_bits = 24;
  EXPECT_EQ(mma_dot8(wide, 0.0f, c.data(), 1, MmaInput::E4M3, d.data(), 1, MmaInput::E4M3, 32),
            6221832.0f);
}

// tf32 inputs: an f32 operand keeps its sign, exponent and 10 leading fraction bits; the 13 low
// bits are dropped (toward zero), or rounded to nearest (ties away) with round_tf32_inputs.
// Specials and subnormals by the f32's own bits; the group is the k8 instruction's 8 products.
TEST(MmaModel, Tf32InputsKeepTenFractionBits) {
  MmaModel m = hopper_mma_model_tf32();
  EXPECT_EQ(m.group, 8);
  auto dot = [&](std::vector<float> a, std::vector<float> b) {
    return mma_dot_tf32(m, 0.0f, a.data(), 1, b.data(), 1, static_cast<int64_t>(a.size()));
  };
  const float ulp10 = std::ldexp(1.0f, -10);  // tf32's unit in the last place at 1
  // 1 + 2^-10 + 2^-11 + 2^-20: truncated to 1 + 2^-10; rounded up to 1 + 2^-9.
  const float x = 1.0f + ulp10 + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20);
  m.round_tf32_inputs = false;
  EXPECT_EQ(dot({x}, {1.0f}), 1.0f + ulp10);
  EXPECT_EQ(dot({-x}, {1.0f}), -(1.0f + ulp10));
  m.round_tf32_inputs = true;
  EXPECT_EQ(dot({x}, {1.0f}), 1.0f + 2 * ulp10);
  // Just below a tie rounds down; 2 - 2^-24 rounds up to 2 (a carry out of the fraction).
  EXPECT_EQ(dot({1.0f + std::ldexp(1.0f, -11) - std::ldexp(1.0f, -23)}, {1.0f}), 1.0f);
  EXPECT_EQ(dot({2.0f - std::ldexp(1.0f, -23)}, {1.0f}), 2.0f);
  m.round_tf32_inputs = false;
  EXPECT_EQ(dot({2.0f - std::ldexp(1.0f, -23)}, {1.0f}), 2.0f - ulp10);
  // f32's range: 2^100 * 2^-120, and a subnormal (2^-130, exact in tf32, whose subnormals are
  // multiples of 2^-136) times 2^10.
  EXPECT_EQ(dot({std::ldexp(1.0f, 100)}, {std::ldexp(1.0f, -120)}), std::ldexp(1.0f, -20));
  EXPECT_EQ(dot({std::ldexp(1.0f, -130)}, {std::ldexp(1.0f, 10)}), std::ldexp(1.0f, -120));
  // Subnormals whose bits lie below tf32's 10 (2^-140, 2^-149): gone.
  EXPECT_EQ(dot({std::ldexp(1.0f, -140)}, {std::ldexp(1.0f, 10)}), 0.0f);
  EXPECT_EQ(dot({std::ldexp(1.0f, -149)}, {1.0f}), 0.0f);
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(dot({inf}, {1.0f}), inf);
  EXPECT_TRUE(std::isnan(dot({inf}, {0.0f})));
  EXPECT_TRUE(std::isnan(dot({std::numeric_limits<float>::quiet_NaN()}, {1.0f})));
  // Nine ones: a group of eight, then the ninth on its own.
  std::vector<float> ones(9, 1.0f);
  EXPECT_EQ(dot(ones, ones), 9.0f);
}

}  // namespace
}  // namespace tilerun::compiler
