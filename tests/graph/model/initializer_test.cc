// The seeded initialiser (determinism, the documented generator, statistics), the conversions it
// rounds through (against independent references), and load_tensors' checks.
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "graph/model/numeric_convert.h"
#include "tilerun/error.h"
#include "tilerun/model.h"
#include "tilerun/tensor.h"

namespace tilerun {
namespace {

namespace fs = std::filesystem;
using graph::load_element;
using graph::store_element;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

TensorDecl decl(const std::string& name, TensorRole role, DType dtype, std::vector<int64_t> shape,
                Initializer init = {}) {
  TensorDecl d;
  d.name = name;
  d.role = role;
  d.dtype = dtype;
  d.shape = std::move(shape);
  for (int64_t s : d.shape) d.dims.push_back(std::to_string(s));
  d.init = init;
  return d;
}

Model small_model() {
  Model m;
  m.name = "small";
  m.file = "small.yaml";
  m.tensors = {
      decl("x", TensorRole::Input, DType::F32, {4, 8}, {Initializer::Kind::Uniform, -1, 1}),
      decl("w", TensorRole::Weight, DType::BF16, {8, 8}, {Initializer::Kind::Normal, 0, 0.02}),
      decl("q", TensorRole::Weight, DType::FP4E2M1, {8, 4}, {Initializer::Kind::Normal, 0, 2}),
      decl("s", TensorRole::Weight, DType::E8M0, {8}, {Initializer::Kind::Ones}),
      decl("y", TensorRole::Activation, DType::F32, {4, 8}),
  };
  m.tensors[1].loc = {"small.yaml", 7, 5};
  return m;
}

// Fresh random data each run; a failure prints its seed, and TILERUN_TEST_SEED replays it.
uint64_t test_seed() {
  if (const char* s = std::getenv("TILERUN_TEST_SEED")) return std::strtoull(s, nullptr, 10);
  return std::random_device{}();
}

std::vector<double> values(const HostTensor& t) {
  std::vector<double> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_element(t.dtype, t.data.data(), i);
  return v;
}

// ----------------------------------------------------------------------------------------------
// The initialiser

TEST(InitializerTest, CoversInputsAndWeightsOnly) {
  TensorMap t = initialize_tensors(small_model(), 1);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_FALSE(t.count("y"));
  for (const auto& [name, x] : t) EXPECT_EQ(x.nbytes(), dtype_bytes(x.dtype, x.numel())) << name;
  EXPECT_EQ(t["q"].shape, (std::vector<int64_t>{8, 4}));
  EXPECT_EQ(t["q"].nbytes(), 16);
}

TEST(InitializerTest, SameSeedSameBytesOtherSeedOrNameOtherBytes) {
  Model m = small_model();
  TensorMap a = initialize_tensors(m, 1234);
  TensorMap b = initialize_tensors(m, 1234);
  TensorMap c = initialize_tensors(m, 1235);
  for (const char* name : {"x", "w", "q"}) {
    EXPECT_EQ(a[name].data, b[name].data) << name;
    EXPECT_NE(a[name].data, c[name].data) << name;
  }
  // Two tensors alike in all but name get independent streams.
  TensorDecl d1 =
      decl("layer.0.w", TensorRole::Weight, DType::F32, {64}, {Initializer::Kind::Uniform, 0, 1});
  TensorDecl d2 = d1;
  d2.name = "layer.1.w";
  EXPECT_NE(initialize_tensor(d1, 5).data, initialize_tensor(d2, 5).data);
  // A tensor's values do not depend on the other tensors of the model.
  Model only_x;
  only_x.tensors = {m.tensors[0]};
  EXPECT_EQ(initialize_tensors(only_x, 1234)["x"].data, a["x"].data);
}

// The generator exactly as the comment atop graph/model/initializer.cc documents it, written again
// here; plus values computed by an independent Python script from the same text.
uint64_t doc_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
double doc_u(uint64_t seed, const std::string& name, uint64_t c) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char ch : name) h = (h ^ ch) * 0x100000001B3ull;
  uint64_t key = doc_mix(doc_mix(seed) ^ h);
  return static_cast<double>(doc_mix(key + (c + 1) * 0x9E3779B97F4A7C15ull) >> 11) * 0x1.0p-53;
}

