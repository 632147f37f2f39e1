// Elementwise ops: add, mul, scale, silu, and silu's backward op silu_grad. Each is one flat
// map kernel (kernels/map_kernel.h) over the tensors seen as flat arrays; add and mul broadcast
// their operands (kernels/broadcast.h) and then index each through its broadcast strides.
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

std::vector<TensorType> infer_binary(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"a", "b"});
}

// add also joins i32 tensors (index arithmetic: an offset added to picked positions).
std::vector<TensorType> infer_add(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"a", "b"}, /*i32=*/true);
}

std::vector<TensorType> infer_unary(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  return {in[0]};
}

std::vector<TensorType> infer_silu_grad(const std::vector<TensorType>& in, const Attrs&) {
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// out[i] = f(in[0][i], in[1][i], ...) over tensors of one shape.
template <typename F>
std::vector<RefTensor> ref_map(const std::vector<RefTensor>& in, F f) {
  RefTensor out = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < out.numel(); ++i) {
    if (in.size() == 1)
      out.data[i] = f(in[0].data[i], 0.0);
    else
      out.data[i] = f(in[0].data[i], in[1].data[i]);
  }
  return {out};
}

// d(x * s(x))/dx = s + x * s * (1 - s), s = sigmoid(x).
double silu_derivative(double x) {
  double s = sigmoid(x);
  return s * (1.0 + x * (1.0 - s));
}

std::vector<RefTensor> ref_add(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return v[0] + v[1]; });
}
std::vector<RefTensor> ref_mul(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return v[0] * v[1]; });
}
std::vector<RefTensor> ref_scale(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double alpha = attr_float(attrs, "alpha");
  return ref_map(in, [alpha](double x, double) { return alpha * x; });
}
std::vector<RefTensor> ref_silu(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, [](double x, double) { return x * sigmoid(x); });
}
std::vector<RefTensor> ref_silu_grad(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_map(in, [](double x, double dy) { return dy * silu_derivative(x); });
}

// ---- Gradient rules ------------------------------------------------------------------------

// Both input gradients are the output gradient itself (no kernel), summed over the axes along
// which the operand was broadcast.
std::vector<GradOp> grad_add(const std::vector<TensorType>& in, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<int64_t> out = broadcast_shape(in, {"a", "b"});
  std::vector<GradOp> ops;
  for (int i = 0; i < 2; ++i)
    if (needs[i]) ops.push_back(sum_to_shape("dy0", dx_name(i), in[i].shape, out));
  return ops;
}

// d(a * b) = dy * b, dy * a (of the output's shape), summed to the operand's shape.
std::vector<GradOp> grad_mul(const std::vector<TensorType>& in, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<int64_t> out = broadcast_shape(in, {"a", "b"});
  std::vector<GradOp> ops;
  for (int i = 0; i < 2; ++i) {
    if (!needs[i]) continue;
    std::string t = "t" + std::to_string(i);
    ops.push_back({"mul", {"dy0", x_name(1 - i)}, {t}, {}});
    ops.push_back(sum_to_shape(t, dx_name(i), in[i].shape, out));
  }
  return ops;
}

std::vector<GradOp> grad_scale(const std::vector<TensorType>&, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"scale", {"dy0"}, {"dx0"}, {{"alpha", attr_float(attrs, "alpha")}}}};
}

std::vector<GradOp> grad_silu(const std::vector<TensorType>&, const Attrs&,
                              const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"silu_grad", {"x0", "dy0"}, {"dx0"}, {}}};
}

// ---- Tile kernels --------------------------------------------------------------------------

namespace cc = tilerun::compiler;

const MapOp kAdd{"add", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] + v[1]; }};
const MapOp kMul{"mul", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] * v[1]; }};
const MapOp kScale{
    "scale", 1, {"alpha"}, [](cc::Scope&, const auto& v, const auto& sc) { return sc[0] * v[0]; }};
const MapOp kSilu{
    "silu", 1, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] * cc::sigmoid(v[0]); }};
// dy * s * (1 + x * (1 - s)), s = sigmoid(x) evaluated once.
const MapOp kSiluGrad{"silu_grad", 2, {}, [](cc::Scope& s, const auto& v, const auto&) {
                        cc::Val sg = s.let(cc::sigmoid(v[0]), "sig");
                        return v[1] * (sg * (1.0f + v[0] * (1.0f - sg)));
                      }};

}  // namespace

