// Binary arithmetic over broadcast operands (kernels/broadcast.h): sub, div (and div's backward
// op div_grad), minimum and maximum. One broadcast map kernel each; the gradient of a broadcast
// operand is summed back to its shape by sum_to.
#include <cmath>

#include "kernels/broadcast.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

const std::vector<std::string> kAB = {"a", "b"};

std::vector<TensorType> infer_ab(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, kAB);
}

// (dy, a, b) -> the gradient of a / b with respect to b, at the output's shape.
std::vector<TensorType> infer_div_grad(const std::vector<TensorType>& in, const Attrs&) {
  return infer_broadcast(in, {"dy", "a", "b"});
}

// The IR's strict min/max: NaN if either is NaN; min(-0, +0) = -0 and max(-0, +0) = +0.
double strict_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}
double strict_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}

std::vector<RefTensor> ref_sub(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return v[0] - v[1]; });
}
std::vector<RefTensor> ref_div(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return v[0] / v[1]; });
}
std::vector<RefTensor> ref_div_grad(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return -(v[0] * (v[1] / v[2]) / v[2]); });
}
std::vector<RefTensor> ref_minimum(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return strict_min(v[0], v[1]); });
}
std::vector<RefTensor> ref_maximum(const std::vector<RefTensor>& in, const Attrs&) {
  return ref_broadcast(in, [](const double* v) { return strict_max(v[0], v[1]); });
}

// ---- Gradient rules ------------------------------------------------------------------------

// d(a - b) = dy, -dy: the sum over broadcast axes first, then the negation (both exact).
std::vector<GradOp> grad_sub(const std::vector<TensorType>& in, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<int64_t> out = broadcast_shape(in, kAB);
  std::vector<GradOp> ops;
  if (needs[0]) ops.push_back(sum_to_shape("dy0", "dx0", in[0].shape, out));
  if (needs[1]) {
    ops.push_back(sum_to_shape("dy0", "db", in[1].shape, out));
    ops.push_back({"neg", {"db"}, {"dx1"}, {}});
  }
  return ops;
}

// d(a / b) = dy / b, -dy · (a / b) / b.
std::vector<GradOp> grad_div(const std::vector<TensorType>& in, const Attrs&,
                             const std::vector<bool>& needs) {
  std::vector<int64_t> out = broadcast_shape(in, kAB);
  std::vector<GradOp> ops;
  if (needs[0]) {
    ops.push_back({"div", {"dy0", "x1"}, {"da"}, {}});
    ops.push_back(sum_to_shape("da", "dx0", in[0].shape, out));
  }
  if (needs[1]) {
    ops.push_back({"div_grad", {"dy0", "x0", "x1"}, {"db"}, {}});
    ops.push_back(sum_to_shape("db", "dx1", in[1].shape, out));
  }
  return ops;
}

// The gradient goes to the operand that was chosen: a where `a_chosen` (a comparison giving a
// bool mask of the output's shape; ties go to a), b elsewhere.
std::vector<GradOp> grad_choice(const std::string& a_chosen, const std::vector<TensorType>& in,
                                const std::vector<bool>& needs) {
  if (!needs[0] && !needs[1]) return {};
  std::vector<int64_t> out = broadcast_shape(in, kAB);
  std::vector<GradOp> ops = {{a_chosen, {"x0", "x1"}, {"mask"}, {}}};
  for (int i = 0; i < 2; ++i) {
    if (!needs[i]) continue;
    std::string t = "d" + std::to_string(i);
    ops.push_back({"where_grad", {"mask", "dy0"}, {t}, {{"branch", i == 0}}});
    ops.push_back(sum_to_shape(t, dx_name(i), in[i].shape, out));
  }
  return ops;
}

std::vector<GradOp> grad_minimum(const std::vector<TensorType>& in, const Attrs&,
                                 const std::vector<bool>& needs) {
  return grad_choice("le", in, needs);
}
std::vector<GradOp> grad_maximum(const std::vector<TensorType>& in, const Attrs&,
                                 const std::vector<bool>& needs) {
  return grad_choice("ge", in, needs);
}

// ---- Tile kernels --------------------------------------------------------------------------

const MapOp kSub{"sub", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] - v[1]; }};
const MapOp kDiv{"div", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return v[0] / v[1]; }};
const MapOp kDivGrad{"div_grad", 3, {}, [](cc::Scope&, const auto& v, const auto&) {
                       return -(v[0] * (v[1] / v[2]) / v[2]);
                     }};
const MapOp kMinimum{
    "minimum", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return cc::min(v[0], v[1]); }};
const MapOp kMaximum{
    "maximum", 2, {}, [](cc::Scope&, const auto& v, const auto&) { return cc::max(v[0], v[1]); }};

// Kernel cases shared by the binary ops: equal shapes (odd, one past 2^16 elements), a row, a
// column, size-1 axes on both sides, a scalar.
std::vector<OpTestCase> binary_cases(double lo, double hi, double min_abs) {
  std::vector<OpTestCase> cases;
  for (std::vector<std::vector<int64_t>> shapes :
       {std::vector<std::vector<int64_t>>{{33, 130}, {33, 130}},
        {{(1 << 16) + 3}, {(1 << 16) + 3}},
        {{33, 130}, {130}},
        {{7, 1, 5}, {1, 3, 1}},
        {{1}, {3, 1, 7}},
        {{5, 7}, {}}})
    cases.push_back({.shapes = shapes, .lo = lo, .hi = hi, .min_abs = min_abs});
  return cases;
}

