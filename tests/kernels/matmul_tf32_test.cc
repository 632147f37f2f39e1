// matmul with `precision: tf32` (kernels/matmul.cc): f32 products on the tensor cores. Every
// output, for every pair of transposes, is checked bit for bit against the tensor core's tf32
// model (compiler/codegen/mma_model.h): the row's and column's dot product from +0 over K
// padded with zeros to the kernels' 32-wide steps. K a multiple of 8 runs the TMA kernel (a
// transposed a or a plain b copied transposed first); a ragged K the register-staged kernels,
// which transpose on their way to shared memory: the same chain, so the same bits.
#include <cstring>
#include <limits>

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

Attrs tf32_attrs(bool ta, bool tb) {
  return {{"transpose_a", ta}, {"transpose_b", tb}, {"precision", std::string("tf32")}};
}

OpExpansion expand(DType dt, const Attrs& attrs, int64_t m, int64_t n, int64_t k) {
  const OpSchema& schema = *op_registry().find("matmul");
  const bool ta = attr_bool(attrs, "transpose_a"), tb = attr_bool(attrs, "transpose_b");
  std::vector<TensorType> in = {{dt, ta ? std::vector{k, m} : std::vector{m, k}},
                                {dt, tb ? std::vector{n, k} : std::vector{k, n}}};
  return schema.expand(in, schema.infer(in, attrs), attrs);
}

std::vector<std::string> kernel_names(const OpExpansion& ex) {
  std::vector<std::string> names;
  for (const KernelCall& c : ex.calls) names.push_back(c.kernel->sig.name);
  return names;
}

void expect_model_bits(bool ta, bool tb, int64_t m, int64_t n, int64_t k) {
  std::mt19937_64 rng(testing::test_seed() + static_cast<uint64_t>(k * 4 + ta * 2 + tb));
  RefTensor a = testing::rounded(
      DType::F32, testing::random_tensor(rng, ta ? std::vector{k, m} : std::vector{m, k}));
  RefTensor b = testing::rounded(
      DType::F32, testing::random_tensor(rng, tb ? std::vector{n, k} : std::vector{k, n}));
  std::vector<Bytes> got = runner().run("matmul", {a, b}, tf32_attrs(ta, tb), DType::F32, kNaN);
  ASSERT_EQ(got.size(), 1u);
  const compiler::MmaModel model = compiler::hopper_mma_model_tf32();
  const int64_t padded = (k + 31) / 32 * 32;
  std::vector<float> row(padded, 0.0f), col(padded, 0.0f);
  int64_t mismatches = 0;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t p = 0; p < k; ++p) {
        row[p] = static_cast<float>(ta ? a.data[p * m + i] : a.data[i * k + p]);
        col[p] = static_cast<float>(tb ? b.data[j * k + p] : b.data[p * n + j]);
      }
      const float want = compiler::mma_dot_tf32(model, 0.0f, row.data(), 1, col.data(), 1, padded);
      float have;
      std::memcpy(&have, got[0].data.data() + 4 * (i * n + j), 4);
      if (std::memcmp(&have, &want, 4) != 0 && mismatches++ < 3)
        ADD_FAILURE() << "ta=" << ta << " tb=" << tb << " K=" << k << ": c[" << i << ", " << j
                      << "] = " << have << ", the model's chain " << want;
    }
  EXPECT_EQ(mismatches, 0) << "ta=" << ta << " tb=" << tb << " K=" << k;
}

TEST(MatmulTf32, EveryOutputIsTheModelsChainForEveryTransposePair) {
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      expect_model_bits(ta, tb, 136, 72, 80);  // K % 8 == 0: the TMA kernel (copies first)
      expect_model_bits(ta, tb, 70, 33, 45);   // a ragged K: the register-staged kernels
    }
}

// The kernels each form runs on: a·b^T straight on the TMA loop; the other forms copy the
// operands that are not K-major transposed first; a ragged K stays on the register-staged
// kernel; the default precision stays strict (no tensor-core kernel); bf16 ignores it.
TEST(MatmulTf32, FormsRunOnTheKMajorKernels) {
  using Names = std::vector<std::string>;
  EXPECT_EQ(kernel_names(expand(DType::F32, tf32_attrs(false, true), 4096, 4096, 4096)),
            (Names{"matmul_tc_nt_128x128x32_tma4_tf32"}));
  EXPECT_EQ(kernel_names(expand(DType::F32, tf32_attrs(false, false), 4096, 4096, 4096)),
            (Names{"strided_transpose_r2_f32", "matmul_tc_nt_128x128x32_tma4_tf32"}));
  EXPECT_EQ(kernel_names(expand(DType::F32, tf32_attrs(true, false), 1024, 1024, 1024)),
            (Names{"strided_transpose_r2_f32", "strided_transpose_r2_f32",
                   "matmul_tc_nt_64x128x32_tma4_tf32"}));
  EXPECT_EQ(kernel_names(expand(DType::F32, tf32_attrs(false, false), 256, 256, 100)),
            (Names{"matmul_tc_nn_128x128x32_s3_tf32"}));
  const Attrs strict = {{"transpose_a", false}, {"transpose_b", true}};
  for (const std::string& name : kernel_names(expand(DType::F32, strict, 4096, 4096, 4096)))
    EXPECT_EQ(name.find("_tc_"), std::string::npos) << name;
  EXPECT_EQ(kernel_names(expand(DType::BF16, tf32_attrs(false, true), 4096, 4096, 4096)),
            (Names{kTcBigTilesOn ? "matmul_tc_nt_256x128x64_tma4_bf16"
                                 : "matmul_tc_nt_128x128x64_tma5_bf16"}));
}

// Batch invariance: kernel_test.cc's MatmulTensorCore.RowsDoNotDependOnM runs tf32 too.

TEST(MatmulTf32, AnUnknownPrecisionIsAnError) {
  const OpSchema& schema = *op_registry().find("matmul");
  const Attrs attrs = {
      {"transpose_a", false}, {"transpose_b", false}, {"precision", std::string("fp16")}};
  try {
    schema.infer({{DType::F32, {4, 8}}, {DType::F32, {8, 4}}}, attrs);
    FAIL() << "precision fp16 accepted";
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("expected strict or tf32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tilerun::kernels