void register_elementwise(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  registry.add(
      {.name = "add",
       .doc = "out = a + b (NumPy broadcasting); gradient dy to each operand, summed over its "
              "broadcast axes (sum_to); i32 too (index arithmetic: the sum must fit in 32 bits)",
       .inputs = {"a", "b"},
       .outputs = {"out"},
       .dtypes = {DType::F32, DType::BF16, DType::F16, DType::I32},
       .infer = infer_add,
       .reference = ref_add,
       .gradient = grad_add,
       .expand = expand_broadcast_map(cache, kAdd),
       // Sizes 1, 33x130 (no tile multiple), 1025 (a ragged last block), and past 2^16
       // elements (4 per thread); broadcast: a row, a column, size-1 axes on both sides,
       // a scalar, and past 2^16 elements.
       .tests = {.kernel = {{{{1}, {1}}},
                            {{{33, 130}, {33, 130}}},
                            {{{1025}, {1025}}},
                            {{{(1 << 20) + 5}, {(1 << 20) + 5}}},
                            {{{33, 130}, {130}}},
                            {{{7, 1, 5}, {1, 3, 1}}},
                            {{{1}, {3, 1, 7}}},
                            {{{5, 7}, {}}},
                            {{{2, 3, 5, 7}, {3, 1, 7}}},
                            {{{513, 257}, {513, 1}}},
                            // Last extents a multiple of 8: the vector rows kernel, partial last
                            // blocks of rows (4 and 64 rows a block).
                            {{{131, 512}, {512}}},
                            {{{3, 5, 32}, {5, 1}}},
                            // Past 2^16 elements in whole 8-element vectors: the vector map
                            // kernel, its last block partial.
                            {{{65544}, {65544}}}},
                 .gradient = {{{{7, 3}, {7, 3}}}, {{{4, 3}, {3}}}, {{{2, 1, 3}, {1, 4, 1}}}},
                 .examples = {{.inputs = {{{2}, {1, -2.5}}, {{2}, {0.5, 2.5}}},
                               .outputs = {{{2}, {1.5, 0}}}},
                              {.inputs = {{{2, 1}, {1, 2}}, {{3}, {10, 20, 30}}},
                               .outputs = {{{2, 3}, {11, 21, 31, 12, 22, 32}}}}}}});
  registry.add({.name = "mul",
                .doc = "out = a * b (NumPy broadcasting); gradient dy · b to a, dy · a to b, each "
                       "summed to its shape",
                .inputs = {"a", "b"},
                .outputs = {"out"},
                .infer = infer_binary,
                .reference = ref_mul,
                .gradient = grad_mul,
                .expand = expand_broadcast_map(cache, kMul),
                .tests = {.kernel = {{{{7}, {7}}},
                                     {{{3, 7, 130}, {3, 7, 130}}},
                                     {{{3, 7, 130}, {7, 1}}},
                                     {{{1, 5}, {3, 1}}},
                                     {{{131, 512}, {131, 1}}}},
                          .gradient = {{{{33}, {33}}}, {{{3, 5}, {3, 1}}}, {{{1, 5}, {3, 1}}}},
                          .examples = {{.inputs = {{{3}, {1.5, -2, 0}}, {{3}, {4, 0.25, -7}}},
                                        .outputs = {{{3}, {6, -0.5, -0.0}}}}}}});
  registry.add({.name = "scale",
                .doc = "out = alpha * x",
                .inputs = {"x"},
                .outputs = {"out"},
                .attrs = {{.name = "alpha", .kind = AttrKind::Float, .doc = "the factor"}},
                .infer = infer_unary,
                .reference = ref_scale,
                .gradient = grad_scale,
                .expand = expand_map(cache, kScale),
                .tests = {.kernel = {{{{130, 33}}, {{"alpha", -1.7}}}, {{{1}}, {{"alpha", 3.0}}}},
                          .gradient = {{{{2, 3, 5}}, {{"alpha", -1.7}}}},
                          .examples = {{.inputs = {{{2}, {1.5, -3}}},
                                        .attrs = {{"alpha", 2.0}},
                                        .outputs = {{{2}, {3, -6}}}}}}});
  registry.add({.name = "silu",
                .doc = "out = x * sigmoid(x)",
                .inputs = {"x"},
                .outputs = {"out"},
                .infer = infer_unary,
                .reference = ref_silu,
                .gradient = grad_silu,
                .expand = expand_map(cache, kSilu),
                .tests = {.kernel = {{{{7, 130}}, {}, -12, 12}, {{{1025}}, {}, -40, 40}},
                          .gradient = {{{{7, 5}}}},
                          // silu(1) = 1 / (1 + e^-1).
                          .examples = {{.inputs = {{{2}, {0, 1}}},
                                        .outputs = {{{2}, {0, 0.7310585786300049}}}}}}});
  registry.add(
      {.name = "silu_grad",
       .doc = "dx = dy * d silu(x)/dx (the backward op of silu)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .infer = infer_silu_grad,
       .reference = ref_silu_grad,
       .expand = expand_map(cache, kSiluGrad),
       // silu'(0) = 1/2.
       .tests = {.kernel = {{{{7, 130}, {7, 130}}, {}, -12, 12}, {{{1}, {1}}}},
                 .examples = {{.inputs = {{{1}, {0}}, {{1}, {3}}}, .outputs = {{{1}, {1.5}}}}}}});
}

}  // namespace tilerun::kernels