TEST(InitializerTest, FollowsTheDocumentedGenerator) {
  const double a = -0.75, b = 2.5;
  TensorDecl du =
      decl("enc.w_q", TensorRole::Weight, DType::F32, {300}, {Initializer::Kind::Uniform, a, b});
  TensorDecl dn =
      decl("enc.w_k", TensorRole::Weight, DType::F32, {300}, {Initializer::Kind::Normal, a, b});
  std::vector<double> u = values(initialize_tensor(du, 99));
  std::vector<double> n = values(initialize_tensor(dn, 99));
  for (uint64_t i = 0; i < 300; ++i) {
    volatile double scaled = (b - a) * doc_u(99, "enc.w_q", i);
    EXPECT_EQ(u[i], static_cast<float>(a + scaled)) << i;
    double s = 0;
    for (uint64_t j = 0; j < 12; ++j) s += doc_u(99, "enc.w_k", 12 * i + j);
    volatile double spread = b * (s - 6);
    EXPECT_EQ(n[i], static_cast<float>(a + spread)) << i;
  }
}

TEST(InitializerTest, MatchesGoldenBitsFromAnIndependentImplementation) {
  // seed 42, tensor "w": Uniform(-1, 1) and Normal(0, 1) as f32, from a Python transcription.
  const uint32_t uniform[] = {0x3f31cf7d, 0xbd840e65, 0xbe45c090, 0x3c350d5b};
  const uint32_t normal[] = {0x3f490d38, 0x3f9a9295, 0xbe6c6670, 0x3f302ed8};
  HostTensor tu = initialize_tensor(
      decl("w", TensorRole::Weight, DType::F32, {4}, {Initializer::Kind::Uniform, -1, 1}), 42);
  HostTensor tn = initialize_tensor(
      decl("w", TensorRole::Weight, DType::F32, {4}, {Initializer::Kind::Normal, 0, 1}), 42);
  for (int i = 0; i < 4; ++i) {
    uint32_t got_u, got_n;
    std::memcpy(&got_u, tu.data.data() + 4 * i, 4);
    std::memcpy(&got_n, tn.data.data() + 4 * i, 4);
    EXPECT_EQ(got_u, uniform[i]) << i;
    EXPECT_EQ(got_n, normal[i]) << i;
  }
}

TEST(InitializerTest, NormalHasItsMeanAndStd) {
  const int64_t n = int64_t{1} << 20;
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  HostTensor t = initialize_tensor(
      decl("big", TensorRole::Weight, DType::F32, {n}, {Initializer::Kind::Normal, 0.5, 2.0}),
      seed);
  double sum = 0, sum_sq = 0, lo = kInf, hi = -kInf;
  for (double v : values(t)) {
    sum += v;
    sum_sq += v * v;
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
  double mean = sum / n, stddev = std::sqrt(sum_sq / n - mean * mean);
  // Standard errors: 2/1024 for the mean, ~2/1448 for the std; 6 of them is safe.
  EXPECT_NEAR(mean, 0.5, 0.012);
  EXPECT_NEAR(stddev, 2.0, 0.01);
  EXPECT_GE(lo, 0.5 - 6 * 2.0);  // Irwin–Hall is bounded
  EXPECT_LT(hi, 0.5 + 6 * 2.0);
  EXPECT_LT(lo, 0.5 - 4 * 2.0) << "tails should reach 4 sigma in 2^20 samples";
}

TEST(InitializerTest, UniformCoversItsRangeEvenly) {
  const int64_t n = int64_t{1} << 20;
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  HostTensor t = initialize_tensor(
      decl("u", TensorRole::Input, DType::F32, {n}, {Initializer::Kind::Uniform, -3.0, 5.0}), seed);
  std::vector<int64_t> bins(16, 0);
  for (double v : values(t)) {
    ASSERT_GE(v, -3.0);
    ASSERT_LE(v, 5.0);
    ++bins[std::min<int64_t>(15, static_cast<int64_t>((v + 3.0) / 0.5))];
  }
  const double expected = n / 16.0;  // binomial sd ~ 250: 1000 is 4 sd
  for (int64_t b : bins) EXPECT_NEAR(b, expected, 1000);
}

TEST(InitializerTest, ConstantKindsInEveryDType) {
  struct Case {
    DType dtype;
    Initializer init;
    std::vector<uint8_t> bytes;  // of a 2-element tensor
  };
  using K = Initializer::Kind;
  const Case cases[] = {
      {DType::F32, {K::Ones}, {0, 0, 0x80, 0x3f, 0, 0, 0x80, 0x3f}},
      {DType::BF16, {K::Constant, -2.0}, {0x00, 0xc0, 0x00, 0xc0}},
      {DType::F16, {K::Zeros}, {0, 0, 0, 0}},
      {DType::F8E4M3, {K::Constant, 1000.0}, {0x7e, 0x7e}},        // saturates to 448
      {DType::I32, {K::Constant, 2.5}, {2, 0, 0, 0, 2, 0, 0, 0}},  // ties to even
      {DType::I64,
       {K::Constant, -3.5},
       {0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xfc, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
        0xff}},
      {DType::U8, {K::Constant, 300.0}, {255, 255}},
      {DType::FP4E2M1, {K::Constant, -1.5}, {0xbb}},  // code 0xb = -1.5, both nibbles
      {DType::E8M0, {K::Ones}, {127, 127}},
      {DType::F8E5M2, {K::Constant, 1e6}, {0x7c, 0x7c}},  // overflows to +inf
      {DType::Bool, {K::Ones}, {1, 1}},
      {DType::Bool, {K::Constant, 0.25}, {0, 0}},  // rounds to false
  };
  for (const Case& c : cases) {
    HostTensor t = initialize_tensor(decl("c", TensorRole::Weight, c.dtype, {2}, c.init), 3);
    EXPECT_EQ(t.data, c.bytes) << dtype_name(c.dtype);
  }
}

TEST(InitializerTest, BadShapeNamesTheTensor) {
  TensorDecl d = decl("w", TensorRole::Weight, DType::F32, {-3});
  d.loc = {"m.yaml", 4, 9};
  try {
    initialize_tensor(d, 0);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "m.yaml:4:9: error: tensor 'w': shape [-3] has a negative dimension");
  }
}

