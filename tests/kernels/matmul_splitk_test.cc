// Split K of the tensor-core matmul (kernels/matmul.cc plan_tc_split and plan_tc_split_rows,
// matmul_tc.h): a bf16/f16 product with few output tiles and a long K runs each 64-aligned K
// slice's chain into f32 partials, then adds them in split order. Every output is checked bit for
// bit against the tensor core's model (compiler/codegen/mma_model.h): each slice's dot product from
// +0, then f32 adds from slice 0 on, rounded once. The slices are restated here, not read from the
// kernel.
#include <algorithm>
#include <cstring>
#include <limits>
#include <tuple>

#include "compiler/codegen/mma_model.h"
#include "kernels/matmul_tc.h"
#include "tests/kernels/kernel_runner.h"
#include "tilerun/tilerun.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

testing::KernelRunner& runner() {
  static testing::KernelRunner* r = new testing::KernelRunner;
  return *r;
}

uint16_t bits16(DType dt, double v) {
  Bytes e = testing::encode(dt, {v});
  uint16_t h;
  std::memcpy(&h, e.data.data(), 2);
  return h;
}

OpExpansion expand(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  const OpSchema& schema = *op_registry().find("matmul");
  const Attrs attrs = {{"transpose_a", ta}, {"transpose_b", tb}};
  std::vector<TensorType> in = {{dt, ta ? std::vector{k, m} : std::vector{m, k}},
                                {dt, tb ? std::vector{n, k} : std::vector{k, n}}};
  return schema.expand(in, schema.infer(in, attrs), attrs);
}

// c = op(a) op(b) with a [k, m] (transposed) or [m, k]; `slice` the split's length in K (the
// last one ragged): c[i, j] = round(dot(slice 0) + dot(slice 1) + ..), each dot the model's
// chain.
void expect_split_model(DType dt, bool ta, bool tb, int64_t m, int64_t n, int64_t k,
                        int64_t slice) {
  std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(k));
  RefTensor a =
      testing::rounded(dt, testing::random_tensor(rng, ta ? std::vector{k, m} : std::vector{m, k}));
  RefTensor b =
      testing::rounded(dt, testing::random_tensor(rng, tb ? std::vector{n, k} : std::vector{k, n}));
  std::vector<Bytes> got =
      runner().run("matmul", {a, b}, {{"transpose_a", ta}, {"transpose_b", tb}}, dt, kNaN);
  ASSERT_EQ(got.size(), 1u);
  const compiler::MmaModel model = compiler::hopper_mma_model();
  int64_t mismatches = 0;
  std::vector<uint16_t> row(k), col(k);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        row[p] = bits16(dt, ta ? a.data[p * m + i] : a.data[i * k + p]);
        col[p] = bits16(dt, tb ? b.data[j * k + p] : b.data[p * n + j]);
      }
      float want = 0.0f;
      for (int64_t lo = 0; lo < k; lo += slice) {
        const float part = compiler::mma_dot(model, 0.0f, &row[lo], 1, &col[lo], 1,
                                             std::min(slice, k - lo), dt == DType::F16);
        want = lo == 0 ? part : want + part;
      }
      uint16_t have;
      std::memcpy(&have, got[0].data.data() + 2 * (i * n + j), 2);
      if (have != bits16(dt, want) && mismatches++ < 3)
        ADD_FAILURE() << dtype_name(dt) << " tb=" << tb << " K=" << k << ": c[" << i << ", " << j
                      << "] bits " << have << ", split model " << bits16(dt, want);
    }
  EXPECT_EQ(mismatches, 0) << dtype_name(dt) << " tb=" << tb << " K=" << k;
}

// One tile, K = 2148: two splits of 17 steps (1088), the second ragged (1060, not a multiple of
// 64); K = 5000: four of 20 steps (1280), the last 1160. M and N ragged in their tile.
TEST(MatmulSplitK, EveryOutputIsTheSlicesModelDotProductsAddedInOrder) {
  expect_split_model(DType::BF16, true, false, 70, 40, 2148, 1088);
  expect_split_model(DType::BF16, true, true, 33, 130, 5000, 1280);
  expect_split_model(DType::F16, true, false, 9, 24, 2148, 1088);
}

