// Batched matmul: each batch element's result is bit for bit the rank-2 matmul of its own
// matrices (the tiling and K order depend on one product's shape, never on the batch), for
// batched, shared and broadcast operands and every transpose pair; and a batch folded into a's
// rows gives the rank-2 matmul of the stacked rows.
#include <cstring>

#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;
using Ints = std::vector<int64_t>;

testing::KernelRunner& runner() {
  static testing::KernelRunner* r = new testing::KernelRunner;
  return *r;
}

// Matrix i of a tensor whose last two axes are the matrix.
RefTensor matrix(const RefTensor& t, int64_t i) {
  Ints shape(t.shape.end() - 2, t.shape.end());
  const int64_t n = shape[0] * shape[1];
  return {.shape = shape,
          .data = std::vector<double>(t.data.begin() + i * n, t.data.begin() + (i + 1) * n)};
}

struct Case {
  Ints a, b;
  bool ta, tb;
  // For c's batch element z, the matrix of a and of b it uses.
  std::function<int64_t(int64_t)> a_of, b_of;
  int64_t batch;
};

TEST(MatmulBatch, EachElementIsTheRank2ProductBitForBit) {
  auto same = [](int64_t z) { return z; };
  auto first = [](int64_t) { return int64_t{0}; };
  const std::vector<Case> cases = {
      {{3, 33, 130}, {3, 130, 40}, false, false, same, same, 3},
      {{2, 130, 33}, {2, 40, 130}, true, true, same, same, 2},
      {{33, 70}, {4, 70, 20}, false, false, first, same, 4},
      {{3, 700, 20}, {700, 18}, true, false, same, first, 3},    // skinny (N <= 32, K >= 512)
      {{2, 24, 600}, {2, 20, 600}, false, true, same, same, 2},  // skinny, both batched
      {{600, 9}, {3, 600, 30}, true, false, first, same, 3},     // skinny, b batched
      // a [2,1,..] and b [3,..] broadcast to c's [2,3]: a's matrix z / 3, b's z % 3.
      {{2, 1, 9, 70},
       {3, 70, 5},
       false,
       false,
       [](int64_t z) { return z / 3; },
       [](int64_t z) { return z % 3; },
       6},
  };
  std::mt19937_64 rng(testing::test_seed());
  for (const Case& c : cases)
    for (DType dtype : {DType::F32}) {
      RefTensor a = testing::rounded(dtype, testing::random_tensor(rng, c.a));
      RefTensor b = testing::rounded(dtype, testing::random_tensor(rng, c.b));
      Attrs attrs{{"transpose_a", c.ta}, {"transpose_b", c.tb}};
      std::vector<Bytes> got = runner().run("matmul", {a, b}, attrs, dtype, std::nan(""));
      ASSERT_EQ(got.size(), 1u);
      const size_t per = got[0].data.size() / c.batch;
      for (int64_t z = 0; z < c.batch; ++z) {
        std::vector<Bytes> want = runner().run(
            "matmul", {matrix(a, c.a_of(z)), matrix(b, c.b_of(z))}, attrs, dtype, std::nan(""));
        ASSERT_EQ(want[0].data.size(), per);
        EXPECT_EQ(std::memcmp(got[0].data.data() + z * per, want[0].data.data(), per), 0)
            << "batch element " << z << " of " << testing::OpCase{"matmul", 0, {{c.a, c.b}, attrs}}
            << " " << dtype_name(dtype);
      }
    }
}

// bf16 on the tensor cores: the batch of three runs 128-row tiles (96 tiles in all) while each
// element alone runs 64-row ones (32 tiles; matmul.cc tc_tile_rows): the same bits.
TEST(MatmulBatch, TensorCoreTileRowsDoNotChangeTheBits) {
  std::mt19937_64 rng(testing::test_seed());
  const DType dtype = DType::BF16;
  RefTensor a = testing::rounded(dtype, testing::random_tensor(rng, {3, 500, 16}));
  RefTensor b = testing::rounded(dtype, testing::random_tensor(rng, {3, 16, 1000}));
  std::vector<Bytes> got = runner().run("matmul", {a, b}, {}, dtype, std::nan(""));
  ASSERT_EQ(got.size(), 1u);
  const size_t per = got[0].data.size() / 3;
  for (int64_t z = 0; z < 3; ++z) {
    std::vector<Bytes> want =
        runner().run("matmul", {matrix(a, z), matrix(b, z)}, {}, dtype, std::nan(""));
    ASSERT_EQ(want[0].data.size(), per);
    EXPECT_EQ(std::memcmp(got[0].data.data() + z * per, want[0].data.data(), per), 0)
        << "batch element " << z;
  }
}