// ----------------------------------------------------------------------------------------------
// Conversions, each against a reference that shares no code with graph/model/numeric_convert.cc.

// Round-to-nearest-even by search: codes 0..max_code (positive, increasing in value) decoded by
// `decode`; the neighbours of |x| compared by exact double differences, a tie going to the even
// code. Returns nullopt when |x| rounds above max_code (overflow: infinity or saturation).
template <typename Decode>
std::optional<uint32_t> reference_round(double a, uint32_t max_code, Decode decode) {
  uint32_t lo = 0, hi = max_code;  // largest code with decode(code) <= a
  if (a >= decode(max_code)) {
    lo = max_code;
  } else {
    while (lo < hi) {
      uint32_t mid = lo + (hi - lo + 1) / 2;
      if (decode(mid) <= a)
        lo = mid;
      else
        hi = mid - 1;
    }
  }
  double below = decode(lo);
  if (below == a) return lo;
  // Above max_code the next step would be one more ulp of the top binade.
  double above = lo < max_code ? decode(lo + 1) : below + (below - decode(lo - 1));
  double d_lo = a - below, d_hi = above - a;
  bool up = d_hi < d_lo || (d_hi == d_lo && (lo & 1));
  if (!up) return lo;
  if (lo == max_code) return std::nullopt;
  return lo + 1;
}

struct FormatUnderTest {
  const char* name;
  int sign_shift;
  uint32_t max_code;
  std::optional<uint32_t> overflow_code;  // nullopt: saturate to max_code
  double (*decode)(uint32_t);
  uint32_t (*round)(double);
  int emin_log2, emax_log2;  // the range random inputs are drawn from
};

const FormatUnderTest kFormats[] = {
    {"f32", 31, 0x7F7FFFFF, 0x7F800000, [](uint32_t c) { return graph::f32_bits_to_double(c); },
     [](double x) { return graph::round_to_f32_bits(x); }, -155, 129},
    {"bf16", 15, 0x7F7F, 0x7F80, [](uint32_t c) { return graph::bf16_to_double(c); },
     [](double x) -> uint32_t { return graph::round_to_bf16(x); }, -140, 129},
    {"f16", 15, 0x7BFF, 0x7C00, [](uint32_t c) { return graph::f16_to_double(c); },
     [](double x) -> uint32_t { return graph::round_to_f16(x); }, -28, 17},
    {"f8e4m3", 7, 0x7E, std::nullopt, [](uint32_t c) { return graph::f8e4m3_to_double(c); },
     [](double x) -> uint32_t { return graph::round_to_f8e4m3(x); }, -12, 10},
    {"fp4e2m1", 3, 0x7, std::nullopt, [](uint32_t c) { return graph::fp4e2m1_to_double(c); },
     [](double x) -> uint32_t { return graph::round_to_fp4e2m1(x); }, -4, 4},
};