// The same split on the copy_async loop (M, K and, b not transposed, N multiples of 8): each
// slice's boxes start at its own first step, past K zeros; a second slice ragged.
TEST(MatmulSplitK, AsyncCopySlicesAreTheModelsDotProductsAddedInOrder) {
  expect_split_model(DType::BF16, true, false, 72, 40, 2148, 1088);
  expect_split_model(DType::BF16, true, true, 16, 130, 5000, 1280);
  expect_split_model(DType::F16, true, true, 136, 8, 2200, 1152);
}

// A not transposed a on copy_async, K from 4096: N = 24 (one column tile), K = 8256: four
// slices of 33 steps (2112), the last ragged (1920); N = 16 with b transposed, K = 4104: two.
TEST(MatmulSplitK, NotTransposedASlicesAreTheModelsDotProductsAddedInOrder) {
  expect_split_model(DType::BF16, false, false, 40, 24, 8256, 2112);
  expect_split_model(DType::F16, false, true, 9, 16, 4104, 2112);
}

// With a not transposed the split is planned from N and K alone: the same kernels, slices and
// splits for every M, so a row's bits do not depend on the batch (dx = dy w^T through a wide
// layer, N = 256, K = 8192: 4 slices of 2048 at M = 8 and at M = 4096 alike).
TEST(MatmulSplitK, NotTransposedASplitDoesNotDependOnM) {
  for (int64_t m : {8, 1024, 4096}) {
    OpExpansion ex = expand(DType::BF16, false, true, m, 256, 8192);
    ASSERT_EQ(ex.calls.size(), 2u) << m;
    EXPECT_EQ(ex.calls[0].kernel->sig.name, "matmul_tc_nt_128x128x64_tma5_splitk_bf16");
    EXPECT_EQ(ex.calls[0].dims, (std::vector<int64_t>{m, 256, 8192, 2048, 4})) << m;
  }
  // A short K or N past two column tiles (N = 384, 512, 1024, 4096): one kernel, at every M.
  EXPECT_EQ(expand(DType::BF16, false, true, 1024, 256, 4095).calls.size(), 1u);
  for (int64_t m : {8, 1024, 4096})
    for (int64_t n : {384, 512, 1024, 4096}) {
      OpExpansion one = expand(DType::BF16, false, false, m, n, 8192);
      ASSERT_EQ(one.calls.size(), 1u) << m << "x" << n;
      EXPECT_EQ(one.calls[0].kernel->sig.name.find("splitk"), std::string::npos) << m << "x" << n;
    }
}

// GpuSession.BigTileMatmulRowsEqualTheSmallTilesRows (tests/cuda/session_gpu_test.cc) rests on
// its M = 4096, N = 1024, K = 4096 products (b both ways) running the 256-row tile: no split, no
// other tile (its forty-first session version kept 128-row tiles; in the forty-second session's
// first run the split still took N = 1024), and on its M = 1000 products running another tile.
TEST(MatmulSplitK, TheBigTileGpuTestsProductsRunTheBigTile) {
  for (bool tb : {false, true}) {
    const OpExpansion big = expand(DType::BF16, false, tb, 4096, 1024, 4096);
    ASSERT_EQ(big.calls.size(), 1u) << "tb=" << tb;
    EXPECT_EQ(big.calls[0].kernel->sig.name,
              std::string("matmul_tc_n") + (tb ? "t" : "n") +
                  (kTcBigTilesOn ? "_256x128x64_tma4_bf16" : "_128x128x64_tma5_bf16"));
    const OpExpansion small = expand(DType::BF16, false, tb, 1000, 1024, 4096);
    ASSERT_EQ(small.calls.size(), 1u) << "tb=" << tb;
    EXPECT_EQ(small.calls[0].kernel->sig.name.find("_256x"), std::string::npos);
  }
}

