// linear_fp8 (kernels/linear_fp8.cc): y = x · w^T in FP8, trained in FP8. Its gradient rule has no
// finite-difference case (the roundings are steps), so it is checked here: the rule's products
// are linear_fp8 ops on the transposed operands, and, run by the references, they give the
// derivative of the unrounded product x·w^T within FP8's rounding error (each operand rounded
// to e4m3's 4 significant bits: a product's relative error about 2^-3), while a wrong rule
// (a transpose missed, operands swapped) is off by the size of the gradient itself.
#include <cmath>

#include "kernels/op_registry.h"
#include "tests/kernels/test_util.h"

namespace tilerun::kernels {
namespace {

using testing::random_tensor;

// Relative L2 distance.
double rel_l2(const RefTensor& got, const RefTensor& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < want.data.size(); ++i) {
    d += (got.data[i] - want.data[i]) * (got.data[i] - want.data[i]);
    n += want.data[i] * want.data[i];
  }
  return std::sqrt(d / n);
}

std::vector<RefTensor> run(const std::string& op, const std::vector<RefTensor>& in,
                           const Attrs& attrs = {}) {
  const OpSchema& s = *op_registry().find(op);
  return s.reference(in, testing::with_defaults(s, attrs));
}

TEST(LinearFp8, GradientRuleIsTheUnroundedDerivativeInFp8) {
  std::mt19937_64 rng(testing::test_seed());
  const int64_t m = 256, n = 128, k = 384;
  const RefTensor x = random_tensor(rng, {m, k}), w = random_tensor(rng, {n, k});
  const RefTensor dy = random_tensor(rng, {m, n});
  const OpSchema& s = *op_registry().find("linear_fp8");
  const Attrs attrs = testing::with_defaults(s, {});
  const std::vector<GradOp> rule =
      s.gradient({{DType::F32, {m, k}}, {DType::F32, {n, k}}}, attrs, {true, true});
  // The rule's shape: transposes, then linear_fp8 products.
  std::vector<std::string> types;
  for (const GradOp& op : rule) types.push_back(op.type);
  EXPECT_EQ(types, (std::vector<std::string>{"transpose", "linear_fp8", "transpose", "transpose",
                                             "linear_fp8"}));
  // Run it by the references.
  std::map<std::string, RefTensor> v = {{"x0", x}, {"x1", w}, {"dy0", dy}};
  for (const GradOp& op : rule) {
    std::vector<RefTensor> in;
    for (const std::string& name : op.inputs) in.push_back(v.at(name));
    std::vector<RefTensor> out = run(op.type, in, op.attrs);
    for (size_t i = 0; i < out.size(); ++i) v[op.outputs[i]] = out[i];
  }
  // The unrounded derivative: dx = dy·w, dw = dy^T·x.
  const RefTensor dx = run("matmul", {dy, w})[0];
  const RefTensor dw = run("matmul", {dy, x}, {{"transpose_a", true}})[0];
  ASSERT_EQ(v.at("dx0").shape, dx.shape);
  ASSERT_EQ(v.at("dx1").shape, dw.shape);
  const double ex = rel_l2(v.at("dx0"), dx), ew = rel_l2(v.at("dx1"), dw);
  EXPECT_LT(ex, 0.08) << "dx";
  EXPECT_LT(ew, 0.08) << "dw";
  EXPECT_GT(ex, 0.0) << "dx was not rounded";
  // A wrong rule is far: dw from another dy (uncorrelated, ~1.4) is nowhere near the bound.
  const RefTensor other = random_tensor(rng, {m, n});
  EXPECT_GT(rel_l2(run("matmul", {other, x}, {{"transpose_a", true}})[0], dw), 0.5);
}

// The forward's reference against the unrounded product: close (FP8's rounding), not equal.
TEST(LinearFp8, ForwardIsTheFp8ProductOfTheRoundedOperands) {
  std::mt19937_64 rng(testing::test_seed() + 1);
  const RefTensor x = random_tensor(rng, {128, 256}), w = random_tensor(rng, {256, 256});
  const RefTensor y = run("linear_fp8", {x, w})[0];
  const RefTensor exact = run("matmul", {x, w}, {{"transpose_b", true}})[0];
  const double e = rel_l2(y, exact);
  EXPECT_LT(e, 0.08);
  EXPECT_GT(e, 1e-4);
}

TEST(LinearFp8, ShapesOffTheBlocksAreErrorsNamingTheDim) {
  const OpSchema& s = *op_registry().find("linear_fp8");
  const Attrs attrs = testing::with_defaults(s, {});
  auto error = [&](std::vector<TensorType> in) {
    try {
      s.infer(in, attrs);
    } catch (const ShapeError& e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_NE(error({{DType::F32, {100, 128}}, {DType::F32, {128, 128}}}).find("M = 100"),
            std::string::npos);
  EXPECT_NE(error({{DType::F32, {128, 128}}, {DType::F32, {128, 256}}}).find("expected [N, 128]"),
            std::string::npos);
  EXPECT_NE(error({{DType::F16, {128, 128}}, {DType::F16, {128, 128}}}).find("f32 or bf16"),
            std::string::npos);
}

}  // namespace
}  // namespace tilerun::kernels