uint32_t expected_code(const FormatUnderTest& f, double x) {
  uint32_t sign = std::signbit(x) ? 1u << f.sign_shift : 0;
  std::optional<uint32_t> r = reference_round(std::fabs(x), f.max_code, f.decode);
  return sign | (r ? *r : f.overflow_code.value_or(f.max_code));
}

TEST(ConvertTest, RandomDoublesRoundLikeTheSearchReference) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (const FormatUnderTest& f : kFormats) {
    SCOPED_TRACE(f.name);
    std::uniform_int_distribution<int> exp(f.emin_log2, f.emax_log2);
    for (int i = 0; i < 20000; ++i) {
      // Random 53-bit mantissa, random exponent across (and beyond) the format's range.
      double x = std::ldexp(1.0 + static_cast<double>(rng() >> 12) * 0x1.0p-52, exp(rng));
      if (rng() & 1) x = -x;
      ASSERT_EQ(f.round(x), expected_code(f, x)) << std::hexfloat << x;
    }
  }
}

TEST(ConvertTest, ExactCodesMidpointsAndNeighboursOfMidpoints) {
  for (const FormatUnderTest& f : kFormats) {
    SCOPED_TRACE(f.name);
    // Every code for the small formats, a stride through the large ones.
    uint32_t step = f.max_code > 0xFFFF ? 0x1001 : 1;
    for (uint32_t c = 0; c <= f.max_code; c += step) {
      double v = f.decode(c);
      EXPECT_EQ(f.round(v), c) << "exact " << v;
      EXPECT_EQ(f.round(-v), c | (1u << f.sign_shift)) << "exact " << -v;
      // The midpoint to the next code (or beyond the top) is exact in double: a tie.
      double next = c < f.max_code ? f.decode(c + 1) : v + (v - f.decode(c - 1));
      double mid = (v + next) / 2;
      for (double x : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, kInf)})
        EXPECT_EQ(f.round(x), expected_code(f, x)) << std::hexfloat << x;
    }
  }
}

TEST(ConvertTest, Specials) {
  for (const FormatUnderTest& f : kFormats) {
    SCOPED_TRACE(f.name);
    uint32_t sign = 1u << f.sign_shift;
    uint32_t top = f.overflow_code.value_or(f.max_code);
    EXPECT_EQ(f.round(0.0), 0u);
    EXPECT_EQ(f.round(-0.0), sign);
    EXPECT_EQ(f.round(kInf), top);
    EXPECT_EQ(f.round(-kInf), sign | top);
    EXPECT_EQ(f.round(1e300), top);
    EXPECT_EQ(f.round(4.9e-324), 0u) << "the smallest double underflows to zero";
    EXPECT_EQ(f.round(-4.9e-324), sign);
  }
  EXPECT_TRUE(std::isnan(graph::f32_bits_to_double(graph::round_to_f32_bits(kNaN))));
  EXPECT_EQ(graph::round_to_bf16(kNaN), 0x7FC0);
  EXPECT_EQ(graph::round_to_f16(-kNaN), 0x7E00);
  EXPECT_EQ(graph::round_to_f8e4m3(kNaN), 0x7F);
  EXPECT_EQ(graph::round_to_fp4e2m1(kNaN), 0x7) << "e2m1 has no NaN: saturates";
}

TEST(ConvertTest, F32MatchesTheHardwareCast) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    double x = std::bit_cast<double>(rng());  // any double at all, NaNs aside
    if (std::isnan(x)) continue;
    ASSERT_EQ(graph::round_to_f32_bits(x), std::bit_cast<uint32_t>(static_cast<float>(x)))
        << std::hexfloat << x;
  }
}