// The attention backward's p^T dO (M = 1280, N = 512, K = 16384: 40 tiles) splits 6 ways
// (40 * 6 <= 2 * 132 blocks) of 43 steps, the sum kernel after; a short K or a grid that
// already fills the GPU keep the one-kernel product.
TEST(MatmulSplitK, TransposedASplitsWithFewTilesAndLongK) {
  OpExpansion ex = expand(DType::BF16, true, false, 1280, 512, 16384);
  ASSERT_EQ(ex.calls.size(), 2u);
  EXPECT_EQ(ex.calls[0].kernel->sig.name, "matmul_tc_tn_128x128x64_tma5_splitk_bf16");
  EXPECT_EQ(ex.calls[0].dims, (std::vector<int64_t>{1280, 512, 16384, 43 * 64, 6}));
  EXPECT_EQ(ex.calls[1].kernel->sig.name, "matmul_splitk_sum_bf16");
  ASSERT_EQ(ex.scratch.size(), 1u);
  EXPECT_EQ(ex.scratch[0].shape, (std::vector<int64_t>{6, 1280, 512}));
  for (const auto& [ta, m, n, k] : std::vector<std::tuple<bool, int64_t, int64_t, int64_t>>{
           {true, 1280, 512, 2047}, {true, 2048, 1152, 16384}}) {
    OpExpansion one = expand(DType::BF16, ta, false, m, n, k);
    ASSERT_EQ(one.calls.size(), 1u) << "ta=" << ta << " " << m << "x" << n << "x" << k;
    EXPECT_EQ(one.calls[0].kernel->sig.name.find("splitk"), std::string::npos);
  }
  // Rows not 16-byte aligned (M = 1276): the register-staged split.
  EXPECT_EQ(expand(DType::BF16, true, false, 1276, 512, 16384).calls[0].kernel->sig.name,
            "matmul_tc_tn_128x128x64_s3_splitk_bf16");
}

// A transposed a on copy_async where M, K and (b not transposed) N are multiples of 8, else the
// register-staged kernel: a weight gradient dW = x^T dy (M = 1024, N = 8192, K = 4096: 512
// tiles, no split; 256-row ones once kTcBigTilesOn) and its unaligned neighbours.
TEST(MatmulSplitK, TransposedAOnCopyAsyncWhereRowsAreAligned) {
  const struct {
    bool tb;
    int64_t m, n, k;
    std::string kernel;
  } cases[] = {
      // N > M: the row tiles first ("_rf") once kTcRowsFirstOn.
      {false, 1024, 8192, 4096,
       std::string(kTcBigTilesOn ? "matmul_tc_tn_256x128x64_tma4"
                                 : "matmul_tc_tn_128x128x64_tma5") +
           (kTcRowsFirstOn ? "_rf" : "") + "_bf16"},
      // N not a multiple of 8 with b transposed: the "_n1" kernel (c's rows not 16-byte aligned).
      {true, 1024, 8190, 4096,
       std::string(kTcBigTilesOn ? "matmul_tc_tt_256x128x64_tma4_n1"
                                 : "matmul_tc_tt_128x128x64_tma5_n1") +
           (kTcRowsFirstOn ? "_rf" : "") + "_bf16"},
      // N <= M: the column tiles first.
      {false, 8192, 1024, 4096,
       kTcBigTilesOn ? "matmul_tc_tn_256x128x64_tma4_bf16" : "matmul_tc_tn_128x128x64_tma5_bf16"},
      {false, 1020, 8192, 4096, "matmul_tc_tn_128x128x64_s3_bf16"},
      {false, 1024, 8190, 4096, "matmul_tc_tn_128x128x64_s3_bf16"},
      {false, 1024, 8192, 4092, "matmul_tc_tn_128x128x64_s3_bf16"},
  };
  for (const auto& c : cases) {
    OpExpansion ex = expand(DType::BF16, true, c.tb, c.m, c.n, c.k);
    ASSERT_EQ(ex.calls.size(), 1u);
    EXPECT_EQ(ex.calls[0].kernel->sig.name, c.kernel) << c.m << "x" << c.n << "x" << c.k;
  }
}

}  // namespace
}  // namespace tilerun::kernels