std::vector<OpTestCase> gradient_cases(double min_abs) {
  return {{.shapes = {{4, 3}, {4, 3}}, .min_abs = min_abs},
          {.shapes = {{4, 3}, {3}}, .min_abs = min_abs},
          {.shapes = {{2, 1, 3}, {1, 4, 1}}, .min_abs = min_abs}};
}

}  // namespace

void register_binary(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN(), inf = kInf();
  registry.add(
      {.name = "sub",
       .doc =
           "out = a - b (NumPy broadcasting); gradient dy to a, -dy to b, each summed to its shape",
       .inputs = kAB,
       .outputs = {"out"},
       .infer = infer_ab,
       .reference = ref_sub,
       .gradient = grad_sub,
       .expand = expand_broadcast_map(cache, kSub),
       .tests = {.kernel = binary_cases(-2, 2, 0),
                 .gradient = gradient_cases(0),
                 .examples = {{.inputs = {{{2, 1}, {1, 2}}, {{3}, {10, 20, 30}}},
                               .outputs = {{{2, 3}, {-9, -19, -29, -8, -18, -28}}}},
                              // 0 - 0 = +0, -0 - 0 = -0, inf - inf = NaN.
                              {.inputs = {{{4}, {0.0, -0.0, inf, nan}}, {{4}, {0.0, 0.0, inf, 1}}},
                               .outputs = {{{4}, {0.0, -0.0, nan, nan}}}}}}});
  registry.add({.name = "div",
                .doc = "out = a / b (IEEE division, NumPy broadcasting); gradient dy / b to a, "
                       "div_grad to b, each summed to its shape",
                .inputs = kAB,
                .outputs = {"out"},
                .infer = infer_ab,
                .reference = ref_div,
                .gradient = grad_div,
                .expand = expand_broadcast_map(cache, kDiv),
                // Operands at least 0.25 from 0 keep quotients and their differences in range.
                .tests = {.kernel = binary_cases(-2, 2, 0.25),
                          .gradient = gradient_cases(0.25),
                          .examples = {{.inputs = {{{2, 1}, {1, -3}}, {{2}, {2, -4}}},
                                        .outputs = {{{2, 2}, {0.5, -0.25, -1.5, 0.75}}}},
                                       // x/±0 = ±inf, 0/0 = NaN, x/inf = ±0.
                                       {.inputs = {{{6}, {1, -1, 0, 1, -1, inf}},
                                                   {{6}, {0.0, 0.0, 0.0, -0.0, inf, inf}}},
                                        .outputs = {{{6}, {inf, -inf, nan, -inf, -0.0, nan}}}}}}});
  registry.add({.name = "div_grad",
                .doc = "db = -dy * (a / b) / b (the backward op of div for b; broadcasting)",
                .inputs = {"dy", "a", "b"},
                .outputs = {"db"},
                .infer = infer_div_grad,
                .reference = ref_div_grad,
                .expand = expand_broadcast_map(cache, kDivGrad),
                .tests = {.kernel = {{.shapes = {{33, 130}, {33, 130}, {33, 130}}, .min_abs = 0.25},
                                     {.shapes = {{7, 5}, {7, 1}, {5}}, .min_abs = 0.25}},
                          .examples = {{.inputs = {{{1}, {3}}, {{1}, {1}}, {{1}, {2}}},
                                        .outputs = {{{1}, {-0.75}}}}}}});
  registry.add(
      {.name = "minimum",
       .doc = "out = min(a, b) (NaN if either is NaN, min(-0, +0) = -0; NumPy broadcasting; "
              "the gradient goes to a on ties)",
       .inputs = kAB,
       .outputs = {"out"},
       .infer = infer_ab,
       .reference = ref_minimum,
       .gradient = grad_minimum,
       .expand = expand_broadcast_map(cache, kMinimum),
       .tests = {
           .kernel = binary_cases(-2, 2, 0),
           .gradient = gradient_cases(0),
           .examples = {{.inputs = {{{5}, {1, -0.0, 0.0, nan, -inf}}, {{5}, {2, 0.0, -0.0, 1, 3}}},
                         .outputs = {{{5}, {1, -0.0, -0.0, nan, -inf}}}}}}});
  registry.add(
      {.name = "maximum",
       .doc = "out = max(a, b) (NaN if either is NaN, max(-0, +0) = +0; NumPy broadcasting; "
              "the gradient goes to a on ties)",
       .inputs = kAB,
       .outputs = {"out"},
       .infer = infer_ab,
       .reference = ref_maximum,
       .gradient = grad_maximum,
       .expand = expand_broadcast_map(cache, kMaximum),
       .tests = {
           .kernel = binary_cases(-2, 2, 0),
           .gradient = gradient_cases(0),
           .examples = {{.inputs = {{{5}, {1, -0.0, 0.0, 1, inf}}, {{5}, {2, 0.0, -0.0, nan, 3}}},
                         .outputs = {{{5}, {2, 0.0, 0.0, nan, inf}}}}}}});
}

}  // namespace tilerun::kernels