TEST(ConvertTest, Bf16MatchesTheBitTrickOnFloats) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = static_cast<uint32_t>(rng());
    if ((u & 0x7F800000) == 0x7F800000) continue;  // inf/NaN: the trick does not handle them
    // The usual float -> bf16 rounding: add 0x7FFF plus the kept lsb, truncate.
    uint32_t trick = (u + 0x7FFF + ((u >> 16) & 1)) >> 16;
    ASSERT_EQ(graph::round_to_bf16(std::bit_cast<float>(u)), trick) << std::hex << u;
  }
  // Straight from double, not through float: this value rounds to a float that is an exact
  // bf16 tie (1 + 2^-8), which float-first rounding would then send down to even.
  EXPECT_EQ(graph::round_to_bf16(1.0 + 0x1.0p-8 + 0x1.0p-40), 0x3F81);
  EXPECT_EQ(graph::round_to_bf16(1.0 + 0x1.0p-8), 0x3F80);      // tie, to even
  EXPECT_EQ(graph::round_to_bf16(1.0 + 3 * 0x1.0p-8), 0x3F82);  // tie, to even
}

#if defined(__FLT16_MANT_DIG__)
TEST(ConvertTest, F16MatchesTheCompilersFloat16) {
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> exp(-28, 17);
  for (int i = 0; i < 200000; ++i) {
    double x = std::ldexp(1.0 + static_cast<double>(rng() >> 12) * 0x1.0p-52, exp(rng));
    if (rng() & 1) x = -x;
    _Float16 h = static_cast<_Float16>(x);
    uint16_t bits;
    std::memcpy(&bits, &h, 2);
    ASSERT_EQ(graph::round_to_f16(x), bits) << std::hexfloat << x;
  }
  for (uint32_t c = 0; c < 0x10000; ++c) {
    uint16_t bits = static_cast<uint16_t>(c);
    _Float16 h;
    std::memcpy(&h, &bits, 2);
    double v = graph::f16_to_double(bits);
    if (std::isnan(static_cast<double>(h))) {
      EXPECT_TRUE(std::isnan(v)) << c;
    } else {
      EXPECT_EQ(v, static_cast<double>(h)) << c;
    }
  }
}
#endif

TEST(ConvertTest, F8E4M3Table) {
  EXPECT_EQ(graph::f8e4m3_to_double(0x00), 0.0);
  EXPECT_EQ(graph::f8e4m3_to_double(0x01), 0x1.0p-9);  // smallest subnormal
  EXPECT_EQ(graph::f8e4m3_to_double(0x07), 7 * 0x1.0p-9);
  EXPECT_EQ(graph::f8e4m3_to_double(0x08), 0x1.0p-6);  // smallest normal
  EXPECT_EQ(graph::f8e4m3_to_double(0x38), 1.0);
  EXPECT_EQ(graph::f8e4m3_to_double(0x3C), 1.5);
  EXPECT_EQ(graph::f8e4m3_to_double(0x78), 256.0);
  EXPECT_EQ(graph::f8e4m3_to_double(0x7E), 448.0);
  EXPECT_EQ(graph::f8e4m3_to_double(0xFE), -448.0);
  EXPECT_TRUE(std::isnan(graph::f8e4m3_to_double(0x7F)));
  EXPECT_TRUE(std::isnan(graph::f8e4m3_to_double(0xFF)));
  EXPECT_EQ(graph::round_to_f8e4m3(464.0), 0x7E);  // the tie above 448 saturates
  EXPECT_EQ(graph::round_to_f8e4m3(470.0), 0x7E);  // nearer 480, which e4m3 spends on NaN
  EXPECT_EQ(graph::round_to_f8e4m3(-1e6), 0xFE);
  EXPECT_EQ(graph::round_to_f8e4m3(0x1.0p-10), 0x00);      // tie 0 | 2^-9: even is 0
  EXPECT_EQ(graph::round_to_f8e4m3(3 * 0x1.0p-10), 0x02);  // tie 2^-9 | 2^-8: even is code 2
  EXPECT_EQ(graph::round_to_f8e4m3(1.0625), 0x38);         // tie 1 | 1.125
  EXPECT_EQ(graph::round_to_f8e4m3(1.1875), 0x3A);         // tie 1.125 | 1.25
}

