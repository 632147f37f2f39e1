// clamp(x; min, max) and its backward op clamp_grad: one flat map kernel each, the bounds f32
// scalars. clamp is max then min with the IR's strict semantics: NaN stays NaN, and a bound of
// ±0 orders -0 below +0.
#include <cmath>

#include "kernels/map_kernel.h"
#include "kernels/op_registry.h"
#include "kernels/ref_util.h"
#include "kernels/ref_values.h"
#include "kernels/schema_util.h"

namespace tilerun::kernels {

namespace {

namespace cc = tilerun::compiler;

void check_bounds(const Attrs& attrs) {
  double lo = attr_float(attrs, "min"), hi = attr_float(attrs, "max");
  if (!(lo <= hi))
    throw ShapeError("attribute 'min' is " + std::to_string(lo) + " and 'max' " +
                     std::to_string(hi) + "; expected min <= max");
}

std::vector<TensorType> infer_clamp(const std::vector<TensorType>& in, const Attrs& attrs) {
  check_bounds(attrs);
  expect_float(in[0], "x");
  return {in[0]};
}

std::vector<TensorType> infer_clamp_grad(const std::vector<TensorType>& in, const Attrs& attrs) {
  check_bounds(attrs);
  expect_float(in[0], "x");
  expect_same(in[1], "dy", in[0], "x");
  return {in[0]};
}

// The IR's strict max and min (NaN propagates, -0 < +0).
double strict_max(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN();
  if (a == b) return std::signbit(a) ? b : a;
  return a > b ? a : b;
}
double strict_min(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return kNaN();
  if (a == b) return std::signbit(a) ? a : b;
  return a < b ? a : b;
}

std::vector<RefTensor> ref_clamp(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double lo = attr_float(attrs, "min"), hi = attr_float(attrs, "max");
  RefTensor y = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.data[i] = strict_min(strict_max(in[0].data[i], lo), hi);
  return {y};
}

// The gradient passes where min <= x <= max (bounds included), else 0.
std::vector<RefTensor> ref_clamp_grad(const std::vector<RefTensor>& in, const Attrs& attrs) {
  double lo = attr_float(attrs, "min"), hi = attr_float(attrs, "max");
  RefTensor dx = ref_zeros(in[0].shape);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    double x = in[0].data[i];
    dx.data[i] = x >= lo && x <= hi ? in[1].data[i] : 0.0;
  }
  return {dx};
}

std::vector<GradOp> grad_clamp(const std::vector<TensorType>&, const Attrs& attrs,
                               const std::vector<bool>& needs) {
  if (!needs[0]) return {};
  return {{"clamp_grad",
           {"x0", "dy0"},
           {"dx0"},
           {{"min", attr_float(attrs, "min")}, {"max", attr_float(attrs, "max")}}}};
}

const MapOp kClamp{"clamp", 1, {"min", "max"}, [](cc::Scope&, const auto& v, const auto& sc) {
                     return cc::min(cc::max(v[0], sc[0]), sc[1]);
                   }};
const MapOp kClampGrad{
    "clamp_grad", 2, {"min", "max"}, [](cc::Scope&, const auto& v, const auto& sc) {
      return cc::select(v[0] >= sc[0] && v[0] <= sc[1], v[1], cc::Val(0.0f));
    }};

std::vector<AttrSpec> bounds() {
  return {{.name = "min",
           .kind = AttrKind::Float,
           .default_value = -kInf(),
           .doc = "the lower bound (default: none)"},
          {.name = "max",
           .kind = AttrKind::Float,
           .default_value = kInf(),
           .doc = "the upper bound (default: none); min <= max"}};
}

Attrs range(double lo, double hi) { return {{"min", lo}, {"max", hi}}; }

}  // namespace

void register_clamp(OpRegistry& registry) {
  auto cache = std::make_shared<KernelCache>();
  const double nan = kNaN(), inf = kInf();
  registry.add(
      {.name = "clamp",
       .doc = "y = min(max(x, min), max) (strict: NaN stays NaN); gradient dy where min <= x <= "
              "max, else 0",
       .inputs = {"x"},
       .outputs = {"y"},
       .attrs = bounds(),
       .infer = infer_clamp,
       .reference = ref_clamp,
       .gradient = grad_clamp,
       .expand = expand_map(cache, kClamp),
       .tests = {.kernel = {{.shapes = {{33, 130}}, .attrs = range(-0.5, 0.75)},
                            {.shapes = {{1025}}, .attrs = {{"min", 0.0}}},
                            {.shapes = {{1}}, .attrs = {{"max", -1.0}}}},
                 .gradient = {{.shapes = {{7, 5}}, .attrs = range(-0.5, 0.75)}},
                 .examples = {{.inputs = {{{6}, {-3, 0.25, 3, nan, -inf, inf}}},
                               .attrs = range(-1, 2),
                               .outputs = {{{6}, {-1, 0.25, 2, nan, -1, 2}}}},
                              // A bound of +0 lifts -0 to +0.
                              {.inputs = {{{2}, {-0.0, -2}}},
                               .attrs = {{"min", 0.0}},
                               .outputs = {{{2}, {0.0, 0.0}}}}}}});
  registry.add(
      {.name = "clamp_grad",
       .doc = "dx = dy where min <= x <= max, else 0 (the backward op of clamp)",
       .inputs = {"x", "dy"},
       .outputs = {"dx"},
       .attrs = bounds(),
       .infer = infer_clamp_grad,
       .reference = ref_clamp_grad,
       .expand = expand_map(cache, kClampGrad),
       .tests = {.kernel = {{.shapes = {{33, 130}, {33, 130}}, .attrs = range(-0.5, 0.75)}},
                 .examples = {{.inputs = {{{4}, {-1, -0.5, 1, nan}}, {{4}, {3, 3, 3, 3}}},
                               .attrs = range(-0.5, 0.75),
                               .outputs = {{{4}, {0, 3, 0, 0}}}}}}});
}

}  // namespace tilerun::kernels
