// Ops that fold the op after them into their kernel, bit for bit the pair they replace:
// - rmsnorm's `to`: y rounded to another dtype as it is stored is the f32 norm followed by a cast,
//   and the gradient of a dy in that dtype is the gradient of dy widened first, on every kernel
//   variant the expansion picks (generic rows, 16-byte vectors, the staged fixed tiles of the
//   forward and of dx);
// - weighted_relu_sum's bias: the op, then an add;
// - rmsnorm_grad's cos and sin (rmsnorm_rope's gradient): rope's inverse, then rmsnorm_grad, on the
//   staged dx kernel (dy turned back in shared memory) and where rope's kernel runs first.
#include "tests/kernels/kernel_runner.h"

namespace tilerun::kernels {
namespace {

using testing::Bytes;
using testing::shared_runner;

TEST(RmsnormTo, IsTheNormThenACastBitForBit) {
  std::mt19937_64 rng(testing::test_seed());
  const std::vector<std::vector<int64_t>> shapes = {
      {7, 33}, {5, 1032}, {37, 512}, {1030, 64}, {3, 2, 1024}};
  for (const auto& shape : shapes)
    for (DType to : {DType::BF16, DType::F16}) {
      const std::string name(dtype_name(to));
      RefTensor x = testing::random_tensor(rng, shape);
      RefTensor gamma = testing::random_tensor(rng, {shape.back()});
      const Attrs attrs{{"to", name}};
      std::vector<Bytes> got =
          shared_runner().run("rmsnorm", {x, gamma}, attrs, DType::F32, std::nan(""));
      std::vector<Bytes> y32 =
          shared_runner().run("rmsnorm", {x, gamma}, {}, DType::F32, std::nan(""));
      ASSERT_EQ(got.size(), 1u);
      ASSERT_EQ(got[0].dtype, to);
      std::vector<Bytes> want =
          shared_runner().run("cast", {{.shape = shape, .data = testing::decode(y32[0])}}, attrs,
                              DType::F32, std::nan(""));
      EXPECT_EQ(got[0].data, want[0].data)
          << "rmsnorm to " << name << " of " << shape.size() << "-d x, last axis " << shape.back();

      RefTensor dy = testing::rounded(to, testing::random_tensor(rng, shape));
      std::vector<Bytes> dgot = shared_runner().run("rmsnorm_grad", {x, gamma, dy}, attrs,
                                                    DType::F32, std::nan(""), {{2, to}});
      std::vector<Bytes> dwant =
          shared_runner().run("rmsnorm_grad", {x, gamma, dy}, {}, DType::F32, std::nan(""));
      ASSERT_EQ(dgot.size(), 2u);
      EXPECT_EQ(dgot[0].data, dwant[0].data)
          << "dx, dy in " << name << ", last axis " << shape.back();
      EXPECT_EQ(dgot[1].data, dwant[1].data) << "dgamma, dy in " << name;
    }
}

// The dtypes `to` takes, and a dy of neither x's dtype nor `to`, are refused by name.
TEST(RmsnormTo, RefusesOtherDtypes) {
  const OpSchema& norm = *op_registry().find("rmsnorm");
  const OpSchema& grad = *op_registry().find("rmsnorm_grad");
  const TensorType x{DType::F32, {4, 8}}, g{DType::F32, {8}};
  auto with = [](const OpSchema& s, const std::string& to) {
    return testing::with_defaults(s, {{"to", to}});
  };
  EXPECT_THROW(norm.infer({x, g}, with(norm, "i32")), ShapeError);
  EXPECT_EQ(norm.infer({x, g}, with(norm, "bf16"))[0].dtype, DType::BF16);
  EXPECT_EQ(norm.infer({x, g}, with(norm, ""))[0].dtype, DType::F32);
  EXPECT_NO_THROW(grad.infer({x, g, {DType::BF16, {4, 8}}}, with(grad, "bf16")));
  EXPECT_THROW(grad.infer({x, g, {DType::F16, {4, 8}}}, with(grad, "bf16")), ShapeError);
  EXPECT_THROW(grad.infer({x, g, {DType::BF16, {4, 8}}}, with(grad, "")), ShapeError);
}

TEST(WeightedReluSumBias, IsTheSumThenAnAddBitForBit) {
  std::mt19937_64 rng(testing::test_seed());
  // Vectors over two tiles (the second partial), scalar columns.
  const std::vector<std::vector<int64_t>> shapes = {{3, 16, 1040}, {2, 3, 4, 37}};
  for (const auto& shape : shapes)
    for (DType dt : {DType::F32, DType::BF16, DType::F16}) {
      std::vector<int64_t> wshape(shape.begin(), shape.end() - 1), yshape = shape;
      yshape.erase(yshape.end() - 2);
      RefTensor x = testing::rounded(dt, testing::random_tensor(rng, shape, -3, 3));
      RefTensor w = testing::rounded(dt, testing::random_tensor(rng, wshape, -3, 3));
      RefTensor bias = testing::rounded(dt, testing::random_tensor(rng, yshape, -3, 3));
      const Attrs attrs{{"alpha", 0.0221}};
      std::vector<Bytes> got =
          shared_runner().run("weighted_relu_sum", {x, w, bias}, attrs, dt, std::nan(""));
      std::vector<Bytes> y =
          shared_runner().run("weighted_relu_sum", {x, w}, attrs, dt, std::nan(""));
      std::vector<Bytes> want = shared_runner().run(
          "add", {{.shape = yshape, .data = testing::decode(y[0])}, bias}, {}, dt, std::nan(""));
      EXPECT_EQ(got[0].data, want[0].data) << dtype_name(dt) << ", C = " << shape.back();
    }
}

TEST(RmsnormGradRopeBack, IsRopeInverseThenTheGradientBitForBit) {
  std::mt19937_64 rng(testing::test_seed());
  struct Case {
    std::vector<int64_t> x;
    int64_t half;
  };
  // V4's query (16 heads of 512, 32 pairs), one head of 128 with 32 pairs, and D = 33 (no staged
  // kernel: rope's own kernel first).
  const Case cases[] = {{{6, 16, 512}, 32}, {{9, 128}, 32}, {{4, 2, 33}, 4}};
  for (const Case& c : cases)
    for (DType dt : {DType::F32, DType::BF16}) {
      const int64_t d = c.x.back();
      RefTensor x = testing::rounded(dt, testing::random_tensor(rng, c.x));
      RefTensor gamma = testing::rounded(dt, testing::random_tensor(rng, {d}));
      RefTensor dy = testing::rounded(dt, testing::random_tensor(rng, c.x));
      RefTensor cos = testing::rounded(dt, testing::random_tensor(rng, {c.x[0], c.half}, -1, 1));
      RefTensor sin = testing::rounded(dt, testing::random_tensor(rng, {c.x[0], c.half}, -1, 1));
      std::vector<Bytes> got =
          shared_runner().run("rmsnorm_grad", {x, gamma, dy, cos, sin}, {}, dt, std::nan(""));
      std::vector<Bytes> turned =
          shared_runner().run("rope", {dy, cos, sin}, {{"inverse", true}}, dt, std::nan(""));
      std::vector<Bytes> want = shared_runner().run(
          "rmsnorm_grad", {x, gamma, {.shape = c.x, .data = testing::decode(turned[0])}}, {}, dt,
          std::nan(""));
      ASSERT_EQ(got.size(), 2u);
      EXPECT_EQ(got[0].data, want[0].data) << "dx, " << dtype_name(dt) << ", D = " << d;
      EXPECT_EQ(got[1].data, want[1].data) << "dgamma, " << dtype_name(dt) << ", D = " << d;
    }
}

}  // namespace
}  // namespace tilerun::kernels