TEST(ConvertTest, Fp4E2M1Table) {
  const double table[8] = {0, 0.5, 1, 1.5, 2, 3, 4, 6};
  for (uint8_t c = 0; c < 16; ++c) {
    double v = c & 8 ? -table[c & 7] : table[c & 7];
    EXPECT_EQ(graph::fp4e2m1_to_double(c), v) << int(c);
    EXPECT_EQ(graph::round_to_fp4e2m1(v), c) << v;
  }
  // Ties go to the even code.
  EXPECT_EQ(graph::round_to_fp4e2m1(0.25), 0);  // 0 | 0.5
  EXPECT_EQ(graph::round_to_fp4e2m1(0.75), 2);  // 0.5 | 1
  EXPECT_EQ(graph::round_to_fp4e2m1(1.25), 2);  // 1 | 1.5
  EXPECT_EQ(graph::round_to_fp4e2m1(1.75), 4);  // 1.5 | 2
  EXPECT_EQ(graph::round_to_fp4e2m1(2.5), 4);   // 2 | 3
  EXPECT_EQ(graph::round_to_fp4e2m1(3.5), 6);   // 3 | 4
  EXPECT_EQ(graph::round_to_fp4e2m1(5.0), 6);   // 4 | 6
  EXPECT_EQ(graph::round_to_fp4e2m1(-5.0), 0xE);
  EXPECT_EQ(graph::round_to_fp4e2m1(5.01), 7);
  EXPECT_EQ(graph::round_to_fp4e2m1(100.0), 7);  // saturates
  EXPECT_EQ(graph::round_to_fp4e2m1(-kInf), 0xF);
}

TEST(ConvertTest, E8M0) {
  EXPECT_EQ(graph::round_to_e8m0(1.0), 127);
  EXPECT_EQ(graph::round_to_e8m0(0.7), 126);   // nearer 0.5 than 1
  EXPECT_EQ(graph::round_to_e8m0(0.75), 127);  // the tie goes up
  EXPECT_EQ(graph::round_to_e8m0(3.0), 129);
  EXPECT_EQ(graph::round_to_e8m0(2.9), 128);
  EXPECT_EQ(graph::round_to_e8m0(0x1.0p127), 254);
  EXPECT_EQ(graph::round_to_e8m0(0x1.0p200), 254);
  EXPECT_EQ(graph::round_to_e8m0(kInf), 254);
  EXPECT_EQ(graph::round_to_e8m0(0x1.0p-127), 0);
  EXPECT_EQ(graph::round_to_e8m0(0x1.0p-140), 0);
  EXPECT_EQ(graph::round_to_e8m0(0.0), 0);
  EXPECT_EQ(graph::round_to_e8m0(-4.0), 0);
  EXPECT_EQ(graph::round_to_e8m0(kNaN), 255);
  for (int c = 0; c < 255; ++c) {
    EXPECT_EQ(graph::e8m0_to_double(c), std::ldexp(1.0, c - 127));
    EXPECT_EQ(graph::round_to_e8m0(graph::e8m0_to_double(c)), c);
  }
  EXPECT_TRUE(std::isnan(graph::e8m0_to_double(255)));
}

TEST(ConvertTest, Integers) {
  const int64_t i32_min = std::numeric_limits<int32_t>::min();
  const int64_t i32_max = std::numeric_limits<int32_t>::max();
  const int64_t i64_min = std::numeric_limits<int64_t>::min();
  const int64_t i64_max = std::numeric_limits<int64_t>::max();
  auto i32 = [&](double x) { return graph::round_to_integer(x, i32_min, i32_max); };
  auto i64 = [&](double x) { return graph::round_to_integer(x, i64_min, i64_max); };
  EXPECT_EQ(i32(2.5), 2);
  EXPECT_EQ(i32(3.5), 4);
  EXPECT_EQ(i32(-2.5), -2);
  EXPECT_EQ(i32(-2.51), -3);
  EXPECT_EQ(i32(0.49999999999999994), 0);
  EXPECT_EQ(i32(1e-300), 0);
  EXPECT_EQ(i32(1e20), i32_max);
  EXPECT_EQ(i32(-1e20), i32_min);
  EXPECT_EQ(i32(2147483646.5), 2147483646);
  EXPECT_EQ(i32(kNaN), 0);
  EXPECT_EQ(i64(0x1.0p63), i64_max);
  EXPECT_EQ(i64(-0x1.0p63), i64_min);
  EXPECT_EQ(i64(0x1.fffffffffffffp62), int64_t{0x7FFFFFFFFFFFFC00});
  EXPECT_EQ(i64(-kInf), i64_min);
  EXPECT_EQ(graph::round_to_integer(254.5, 0, 255), 254);
  EXPECT_EQ(graph::round_to_integer(-3.0, 0, 255), 0);
  // Random halves against the reference definition: floor, then the even one of a tie.
  const uint64_t seed = test_seed();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  for (int i = 0; i < 10000; ++i) {
    double x = static_cast<double>(static_cast<int64_t>(rng() % 2000001) - 1000000) / 4;
    double f = std::floor(x), d = x - f;
    double want = d < 0.5 ? f : d > 0.5 ? f + 1 : (std::fmod(f, 2) == 0 ? f : f + 1);
    ASSERT_EQ(i32(x), static_cast<int64_t>(want)) << x;
  }
}