// a [B, M, K] @ b [K, N]: one matmul over B·M rows, bit for bit.
TEST(MatmulBatch, SharedRightOperandFoldsIntoRows) {
  std::mt19937_64 rng(testing::test_seed());
  RefTensor a = testing::rounded(DType::F32, testing::random_tensor(rng, {4, 9, 70}));
  RefTensor b = testing::rounded(DType::F32, testing::random_tensor(rng, {70, 33}));
  std::vector<Bytes> got = runner().run("matmul", {a, b}, {}, DType::F32, std::nan(""));
  RefTensor rows = a;
  rows.shape = {36, 70};
  std::vector<Bytes> want = runner().run("matmul", {rows, b}, {}, DType::F32, std::nan(""));
  EXPECT_EQ(got[0].data, want[0].data);
}

// `t` ([d0, d1, d2]) with axes 0 and 1 exchanged.
RefTensor swap01(const RefTensor& t) {
  const int64_t d0 = t.shape[0], d1 = t.shape[1], d2 = t.shape[2];
  RefTensor r{.shape = {d1, d0, d2}, .data = std::vector<double>(t.data.size())};
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      for (int64_t k = 0; k < d2; ++k)
        r.data[(j * d0 + i) * d2 + k] = t.data[(i * d1 + j) * d2 + k];
  return r;
}

// The same for c's bytes (`e` bytes an element).
std::vector<uint8_t> swap01(const std::vector<uint8_t>& t, int64_t d0, int64_t d1, int64_t d2,
                            int64_t e) {
  std::vector<uint8_t> r(t.size());
  for (int64_t i = 0; i < d0; ++i)
    for (int64_t j = 0; j < d1; ++j)
      std::memcpy(&r[(j * d0 + i) * d2 * e], &t[(i * d1 + j) * d2 * e],
                  static_cast<size_t>(d2 * e));
  return r;
}

// einsum on the tensor cores reads an operand with its batch between the matrix's axes
// ("tgk,gko->tgo", the output projection's groups) in place and writes such a c in place: one
// kernel, and bit for bit the batched matmul of the operands permuted to lead with the batch
// (the copies it replaces). The forward and both gradients' equations, with ragged T.
TEST(MatmulBatch, EinsumReadsAndWritesTheBatchInTheMiddleInPlace) {
  std::mt19937_64 rng(testing::test_seed());
  const DType dt = DType::BF16;
  const int64_t t = 70, g = 3, k = 136, o = 40;
  RefTensor x = testing::rounded(dt, testing::random_tensor(rng, {t, g, k}));   // tgk
  RefTensor w = testing::rounded(dt, testing::random_tensor(rng, {g, k, o}));   // gko
  RefTensor dy = testing::rounded(dt, testing::random_tensor(rng, {t, g, o}));  // tgo
  // The weight gradient's K is T: a multiple of 8 for the tensor cores' 16-byte rows.
  RefTensor x8 = testing::rounded(dt, testing::random_tensor(rng, {t + 2, g, k}));
  RefTensor dy8 = testing::rounded(dt, testing::random_tensor(rng, {t + 2, g, o}));
  struct Case {
    const char *eq, *lead;  // the in-place equation, the one with the batch leading
    RefTensor a, b;         // its operands
    bool a_mid, b_mid, c_mid;
  };
  const Case cases[] = {
      {"tgk,gko->tgo", "gtk,gko->gto", x, w, true, false, true},
      {"tgo,gko->tgk", "gto,gko->gtk", dy, w, true, false, true},
      {"tgk,tgo->gko", "gtk,gto->gko", x8, dy8, true, true, false},
  };
  const OpSchema& einsum = *op_registry().find("einsum");
  for (const Case& c : cases) {
    const Attrs attrs{{"equation", std::string(c.eq)}};
    const std::vector<TensorType> in = {{dt, c.a.shape}, {dt, c.b.shape}};
    const OpExpansion ex = einsum.expand(in, einsum.infer(in, attrs), attrs);
    ASSERT_EQ(ex.calls.size(), 1u) << c.eq;
    EXPECT_NE(ex.calls[0].kernel->sig.name.find("_mid"), std::string::npos) << c.eq;
    std::vector<Bytes> got = runner().run("einsum", {c.a, c.b}, attrs, dt, std::nan(""));
    std::vector<Bytes> want =
        runner().run("einsum", {c.a_mid ? swap01(c.a) : c.a, c.b_mid ? swap01(c.b) : c.b},
                     {{"equation", std::string(c.lead)}}, dt, std::nan(""));
    ASSERT_EQ(got.size(), 1u);
    ASSERT_EQ(want.size(), 1u);
    // want's c [g, t, n] back to got's [t, g, n] when c is mid.
    const int64_t n = static_cast<int64_t>(want[0].data.size()) / (2 * g * c.a.shape[0]);
    EXPECT_EQ(got[0].data, c.c_mid ? swap01(want[0].data, g, c.a.shape[0], n, 2) : want[0].data)
        << c.eq;
  }
}

}  // namespace
}  // namespace tilerun::kernels
