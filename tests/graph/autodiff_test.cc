// Autodiff against central finite differences of the double-precision reference: models where
// one op reads a tensor twice while the tensor also gets a gradient elsewhere (x*x + x,
// matmul(x, x) + x, (x+x)*x, an output squared, a repeated layer with carry). The gradients come
// from the backward graph evaluated by the reference; the finite differences only run the
// forward graph, so a wrong rule or a lost accumulation shows as a mismatch.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "graph/autodiff.h"
#include "graph/reference.h"
#include "tilerun/tilerun.h"

namespace tilerun::graph {
namespace {

// A model over x: [2, 2] (square, so matmul(x, x) works) with the given layer lines.
Model model_with(const std::string& layer, const std::string& outputs) {
  return parse_model("model: m\ndims: {T: 2}\ninputs:\n  x: {shape: [T, T]}\nlayers:\n" + layer +
                         "outputs: " + outputs + "\n",
                     "m.yaml");
}

std::vector<kernels::RefTensor> random_values(const OpGraph& g, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<kernels::RefTensor> values(g.tensors.size());
  for (size_t i = 0; i < g.tensors.size(); ++i) {
    if (g.tensors[i].kind != TensorKind::Input && g.tensors[i].kind != TensorKind::Weight) continue;
    values[i].shape = g.tensors[i].type.shape;
    for (int64_t k = 0; k < values[i].numel(); ++k) values[i].data.push_back(normal(rng));
  }
  return values;
}

double loss(const OpGraph& forward, const std::vector<kernels::RefTensor>& values) {
  std::vector<kernels::RefTensor> all = evaluate_reference(forward, values);
  double l = 0;
  for (int out : forward.outputs)
    for (double v : all[out].data) l += 0.5 * v * v;
  return l;
}

void expect_gradients_match_finite_differences(const Model& model) {
  SCOPED_TRACE(model_summary(model));
  const OpGraph forward = build_forward(model);
  OpGraph full = forward;
  ASSERT_NO_THROW(append_backward(model, full));
  const uint64_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  std::vector<kernels::RefTensor> values = random_values(forward, rng);
  std::vector<kernels::RefTensor> all = evaluate_reference(full, values);
  int checked = 0;
  for (size_t x = 0; x < forward.tensors.size(); ++x) {
    TensorKind k = forward.tensors[x].kind;
    if (k != TensorKind::Input && k != TensorKind::Weight) continue;
    ASSERT_TRUE(full.grad.count(static_cast<int>(x))) << forward.tensors[x].name;
    const kernels::RefTensor& grad = all[full.grad.at(static_cast<int>(x))];
    for (size_t e = 0; e < values[x].data.size(); ++e) {
      const double keep = values[x].data[e];
      auto central = [&](double h) {
        values[x].data[e] = keep + h;
        double up = loss(forward, values);
        values[x].data[e] = keep - h;
        double down = loss(forward, values);
        values[x].data[e] = keep;
        return (up - down) / (2 * h);
      };
      // Richardson's extrapolation cancels the h^2 term: the repeated layers make the loss a
      // polynomial of high degree, whose third derivative made a plain central difference miss
      // by more than the tolerance on some random draws. The tolerance's floor scales with the
      // loss (rounding in up - down is eps·|loss|/h).
      const double h = 1e-4;
      const double fd = (4 * central(h / 2) - central(h)) / 3;
      const double tolerance =
          1e-6 * std::max(1.0, std::abs(fd)) + 1e-9 * std::abs(loss(forward, values));
      EXPECT_NEAR(grad.data[e], fd, tolerance)
          << "d loss / d " << forward.tensors[x].name << "[" << e << "]";
      ++checked;
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(Autodiff, TensorReadTwiceByOneOpAndUsedElsewhere) {
  // y = x*x + x
  expect_gradients_match_finite_differences(
      model_with("  - name: b\n    ops:\n      - {op: mul, in: [x, x], out: s}\n"
                 "      - {op: add, in: [s, x], out: y}\n",
                 "[b.y]"));
  // y = x@x + x
  expect_gradients_match_finite_differences(
      model_with("  - name: b\n    ops:\n      - {op: matmul, in: [x, x], out: s}\n"
                 "      - {op: add, in: [s, x], out: y}\n",
                 "[b.y]"));
  // y = (x+x)*x
  expect_gradients_match_finite_differences(
      model_with("  - name: b\n    ops:\n      - {op: add, in: [x, x], out: s}\n"
                 "      - {op: mul, in: [s, x], out: y}\n",
                 "[b.y]"));
}

TEST(Autodiff, OutputSquared) {
  // y is an output (its gradient is seeded with y) and is also read twice by z = y*y.
  expect_gradients_match_finite_differences(
      model_with("  - name: b\n    weights:\n      w: {shape: [T, T]}\n    ops:\n"
                 "      - {op: add, in: [x, w], out: y}\n      - {op: mul, in: [y, y], out: z}\n",
                 "[b.y, b.z]"));
}

TEST(Autodiff, RepeatedLayerWithCarryReadingItsInputTwice) {
  expect_gradients_match_finite_differences(model_with(
      "  - name: b\n    repeat: 3\n    carry: {x: y}\n    weights:\n"
      "      w: {shape: [T, T]}\n    ops:\n      - {op: mul, in: [x, x], out: s}\n"
      "      - {op: matmul, in: [s, w], out: m}\n      - {op: add, in: [m, x], out: y}\n",
      "[b.y]"));
}

// An integer output carries no gradient: argmax's index picks table rows (embedding), so x's
// gradient comes only through the product, the table's through the rows the index picked; no
// gradient tensor of the index exists and argmax needs no gradient rule.
TEST(Autodiff, IntegerIndexPassesNoGradientButTheValuesItSelectsDo) {
  const Model model = model_with(
      "  - name: b\n    weights:\n      table: {shape: [T, T]}\n    ops:\n"
      "      - {op: argmax, in: x, out: i}\n"
      "      - {op: embedding, in: [table, i], out: e}\n"
      "      - {op: mul, in: [e, x], out: y}\n",
      "[b.y]");
  expect_gradients_match_finite_differences(model);
  OpGraph g = build_forward(model);
  append_backward(model, g);
  const int index = g.find("b.i");
  ASSERT_GE(index, 0);
  EXPECT_EQ(g.tensors[index].type.dtype, DType::I32);
  EXPECT_FALSE(g.grad.count(index));
  int embedding_grads = 0;
  for (const GraphOp& op : g.ops) {
    embedding_grads += op.type == "embedding_grad";
    for (int in : op.inputs)
      if (op.direction == Direction::Backward && g.tensors[in].kind == TensorKind::Gradient)
        EXPECT_TRUE(dtype_is_float(g.tensors[in].type.dtype)) << op.type;
  }
  EXPECT_EQ(embedding_grads, 1);
}

// The default loss halves the squares of the float outputs only: an integer output gets no term.
TEST(Autodiff, DefaultLossLeavesIntegerOutputsOut) {
  const Model model = model_with(
      "  - name: b\n    ops:\n      - {op: argmin, in: x, out: i}\n"
      "      - {op: mul, in: [x, x], out: y}\n",
      "[b.i, b.y]");
  OpGraph g = build_forward(model);
  ASSERT_EQ(g.loss.size(), 1u);
  EXPECT_EQ(g.loss[0].name, "half_sum_squares");
  EXPECT_EQ(g.ops[g.loss[0].op].inputs, std::vector<int>{g.find("b.y")});
  append_backward(model, g);
  EXPECT_TRUE(g.grad.count(g.find("x")));
}

}  // namespace
}  // namespace tilerun::graph