TEST(ConvertTest, ElementsPackLittleEndianAndFp4LowNibbleFirst) {
  std::vector<uint8_t> buf(8, 0);
  store_element(DType::FP4E2M1, buf.data(), 0, 1.0);   // code 2
  store_element(DType::FP4E2M1, buf.data(), 1, -6.0);  // code 0xF
  store_element(DType::FP4E2M1, buf.data(), 3, 0.5);   // code 1, high nibble of byte 1
  EXPECT_EQ(buf[0], 0xF2);
  EXPECT_EQ(buf[1], 0x10);
  store_element(DType::FP4E2M1, buf.data(), 1, 0.0);  // rewriting keeps the neighbour
  EXPECT_EQ(buf[0], 0x02);
  EXPECT_EQ(load_element(DType::FP4E2M1, buf.data(), 0), 1.0);
  EXPECT_EQ(load_element(DType::FP4E2M1, buf.data(), 3), 0.5);

  store_element(DType::I32, buf.data(), 1, -2.0);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin() + 4, buf.end()),
            (std::vector<uint8_t>{0xFE, 0xFF, 0xFF, 0xFF}));
  EXPECT_EQ(load_element(DType::I32, buf.data(), 1), -2.0);
  store_element(DType::BF16, buf.data(), 0, 1.0);
  EXPECT_EQ(buf[0], 0x80);
  EXPECT_EQ(buf[1], 0x3F);
  store_element(DType::I64, buf.data(), 0, -1.0);
  EXPECT_EQ(buf, std::vector<uint8_t>(8, 0xFF));
  for (DType t : {DType::F32, DType::BF16, DType::F16, DType::F8E4M3, DType::I32, DType::I64,
                  DType::U8, DType::FP4E2M1, DType::E8M0, DType::F8E5M2}) {
    store_element(t, buf.data(), 0, 4.0);  // exact in every type
    EXPECT_EQ(load_element(t, buf.data(), 0), 4.0) << dtype_name(t);
  }
  // A bool holds false or true: values round to an integer (ties to even), nonzero (NaN
  // included) is true, and any nonzero byte reads as true.
  const std::pair<double, uint8_t> bools[] = {{0.0, 0},  {0.49, 0}, {0.5, 0},         {0.51, 1},
                                              {-0.5, 0}, {1.5, 1},  {-3.0, 1},        {1.0, 1},
                                              {-0.0, 0}, {1e30, 1}, {std::nan(""), 1}};
  for (auto [value, byte] : bools) {
    store_element(DType::Bool, buf.data(), 0, value);
    EXPECT_EQ(buf[0], byte) << value;
    EXPECT_EQ(load_element(DType::Bool, buf.data(), 0), byte) << value;
  }
  buf[0] = 0x80;
  EXPECT_EQ(load_element(DType::Bool, buf.data(), 0), 1.0);
}

// ----------------------------------------------------------------------------------------------
// load_tensors

class LoadTensorsTest : public testing::Test {
 protected:
  LoadTensorsTest() {
    dir_ =
        fs::temp_directory_path() / ("tilerun_init_" + std::to_string(::getpid()) + "_" +
                                     testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    path_ = (dir_ / "w.safetensors").string();
  }
  ~LoadTensorsTest() override { fs::remove_all(dir_); }

  std::string load_error(const Model& m, const TensorMap& file) {
    write_safetensors(path_, file);
    try {
      load_tensors(m, path_, 0);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(path_), std::string::npos) << e.what();
      return e.what();
    }
    ADD_FAILURE() << "no error";
    return "";
  }

  fs::path dir_;
  std::string path_;
};

TEST_F(LoadTensorsTest, FileValuesWinMissingOnesComeFromTheInitializer) {
  Model m = small_model();
  TensorMap init = initialize_tensors(m, 77);
  TensorMap file;
  file["w"] = initialize_tensor(m.tensors[1], 1000);  // other values than seed 77 gives
  file["q"] = init["q"];
  write_safetensors(path_, file);
  TensorMap got = load_tensors(m, path_, 77);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got["w"].data, file["w"].data);
  EXPECT_NE(got["w"].data, init["w"].data);
  EXPECT_EQ(got["q"].data, init["q"].data);
  EXPECT_EQ(got["q"].dtype, DType::FP4E2M1);
  EXPECT_EQ(got["x"].data, init["x"].data);
  EXPECT_EQ(got["s"].data, init["s"].data);
}

