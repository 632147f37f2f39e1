// relu and its backward op relu_grad: one flat elementwise kernel each, like elementwise.cc.
// relu is the IR's strict max(x, 0): NaN stays NaN and -0 becomes +0, on both backends and in the
// reference.
#include <cmath>
#include <limits>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

std::vector<TensorType> infer_relu(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

// (x, dy) -> dx.
std::vector<TensorType> infer_relu_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

// The IR's max(x, +0): NaN if x is NaN, and max(-0, +0) = +0.
double strict_relu(double x) { return std::isnan(x) ? x : (x > 0 ? x : 0.0); }

std::vector<RefTensor> ref_relu(const std::vector<RefTensor>& in, const Attrs&) {
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.data[i] = strict_relu(in[0].data[i]);
  return {y};
}

// dy * (x > 0): the derivative at 0 is taken as 0.
std::vector<RefTensor> ref_relu_grad(const std::vector<RefTensor>& in, const Attrs&) {
  RefTensor dx = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < dx.numel(); ++i)
    dx.data[i] = in[1].data[i] * (in[0].data[i] > 0 ? 1.0 : 0.0);
  return {dx};
}

std::vector<GradOp> grad_relu(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"relu_grad", {"x0", "dy0"}, {"dx0"}, {}}};
}

const MapOp kRelu{
    "relu", 1, {}, [](cc::Scope&, const auto& v, const auto&) { return cc::max(v[0], 0.0f); }};
const MapOp kReluGrad{"relu_grad", 2, {}, [](cc::Scope&, const auto& v, const auto&) {
                        return v[1] * cc::select(v[0] > 0.0f, cc::Val(1.0f), cc::Val(0.0f));
                      }};

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

}  // namespace

void register_relu(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add({.name = "relu",
                .doc = "y = max(x, 0) (NaN stays NaN, -0 gives +0)",
                .inputs = {"x"},
                .outputs = {"y"},
                .infer = infer_relu,
                .reference = ref_relu,
                .gradient = grad_relu,
                .expand = expand_map(cache, kRelu),
                .tests = {.kernel = {{{{1}}}, {{{33, 130}}}, {{{1025}}}},
                          // Finite differences need every input away from the kink at 0.
                          .gradient = {{.shapes = {{7, 5}}, .min_abs = 1e-3}},
                          .examples = {{.inputs = {{{5}, {-1.5, -0.0, 0.0, 2.0, kNaN}}},
                                        .outputs = {{{5}, {0.0, 0.0, 0.0, 2.0, kNaN}}}}}}});
  registry.add({.name = "relu_grad",
                .doc = "dx = dy * (x > 0) (the backward op of relu)",
                .inputs = {"x", "dy"},
                .outputs = {"dx"},
                .infer = infer_relu_grad,
                .reference = ref_relu_grad,
                .expand = expand_map(cache, kReluGrad),
                .tests = {.kernel = {{{{7, 130}, {7, 130}}}, {{{1}, {1}}}},
                          .examples = {{.inputs = {{{3}, {-1, 0, 2}}, {{3}, {5, 5, 5}}},
                                        .outputs = {{{3}, {0, 0, 5}}}}}}});
}

}  // namespace tilerun::kernels