TEST_F(LoadTensorsTest, DTypeMismatchNamesTensorBothTypesAndFile) {
  Model m = small_model();
  TensorMap file;
  file["w"] = initialize_tensor(decl("w", TensorRole::Weight, DType::F32, {8, 8}), 0);
  std::string what = load_error(m, file);
  EXPECT_NE(what.find("tensor 'w' is f32 [8, 8] in the file, but the model declares it bf16 "
                      "[8, 8] (small.yaml:7:5)"),
            std::string::npos)
      << what;
}

TEST_F(LoadTensorsTest, ShapeMismatchIsRefused) {
  Model m = small_model();
  TensorMap file;
  file["x"] = initialize_tensor(decl("x", TensorRole::Input, DType::F32, {8, 4}), 0);
  std::string what = load_error(m, file);
  EXPECT_NE(what.find("tensor 'x' is f32 [8, 4] in the file, but the model declares it f32 [4, 8]"),
            std::string::npos)
      << what;
}

TEST_F(LoadTensorsTest, UnknownTensorsAreNamed) {
  Model m = small_model();
  TensorMap file;
  file["wieght"] = initialize_tensor(decl("wieght", TensorRole::Weight, DType::U8, {2}), 0);
  file["y"] = initialize_tensor(m.tensors[4], 0);
  std::string what = load_error(m, file);
  EXPECT_NE(what.find("not inputs or weights of model 'small'"), std::string::npos) << what;
  EXPECT_NE(what.find("'wieght'"), std::string::npos) << what;
  EXPECT_NE(what.find("'y' (an activation"), std::string::npos) << what;
}

// The header is compared with the model before any data is read: a (sparse) file whose header
// gives 'x' 2^40 bytes is refused by its shape at the cost of the header, not read in full (that
// was std::bad_alloc, or a terabyte of reading).
TEST_F(LoadTensorsTest, HeaderIsCheckedAgainstTheModelBeforeTheData) {
  const uint64_t huge = uint64_t{1} << 40;
  std::string header = "{\"x\":{\"dtype\":\"U8\",\"shape\":[" + std::to_string(huge) +
                       "],\"data_offsets\":[0," + std::to_string(huge) + "]}}";
  {
    std::ofstream out(path_, std::ios::binary);
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>(header.size() >> (8 * i)));
    out << header;
  }
  std::error_code ec;
  fs::resize_file(path_, 8 + header.size() + huge, ec);  // sparse: no disk used
  if (ec) GTEST_SKIP() << "no sparse 1 TiB file here: " << ec.message();
  try {
    load_tensors(small_model(), path_, 0);
    ADD_FAILURE() << "a 1 TiB tensor was accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("tensor 'x' is u8 [1099511627776] in the file, but the model declares it "
                        "f32 [4, 8]"),
              std::string::npos)
        << what;
  }
}

// Names from the file are echoed with control characters escaped.
TEST_F(LoadTensorsTest, UnknownNamesWithControlCharactersAreEscaped) {
  Model m = small_model();
  TensorMap file;
  std::string name = std::string("w\0\x1b[2J", 6);
  file[name] = initialize_tensor(decl("w", TensorRole::Weight, DType::U8, {2}), 0);
  std::string what = load_error(m, file);
  EXPECT_NE(what.find("'w\\x00\\x1b[2J'"), std::string::npos) << what;
  EXPECT_EQ(what.find('\x1b'), std::string::npos) << what;
}

// A FIFO is refused as not a regular file, without opening it (opening blocks for a writer).
TEST_F(LoadTensorsTest, FifoIsRefusedWithoutBlocking) {
  std::string fifo = (dir_ / "fifo.safetensors").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    load_tensors(small_model(), fifo, 0);
    ADD_FAILURE() << "a FIFO was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
  }
}

TEST_F(LoadTensorsTest, MissingFileIsAnError) {
  EXPECT_THROW(load_tensors(small_model(), (dir_ / "none.safetensors").string(), 0), Error);
}

}  // namespace
}  // namespace tilerun
